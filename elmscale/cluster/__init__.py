"""Clustering of row-chunked embeddings on the cluster."""

from ._assign import cluster_means, nearest_center, negative_sse
from ._kmeans import kmeans

__all__ = ["cluster_means", "kmeans", "nearest_center", "negative_sse"]
