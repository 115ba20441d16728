"""kNN graphs on row-chunked data and their Laplacians."""

from ._backends import exact_knn, nndescent_knn
from ._cell_search import CellSearch
from ._laplacian import (
    BUILTIN_BACKENDS,
    WEIGHTS,
    GraphBlock,
    KNNGraph,
    knn_graph,
    resolve_backend,
)

__all__ = [
    "BUILTIN_BACKENDS",
    "WEIGHTS",
    "CellSearch",
    "GraphBlock",
    "KNNGraph",
    "exact_knn",
    "knn_graph",
    "nndescent_knn",
    "resolve_backend",
]
