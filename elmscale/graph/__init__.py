"""kNN graphs on row-chunked data and their Laplacians."""

from ._backends import exact_knn, nndescent_knn
from ._cell_search import CellSearch
from ._laplacian import WEIGHTS, GraphBlock, KNNGraph, knn_graph, resolve_backend
from ._select import Operands, propose
from ._smoothing import retained_variance, smooth_rows, smoothed_graph
from ._transformer import KNNGraphTransformer, knn_arrays

__all__ = [
    "WEIGHTS",
    "CellSearch",
    "GraphBlock",
    "KNNGraph",
    "KNNGraphTransformer",
    "Operands",
    "exact_knn",
    "knn_arrays",
    "knn_graph",
    "nndescent_knn",
    "propose",
    "resolve_backend",
    "retained_variance",
    "smooth_rows",
    "smoothed_graph",
]
