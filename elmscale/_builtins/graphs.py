from ..graph import CellSearch, exact_knn, nndescent_knn
from ..hookspecs import hookimpl


@hookimpl
def register_graph_backends(register):
    register(
        "pynndescent",
        nndescent_knn,
        aliases=("nndescent",),
        description="approximate kNN by NN-descent, index built on one worker",
    )
    register(
        "exact",
        exact_knn,
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
