"""The ``knn_graph`` pipeline: search, weight, symmetrise, normalise and split back, each
stage a blockwise computation on the cluster that persists its blocks.

Symmetrisation ("i among the k nearest of j, or j among the k nearest of i") needs the
reverse edges, which live in other chunks: the edge lists (N k integers) are split by the
chunk of their target and exchanged (:mod:`elmscale.graph._exchange`); the data is not.
"""

import functools
import logging

import dask
import dask.array as da
import numpy as np

from .. import registry
from ..hidden import apply_scaling
from ..utils._dask import is_compact_view, moved_rows, named, persist_compact, read_through
from ..utils._validation import as_row_chunked, tune_current_workers
from ._backends import check_n_neighbors
from ._cell_search import CellSearch
from ._chunking import graph_chunks
from ._container import KNNGraph
from ._exchange import exchange
from ._laplacian import (
    _assemble_block,
    _degree_of,
    _halo_indices,
    _halo_sources,
    _normalise_block,
    _split_block,
    _take_rows,
    fuzzy_memberships,
)
from ._ordering import locality_order
from ._tasks import PREFIX, task

logger = logging.getLogger(__name__)


WEIGHTS = ("binary", "heat", "fuzzy")
#: ``backend="auto"`` searches exactly up to this many samples
EXACT_MAX_SAMPLES = 10_000
#: ``order="auto"`` sorts rows by locality above this many samples
ORDER_MIN_SAMPLES = 20_000
#: the recall@k ``knn_graph`` and ``KNNGraphTransformer`` search for by default (``"auto"``
#: above ``EXACT_MAX_SAMPLES`` rows)
DEFAULT_TARGET_RECALL = 0.98


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


def resolve_backend(backend, n_samples):
    """The backend ``"auto"`` stands for: exact search up to ``EXACT_MAX_SAMPLES`` rows (exact
    and, there, as fast as any index), the distributed cell search above."""
    if isinstance(backend, str) and backend == "auto":
        return "exact" if n_samples <= EXACT_MAX_SAMPLES else "cells"
    return backend


def check_target_recall(target_recall):
    """``target_recall`` as a float in (0, 1], or None; ValueError otherwise."""
    if target_recall is None:
        return None
    if isinstance(target_recall, bool) or not isinstance(target_recall, (int, float, np.number)):
        raise ValueError(f"target_recall must be a float in (0, 1] or None, got {target_recall!r}")
    if not 0 < target_recall <= 1:
        raise ValueError(f"target_recall must be a float in (0, 1] or None, got {target_recall!r}")
    return float(target_recall)


def backend_callable(
    backend, n_samples, estimate_recall=True, target_recall=None, *, param="backend"
):
    """A backend callable as is; ``"auto"``, a registered name or an alias as the callable the
    plugin registry holds for it (the registry is the one table of backend names). Without
    ``estimate_recall``, its ``without_recall_estimate()`` where it has one. ``param`` names
    the parameter in the error for an unknown name.

    ``"auto"`` with a ``target_recall`` above ``EXACT_MAX_SAMPLES`` rows is the cell search
    that measures its recall and adds cells, then refinement rounds, until the estimate
    reaches the target or stops rising (``CellSearch(n_probes="auto", n_refine="auto")``)."""
    if (
        target_recall is not None
        and isinstance(backend, str)
        and backend == "auto"
        and n_samples > EXACT_MAX_SAMPLES
    ):
        return CellSearch(n_probes="auto", n_refine="auto", target_recall=target_recall)
    fn = registry.resolve("graph", resolve_backend(backend, n_samples), param)
    if not estimate_recall and hasattr(fn, "without_recall_estimate"):
        fn = fn.without_recall_estimate()
    return fn


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
    scaling=None,
    order="auto",
    estimate_recall=True,
    target_recall=DEFAULT_TARGET_RECALL,
):
    """Build the symmetrised kNN graph of the rows of X on the cluster.

    Parameters
    ----------
    X : array-like (NumPy, pandas) or dask array (n_samples, n_features)
        The data as the Gram pass will read it (raw, before any scaling): a dask array
        chunked by rows only (the graph's blocks align with its chunks), or input that is cut
        into row chunks as the estimators cut it (the same graph).
    n_neighbors : int
        k of the kNN graph, before symmetrisation.
    backend : "auto", str or callable, default="auto"
        A graph backend callable, or the name (or alias) of a registered one
        (``elmscale.available("graph")``). "auto" takes "exact" up to 10,000 rows and the
        distributed search (:class:`~elmscale.graph.CellSearch`) above, searching for
        ``target_recall``.
    weights : {"binary", "heat", "fuzzy"}
        1 on every edge, ``exp(-||xi - xj||^2 / (2 sigma^2))``, or UMAP's fuzzy
        memberships, each row's edges weighed by its local density and the two directions
        joined by the fuzzy union ``w_ij + w_ji - w_ij w_ji``
        (:func:`~elmscale.graph._laplacian.fuzzy_memberships`).
    sigma : float or None
        Heat-kernel width; None: the mean distance to the k nearest neighbours.
    normalized : bool
        Use ``I - D^-1/2 W D^-1/2`` instead of ``D - W``.
    random_state : int or None
        Seed for approximate backends and the locality ordering.
    transform, scaling : callable or None, (offset, scale) or None
        Search ``transform(X)`` (lazily), or ``(X - offset) / scale`` (estimators' scaling).
    order : "auto" or bool
        Sort rows by coarse cells so neighbours share chunks (``locality_order``; "auto":
        above 20,000 rows in several chunks). Internal: :func:`elmscale.gram.hidden_stats`
        applies it to every row-aligned input; sums over rows do not depend on it.
    estimate_recall : bool, default=True
        False skips a backend's recall estimate where its rounds do not need it (its
        ``without_recall_estimate()``), for callers that do not read it: the same graph.
    target_recall : float in (0, 1] or None, default=0.98
        With ``backend="auto"`` above 10,000 rows, the recall@k to search for:
        ``CellSearch(n_probes="auto", n_refine="auto")`` adds cells (at most 6), then
        rounds of the local join, until its estimate (``recall_estimate_``) reaches it or
        stops rising.
        None: the estimators' fixed search (``backend="cells"``), faster, with whatever
        recall the data gives. The graph guide states both's cost and recall.

    Returns
    -------
    KNNGraph, with ``recall_estimate_``: the backend's estimate of its recall@k, or None.
    """
    if isinstance(X, da.Array):
        tune_current_workers()  # as_row_chunked registers it for every other input
    else:
        X, _ = as_row_chunked(X, name="X")
    _check_graph_params(X, n_neighbors, weights, sigma, order, transform, scaling)
    target_recall = check_target_recall(target_recall)
    backend_fn = backend_callable(backend, X.shape[0], estimate_recall, target_recall)
    source_name, outer_chunks = X.name, tuple(X.chunks[0])
    X = moved_rows(X, lambda A: A.rechunk({0: graph_chunks(outer_chunks)}))
    if order == "auto":
        order = len(X.chunks[0]) > 1 and X.shape[0] > ORDER_MIN_SAMPLES
    search_rows, by_rows = _search_rows(transform, scaling)
    searched = _search(X, backend_fn, n_neighbors, search_rows, by_rows, order, random_state)
    graph = _assemble(*searched, outer_chunks, source_name, n_neighbors, weights, sigma, normalized)
    graph.rows_source = _rows_source(X, searched[-1], graph)  # searched[-1]: the row order
    graph.recall_estimate_ = getattr(backend_fn, "recall_estimate_", None)
    logger.info("kNN graph: %r, %d halo rows in all", graph, graph.halo_size())
    return graph


def _rows_source(X, row_order, graph):
    """The graph's rows read lazily from ``X`` (the input, chunked for the search) as its
    held ``X`` was made from them: moved to ``row_order`` and split into the graph's chunks
    (the same values, :func:`~elmscale.utils._dask.persist_compact` holds them exactly).
    None when the graph's X is ``X`` itself (no order, the same chunks)."""
    rows = X if row_order is None else row_order.apply(X)
    if tuple(rows.chunks[0]) != graph.chunks:
        rows = moved_rows(rows, lambda A: A.rechunk({0: graph.chunks}))
    return None if rows is X else rows


def _assemble(
    X, idx, dist, row_order, chunks, source_name, n_neighbors, weights, sigma, normalized
):
    """The :class:`KNNGraph` of the searched lists: weighted, symmetrised, normalised, split
    back into X's own row ``chunks`` where it was built on runs of them."""
    blocks, starts, sigma_value = _weighted_blocks(X, idx, dist, weights, sigma, normalized)
    if tuple(X.chunks[0]) != chunks:
        blocks, X, idx, dist, row_order = _in_chunks(
            chunks, starts, blocks, X, idx, dist, row_order
        )
    return KNNGraph(
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


def _weighted_blocks(X, idx, dist, weights, sigma, normalized):
    """The symmetrised graph's blocks on X's chunks, their first rows and the heat width."""
    sigma_value = _heat_width(dist, weights, sigma)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    if weights == "fuzzy":  # each row's memberships, from its own list, before the union
        dist = dist.map_blocks(fuzzy_memberships, dtype=np.float64)
    blocks = _symmetrise(idx, dist, starts, weights, sigma_value)
    if normalized:
        blocks = _normalise(blocks, starts)
    return blocks, starts, sigma_value


def _in_chunks(chunks, starts, blocks, X, idx, dist, row_order):
    """The graph built on runs of chunks (``starts``) split back into X's own ``chunks``:
    ``(blocks, X, idx, dist, row_order)``."""
    blocks = _split_back(blocks, starts, chunks)
    idx, dist = dask.persist(*(a.rechunk({0: chunks}) for a in (idx, dist)))
    X = persist_compact(moved_rows(X, lambda A: A.rechunk({0: chunks})), f"{PREFIX}-rows")
    if row_order is not None:
        row_order = row_order.with_outer_chunks(chunks)
    return blocks, X, idx, dist, row_order


def _check_graph_params(X, n_neighbors, weights, sigma, order, transform, scaling):
    if transform is not None and scaling is not None:
        raise ValueError("give knn_graph a transform or scaling, not both")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    if sigma is not None and not sigma > 0:
        raise ValueError(f"sigma must be a positive float or None, got {sigma!r}")
    if order not in ("auto", True, False):
        raise ValueError(f"order must be 'auto', True or False, got {order!r}")
    check_n_neighbors(X, n_neighbors)


def _search_rows(transform, scaling):
    """What the search runs on, as a function of X: X scaled by ``scaling`` (offset, scale),
    ``transform(X)``, or X itself; and whether that function works row by row on a block
    of rows (the scaling and the identity; a user's ``transform`` is a function of the
    whole dask array)."""
    if scaling is not None:
        offset, scale = scaling
        return functools.partial(apply_scaling, offset=offset, scale=scale), True
    return transform or _same_rows, transform is None


def _same_rows(A):
    return A


def _search(X, backend_fn, n_neighbors, transform, by_rows, order, random_state):
    """The search stage: X in the graph's row order (locality-sorted when ``order``) and its
    directed kNN lists, persisted and chunked like it: ``(X, idx, dist, row_order)``.

    The ordered rows are held compactly (:func:`~elmscale.utils._dask.persist_compact`);
    a ``transform`` that works ``by_rows`` is then applied as the search reads them, so the
    transformed rows are never held whole while the search runs."""
    row_order = part = None
    if order:
        if getattr(backend_fn, "provides_order", False):
            # the backend's cells are the locality order: one assignment serves both
            part = backend_fn.partition(transform(X), random_state=random_state)
            row_order = part.order
        else:
            row_order = locality_order(transform(X), random_state=random_state or 0)
        X = persist_compact(row_order.apply(X), f"{PREFIX}-rows")
    if transform is _same_rows:
        rows = X
    elif by_rows and is_compact_view(X):
        rows = read_through(X, transform)
    else:
        rows = transform(X)
    if part is not None:
        idx, _, dist = backend_fn.search(part, rows, n_neighbors)
    else:
        idx, dist = backend_fn(rows, n_neighbors, random_state=random_state)
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


def union_blocks(stage, assemble, idx, dist, starts, *args):
    """One task per row chunk b (starting at ``starts``) of the directed lists ``idx``,
    ``dist``: ``assemble(idx_b, dist_b, start, stop, *args, source_starts, reverse)``, where
    ``reverse`` holds the reverse edges ``(target, source local to its chunk, distance)`` of
    the chunks with edges into b and ``source_starts`` their first rows. The reverse edges
    (not the data) are exchanged between chunks; only the chunk pairs with edges between
    them get shuffle tasks."""
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
    return [
        task(
            stage,
            assemble,
            idx_blocks[b],
            dist_blocks[b],
            int(starts[b]),
            int(starts[b + 1]),
            *args,
            [int(starts[s]) for s in senders[b]],
            reverse[b],
        )
        for b in range(nb)
    ]


def _symmetrise(idx, dist, starts, weights, sigma):
    """The symmetrise and weight stages: each chunk's rows of the "or"-symmetrised,
    weighted W, from its own edges and the reverse edges other chunks hold. Persisted
    blocks."""
    blocks = union_blocks("block", _assemble_block, idx, dist, starts, weights, sigma)
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
