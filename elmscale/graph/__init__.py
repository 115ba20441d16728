"""kNN graphs on row-chunked data and their Laplacians."""

from ._backends import exact_knn, nndescent_knn
from ._cell_search import CellSearch
from ._laplacian import WEIGHTS, GraphBlock, KNNGraph, knn_graph, resolve_backend
from ._select import Operands, propose

__all__ = [
    "WEIGHTS",
    "CellSearch",
    "GraphBlock",
    "KNNGraph",
    "Operands",
    "exact_knn",
    "knn_graph",
    "nndescent_knn",
    "propose",
    "resolve_backend",
]
