"""Clustering of row-chunked embeddings on the cluster."""

from ._kmeans import kmeans

__all__ = ["kmeans"]
