"""The kNN graph as an object: :class:`KNNGraph` holds the persisted blocks, the data in the
graph's row order and its row order, and answers the questions a pass on the graph asks (its
row groups, the pattern a task multiplies, the halo rows each task needs)."""

import functools

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from ..utils._dask import (
    default_group_bytes,
    held_blocks,
    named,
    persist_compact,
    row_groups,
)
from ._exchange import exchange, whole_sources
from ._laplacian import _halo_indices, _halo_sources, _take_rows
from ._patterns import group_pattern
from ._tasks import PREFIX


class KNNGraph:
    """A symmetrised kNN graph over the rows of a row-chunked dask array, with its Laplacian
    ``L = D - W`` or, when ``normalized``, ``I - D^-1/2 W D^-1/2``.

    Built by :func:`knn_graph`. The graph owns its row order, its halo and the patterns a
    Gram pass multiplies by: :func:`elmscale.gram.hidden_stats` reads its rows ``X`` and asks
    it for the rest (:meth:`in_graph_order`, :meth:`group_pattern`, :meth:`groups_halo`,
    :meth:`halo_pieces`).

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
    recall_estimate_ : float or None
        Set by :func:`knn_graph`: the share of true k nearest neighbours that the search
        found for a sample of rows (``CellSearch``'s estimate), None for an exact search or a
        backend that gives none.
    rows_source : dask array or None
        Set by :func:`knn_graph` when ``X`` is a held copy of the input's rows (moved to the
        graph's order or chunks): the same rows, lazily, from the input, what
        :meth:`release_rows` puts in X's place. None where X holds nothing of its own.
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
        self.rows_source = None

    @property
    def n_samples(self):
        return int(sum(self.chunks))

    @property
    def starts(self):
        return np.concatenate([[0], np.cumsum(self.chunks)]).astype(np.int64)

    def built_on(self, X):
        """Whether the graph was built for the dask array X (by name: the same array)."""
        return self.source_name == X.name

    def release_lists(self):
        """Let go of the directed kNN lists (``indices``, ``distances``: N x k integers and
        floats held on the workers). The weighted blocks hold all that a Laplacian, a graph
        filter, a Gram pass, a cut or a vote reads; the estimators read no list, and a
        checkpoint of the graph then writes none. Returns the graph."""
        self.indices = self.distances = None
        return self

    def release_rows(self):
        """Let go of the held copy of the input's rows: ``X`` becomes :attr:`rows_source`,
        the same values read lazily from the input, so this process or the workers free the
        copy once the tasks that read it have run (a graph filter's first step reads it, and
        no later step does). A pass that reads ``X`` afterwards moves the input's rows again;
        :meth:`hold_rows` holds them again. Returns whether a held copy was let go."""
        if self.rows_source is None or self.X is self.rows_source:
            return False
        self.X = self.rows_source
        return True

    def hold_rows(self):
        """Hold ``X`` again (compactly, :func:`~elmscale.utils._dask.persist_compact`)
        after :meth:`release_rows`, for the passes that will read it; otherwise nothing."""
        if self.rows_source is not None and self.X is self.rows_source:
            self.X = persist_compact(self.X, f"{PREFIX}-rows")

    def in_graph_order(self, array):
        """A row-aligned dask array (or None) moved to the graph's row order."""
        if array is None or self.order is None:
            return array
        return self.order.apply(array)

    def row_groups(self, row_bytes):
        """Runs of consecutive chunks, one task each, for a blockwise pass on the graph whose
        rows take ``row_bytes`` each (a filter step, a cut): up to
        :func:`~elmscale.utils._dask.default_group_bytes` of rows, in at least as many runs
        as :func:`~elmscale.utils._dask.row_groups` keeps. A run receives only the neighbours
        outside it (:meth:`group_pattern`, :meth:`groups_halo`), so the fewer the runs, the
        fewer halo rows the pass ships."""
        return row_groups(self.chunks, row_bytes, default_group_bytes())

    def group_pattern(self, group, *, half=True, prefix=PREFIX):
        """The pattern of W that one task multiplies on the consecutive chunks ``group``:
        delayed ``(pattern, need)`` (:func:`~elmscale.graph._patterns.group_pattern`),
        keyed ``<prefix>-pattern-<token>``."""
        pattern = named(group_pattern, f"{prefix}-pattern", nout=2)
        return pattern(*[self.blocks[b] for b in group], half=half)

    def groups_halo(self, groups, needs, array=None, *, prefix=PREFIX, held=False, deferred=False):
        """Per task of consecutive chunks ``groups[i]``, a delayed tuple of ``array``'s rows
        ``needs[i]`` (delayed sorted global indices outside the group), one piece per chunk
        that holds any, keyed ``<prefix>-halo-...`` (:func:`~elmscale.graph._exchange.exchange`).
        ``array`` (default: the graph's X) is row-chunked like the graph, in its row order.
        With ``held``, returns ``(pieces, read)``: the rows as ``array`` holds them (e.g. the
        input's float32 rows of a float64 view) and the function that turns them into its
        rows (None for its own), for a task that reads its halo a slice at a time. With
        ``deferred``, for tasks that only iterate their pieces: in one process each task's
        pieces are taken as it reads them, not when the scheduler runs the exchange
        (:class:`~elmscale.graph._exchange.PiecesOnRead`)."""
        array = self._aligned(array)
        starts = self.starts
        requests, asked = [], []
        for group in groups:
            sources, rows = self._outside_sources(group)
            requests.append([(s, (int(starts[s]), int(starts[s + 1]))) for s in sources])
            asked.append(rows)
        return self._take_halo(array, requests, needs, asked, prefix, held=held, deferred=deferred)

    def _outside_sources(self, group):
        """The chunks outside the consecutive chunks ``group`` that hold its halo rows, and
        about how many rows it takes from them (rows shared by its chunks counted each time)."""
        sources = sorted(set().union(*(self.halo_sources[b] for b in group)) - set(group))
        rows = int(self.halo_counts[np.ix_(group, sources)].sum()) if sources else 0
        return sources, rows

    def runs_halo(self, groups, needs, array, *, prefix=PREFIX, deferred=False):
        """:meth:`groups_halo` for an ``array`` chunked by the runs ``groups`` themselves
        (run i holds the rows of the chunks ``groups[i]``): each run's halo rows come from the
        runs that hold them, one piece per run (``deferred``: see :meth:`groups_halo`)."""
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
        return self._take_halo(array, requests, needs, asked, prefix, deferred=deferred)

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
        by_source = [
            {s: int(self.halo_counts[b, s]) for s, _ in req} for b, req in enumerate(requests)
        ]
        whole = whole_sources(by_source, self.chunks)
        asked = [
            sum(n for s, n in rows.items() if s not in whole[b]) for b, rows in enumerate(by_source)
        ]
        return self._take_halo(array, requests, self.halo_indices(), asked, prefix, whole)

    def _aligned(self, array):
        """``array``, default the graph's X, checked to be row-chunked like the graph."""
        array = self.X if array is None else array
        if tuple(array.chunks[0]) != self.chunks:
            raise ValueError(
                f"array must be chunked like the graph's rows {self.chunks}, got {array.chunks[0]}"
            )
        return array

    def _take_halo(
        self, array, requests, wants, asked, prefix, whole=None, held=False, deferred=False
    ):
        """The exchange of ``array``'s rows ``wants[i]`` to destination i, from the source
        chunks of ``requests[i]``; ``asked[i]``: about how many rows i receives in packs;
        ``whole[i]``: the sources i reads whole; ``deferred``: in one process, taken when
        read (:func:`~._exchange.exchange`). ``held``: the rows travel as held, returned with
        their ``read`` (:meth:`groups_halo`)."""
        blocks, read = held_blocks(array)
        row_bytes = array.dtype.itemsize * int(np.prod(array.shape[1:]))
        pieces = exchange(
            f"{prefix}-halo",
            _take_rows if read is None or held else functools.partial(_take_rows, read=read),
            [(blk,) for blk in blocks],
            requests,
            wants,
            nbytes=[n * row_bytes for n in asked],
            whole=whole,
            deferred=deferred,
        )
        return (pieces, read) if held else pieces

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
