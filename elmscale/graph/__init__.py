"""kNN graphs on row-chunked data and their Laplacians."""

import warnings

from ._backends import exact_knn, nndescent_knn
from ._build import WEIGHTS, knn_graph, resolve_backend
from ._cell_search import CellSearch
from ._container import KNNGraph
from ._cuts import cut_and_modularity, modularity, normalized_cut
from ._extend import neighbour_mean
from ._laplacian import GraphBlock
from ._ordering import RowOrder
from ._reference import TrainingReference
from ._select import Operands, propose
from ._smoothing import (
    input_order,
    retained_variance,
    smooth_rows,
    smoothed_graph,
    smoothed_graph_if_kept,
)

# for elmscale and elmscale.neighbors, where users import (and the docs list) them
from ._transformer import KNNGraphTransformer as KNNGraphTransformer
from ._transformer import knn_arrays as knn_arrays

__all__ = [
    "WEIGHTS",
    "CellSearch",
    "GraphBlock",
    "KNNGraph",
    "Operands",
    "RowOrder",
    "cut_and_modularity",
    "exact_knn",
    "input_order",
    "knn_graph",
    "modularity",
    "neighbour_mean",
    "TrainingReference",
    "nndescent_knn",
    "normalized_cut",
    "propose",
    "resolve_backend",
    "retained_variance",
    "smooth_rows",
    "smoothed_graph",
    "smoothed_graph_if_kept",
]


def __getattr__(name):
    # the built-in backends were once a table of their own here; the registry holds them now,
    # with their aliases and any plugin's
    if name == "BUILTIN_BACKENDS":
        from .. import registry

        warnings.warn(
            "elmscale.graph.BUILTIN_BACKENDS is deprecated: the plugin registry holds every "
            "graph backend (elmscale.available('graph'), elmscale.get('graph', name))",
            FutureWarning,
            stacklevel=2,
        )
        return {n: registry.get("graph", n) for n in ("exact", "cells", "pynndescent")}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
