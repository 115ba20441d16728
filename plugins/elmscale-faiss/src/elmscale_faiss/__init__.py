"""elmscale-faiss: elmscale's cells kNN graph with faiss-cpu's compiled in-cell search,
registered as the graph backend ``"faiss"``."""

from elmscale import hookimpl

from ._kernel import BLAS_THRESHOLD, cell_search, configure, propose

__all__ = ["BLAS_THRESHOLD", "cell_search", "configure", "propose"]


@hookimpl
def register_graph_backends(register):
    register(
        "faiss",
        cell_search(),
        aliases=("cells-faiss",),
        description="the cells graph with faiss-cpu's in-cell search (the same neighbours)",
    )
