"""The kNN graph as a scikit-learn transformer, for libraries that take a precomputed sparse
neighbours graph (scikit-learn's SpectralClustering, HDBSCAN, Isomap, TSNE; umap-learn).

Defined in :mod:`elmscale.graph`; this module keeps the import path
``from elmscale.neighbors import KNNGraphTransformer``."""

from .graph import KNNGraphTransformer, knn_arrays

__all__ = ["KNNGraphTransformer", "knn_arrays"]
