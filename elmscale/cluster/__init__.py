"""Clustering of row-chunked embeddings on the cluster."""

from ._kmeans import kmeans
from ._refine import cluster_means, refine_labels

__all__ = ["cluster_means", "kmeans", "refine_labels"]
