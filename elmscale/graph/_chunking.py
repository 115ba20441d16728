"""The chunk policy: the runs of X's row chunks the graph is built on."""

from .._config import get_config
from ._exchange import cluster_workers
from ._ordering import merge_chunks

#: the graph is built on runs of consecutive row chunks of X of at least this many rows...
GRAPH_CHUNK_ROWS = 65_536
#: ... or more, so that there are at most this many of them, or this many per worker of the
#: distributed client (the exchanges cost n_chunks x n_workers tasks) ...
MAX_GRAPH_CHUNKS = 64
GRAPH_CHUNKS_PER_WORKER = 4
#: ... but never fewer than this many (while X has that many chunks)
MIN_GRAPH_CHUNKS = 8


def graph_chunks(chunks, n_workers=None):
    """The row chunks the graph is built on: X's own with the ``graph_chunks="data"``
    setting; else consecutive ``chunks`` joined into runs of at least ``GRAPH_CHUNK_ROWS``
    rows, and of at least N / ``max(MAX_GRAPH_CHUNKS, GRAPH_CHUNKS_PER_WORKER * n_workers)``,
    as long as ``MIN_GRAPH_CHUNKS`` runs remain. ``n_workers`` defaults to the
    ``plan_workers`` setting, else the workers of the distributed client (none without one).
    Larger runs make larger search tasks that hold whole cells and fewer exchange tasks; a
    bound that grows with the workers keeps every worker busy on large data."""
    chunks = tuple(chunks)
    if get_config()["graph_chunks"] == "data":
        return chunks
    if n_workers is None:
        n_workers = get_config()["plan_workers"] or len(cluster_workers())
    n = sum(chunks)
    most = max(MAX_GRAPH_CHUNKS, GRAPH_CHUNKS_PER_WORKER * n_workers)
    rows = max(GRAPH_CHUNK_ROWS, -(-n // most))
    return merge_chunks(chunks, min(rows, max(1, n // MIN_GRAPH_CHUNKS)))
