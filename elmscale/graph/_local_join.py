"""Refinement of a kNN graph on row-chunked data: NN-descent's local join, and the recall
estimate that decides how many rounds to run.

Exact search inside coarse cells misses the neighbours that lie across a cell's boundary, and
in data of high intrinsic dimension most neighbourhoods cross one. NN-descent (Dong, Charikar
and Li, WWW 2011) repairs such a graph from its own edges: two rows that share a neighbour are
likely neighbours of each other. One round here, on the workers, with the economies of
pynndescent's implementation:

1. **Candidates.** Each chunk sends every edge ``i -> j`` (with its flag) to the chunk holding
   j (one exchange). A row's pool is its list and the rows that list it; each entry is *new*
   (it entered a list since it was last used in a join) or *old*. A row keeps at most
   ``max_candidates`` new and as many old ones, chosen by a hash of (row, entry, round):
   its *hub set*. Forward entries chosen as new are old from the next round on.
2. **Rows.** A chunk's hub sets are cut into *waves*, consecutive runs of hub sets whose
   rows and candidate pairs fit a memory budget (:func:`plan_waves`), so that no task
   holds more than the budget however wide the rows and however far the neighbourhoods
   spread (wide data of high intrinsic dimension names most of X from every chunk). Each
   wave's task receives the distinct rows of X its hub sets name outside the chunk, with
   each row's original index and the squared distance of its last list entry (its
   *threshold*), from the chunks holding them (one exchange, in rounds of about a task per
   worker thread).
3. **Join.** Every pair (p, q) of a hub set with at least one new member is a candidate for
   both rows (pairs of two old members were joined in an earlier round). One batched float32
   product per block of hubs proposes every pair's squared distance; a pair can enter p's
   list only if its exact distance is at most p's threshold, hence its proposal at most the
   threshold plus the product's error bound (:mod:`elmscale.graph._select`). Only those
   pairs get their exact squared distance (a function of the two rows alone, in wide rows
   computed once for (p, q) and (q, p): :func:`~elmscale.graph._select.pair_sq_distances`);
   those still within the threshold, at most p's ``width`` best from one task, go to the
   chunk holding p (one exchange of (row, candidate, distance) triples).
4. **Merge.** A row keeps the best of its list and the triples it received, by (exact
   distance, original index), and flags what entered as new. A round never loses a
   neighbour it had found.

Hub sets, thresholds and the exact distances depend on the rows and the previous lists only,
and the product only filters (conservatively), so a round's lists, like the cell search's,
are the same for any chunking, memory budget and number of workers.

The number of rounds follows a measured rule: :func:`recall_estimate` compares the lists of a
fixed sample of rows with their exact neighbours (found once, blockwise on the cluster), and
rounds continue while that estimate is below a target and still rising.
"""

import dask
import dask.array as da
import numpy as np

from .._config import get_config
from ..utils._compiled import compiled_available
from ..utils._dask import cluster_threads, held_blocks, held_rows, read_rows
from . import _join_compiled
from ._backends import exact_kneighbors
from ._exchange import exchange, split_by_bytes
from ._select import Operands, lexorder, pair_rows, pair_sq_distances
from ._tasks import PREFIX, task


def _task_table(own, pieces):
    """A join task's table, the rows it holds sorted by ordered position: ``own`` (rows of
    its chunk, a tuple of columns: ordered positions, rows of X, original indices, further
    columns) and the rows it received from other chunks (``pieces``, with the same columns).
    Each holds increasing positions of one chunk, and chunks hold disjoint ranges, so
    putting them in the order of their first positions sorts the table."""
    parts = [p for p in [own, *pieces] if len(p[0])]
    parts.sort(key=lambda p: p[0][0])
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def _distinct(positions):
    """Sorted distinct ordered positions (negative entries are padding), through a flag per
    position (a hashed or sorted unique of a chunk's many candidates costs far more)."""
    p = positions[positions >= 0]
    flags = np.zeros(int(p.max(initial=-1)) + 1, dtype=bool)
    flags[p] = True
    return np.flatnonzero(flags)


def _first_occurrences(values):
    """Whether each entry of ``values`` (non-negative integers) is the first with its value:
    through each value's first index in an array over the values' range (a sort of the
    entries costs far more)."""
    if not len(values):
        return np.zeros(0, dtype=bool)
    lo = int(values.min())
    index = np.arange(len(values), dtype=np.int32 if len(values) < 2**31 else np.int64)
    first = np.full(int(values.max()) - lo + 1, len(values), dtype=index.dtype)
    np.minimum.at(first, values - lo, index)
    return first[values - lo] == index


def _source_chunks(positions, starts):
    """The chunks (ordered rows ``starts[c]:starts[c + 1]``) holding these positions, in
    increasing order (counted, not sorted: a chunk's lists name a few chunks many times)."""
    positions = positions[positions >= 0]
    chunks = np.searchsorted(starts, positions, side="right") - 1
    return np.flatnonzero(np.bincount(chunks, minlength=len(starts) - 1))


def _take_positions(block, after, positions, lo, hi):
    """Rows of this chunk (ordered rows [lo, hi)) at ``positions``, with the positions.
    ``after`` only orders the task after an earlier round's joins."""
    mine = positions[(positions >= lo) & (positions < hi)]
    return (mine,) + tuple(b[mine - lo] for b in block)


def _take_reverse(pos, new, lo, bounds):
    """This chunk's edges (rows from ``lo``) into the ordered rows ``bounds``, reversed:
    ``(target positions, source positions, new flags)``."""
    a, b = bounds
    rows, cols = np.nonzero((pos >= a) & (pos < b))
    return pos[rows, cols], rows + lo, new[rows, cols]


def _columns(pieces, dtypes):
    """The pieces' columns, concatenated (empty arrays of ``dtypes`` without pieces)."""
    return tuple(
        np.concatenate([p[i] for p in pieces if len(p[0])] or [np.empty(0, dtype=dt)])
        for i, dt in enumerate(dtypes)
    )


def _rank_in_groups(group, n_groups):
    """Each entry's place among the entries of its group (entries sorted by group)."""
    counts = np.bincount(group, minlength=n_groups)
    return np.arange(len(group)) - (np.cumsum(counts) - counts)[group], counts


def _first_of_runs(*keys):
    """Entries whose keys differ from the previous entry's (entries sorted by the keys)."""
    first = np.ones(len(keys[0]), dtype=bool)
    if len(first):
        first[1:] = np.any([k[1:] != k[:-1] for k in keys], axis=0)
    return first


def _hub_sets(max_candidates, salt, lo, pos, new, pieces, compiled=False):
    """Each row's hub set (module docstring, step 1): ``(H, H_new, used)``; H (n, s) ordered
    positions padded with -1, H_new their flags, ``used`` (n, m) the forward entries chosen
    as new (old from the next round on). ``compiled``: per row, by
    :func:`~elmscale.graph._join_compiled.hub_sets` (the same result)."""
    target, source, flag = _columns(pieces, (np.int64, np.int64, bool))
    if compiled_available(compiled):
        return _join_compiled.hub_sets(max_candidates, salt, lo, pos, new, target, source, flag)
    n = pos.shape[0]
    rows, cols = np.nonzero(pos >= 0)
    hub = np.concatenate([rows, target - lo])
    member = np.concatenate([pos[rows, cols], source])
    is_new = np.concatenate([new[rows, cols], flag])
    # one entry per (hub, member), new when any of its copies is
    order = lexorder(hub, member, ~is_new)
    hub, member, is_new = hub[order], member[order], is_new[order]
    first = _first_of_runs(hub, member)
    hub, member, is_new = hub[first], member[first], is_new[first]
    # per hub, the new entries of smallest priority, then the old ones
    order = lexorder(hub, ~is_new, _join_compiled.priority(hub + lo, member, salt), member)
    hub, member, is_new = hub[order], member[order], is_new[order]
    rank, _ = _rank_in_groups(2 * hub + ~is_new, 2 * n)
    keep = rank < max_candidates
    hub, member, is_new = hub[keep], member[keep], is_new[keep]
    slot, counts = _rank_in_groups(hub, n)
    H = np.full((n, max(int(counts.max(initial=0)), 1)), -1, dtype=np.int64)
    H_new = np.zeros(H.shape, dtype=bool)
    H[hub, slot], H_new[hub, slot] = member, is_new
    span = int(max(pos.max(initial=0), member.max(initial=0))) + 1
    chosen = np.sort(hub[is_new] * span + member[is_new])
    used = np.zeros(pos.shape, dtype=bool)
    keys = rows * span + pos[rows, cols]
    at = np.minimum(np.searchsorted(chosen, keys), max(len(chosen) - 1, 0))
    used[rows, cols] = new[rows, cols] & (chosen[at] == keys if len(chosen) else False)
    return H, H_new, used


def join_row_bytes(d, itemsize):
    """About the bytes a join task holds per row of its table: the row as received and in
    the table (``itemsize`` per value each), centred as float32 (:class:`~elmscale.graph.
    _select.Operands`), and its position, original index, threshold and norms."""
    return d * (2 * itemsize + 4) + 48


#: about the most bytes a join task holds per pair of members of a hub set: each pair as a
#: candidate (a key, sorted, split into p and q, an exact distance and the order that ranks them)
JOIN_PAIR_BYTES = 48


#: bytes a join task's products hold per value of their block (the gathered float32 rows,
#: their products, the masks and the indices)
JOIN_BLOCK_BYTES = 8


class JoinWorkspace:
    """What a join task of ``budget`` bytes spends on buffers that do not grow with its
    table, at most an eighth of the budget each: the products' blocks of hub sets
    (``block_values`` values, at most :data:`HUB_BLOCK_VALUES`) and the exact distances'
    pairs (``pairs`` at a time, at most :func:`~elmscale.graph._select.pair_rows`) of rows
    of d values of ``itemsize`` bytes. ``table_budget`` is what is left for the table and
    the candidate pairs. ``compiled``: the pairs are filtered per hub set by
    :func:`~elmscale.graph._join_compiled.join_pairs` (no blocks of products)."""

    def __init__(self, budget, d, itemsize, compiled=False):
        self.compiled = compiled
        budget = int(budget)
        self.block_values = max(1, min(HUB_BLOCK_VALUES, budget // (8 * JOIN_BLOCK_BYTES)))
        pair_bytes = (2 * itemsize + max(itemsize, 4)) * d
        self.pairs = max(1, min(pair_rows(d), budget // (8 * pair_bytes)))
        spent = JOIN_BLOCK_BYTES * self.block_values + pair_bytes * self.pairs
        self.table_budget = max(budget - spent, 1)


def plan_waves(hubs, lo, hi, budget, row_bytes, pair_bytes):
    """This chunk's hub sets (its rows [lo, hi)) cut into *waves*: consecutive runs of hub
    rows whose join holds at most ``budget`` bytes, ``row_bytes`` for each distinct row of
    X the run's hub sets name and ``pair_bytes`` for each ordered pair of members of a hub
    set (m^2 for m members; at least one hub row a wave), so that a join task holds a
    bounded table whatever the data's width and spread. Returns ``(cuts, own, outside)``:
    the hub rows where the waves begin (and the end), and per wave the sorted distinct rows
    its hub sets name inside [lo, hi) (taken from the chunk's block) and outside it (which
    its task receives). Only the plan finds a wave's rows: the sending and the join read
    them from it.

    A run's distinct members are counted through each member's first hub row: the runs
    grow over windows of doubling size until one ends inside its window."""
    H = hubs[0]
    n, s = H.shape
    pairs = np.cumsum(np.count_nonzero(H >= 0, axis=1) ** 2) * pair_bytes
    pairs = np.concatenate([[0], pairs])
    cuts = [0]
    while cuts[-1] < n:
        r0 = cuts[-1]
        window = max(1, 2 * budget // max(s * row_bytes + s * s * pair_bytes, 1))
        while True:
            block = H[r0 : r0 + window]
            flat = block.ravel()
            at = np.flatnonzero(flat >= 0)
            first = at[_first_occurrences(flat[at])]
            distinct = np.cumsum(np.bincount(first // s, minlength=len(block)))
            cost = distinct * row_bytes + pairs[r0 + 1 : r0 + len(block) + 1] - pairs[r0]
            fit = max(int(np.searchsorted(cost, budget, side="right")), 1)
            if fit < len(block) or r0 + window >= n:
                break
            window *= 2
        cuts.append(r0 + min(fit, len(block)))
    named = [_distinct(H[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    own = [m[(m >= lo) & (m < hi)] for m in named]
    outside = [m[(m < lo) | (m >= hi)] for m in named]
    return np.array(cuts, dtype=np.int64), own, outside


def _wave_summary(plan, starts):
    """What the client needs of a chunk's waves (its :func:`plan_waves`): per wave, how many
    rows it receives and the chunks (ordered rows ``starts[c]:starts[c + 1]``) holding them."""
    _, _, outside = plan
    return [(len(o), _source_chunks(o, starts)) for o in outside]


def _wave_outside(plan, j):
    """The rows wave ``j`` of a chunk's ``plan`` (:func:`plan_waves`) names outside the
    chunk: what its join task receives."""
    return plan[2][j]


#: a list with free places takes candidates up to this many times the squared distance of
#: its last entry
FILL_FACTOR = 1.5


def _threshold(sq_dist):
    """Each row's threshold: the squared distance of its last list entry. A list with free
    places (its probed cells held fewer rows than the list's width) takes candidates up to
    :data:`FILL_FACTOR` times its last entry's: enough to fill it, without every pair of
    its hub sets reaching the exact stage."""
    finite = np.isfinite(sq_dist)
    last = np.where(finite, sq_dist, -np.inf).max(axis=1, initial=-np.inf)
    return np.where(
        finite.all(axis=1), last, np.where(finite.any(axis=1), FILL_FACTOR * last, np.inf)
    )


#: values of a block of hub sets' rows, products or masks in a join task
HUB_BLOCK_VALUES = 1 << 22


#: a join task looks its members up in an array over its table's span of positions where
#: the span is at most this many times the table's rows (a binary search otherwise)
LOOKUP_SPAN_PER_ROW = 16


def _table_rows(H, t_pos):
    """Each hub set member's row in the task's table (``t_pos``, ordered positions sorted),
    -1 where the hub set is padded."""
    valid = H >= 0
    span = int(t_pos[-1] - t_pos[0]) + 1
    if span > LOOKUP_SPAN_PER_ROW * len(t_pos):
        return np.where(valid, np.searchsorted(t_pos, np.where(valid, H, t_pos[0])), -1)
    row = np.full(span + 1, -1, dtype=np.int64)  # the last place answers for the padding
    row[t_pos - t_pos[0]] = np.arange(len(t_pos))
    return row[np.where(valid, H - t_pos[0], span)]


def _proposed_pairs(H_at, H_new, n_table, ops, limit, block_values):
    """The NumPy path of :func:`~elmscale.graph._join_compiled.join_pairs`: the ordered pairs
    of a hub set (``H_at``: its members' table rows, :func:`_table_rows`; ``H_new``: their
    flags), one of them new, whose product-based squared distance is within the first's
    ``limit``, as keys ``p * n_table + q`` of table rows, one array per block of hub sets of
    about ``block_values`` values."""
    n, s = H_at.shape
    step = max(1, block_values // (s * max(s, ops.d)))
    found = []
    for h0 in range(0, n, step):
        at, block_new = H_at[h0 : h0 + step], H_new[h0 : h0 + step]
        valid = at >= 0
        R = ops.rows[at]
        G = np.matmul(R, R.transpose(0, 2, 1))
        sq = ops.sq[at]
        G *= -2
        G += sq[:, :, None]
        G += sq[:, None, :]
        ok = G <= limit[at][:, :, None]
        ok &= valid[:, :, None] & valid[:, None, :]
        ok &= block_new[:, :, None] | block_new[:, None, :]
        ok[:, np.arange(s), np.arange(s)] = False
        # flat indices (hub * s + i) * s + j: one array, not nonzero's three
        flat = np.flatnonzero(ok)
        hub_i = flat // s
        at = at.ravel()
        found.append(at[hub_i] * n_table + at[hub_i - hub_i % s + (flat - hub_i * s)])
    return found


def _join_wave(width, lo, X, original, threshold, hubs, plan, j, pieces, workspace, read=None):
    """The local join of wave ``j`` of this chunk's hub sets (its ``plan``, :func:`plan_waves`;
    module docstring, step 3): the pairs ``(p, q)`` of a hub set with at least one new member
    and an exact squared distance within p's threshold, at most p's ``width`` best by
    (squared distance, original index), as ``(p, q, original index of q, squared distance)``
    sorted by p (ordered positions). The task's table holds the rows these hub sets name:
    the chunk's own (the plan's, taken from its block, X's rows from ordered position
    ``lo``) and those received (``pieces``); the products and exact distances run in the
    blocks ``workspace`` (:class:`JoinWorkspace`) sets; ``read`` turns rows of a held block
    into X's rows."""
    cuts, own, outside = plan
    r0, r1, own = cuts[j], cuts[j + 1], own[j]
    H, H_new = hubs[0][r0:r1], hubs[1][r0:r1]
    if not len(own) and not len(outside[j]):
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty, np.empty(0)
    rows = X[own - lo]
    pieces = [(p[0], read(p[1]), *p[2:]) for p in pieces] if read is not None else pieces
    own = (own, read_rows(rows, read), original[own - lo], threshold[own - lo])
    t_pos, t_X, t_orig, t_thr = _task_table(own, pieces)
    ops = Operands(t_X, t_X.mean(axis=0, dtype=np.result_type(t_X.dtype, np.float32)), np.float32)
    # a pair enters p's list only if its exact distance is within p's threshold, so its
    # proposal within the threshold plus the product's error bound
    limit = t_thr + ops.error_bound()
    H_at = _table_rows(H, t_pos)
    if compiled_available(workspace.compiled):
        found = [_join_compiled.join_pairs(H_at, H_new, ops.rows, ops.sq, limit)]
    else:
        found = _proposed_pairs(H_at, H_new, len(t_pos), ops, limit, workspace.block_values)
    keys = np.sort(np.concatenate(found))
    p, q = np.divmod(keys[_first_of_runs(keys)], len(t_pos))
    sq_dist = pair_sq_distances(t_X, p, q, workspace.pairs).astype(np.float64)
    keep = sq_dist <= t_thr[p]
    p, q, sq_dist = p[keep], q[keep], sq_dist[keep]
    # only a row's best ``width`` of this task's candidates can be among its best of all
    ids = t_orig[q].astype(np.int64)
    order = lexorder(p, sq_dist, ids)
    p, q, ids, sq_dist = p[order], q[order], ids[order], sq_dist[order]
    rank, _ = _rank_in_groups(p, len(t_pos))
    keep = rank < width
    return t_pos[p[keep]], t_pos[q[keep]], ids[keep], sq_dist[keep]


def _take_updates(updates, bounds):
    """The triples of one join task for the rows ``bounds`` (triples sorted by row)."""
    a, b = np.searchsorted(updates[0], bounds)
    return tuple(u[a:b] for u in updates)


def _merge(width, lo, pos, orig, sq_dist, new, hubs, pieces, compiled=False):
    """Each row's ``width`` best of its list and the join's triples for it, by (squared
    distance, original index): ``(positions, original indices, squared distances, new
    flags)``, padded with (-1, -1, inf, False). ``compiled``: per row, by
    :func:`~elmscale.graph._join_compiled.merge_lists` (the same result)."""
    target, cand, ids, e = _columns(pieces, (np.int64, np.int64, np.int64, np.float64))
    if compiled_available(compiled):
        own_new = new & ~hubs[2]
        return _join_compiled.merge_lists(
            width, lo, pos, orig, sq_dist, own_new, target, cand, ids, e
        )
    n = pos.shape[0]
    rows, cols = np.nonzero(pos >= 0)
    row = np.concatenate([rows, target - lo])
    cand = np.concatenate([pos[rows, cols], cand])
    ids = np.concatenate([orig[rows, cols], ids])
    e = np.concatenate([sq_dist[rows, cols], e])
    received = np.concatenate([np.zeros(len(rows), dtype=bool), np.ones(len(target), dtype=bool)])
    flag = np.concatenate([(new & ~hubs[2])[rows, cols], np.ones(len(target), dtype=bool)])
    # one copy of each candidate, the list's own first (it keeps its flag), then ranked by
    # (distance, index)
    order = lexorder(row, cand, received)
    order = order[_first_of_runs(row[order], cand[order])]
    order = order[lexorder(row[order], e[order], ids[order])]
    row, cand, ids, e, flag = row[order], cand[order], ids[order], e[order], flag[order]
    rank, _ = _rank_in_groups(row, n)
    keep = rank < width
    out_pos = np.full((n, width), -1, dtype=np.int64)
    out_ids = np.full((n, width), -1, dtype=np.int64)
    out_e = np.full((n, width), np.inf)
    out_new = np.zeros((n, width), dtype=bool)
    at = (row[keep], rank[keep])
    out_pos[at], out_ids[at], out_e[at], out_new[at] = cand[keep], ids[keep], e[keep], flag[keep]
    return out_pos, out_ids, out_e, out_new


def _blocks(array):
    return array.to_delayed(optimize_graph=False).ravel()


def _reverse_lists(starts, bounds, pos, new):
    """Per chunk (ordered rows ``bounds[c]``, which ``starts`` lists as one array), the
    pieces of reversed edges pointing into it, with their flags (one exchange)."""
    nb = len(bounds)
    pos_blocks, new_blocks = _blocks(pos), _blocks(new)
    targets = dask.compute(*[task("join-targets", _source_chunks, p, starts) for p in pos_blocks])
    return exchange(
        f"{PREFIX}-join-reverse",
        _take_reverse,
        [(p, f, bounds[t][0]) for t, (p, f) in enumerate(zip(pos_blocks, new_blocks, strict=True))],
        [[(t, (bounds[s],)) for t in range(nb) if s in targets[t]] for s in range(nb)],
    )


def local_join(
    starts, original, X, lists, new, n_neighbors, *, max_candidates, salt, memory_budget
):
    """One round of NN-descent's local join on row-chunked, ordered data (module docstring).

    Each chunk's hub sets are joined in waves (:func:`plan_waves`) whose tables hold at most
    ``memory_budget`` bytes (:func:`join_row_bytes`), unless one hub set alone names more;
    the rows move to them in rounds of about a task's worth per worker thread, each round's
    sending waiting for the joins of the round before the last, so that a worker holds a
    bounded number of copies. The lists are the same for any budget.

    Parameters
    ----------
    starts : ndarray (n_chunks + 1,)
        Where each chunk's ordered rows begin.
    original : dask array (N,)
        The original index of each ordered row, chunked like X.
    X : dask array (N, d)
        The rows, in order (a rows view is read where its rows are joined).
    lists : tuple of dask arrays (N, m)
        The current lists, each row's sorted by (squared distance, original index): ordered
        positions of the neighbours, their original indices and exact squared distances.
    new : dask array of bool (N, m)
        Which entries are new (all, before the first round).
    n_neighbors : int
        The width of the refined lists.
    max_candidates : int
        New (and old) entries at most in a row's hub set.
    salt : int >= 0
        Picks the hub sets (a different one each round).
    memory_budget : int
        The bytes a join task's table may hold.

    Returns
    -------
    (pos, orig, sq_dist, new) : dask arrays (N, n_neighbors), chunked like X
        The refined lists and their flags.
    """
    w = n_neighbors
    bounds = [(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    pos_b, ids_b, e_b = (_blocks(a) for a in lists)
    new_b = _blocks(new)
    reverse = _reverse_lists(starts, bounds, lists[0], new)
    compiled = get_config()["compiled"]
    hub_args = (max_candidates, salt)
    hubs = list(
        dask.persist(
            *[
                task("join-hubs", _hub_sets, *hub_args, lo, pos_b[t], new_b[t], rev, compiled)
                for t, ((lo, _), rev) in enumerate(zip(bounds, reverse, strict=True))
            ]
        )
    )
    workspace = JoinWorkspace(memory_budget, X.shape[1], X.dtype.itemsize, compiled)
    thresholds = [task("join-threshold", _threshold, e) for e in e_b]
    updates = _joins(w, starts, bounds, X, original, thresholds, hubs, workspace, memory_budget)
    received = exchange(
        f"{PREFIX}-join-updates",
        _take_updates,
        [(u,) for u in updates],
        [[(s, (b,)) for s in range(len(updates))] for b in bounds],
    )
    return _merged(w, bounds, (pos_b, ids_b, e_b, new_b), hubs, received, compiled)


def _waves(hubs, starts, bounds, budget, row_bytes):
    """Every chunk's waves (:func:`plan_waves`), planned on the workers and kept there (the
    rows each wave names stay there too): ``(plans, waves)``, per chunk its plan, and per
    wave in chunk order ``(chunk, wave in the chunk, rows it receives, chunks sending
    them)``, which one compute brings the client."""
    plans = dask.persist(
        *[
            task("join-plan", plan_waves, hubs[t], lo, hi, budget, row_bytes, JOIN_PAIR_BYTES)
            for t, (lo, hi) in enumerate(bounds)
        ]
    )
    summaries = dask.compute(*[task("join-waves", _wave_summary, p, starts) for p in plans])
    waves = [
        (t, j, int(n_out), sources)
        for t, summary in enumerate(summaries)
        for j, (n_out, sources) in enumerate(summary)
    ]
    return plans, waves


def _joins(w, starts, bounds, X, original, thresholds, hubs, workspace, memory_budget):
    """The join tasks of every wave (:func:`_join_wave`), one delayed result each, their
    rows sent in rounds of about ``memory_budget`` per worker thread (a round's sending
    waits for the joins of the round before the last)."""
    X_blocks, read = held_blocks(X)
    orig_blocks = _blocks(original)
    row_bytes = join_row_bytes(X.shape[1], X.dtype.itemsize)
    plans, waves = _waves(hubs, starts, bounds, workspace.table_budget, row_bytes)
    packed = [
        task("join-pack", tuple, [xb, ob, tb])
        for xb, ob, tb in zip(X_blocks, orig_blocks, thresholds, strict=True)
    ]
    # a wave's rows in two measures: the rounds bound what the join tasks hold, each row in
    # a table (join_row_bytes); the exchange bounds what an unpack task holds, each row as
    # sent (the row as held, its position, original index and threshold)
    sent_bytes = X.shape[1] * held_rows(X)[0].dtype.itemsize + 24
    nbytes = [n_out * row_bytes for _, _, n_out, _ in waves]
    rounds = split_by_bytes(range(len(waves)), nbytes, memory_budget * max(cluster_threads(), 1))
    updates, done = [None] * len(waves), []
    for r, members in enumerate(rounds):
        after = done[r - 2] if r >= 2 else None
        rows = exchange(
            f"{PREFIX}-join-rows",
            _take_positions,
            [(p, after) for p in packed],
            [[(s, bounds[s]) for s in waves[i][3]] for i in members],
            [task("join-want", _wave_outside, plans[waves[i][0]], waves[i][1]) for i in members],
            nbytes=[waves[i][2] * sent_bytes for i in members],
        )
        for i, got in zip(members, rows, strict=True):
            t, j, _, _ = waves[i]
            updates[i] = task(
                "join",
                _join_wave,
                w,
                bounds[t][0],
                X_blocks[t],
                orig_blocks[t],
                thresholds[t],
                hubs[t],
                plans[t],
                j,
                got,
                workspace,
                read,
            )
        done.append(task("join-round", _after, *[updates[i] for i in members]))
    return updates


def _after(*joined):
    """Nothing, once these join tasks have run: what a later round's sending waits for."""


def _merged(w, bounds, list_blocks, hubs, received, compiled):
    """Each chunk's lists merged with the updates it received: ``(pos, orig, sq_dist, new)``
    as dask arrays (N, w) chunked like the rows."""
    out = [
        task("join-merge", _merge, w, lo, *(b[t] for b in list_blocks), hubs[t], rt, compiled)
        for t, ((lo, _), rt) in enumerate(zip(bounds, received, strict=True))
    ]
    return tuple(
        da.concatenate(
            [
                da.from_delayed(o[i], (hi - lo, w), dtype=dt)
                for o, (lo, hi) in zip(out, bounds, strict=True)
            ]
        )
        for i, dt in enumerate((np.int64, np.int64, np.float64, bool))
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
    idx, _ = exact_kneighbors(Xq, X, n_neighbors + 1, dtype=np.float32)
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
