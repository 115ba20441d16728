"""The symmetrised kNN graph and its Laplacian, stored in row blocks aligned with X.

Block b holds the rows of W (or of D^-1/2 W D^-1/2) that belong to X's row chunk b, as a
CSR matrix whose columns are *local*: first the chunk's own rows, then its "halo", the
sorted global indices of the neighbours that live in other chunks. A Gram task for chunk b
therefore needs X_b plus the halo rows of X (d numbers each) to rebuild every hidden row it
multiplies, and no row of H ever crosses the network.

Symmetrisation ("i among the k nearest of j, or j among the k nearest of i") needs the
reverse edges, which live in other chunks: the edge lists (N k integers) are split by the
chunk of their target and exchanged (:mod:`elmscale.graph._exchange`); the data is not.
"""

import dataclasses
import logging

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from .. import registry
from .._config import get_config
from ..utils._dask import cluster_threads, default_group_bytes, named, row_groups
from ._backends import check_n_neighbors
from ._exchange import cluster_workers, exchange
from ._ordering import locality_order, merge_chunks
from ._patterns import group_pattern
from ._tasks import PREFIX, task

logger = logging.getLogger(__name__)

WEIGHTS = ("binary", "heat")
#: ``backend="auto"`` searches exactly up to this many samples
EXACT_MAX_SAMPLES = 10_000
#: ``order="auto"`` sorts rows by locality above this many samples
ORDER_MIN_SAMPLES = 20_000
#: the graph is built on runs of consecutive row chunks of X of at least this many rows...
GRAPH_CHUNK_ROWS = 65_536
#: ... or more, so that there are at most this many of them, or this many per worker of the
#: distributed client (the exchanges cost n_chunks x n_workers tasks) ...
MAX_GRAPH_CHUNKS = 64
GRAPH_CHUNKS_PER_WORKER = 4
#: ... but never fewer than this many (while X has that many chunks)
MIN_GRAPH_CHUNKS = 8
#: a blockwise pass on the graph's rows keeps at least this many tasks per worker thread
GROUPS_PER_THREAD = 2


@dataclasses.dataclass
class GraphBlock:
    """Rows [start, stop) of the graph: ``W`` (CSR, local columns), ``halo`` (global indices
    of the non-local columns, sorted), ``degree`` (row sums of the unnormalised W) and
    ``diagonal`` (the diagonal of L: the degree, or 1 for a normalised Laplacian)."""

    start: int
    stop: int
    W: sp.csr_matrix
    halo: np.ndarray
    degree: np.ndarray
    diagonal: np.ndarray

    def split(self, dtype):
        """``(W_local, W_halo)``: the columns of the chunk's own rows and of its halo, in
        ``dtype``; computed once per worker process and kept on the block."""
        cache = self.__dict__.setdefault("_split", {})
        if dtype not in cache:
            n = self.stop - self.start
            W = self.W.astype(dtype)
            cache[dtype] = (W[:, :n].tocsr(), W[:, n:].tocsr())
        return cache[dtype]

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_split", None)
        return state

    def global_csr(self, n_samples):
        """This block's rows of W with global column indices (for tests and small data)."""
        cols = np.concatenate([np.arange(self.start, self.stop), self.halo])
        W = self.W.tocoo()
        return sp.csr_matrix(
            (W.data, (W.row, cols[W.col])), shape=(self.stop - self.start, n_samples)
        )


def _edge_counts(idx, starts):
    """Number of chunk s's edges that point into each chunk b."""
    owner = np.searchsorted(starts, idx.ravel(), side="right") - 1
    return np.bincount(owner, minlength=len(starts) - 1)


#: bytes of one reverse edge (target, source, distance) in an exchange
REVERSE_EDGE_BYTES = 24


def _reverse_edges(idx, dist, lo, hi):
    """Chunk s's edges i -> j with j in [lo, hi), as reverse edges (j, i local to s, dist)."""
    n, k = idx.shape
    dst = idx.ravel()
    m = (dst >= lo) & (dst < hi)
    return dst[m], np.repeat(np.arange(n), k)[m], dist.ravel()[m]


def _edge_weights(dist, weights, sigma):
    if weights == "binary":
        return np.ones_like(dist, dtype=np.float64)
    return np.exp(-(dist.astype(np.float64) ** 2) / (2.0 * sigma**2))


def _distinct(values):
    """Sorted distinct values and each value's position among them (a sort, not a hash:
    the inverse comes with it)."""
    order = np.argsort(values)
    v = values[order]
    new = np.ones(len(v), dtype=bool)
    new[1:] = v[1:] != v[:-1]
    at = np.empty(len(v), dtype=np.int64)
    at[order] = np.cumsum(new) - 1
    return v[new], at


def _assemble_block(idx, dist, start, stop, weights, sigma, source_starts, reverse):
    """Build chunk b's rows of the symmetrised W and their local column map.

    ``reverse`` holds ``(rows, cols, dist)`` for every chunk with edges into b, whose first
    rows are ``source_starts``.
    """
    n, k = idx.shape
    rows = [np.repeat(np.arange(start, stop), k)]
    cols = [idx.ravel()]
    dists = [dist.ravel()]
    for s_start, (r, c, d) in zip(source_starts, reverse, strict=True):
        rows.append(r)
        cols.append(c + s_start)
        dists.append(d)
    rows = np.concatenate(rows) - start
    cols = np.concatenate(cols).astype(np.int64)
    w = _edge_weights(np.concatenate(dists), weights, sigma)
    # "or" symmetrisation: an edge present in both directions keeps one (the larger) weight;
    # one sort by (row, column) as a single integer key
    key = rows * (int(cols.max(initial=0)) + 1) + cols
    order = np.argsort(key)
    key, w = key[order], w[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    w = np.maximum.reduceat(w, np.flatnonzero(first)) if len(w) else w
    rows, cols = rows[order[first]], cols[order[first]]
    outside = (cols < start) | (cols >= stop)
    halo, at = _distinct(cols[outside])
    local = cols - start
    local[outside] = n + at
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    W = sp.csr_matrix((w, local, indptr), shape=(n, n + len(halo)))
    degree = np.asarray(W.sum(axis=1)).ravel()
    return GraphBlock(start, stop, W, halo, degree, degree.copy())


def _split_block(block, lo, hi):
    """Rows [lo, hi) of a graph block, as a block of their own: columns outside them
    (rows of the block's other chunks and its halo) become the new block's halo."""
    cols = np.concatenate([np.arange(block.start, block.stop), block.halo])
    W = block.W[lo - block.start : hi - block.start]
    g = cols[W.indices]
    n = hi - lo
    outside = (g < lo) | (g >= hi)
    halo, at = _distinct(g[outside])
    local = g - lo
    local[outside] = n + at
    rows = slice(lo - block.start, hi - block.start)
    return GraphBlock(
        lo,
        hi,
        sp.csr_matrix((W.data, local, W.indptr), shape=(n, n + len(halo))),
        halo,
        block.degree[rows],
        block.diagonal[rows],
    )


def graph_chunks(chunks, n_workers=None):
    """The row chunks the graph is built on: X's own with the ``graph_chunks="data"``
    setting; else consecutive ``chunks`` joined into runs of at least ``GRAPH_CHUNK_ROWS``
    rows, and of at least N / ``max(MAX_GRAPH_CHUNKS, GRAPH_CHUNKS_PER_WORKER * n_workers)``,
    as long as ``MIN_GRAPH_CHUNKS`` runs remain. ``n_workers`` defaults to the workers of
    the distributed client (none without one). Larger runs make larger search tasks that
    hold whole cells and fewer exchange tasks; a bound that grows with the workers keeps
    every worker busy on large data."""
    chunks = tuple(chunks)
    if get_config()["graph_chunks"] == "data":
        return chunks
    if n_workers is None:
        n_workers = len(cluster_workers())
    n = sum(chunks)
    most = max(MAX_GRAPH_CHUNKS, GRAPH_CHUNKS_PER_WORKER * n_workers)
    rows = max(GRAPH_CHUNK_ROWS, -(-n // most))
    return merge_chunks(chunks, min(rows, max(1, n // MIN_GRAPH_CHUNKS)))


def _halo_counts(block, starts):
    owner = np.searchsorted(starts, block.halo, side="right") - 1
    return np.bincount(owner, minlength=len(starts) - 1)


def _halo_sources(blocks, starts):
    """The (blocks x chunks) table of halo rows each block takes from each chunk, and for
    each block the chunks it takes any from."""
    halo_counts = named(_halo_counts, f"{PREFIX}-halo-counts")
    counts = np.array(dask.compute(*[halo_counts(blk, starts) for blk in blocks]))
    return counts, [np.flatnonzero(row).tolist() for row in counts]


def _take_rows(array_block, rows, s_start, s_stop):
    """The rows of source chunk [s_start, s_stop) among the sorted global indices ``rows``."""
    lo, hi = np.searchsorted(rows, [s_start, s_stop])
    return array_block[rows[lo:hi] - s_start]


def _degree_of(block):
    return block.degree


def _normalise_block(block, halo_degrees):
    d_halo = np.concatenate(halo_degrees) if halo_degrees else np.zeros(0)
    d = np.concatenate([block.degree, d_halo])
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, 1.0 / np.sqrt(d), 0.0)
    W = block.W.tocoo()
    data = W.data * inv[W.row] * inv[W.col]
    Wn = sp.csr_matrix((data, (W.row, W.col)), shape=W.shape)
    diagonal = (block.degree > 0).astype(np.float64)
    return GraphBlock(block.start, block.stop, Wn, block.halo, block.degree, diagonal)


class KNNGraph:
    """A symmetrised kNN graph over the rows of a row-chunked dask array, with its Laplacian
    ``L = D - W`` or, when ``normalized``, ``I - D^-1/2 W D^-1/2``.

    Built by :func:`knn_graph`. The graph owns its row order, its halo and the patterns a
    Gram pass multiplies by: :func:`elmscale.gram.hidden_stats` asks it for blocks
    (:meth:`row_blocks`, :meth:`in_graph_order`, :meth:`group_pattern`, :meth:`groups_halo`,
    :meth:`halo_pieces`) and reads nothing else.

    Parameters
    ----------
    blocks : list of delayed GraphBlock
        One persisted block per row chunk of X (delayed objects or futures, never gathered
        to the client).
    X : dask array
        The data in the graph's row order, chunked like the blocks.
    n_neighbors, weights, normalized, sigma
        As given to :func:`knn_graph` (``sigma``: the heat-kernel width used, or None).
    indices, distances : dask arrays (n_samples, n_neighbors) or None
        The directed kNN lists, in the graph's row order.
    order : RowOrder or None
        The locality order the rows were put in (None: X's own order).
    source_name : str or None
        The name of the dask array the graph was built for (default ``X.name``).

    Attributes
    ----------
    chunks : tuple of int
        The row chunks, X's.
    halo_counts : ndarray (n_chunks, n_chunks)
        Halo rows each block takes from each chunk.
    halo_sources : list of list of int
        For each block, the chunks that hold its halo rows.
    """

    def __init__(
        self,
        blocks,
        X,
        *,
        n_neighbors,
        weights,
        normalized,
        sigma=None,
        indices=None,
        distances=None,
        order=None,
        source_name=None,
    ):
        self.blocks = list(blocks)
        self.X = X
        self.chunks = tuple(X.chunks[0])
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.normalized = normalized
        self.sigma = sigma
        self.indices, self.distances = indices, distances
        self.order = order
        self.source_name = X.name if source_name is None else source_name
        self.halo_counts, self.halo_sources = _halo_sources(self.blocks, self.starts)

    @property
    def n_samples(self):
        return int(sum(self.chunks))

    @property
    def starts(self):
        return np.concatenate([[0], np.cumsum(self.chunks)]).astype(np.int64)

    def built_on(self, X):
        """Whether the graph was built for the dask array X (by name: the same array)."""
        return self.source_name == X.name

    def in_graph_order(self, array):
        """A row-aligned dask array (or None) moved to the graph's row order."""
        if array is None or self.order is None:
            return array
        return self.order.apply(array)

    def row_blocks(self):
        """One delayed block of X per row chunk, in the graph's row order."""
        return self.X.to_delayed().ravel().tolist()

    def row_groups(self, row_bytes):
        """Runs of consecutive chunks, one task each, for a blockwise pass on the graph whose
        rows take ``row_bytes`` each (a filter step, a cut): up to
        :func:`~elmscale.utils._dask.default_group_bytes` of rows, at least 8 runs and
        :data:`GROUPS_PER_THREAD` per worker thread. A run receives only the neighbours
        outside it (:meth:`group_pattern`, :meth:`groups_halo`), so the fewer the runs, the
        fewer halo rows the pass ships."""
        return row_groups(
            self.chunks,
            row_bytes,
            default_group_bytes(),
            min_groups=max(8, GROUPS_PER_THREAD * cluster_threads()),
        )

    def group_pattern(self, group, *, half=True, prefix=PREFIX):
        """The pattern of W that one task multiplies on the consecutive chunks ``group``:
        delayed ``(pattern, need)`` (:func:`~elmscale.graph._patterns.group_pattern`),
        keyed ``<prefix>-pattern-<token>``."""
        pattern = named(group_pattern, f"{prefix}-pattern", nout=2)
        return pattern(*[self.blocks[b] for b in group], half=half)

    def groups_halo(self, groups, needs, array=None, *, prefix=PREFIX):
        """Per task of consecutive chunks ``groups[i]``, a delayed tuple of ``array``'s rows
        ``needs[i]`` (delayed sorted global indices outside the group), one piece per chunk
        that holds any, keyed ``<prefix>-halo-...`` (:func:`~elmscale.graph._exchange.exchange`).
        ``array`` (default: the graph's X) is row-chunked like the graph, in its row order."""
        array = self._aligned(array)
        starts = self.starts
        requests, asked = [], []
        for group in groups:
            sources, rows = self._outside_sources(group)
            requests.append([(s, (int(starts[s]), int(starts[s + 1]))) for s in sources])
            asked.append(rows)
        return self._take_halo(array, requests, needs, asked, prefix)

    def _outside_sources(self, group):
        """The chunks outside the consecutive chunks ``group`` that hold its halo rows, and
        about how many rows it takes from them (rows shared by its chunks counted each time)."""
        sources = sorted(set().union(*(self.halo_sources[b] for b in group)) - set(group))
        rows = int(self.halo_counts[np.ix_(group, sources)].sum()) if sources else 0
        return sources, rows

    def runs_halo(self, groups, needs, array, *, prefix=PREFIX):
        """:meth:`groups_halo` for an ``array`` chunked by the runs ``groups`` themselves
        (run i holds the rows of the chunks ``groups[i]``): each run's halo rows come from the
        runs that hold them, one piece per run."""
        run_of = np.empty(len(self.chunks), dtype=np.int64)
        for i, group in enumerate(groups):
            run_of[group] = i
        starts = self.starts
        bounds = [(int(starts[g[0]]), int(starts[g[-1] + 1])) for g in groups]
        if tuple(array.chunks[0]) != tuple(hi - lo for lo, hi in bounds):
            raise ValueError(f"array must be chunked by the runs, got {array.chunks[0]}")
        requests, asked = [], []
        for group in groups:
            sources, rows = self._outside_sources(group)
            requests.append([(r, bounds[r]) for r in sorted({int(run_of[s]) for s in sources})])
            asked.append(rows)
        return self._take_halo(array, requests, needs, asked, prefix)

    def halo_rows(self, b, array=None, *, prefix=PREFIX):
        """A delayed tuple of ``array``'s rows for chunk b's halo (:meth:`halo_pieces`)."""
        return self.halo_pieces(array, chunks=[b], prefix=prefix)[b]

    def halo_pieces(self, array=None, *, chunks=None, prefix=PREFIX):
        """Per chunk b, a delayed tuple of ``array``'s rows for b's halo, in halo order, one
        piece per source chunk (``chunks``: only for these chunks, the others get ``()``).
        ``array`` (default: the graph's X) must be row-chunked like the graph and in its row
        order, e.g. a product ``L Z`` built block by block on the graph."""
        array = self._aligned(array)
        nb = len(self.chunks)
        chunks = range(nb) if chunks is None else set(chunks)
        starts = self.starts
        requests = [
            [(s, (int(starts[s]), int(starts[s + 1]))) for s in self.halo_sources[b]]
            if b in chunks
            else []
            for b in range(nb)
        ]
        asked = [
            int(self.halo_counts[b, [s for s, _ in req]].sum()) for b, req in enumerate(requests)
        ]
        return self._take_halo(array, requests, self.halo_indices(), asked, prefix)

    def _aligned(self, array):
        """``array``, default the graph's X, checked to be row-chunked like the graph."""
        array = self.X if array is None else array
        if tuple(array.chunks[0]) != self.chunks:
            raise ValueError(
                f"array must be chunked like the graph's rows {self.chunks}, got {array.chunks[0]}"
            )
        return array

    def _take_halo(self, array, requests, wants, asked, prefix):
        """The exchange of ``array``'s rows ``wants[i]`` to destination i, from the source
        chunks of ``requests[i]``; ``asked[i]``: about how many rows i receives."""
        blocks = array.to_delayed(optimize_graph=False).ravel()
        row_bytes = array.dtype.itemsize * int(np.prod(array.shape[1:]))
        return exchange(
            f"{prefix}-halo",
            _take_rows,
            [(blk,) for blk in blocks],
            requests,
            wants,
            nbytes=[n * row_bytes for n in asked],
        )

    def halo_indices(self):
        """Per block, its halo's global indices (delayed, persisted on first use): what the
        chunks holding those rows are asked for."""
        if getattr(self, "_halo_indices", None) is None:
            self._halo_indices = _halo_indices(self.blocks)
        return self._halo_indices

    def map_rows(self, block_task, sources, width, dtype, *, halo_of=None, args=(), prefix=PREFIX):
        """A persisted (n_samples x ``width``) dask array aligned with the graph's rows whose
        block b is ``block_task(sources[b], graph block b, *args, halo rows of halo_of)``:
        one task per chunk of a blockwise product on the graph (``L Z``, a filter step),
        each reading its chunk and a tuple of the halo rows it needs (``halo_of``: default
        the graph's X). ``block_task`` is a delayed-returning callable (a named or
        unique-keyed task)."""
        halo = self.halo_pieces(halo_of, prefix=prefix)
        blocks = [
            block_task(sources[b], self.blocks[b], *args, halo[b]) for b in range(len(self.chunks))
        ]
        return da.concatenate(
            [
                da.from_delayed(blk, shape=(n, int(width)), dtype=dtype)
                for blk, n in zip(blocks, self.chunks, strict=True)
            ]
        ).persist()

    def halo_size(self):
        """Total number of halo rows over all chunks (what a Gram pass ships, in rows of X,
        or in rows of ``L^j H`` for every product ``L (L^j H)`` of a power p > 2)."""
        return int(self.halo_counts.sum())

    def laplacian(self):
        """The whole Laplacian as a scipy CSR matrix, gathered to the client. For tests and
        small data only."""
        blocks = dask.compute(*self.blocks)
        N = self.n_samples
        W = sp.vstack([blk.global_csr(N) for blk in blocks]).tocsr()
        diag = np.concatenate([blk.diagonal for blk in blocks])
        return (sp.diags(diag) - W).tocsr()

    def __repr__(self):
        return (
            f"KNNGraph(n_samples={self.n_samples}, n_chunks={len(self.chunks)}, "
            f"n_neighbors={self.n_neighbors}, weights={self.weights!r}, "
            f"normalized={self.normalized}, ordered={self.order is not None})"
        )


def _halo_of(block):
    return block.halo


def _halo_indices(blocks):
    """Per (delayed) block, its halo indices, persisted."""
    return list(dask.persist(*[task("halo-index", _halo_of, blk) for blk in blocks]))


def resolve_backend(backend, n_samples):
    """The backend ``"auto"`` stands for: exact search up to ``EXACT_MAX_SAMPLES`` rows (exact
    and, there, as fast as any index), the distributed cell search above."""
    if isinstance(backend, str) and backend == "auto":
        return "exact" if n_samples <= EXACT_MAX_SAMPLES else "cells"
    return backend


def backend_callable(backend, n_samples):
    """A backend callable as is; ``"auto"``, a registered name or an alias as the callable the
    plugin registry holds for it (the registry is the one table of backend names)."""
    return registry.resolve("graph", resolve_backend(backend, n_samples), "backend")


def knn_graph(
    X,
    n_neighbors=10,
    *,
    backend="auto",
    weights="binary",
    sigma=None,
    normalized=False,
    random_state=None,
    transform=None,
    order="auto",
):
    """Build the symmetrised kNN graph of the rows of X on the cluster.

    Parameters
    ----------
    X : dask array, chunked by rows only
        The data as the Gram pass will read it (raw, before any scaling).
    n_neighbors : int
        k of the kNN graph, before symmetrisation.
    backend : "auto", str or callable, default="auto"
        A graph backend callable, or the name (or alias) of a registered one
        (``elmscale.available("graph")``: built-in or a plugin's). "auto" takes "exact" up to
        10,000 rows and "cells" (the distributed search, :class:`~elmscale.graph.CellSearch`)
        above.
    weights : {"binary", "heat"}
        1 on every edge, or ``exp(-||xi - xj||^2 / (2 sigma^2))``.
    sigma : float or None
        Heat-kernel width; None uses the mean distance to the k nearest neighbours.
    normalized : bool
        Use ``I - D^-1/2 W D^-1/2`` instead of ``D - W``.
    random_state : int or None
        Seed for approximate backends and the locality ordering.
    transform : callable or None
        Applied (lazily) to X before the neighbour search, e.g. the estimator's scaling.
    order : "auto" or bool
        Sort rows by coarse cells first so neighbours share chunks (see ``locality_order``);
        "auto" does so when X has more than one chunk and more than 20,000 rows. The order
        is internal: :func:`elmscale.gram.hidden_stats` applies it to every row-aligned
        input, and sums over rows do not depend on it.

    Returns
    -------
    KNNGraph
    """
    _check_graph_params(X, n_neighbors, weights, sigma, order)
    backend_fn = backend_callable(backend, X.shape[0])
    source_name, outer_chunks = X.name, tuple(X.chunks[0])
    X = X.rechunk({0: graph_chunks(outer_chunks)})
    if order == "auto":
        order = len(X.chunks[0]) > 1 and X.shape[0] > ORDER_MIN_SAMPLES
    X, idx, dist, row_order = _search(
        X, backend_fn, n_neighbors, transform or (lambda A: A), order, random_state
    )
    sigma_value = _heat_width(dist, weights, sigma)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    blocks = _symmetrise(idx, dist, starts, weights, sigma_value)
    if normalized:
        blocks = _normalise(blocks, starts)
    if tuple(X.chunks[0]) != outer_chunks:
        blocks = _split_back(blocks, starts, outer_chunks)
        X, idx, dist = dask.persist(*(a.rechunk({0: outer_chunks}) for a in (X, idx, dist)))
        if row_order is not None:
            row_order = row_order.with_outer_chunks(outer_chunks)
    graph = KNNGraph(
        blocks,
        X,
        n_neighbors=n_neighbors,
        weights=weights,
        normalized=normalized,
        sigma=sigma_value,
        indices=idx,
        distances=dist,
        order=row_order,
        source_name=source_name,
    )
    logger.info("kNN graph: %r, %d halo rows in all", graph, graph.halo_size())
    return graph


def _check_graph_params(X, n_neighbors, weights, sigma, order):
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    if sigma is not None and not sigma > 0:
        raise ValueError(f"sigma must be a positive float or None, got {sigma!r}")
    if order not in ("auto", True, False):
        raise ValueError(f"order must be 'auto', True or False, got {order!r}")
    check_n_neighbors(X, n_neighbors)


def _search(X, backend_fn, n_neighbors, transform, order, random_state):
    """The search stage: X in the graph's row order (locality-sorted when ``order``) and its
    directed kNN lists, persisted and chunked like it: ``(X, idx, dist, row_order)``."""
    row_order = part = None
    if order:
        if getattr(backend_fn, "provides_order", False):
            # the backend's cells are the locality order: one assignment serves both
            part = backend_fn.partition(transform(X), random_state=random_state)
            row_order = part.order
        else:
            row_order = locality_order(transform(X), random_state=random_state or 0)
        X = row_order.apply(X).persist()
    if part is not None:
        idx, _, dist = backend_fn.search(part, transform(X), n_neighbors)
    else:
        idx, dist = backend_fn(transform(X), n_neighbors, random_state=random_state)
    if tuple(idx.chunks[0]) != tuple(X.chunks[0]):
        idx = idx.rechunk((X.chunks[0], -1))
        dist = dist.rechunk((X.chunks[0], -1))
    idx, dist = dask.persist(idx, dist)
    return X, idx, dist, row_order


def _heat_width(dist, weights, sigma):
    """The weight stage's one number: the heat kernel's width, by default the mean distance
    to the k nearest neighbours (None for binary weights without a sigma)."""
    if weights == "heat" and sigma is None:
        return float(dist.mean().compute())
    return sigma


def _symmetrise(idx, dist, starts, weights, sigma):
    """The symmetrise and weight stages: each chunk's rows of the "or"-symmetrised,
    weighted W, from its own edges and the reverse edges other chunks hold (only the chunk
    pairs with edges between them get shuffle tasks). Persisted blocks."""
    nb = len(starts) - 1
    idx_blocks = idx.to_delayed(optimize_graph=False).ravel()
    dist_blocks = dist.to_delayed(optimize_graph=False).ravel()
    counts = named(_edge_counts, f"{PREFIX}-edge-counts")
    edges = np.array(dask.compute(*[counts(blk, starts) for blk in idx_blocks]))
    senders = [[s for s in range(nb) if edges[s, b] > 0] for b in range(nb)]  # s == b too
    reverse = exchange(
        f"{PREFIX}-reverse",
        _reverse_edges,
        list(zip(idx_blocks, dist_blocks, strict=True)),
        [[(s, (int(starts[b]), int(starts[b + 1]))) for s in senders[b]] for b in range(nb)],
        nbytes=(edges.sum(axis=0) * REVERSE_EDGE_BYTES).tolist(),
    )
    blocks = [
        task(
            "block",
            _assemble_block,
            idx_blocks[b],
            dist_blocks[b],
            int(starts[b]),
            int(starts[b + 1]),
            weights,
            sigma,
            [int(starts[s]) for s in senders[b]],
            reverse[b],
        )
        for b in range(nb)
    ]
    return list(dask.persist(*blocks))


def _normalise(blocks, starts):
    """The normalise stage: ``D^-1/2 W D^-1/2``, each block taking its halo's degrees from
    the chunks that hold them. Persisted blocks."""
    _, sources = _halo_sources(blocks, starts)
    degree_of = named(_degree_of, f"{PREFIX}-degree")
    halo_degrees = exchange(
        f"{PREFIX}-halo-degree",
        _take_rows,
        [(degree_of(blk),) for blk in blocks],
        [
            [(s, (int(starts[s]), int(starts[s + 1]))) for s in sources[b]]
            for b in range(len(blocks))
        ],
        _halo_indices(blocks),
    )
    normalised = [
        task("normalise", _normalise_block, blocks[b], halo_degrees[b]) for b in range(len(blocks))
    ]
    return list(dask.persist(*normalised))


def _split_back(blocks, starts, outer_chunks):
    """The split-back stage: the blocks of the (coarser) graph chunks cut back to X's own
    chunks, each a slice of one graph chunk, so that nothing moves. Persisted blocks."""
    outer = np.concatenate([[0], np.cumsum(outer_chunks)]).astype(np.int64)
    owner = np.searchsorted(starts, outer[:-1], side="right") - 1
    split = [
        task("split", _split_block, blocks[owner[b]], int(outer[b]), int(outer[b + 1]))
        for b in range(len(outer_chunks))
    ]
    return list(dask.persist(*split))
