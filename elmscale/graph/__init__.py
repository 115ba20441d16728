"""kNN graphs on row-chunked data and their Laplacians."""

from ._backends import exact_knn, nndescent_knn
from ._cell_search import CellSearch
from ._cuts import normalized_cut
from ._extend import neighbour_mean
from ._laplacian import (
    BUILTIN_BACKENDS,
    WEIGHTS,
    GraphBlock,
    KNNGraph,
    knn_graph,
    resolve_backend,
)
from ._select import Operands, propose
from ._smoothing import (
    input_order,
    retained_variance,
    smooth_rows,
    smoothed_graph,
    smoothed_graph_if_kept,
)

__all__ = [
    "BUILTIN_BACKENDS",
    "WEIGHTS",
    "CellSearch",
    "GraphBlock",
    "KNNGraph",
    "Operands",
    "exact_knn",
    "input_order",
    "knn_graph",
    "neighbour_mean",
    "nndescent_knn",
    "normalized_cut",
    "propose",
    "resolve_backend",
    "retained_variance",
    "smooth_rows",
    "smoothed_graph",
    "smoothed_graph_if_kept",
]
