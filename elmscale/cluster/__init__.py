"""Clustering of row-chunked embeddings on the cluster."""

from ._assign import assign_nearest, nearest_center, negative_sse, rename_labels
from ._kmeans import Restarts, block_rows, kmeans, refined_starts, restart_labels
from ._refine import cluster_means, majority_vote, refine_labels

__all__ = [
    "Restarts",
    "assign_nearest",
    "block_rows",
    "cluster_means",
    "kmeans",
    "majority_vote",
    "nearest_center",
    "negative_sse",
    "refine_labels",
    "refined_starts",
    "rename_labels",
    "restart_labels",
]
