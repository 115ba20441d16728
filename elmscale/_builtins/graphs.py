from ..graph import _backends
from ..graph._cell_search import CellSearch
from ..hookspecs import hookimpl


@hookimpl
def register_graph_backends(register):
    register(
        "pynndescent",
        _backends.nndescent_knn,
        aliases=("nndescent",),
        description="approximate kNN by NN-descent, index built on one worker",
    )
    register(
        "exact",
        _backends.exact_knn,
        aliases=("brute",),
        description="exact kNN by blocked brute force (small data, tests)",
    )
    register(
        "cells",
        CellSearch(),
        aliases=("distributed",),
        description="approximate kNN by exact search in overlapping coarse cells, "
        "across the workers",
    )
