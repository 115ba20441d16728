"""Refinement of a kNN graph on row-chunked data: NN-descent's local join, and the recall
estimate that decides how many rounds to run.

Exact search inside coarse cells misses the neighbours that lie across a cell's boundary, and
in data of high intrinsic dimension most neighbourhoods cross one. NN-descent (Dong, Charikar
and Li, WWW 2011) repairs such a graph from its own edges: a neighbour of a neighbour is
likely a neighbour, and so is a row that lists you. One round here, on the workers:

1. **Reverse lists.** Each chunk sends every edge ``i -> j`` to the chunk holding j (one
   exchange); a row keeps its ``k`` nearest reverse neighbours, ranked by (distance,
   position). With its own k neighbours they form its joined list (at most 2k rows).
2. **Neighbours of neighbours.** A chunk receives the joined lists of the rows its lists name
   from other chunks (one exchange of the distinct rows asked for); a row's candidates are its
   joined list and the joined lists of its members, deduplicated.
3. **Rows and distances.** A chunk receives the distinct candidate rows of X it does not hold
   (one exchange), computes every candidate's exact squared distance (a function of the two
   rows alone, :func:`~elmscale.graph._select.exact_sq_distances`) and keeps the k best by
   (distance, global index). A row's current neighbours are among its candidates, so a round
   never loses a neighbour it had found.

Candidates, distances and ranks depend on the rows and the previous lists only, so a round's
lists, like the cell search's, are the same for any chunking and any number of workers.

The number of rounds follows a measured rule: :func:`recall_estimate` compares the lists of a
fixed sample of rows with their exact neighbours (found once, blockwise on the cluster), and
rounds continue while that estimate is below a target and still rising.
"""

import dask
import dask.array as da
import numpy as np

from ._backends import exact_kneighbors
from ._exchange import exchange
from ._select import exact_sq_distances, topk_exact, topk_of_pairs
from ._tasks import PREFIX, task


def _task_table(lo, X, original, pieces):
    """A task's rows, its chunk's and the rows it received from other chunks (``pieces``),
    sorted by ordered position: ``(positions, rows of X, original indices)``. Each piece holds
    increasing positions of one source chunk, and chunks hold disjoint ranges, so putting the
    pieces in the order of their first positions sorts the table."""
    parts = [(np.arange(lo, lo + X.shape[0]), X, original)] + [p for p in pieces if len(p[0])]
    parts.sort(key=lambda p: p[0][0] if len(p[0]) else lo)
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def _positions(db_pos, db_orig, ids):
    """Original indices -> ordered positions, through the task's own table."""
    by_orig = np.argsort(db_orig)
    at = np.searchsorted(db_orig[by_orig], ids)
    return db_pos[by_orig[np.minimum(at, len(db_orig) - 1)]]


def _outside(positions, lo, hi):
    """Sorted distinct ordered positions outside [lo, hi) (negative entries are padding),
    through a flag per position (a hashed or sorted unique of a chunk's many candidates
    costs far more)."""
    p = positions[positions >= 0]
    flags = np.zeros(int(p.max(initial=-1)) + 1, dtype=bool)
    flags[p] = True
    flags[lo:hi] = False
    return np.flatnonzero(flags)


def _source_chunks(positions, starts):
    """The chunks (ordered rows ``starts[c]:starts[c + 1]``) holding these positions."""
    positions = positions[positions >= 0]
    return np.unique(np.searchsorted(starts, positions, side="right") - 1)


def _take_positions(block, positions, lo, hi):
    """Rows of this chunk (ordered rows [lo, hi)) at ``positions``, with the positions."""
    mine = positions[(positions >= lo) & (positions < hi)]
    return (mine,) + tuple(b[mine - lo] for b in block)


def _take_reverse(pos, dist, lo, bounds):
    """This chunk's edges (rows from ``lo``) into the ordered rows ``bounds``, reversed:
    ``(target positions, source positions, distances)``."""
    a, b = bounds
    rows, cols = np.nonzero((pos >= a) & (pos < b))
    return pos[rows, cols], rows + lo, dist[rows, cols]


def _joined_lists(k, lo, n, pos, pieces):
    """Each row's neighbours and its k nearest reverse neighbours, ranked by (distance,
    position): (n, m + k) positions padded with -1."""
    target, source, dist = (
        np.concatenate([p[i] for p in pieces] or [np.empty(0)]) for i in range(3)
    )
    target, source = target.astype(np.int64) - lo, source.astype(np.int64)
    order = np.lexsort((source, dist, target))
    target, source = target[order], source[order]
    counts = np.bincount(target, minlength=n)
    rank = np.arange(len(target)) - (np.cumsum(counts) - counts)[target]
    keep = rank < k
    reverse = np.full((n, k), -1, dtype=np.int64)
    reverse[target[keep], rank[keep]] = source[keep]
    return np.concatenate([pos, reverse], axis=1)


def _dedup(cand, lo):
    """Rows of candidate positions sorted, each row's duplicates and itself set to -1."""
    cand.sort(axis=1)
    dup = np.zeros(cand.shape, dtype=bool)
    dup[:, 1:] = cand[:, 1:] == cand[:, :-1]
    cand[dup | (cand == np.arange(lo, lo + cand.shape[0])[:, None])] = -1
    return cand


#: rows whose candidates a join task holds at once (each has up to (4k)^2 + 4k candidates)
JOIN_BLOCK = 2048


def _candidate_blocks(lo, lists, pieces):
    """Candidate positions of the rows, JOIN_BLOCK rows at a time: ``(first row, block)``.
    A row's candidates are its list and its members' lists (``pieces`` holds the lists of
    members in other chunks), deduplicated, the row itself and padding -1."""
    n, w = lists.shape
    table_pos = np.concatenate([np.arange(lo, lo + n)] + [p[0] for p in pieces])
    table = np.concatenate([lists] + [p[1] for p in pieces])
    where = _position_map(table_pos)
    for r0 in range(0, n, JOIN_BLOCK):
        block = lists[r0 : r0 + JOIN_BLOCK]
        valid = block >= 0
        second = np.where(valid[:, :, None], table[where[np.where(valid, block, lo)]], -1)
        cand = np.concatenate([block, second.reshape(len(block), w * w)], axis=1)
        yield r0, _dedup(cand, lo + r0)


def _wanted_rows(lo, hi, lists, pieces):
    """The distinct candidate positions outside this chunk's rows [lo, hi), sorted: the
    union of the rows' lists and their members' lists (``pieces``: those of members in other
    chunks), without building each row's candidates."""
    inside = lists[(lists >= lo) & (lists < hi)] - lo
    members = np.zeros(len(lists), dtype=bool)
    members[inside] = True
    parts = [lists.ravel(), lists[members].ravel()] + [p[1].ravel() for p in pieces]
    return _outside(np.concatenate(parts), lo, hi)


def _position_map(table_pos):
    """An array mapping each of a task's positions (``table_pos``, distinct) to its place in
    the task's table: one gather per lookup instead of a binary search."""
    where = np.zeros(int(table_pos.max(initial=-1)) + 1, dtype=np.int64)
    where[table_pos] = np.arange(len(table_pos))
    return where


def _best_candidates(k, lo, X, original, lists, list_pieces, row_pieces):
    """The k nearest of each row's candidates, by (exact distance, original index):
    (ordered positions, original indices, distances)."""
    table_pos, table_X, table_orig = _task_table(lo, X, original, row_pieces)
    table_orig = table_orig.astype(np.int64, copy=False)
    where = _position_map(table_pos)
    out = []
    for r0, cand in _candidate_blocks(lo, lists, list_pieces):
        rows, cols = np.nonzero(cand >= 0)
        at = where[cand[rows, cols]]
        e = np.full(cand.shape, np.inf)
        e[rows, cols] = exact_sq_distances(X, rows + r0, table_X, at)
        ids = np.full(cand.shape, -1, dtype=np.int64)
        ids[rows, cols] = table_orig[at]
        out.append(_topk(k, ids, e))
    ids, d2 = (np.concatenate(c) for c in zip(*out, strict=True))
    return _positions(table_pos, table_orig, ids), ids, np.sqrt(d2)


def _topk(k, ids, sq_dist):
    """:func:`~elmscale.graph._select.topk_exact` of wide candidate lists: a partition finds
    each row's k-th smallest distance, and only the candidates at or below it (ties
    included) are ranked by (distance, id)."""
    if sq_dist.shape[1] <= 2 * k:
        return topk_exact(k, ids, sq_dist)
    kth = np.partition(sq_dist, k - 1, axis=1)[:, k - 1]
    rows, cols = np.nonzero(sq_dist <= kth[:, None])
    return topk_of_pairs(k, len(ids), rows, ids[rows, cols], sq_dist[rows, cols])


def _blocks(array):
    return array.to_delayed(optimize_graph=False).ravel()


def _exchange_positions(stage, starts, wanted, blocks):
    """Per chunk: the pieces of ``blocks`` (tuples of row-aligned arrays per chunk) at the
    ordered positions ``wanted[t]`` lists, with the positions; one exchange."""
    nb = len(starts) - 1
    bounds = [(int(starts[t]), int(starts[t + 1])) for t in range(nb)]
    wanted = list(dask.persist(*wanted))
    sources = dask.compute(*[task(f"{stage}-sources", _source_chunks, w, starts) for w in wanted])
    return exchange(
        f"{PREFIX}-{stage}",
        _take_positions,
        [(blk,) for blk in blocks],
        [[(s, bounds[s]) for s in sources[t]] for t in range(nb)],
        wanted,
    )


def _reverse_lists(starts, pos, dist):
    """Per chunk, the pieces of reversed edges pointing into it (one exchange)."""
    nb = len(starts) - 1
    bounds = [(int(starts[t]), int(starts[t + 1])) for t in range(nb)]
    pos_blocks, dist_blocks = _blocks(pos), _blocks(dist)
    targets = dask.compute(*[task("join-targets", _source_chunks, p, starts) for p in pos_blocks])
    return exchange(
        f"{PREFIX}-join-reverse",
        _take_reverse,
        [
            (p, d, bounds[t][0])
            for t, (p, d) in enumerate(zip(pos_blocks, dist_blocks, strict=True))
        ],
        [[(t, (bounds[s],)) for t in range(nb) if s in targets[t]] for s in range(nb)],
    )


def local_join(starts, original, X, pos, dist, n_neighbors, n_reverse=None):
    """One round of NN-descent's local join on row-chunked, ordered data (module docstring).

    Parameters
    ----------
    starts : ndarray (n_chunks + 1,)
        Where each chunk's ordered rows begin.
    original : dask array (N,)
        The original index of each ordered row, chunked like X.
    X : dask array (N, d)
        The rows, in order.
    pos, dist : dask arrays (N, m)
        The current lists: ordered positions of each row's neighbours and their distances.
    n_neighbors : int
        k, the width of the refined lists.
    n_reverse : int, optional
        Reverse neighbours each row joins with (default k).

    Returns
    -------
    (pos, orig, dist) : dask arrays (N, k), chunked like X
        The refined lists: ordered positions, original indices and distances.
    """
    k = n_neighbors
    r = k if n_reverse is None else n_reverse
    nb = len(starts) - 1
    bounds = [(int(starts[t]), int(starts[t + 1])) for t in range(nb)]
    X_blocks, orig_blocks, pos_blocks = _blocks(X), _blocks(original), _blocks(pos)
    reverse = _reverse_lists(starts, pos, dist)
    lists = list(
        dask.persist(
            *[
                task("join-lists", _joined_lists, r, lo, hi - lo, pos_blocks[t], reverse[t])
                for t, (lo, hi) in enumerate(bounds)
            ]
        )
    )
    their_lists = _exchange_positions(
        "join-lists",
        starts,
        [task("join-want", _outside, lists[t], *bounds[t]) for t in range(nb)],
        [task("join-pack", tuple, [b]) for b in lists],
    )
    rows = _exchange_positions(
        "join-rows",
        starts,
        [task("join-want", _wanted_rows, *bounds[t], lists[t], their_lists[t]) for t in range(nb)],
        [task("join-pack", tuple, [xb, ob]) for xb, ob in zip(X_blocks, orig_blocks, strict=True)],
    )
    out = [
        task(
            "join",
            _best_candidates,
            k,
            lo,
            X_blocks[t],
            orig_blocks[t],
            lists[t],
            their_lists[t],
            rows[t],
        )
        for t, (lo, _) in enumerate(bounds)
    ]
    return tuple(
        da.concatenate(
            [
                da.from_delayed(o[i], (hi - lo, k), dtype=dt)
                for o, (lo, hi) in zip(out, bounds, strict=True)
            ]
        )
        for i, dt in enumerate((np.int64, np.int64, np.float64))
    )


def recall_sample(n_samples, size, seed):
    """The sorted ordered positions of the rows a recall estimate checks (drawn from ``seed``
    alone, so the same rows for any chunking)."""
    size = min(int(size), n_samples)
    return np.sort(np.random.default_rng([seed, 1]).choice(n_samples, size=size, replace=False))


def exact_sample_neighbours(X, rows, n_neighbors):
    """The exact k nearest neighbours (ordered positions) of X's ``rows`` among all of X's
    rows, blockwise on the cluster (one task per chunk of X): ``(len(rows), k)`` on the
    client. Ranked by (exact distance, position); a row is not its own neighbour."""
    Xq = X[rows].rechunk({0: -1})
    idx, _ = exact_kneighbors(Xq, X, n_neighbors + 1)
    idx = np.asarray(idx.compute())
    own = idx == rows[:, None]
    # drop the row itself; a row not found among its k + 1 (more than k exact duplicates of
    # smaller position) drops its last entry instead
    own[~own.any(axis=1), -1] = True
    return idx[~own].reshape(len(rows), n_neighbors)


def recall_estimate(pos, rows, exact):
    """Mean fraction of the exact neighbours ``exact`` of the sampled ``rows`` that the lists
    ``pos`` (ordered positions, a dask array) hold."""
    got = np.asarray(pos[rows].compute())
    k = exact.shape[1]
    hits = [np.intersect1d(a, b).size for a, b in zip(got, exact, strict=True)]
    return float(np.mean(hits)) / k
