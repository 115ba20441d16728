"""kNN graphs on row-chunked data and their Laplacians."""

from ._backends import exact_knn, nndescent_knn
from ._laplacian import WEIGHTS, GraphBlock, KNNGraph, knn_graph

__all__ = ["WEIGHTS", "GraphBlock", "KNNGraph", "exact_knn", "knn_graph", "nndescent_knn"]
