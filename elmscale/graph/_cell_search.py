"""A kNN graph built across the workers: exact search inside overlapping coarse cells.

The design of NVIDIA cuVS's all-neighbours batching and faiss's IVF self-join
(``contrib/big_batch_search.py``), on row-chunked dask arrays:

1. **Cells.** A balanced k-means tree on a sample of rows gives P cells of about
   ``rows_per_cell`` rows (:mod:`elmscale.graph._cells`); every row learns its nearest cells.
2. **Locality order.** Rows move once, to chunks sorted by their nearest cell
   (:func:`~elmscale.graph._ordering.order_by_cells`); a cell's rows are then contiguous and
   sit in one or two chunks. This is also the order the Gram pass uses.
3. **Search.** Each row is searched in its ``n_probes`` nearest cells (more when those
   cells together hold fewer than k + 1 rows), in faiss's ``big_batch_search`` way: the
   ordered rows are cut into reference blocks of consecutive cells, sized by a memory budget
   (``memory_budget``) and d, not N. Each block first searches its own rows (its *home*
   tasks: a row's own cell lies in its block); then the rows of other blocks that probe one
   of its cells are sent to it as (row, bound) pairs, in as many tasks as keep each within
   the budget (:func:`plan_search`). A row's bound is the k-th distance of its home lists:
   a block is asked only for rows that may lie nearer, so each row is searched without a
   bound once. Inside a task the search is exact, cell by cell: float32 products propose
   candidates, float64 distances of the candidates decide, ties go to the smaller original
   row index (:func:`~elmscale.graph._select.decide`). Each row's lists from the blocks it
   probes are merged on its chunk by (distance, index), wave by wave as the searches of a
   wave end: the blocks are disjoint, and no row beyond a bound can be among the k nearest,
   so that is its k nearest among all its probed cells.

4. **Refinement.** Where cells cut many neighbourhoods (data of high intrinsic dimension),
   rounds of NN-descent's local join (:mod:`elmscale.graph._local_join`) compare each row
   with the neighbours of its neighbours and its reverse neighbours; a recall estimate on a
   sample of rows searched exactly decides how many rounds run.

A row's neighbours are thus the k nearest among the rows of its probed cells and the
candidates the refinement rounds propose: a function of the data and the seed alone, the same
for any chunking, memory budget and number of workers. A search task holds one
reference block and a run of its queries, at most the budget (logged at INFO), whatever N and
d; no worker holds X and nothing with N rows reaches the client. The products are BLAS;
each row's selection from them and the ranking of the exact distances
(:mod:`elmscale.graph._select_compiled`) and the refinement's join loops
(:mod:`elmscale.graph._join_compiled`) are compiled, each beside its NumPy path.
"""

import copy
import functools
import logging
import math

import dask
import dask.array as da
import numpy as np
from dask.utils import format_bytes

from .._config import get_config
from ..utils._compiled import compiled_available
from ..utils._dask import (
    cluster_threads,
    held_blocks,
    one_key,
    persist_compact,
    read_rows,
    worker_memory_per_thread,
)
from . import _select_compiled
from ._backends import check_n_neighbors
from ._cells import assign_cells, cell_groups, fit_cells_on_workers, nearest_cells
from ._exchange import exchange, split_by_bytes
from ._local_join import (
    _columns,
    _rank_in_groups,
    exact_sample_neighbours,
    local_join,
    recall_estimate,
    recall_sample,
)
from ._ordering import order_by_cells
from ._select import (
    BLOCK_VALUES,
    Operands,
    decide,
    exact_sq_distances,
    lexorder,
    pair_rows,
    proposal_bound,
    propose,
    propose_compiled,
    within_limits,
)
from ._tasks import PREFIX, row_numbers, task

logger = logging.getLogger(__name__)

#: the most refinement rounds ``n_refine="auto"`` runs
MAX_AUTO_REFINE = 10
#: refinement keeps this many times k neighbours per row between rounds
JOIN_WIDTH = 3
#: a row's hub set in a refinement round holds at most this many times k new entries (and
#: as many old ones)
CANDIDATES_PER_K = 3
#: ``n_refine="auto"`` stops after a round that raised the recall estimate by less
MIN_RECALL_GAIN = 0.005

#: cells beyond ``n_probes`` each row keeps in reserve, for probes of cells too small for k
EXTRA_PROBES = 3
#: the share of a worker thread's memory one search task holds by default
#: (``CellSearch(memory_budget=None)``) ...
SEARCH_MEMORY_SHARE = 0.25
#: ... and at most this, also where no worker states a memory limit: a task searching
#: more queries at once is slower per query, and fewer tasks balance the workers worse
DEFAULT_SEARCH_BYTES = 256 * 2**20
#: the most cells ``n_probes="auto"`` searches each row in
MAX_AUTO_PROBES = 24
#: ... and where refinement rounds follow (``n_refine`` not 0): past this many cells a round
#: of the local join adds more recall for its cost than more cells do
MAX_PROBES_BEFORE_ROUNDS = 6
#: ``n_probes="auto"`` short of its target stops adding cells where one more adds less recall
MIN_PROBE_GAIN = 0.002


def effective_probes(probes, sizes, n_probes, k):
    """Each row's probed cells: its ``n_probes`` nearest, extended to the next nearest while
    they hold fewer than k + 1 rows in all; unused slots are -1."""
    cum = np.cumsum(sizes[probes], axis=1)
    need = np.argmax(cum >= k + 1, axis=1) + 1  # cells needed to reach k + 1 rows
    need[cum[:, -1] < k + 1] = probes.shape[1]
    n_used = np.maximum(need, min(n_probes, probes.shape[1]))
    out = probes.astype(np.int64)
    out[np.arange(probes.shape[1])[None, :] >= n_used[:, None]] = -1
    return out


def probe_recall(probes, sizes, neighbour_cells, n_probes):
    """The recall@k the cell search reaches with ``n_probes`` on rows whose exact k nearest
    neighbours lie in ``neighbour_cells`` (n, k) and whose nearest cells are ``probes``
    (n, m, as :func:`~elmscale.graph._cells.assign_cells` gives them for ``n_probes``): the
    mean fraction of neighbours that lie in the cells :func:`effective_probes` gives the
    row. The search inside the probed cells is exact, so a neighbour is found exactly when
    its cell is probed: on the recall sample this is the estimate the search will report,
    known before it runs."""
    probed = effective_probes(probes, sizes, n_probes, neighbour_cells.shape[1])
    return float((neighbour_cells[:, :, None] == probed[:, None, :]).any(axis=2).mean())


def chosen_probes(recalls, target):
    """The fewest probes whose recall (``recalls[P - 1]``, :func:`probe_recall`) reaches
    ``target``; short of it, the fewest after which no further probe adds
    :data:`MIN_PROBE_GAIN`."""
    reached = np.flatnonzero(recalls >= target)
    if len(reached):
        return int(reached[0]) + 1
    gains = np.diff(recalls)
    useful = np.flatnonzero(gains >= MIN_PROBE_GAIN)
    return int(useful[-1]) + 2 if len(useful) else 1


def search_budget(memory_budget=None, most=DEFAULT_SEARCH_BYTES):
    """The bytes one search task may hold: ``memory_budget``; else
    :data:`SEARCH_MEMORY_SHARE` of a worker thread's memory
    (:func:`~elmscale.utils._dask.worker_memory_per_thread`), at most ``most`` (None: no
    cap); else, without workers that state a memory limit, :data:`DEFAULT_SEARCH_BYTES`."""
    if memory_budget is not None:
        return int(memory_budget)
    share = worker_memory_per_thread()
    if not share:
        return DEFAULT_SEARCH_BYTES
    budget = int(SEARCH_MEMORY_SHARE * share)
    return budget if most is None else min(budget, most)


def task_bytes(nr, nq, d, itemsize, width, k):
    """About the most bytes a search task holds: ``nr`` reference rows and ``nq`` query
    rows of d values of ``itemsize`` bytes, each query with up to ``width`` probed cells
    proposing k + 1 candidates each.

    References: the rows, centred float32 and augmented (:class:`~elmscale.graph._select.
    Operands`). Queries: the pieces received and their concatenation, centred, augmented and
    taken per cell, and the (width, k + 1) proposals. The products' temporaries are at most
    ``BLOCK_VALUES`` values and the exact distances' buffers at most
    :func:`~elmscale.graph._select.pair_rows` pairs, so neither grows with the rows."""
    ref = nr * (d * (itemsize + 8) + 48)
    query = nq * (d * (2 * itemsize + 12) + 40 * width * (k + 1) + 96)
    product = 14 * min(BLOCK_VALUES, nq * nr)
    pairs = (2 * itemsize + max(itemsize, 4)) * d * min(pair_rows(d), nq * width * (k + 1))
    return ref + query + product + pairs


def _most(fits, high):
    """The largest n in [1, high] with ``fits(n)`` (fits decreasing in n), at least 1."""
    lo, hi = 1, max(int(high), 1)
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _queries_fit(budget, nr, shape, nq):
    return task_bytes(nr, nq, *shape) <= budget


def reference_blocks(starts, budget, d, itemsize, width, k):
    """The reference blocks of the search: each ordered chunk ``starts[t]:starts[t + 1]``
    cut into equal runs of consecutive rows (so of consecutive cells), as few as keep a
    block's share of a task (:func:`task_bytes` without queries) within half of
    ``budget``. Returns ``(block_starts, block_chunk)``: the ordered positions where blocks
    begin (and the end), and the chunk each block lies in.

    A block never spans two chunks: its rows are a slice of one chunk, read where that chunk
    lives. With a budget larger than a chunk, the blocks are the chunks."""
    sizes = np.diff(starts)
    cap = _most(lambda n: task_bytes(n, 0, d, itemsize, width, k) <= budget // 2, sizes.max())
    bounds, chunk = [], []
    for t, n in enumerate(sizes):
        pieces = -(-int(n) // cap)
        bounds.extend(int(starts[t]) + (i * int(n)) // pieces for i in range(pieces))
        chunk.extend([t] * pieces)
    return np.array(bounds + [int(starts[-1])], dtype=np.int64), np.array(chunk, dtype=np.int64)


class SearchPlan:
    """The search tasks. First the *home* tasks, ``home[i] = (block, first, stop)``: rows
    ``first:stop`` of a reference block searched among the block's own rows (a row's own
    cell lies in its block). Then the *remote* tasks: per task, its reference block
    ``blocks[i]`` and its queries ``queries[i]``, ``[(source chunk, first, stop), ...]``
    (the slice of the source chunk's rows that probe the block and lie outside it,
    :func:`_row_blocks`). ``held`` the bytes each task holds at most (:func:`task_bytes`),
    home tasks first, each at most ``budget`` unless one reference row and one query alone
    exceed it."""

    def __init__(self, block_starts, home, blocks, queries, held, budget):
        self.block_starts = block_starts
        self.home = home
        self.blocks = blocks
        self.queries = queries
        self.held = held
        self.budget = budget

    def __len__(self):
        return len(self.home) + len(self.blocks)


def _cut(total, cap):
    """``[0, total)`` cut into as few equal runs as keep each at most ``cap``."""
    parts = -(-total // cap)
    cuts = [(i * total) // parts for i in range(parts + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def plan_search(block_starts, counts, budget, d, itemsize, width, k):
    """:class:`SearchPlan` of the search tasks from ``counts`` (n_chunks, n_blocks): the
    rows of each chunk that probe a cell of each block from outside it. Each block's own
    rows, then its queries from outside in chunk order, are cut into equal runs of as few
    tasks as keep each within ``budget`` with the block (:func:`task_bytes`); a block no
    outside row probes has no remote task."""
    home, blocks, queries, home_held, held = [], [], [], [], []
    shape = (d, itemsize, width, k)
    for b in range(counts.shape[1]):
        nr = int(block_starts[b + 1] - block_starts[b])
        fits = functools.partial(_queries_fit, budget, nr, shape)
        for q0, q1 in _cut(nr, _most(fits, nr)):
            home.append((b, q0, q1))
            home_held.append(task_bytes(nr, q1 - q0, *shape))
        total = int(counts[:, b].sum())
        if total == 0:
            continue
        ends = np.cumsum(counts[:, b])
        for q0, q1 in _cut(total, _most(fits, total)):
            mine = []
            for s in np.flatnonzero((ends > q0) & (ends - counts[:, b] < q1)):
                first = int(ends[s] - counts[s, b])
                mine.append((int(s), max(q0, first) - first, min(q1, int(ends[s])) - first))
            blocks.append(b)
            queries.append(mine)
            held.append(task_bytes(nr, q1 - q0, *shape))
    return SearchPlan(block_starts, home, blocks, queries, home_held + held, budget)


def _row_blocks(probes, sizes, n_probes, k, cell_start, block_starts, lo):
    """This ordered chunk's rows' probed cells (:func:`effective_probes`) and, per
    reference block, its rows outside the block that probe a cell with rows in it (the
    chunk starts at ordered position ``lo``; a block's own rows are its home task's):
    ``(probes, rows, ptr)``, ``rows[ptr[b]:ptr[b + 1]]`` increasing."""
    eff = effective_probes(probes, sizes, n_probes, k)
    n, n_blocks = eff.shape[0], len(block_starts) - 1
    r, j = np.nonzero(eff >= 0)
    c = eff[r, j]
    c0, c1 = cell_start[c], cell_start[c + 1]
    r, c0, c1 = r[c1 > c0], c0[c1 > c0], c1[c1 > c0]
    b0 = np.searchsorted(block_starts, c0, side="right") - 1
    span = np.searchsorted(block_starts, c1 - 1, side="right") - b0  # blocks per cell
    first = np.repeat(np.cumsum(span) - span, span)
    blocks = np.repeat(b0, span) + np.arange(len(first)) - first
    r = np.repeat(r, span)
    outside = (r + lo < block_starts[blocks]) | (r + lo >= block_starts[blocks + 1])
    blocks, rows = np.divmod(np.unique(blocks[outside] * n + r[outside]), max(n, 1))
    return eff, rows, np.searchsorted(blocks, np.arange(n_blocks + 1))


def _block_counts(row_blocks):
    """Per reference block, this chunk's rows that probe it (:func:`_row_blocks`)."""
    return np.diff(row_blocks[2])


def _take_queries(X, original, row_blocks, bounds, after, lo, block, first, stop, read=None):
    """Rows ``first:stop`` of this chunk's rows that probe ``block`` from outside it (the
    chunk starts at ordered position ``lo``): (ordered positions, rows, original indices,
    probed cells, bounds). A row's bound (``bounds``, :func:`_kth`) is the k-th squared
    distance of its lists from its home task: no row farther can be among its k nearest.
    ``after`` only orders the task after an earlier wave's searches; ``read`` turns rows of
    a held block into the rows searched (:func:`~elmscale.utils._dask.held_blocks`)."""
    eff, rows, ptr = row_blocks
    sel = rows[ptr[block] + first : ptr[block] + stop]
    queries = read_rows(X[sel], read)
    return sel + lo, queries, original[sel], eff[sel], bounds[sel]


def _after(*found):
    """Nothing, once these search tasks have run: what a later wave's packs wait for."""


def _in_block(probes, cell_start, a, b):
    """Each query's probed cells that have rows in [a, b), in its order (the nearest
    first), padded with -1."""
    p = np.maximum(probes, 0)
    inside = (probes >= 0) & (cell_start[p] < b) & (cell_start[p + 1] > a)
    inside &= cell_start[p + 1] > cell_start[p]
    order = np.argsort(~inside, axis=1, kind="stable")
    out = np.take_along_axis(np.where(inside, probes, -1), order, axis=1)
    return out[:, : max(int(inside.sum(axis=1).max(initial=0)), 1)]


def _take_results(found, lo, hi):
    """A search task's lists of the queries at ordered positions [lo, hi): (rows of the
    chunk, positions, original indices, squared distances)."""
    q_pos, pos, ids, sq_dist = found
    m = (q_pos >= lo) & (q_pos < hi)
    return q_pos[m] - lo, pos[m], ids[m], sq_dist[m]


def _merge_lists(n, k, pieces):
    """Each of the chunk's n rows' k best of the lists its search tasks found, by (squared
    distance, original index): (positions, original indices, squared distances), padded
    with (-1, -1, inf). The tasks searched disjoint reference blocks, so a candidate comes
    from one list."""
    q, pos, ids, e = _columns(pieces, (np.int64, np.int64, np.int64, np.float64))
    width = pos.shape[1] if pos.ndim == 2 else k
    row = np.repeat(q, width)
    pos, ids, e = pos.ravel(), ids.ravel(), e.ravel()
    keep = ids >= 0
    row, pos, ids, e = row[keep], pos[keep], ids[keep], e[keep]
    order = lexorder(row, e, ids)
    row, pos, ids, e = row[order], pos[order], ids[order], e[order]
    rank, _ = _rank_in_groups(row, n)
    keep = rank < k
    out = (np.full((n, k), -1, dtype=np.int64), np.full((n, k), -1, dtype=np.int64))
    out_e = np.full((n, k), np.inf)
    at = (row[keep], rank[keep])
    out[0][at], out[1][at], out_e[at] = pos[keep], ids[keep], e[keep]
    return out[0], out[1], out_e


def _cell_runs(table):
    """``(cell, rows, columns)`` for each distinct cell of an (n, w) table of cell numbers,
    in increasing cell order (entries -1 are skipped)."""
    flat = table.ravel()
    if len(flat) == 0:
        return
    order = np.argsort(flat, kind="stable")
    cells, first = np.unique(flat[order], return_index=True)
    for c, a, b in zip(cells, first, np.append(first[1:], len(flat)), strict=True):
        if c >= 0:
            rows, cols = np.divmod(order[a:b], table.shape[1])
            yield c, rows, cols


def _search_block(kernel, k, cell_start, a, b, lo, X, original, pieces, read=None, compiled=False):
    """One search task: the k nearest neighbours of the queries it received (``pieces``,
    :func:`_take_queries`) among the rows of their probed cells inside the reference block
    of ordered rows [a, b) (rows of this ordered chunk, which starts at ``lo``), only those
    within each query's bound: (query positions, then per query (k) ordered positions,
    original indices and squared distances), padded with (-1, -1, inf)."""
    db_pos = np.arange(a, b)
    db_X = read_rows(X[a - lo : b - lo], read)
    db_orig = np.asarray(original[a - lo : b - lo], dtype=np.int64)
    q_pos, Xq, q_orig, probes, within = (np.concatenate(c) for c in zip(*pieces, strict=True))
    probes = _in_block(probes, cell_start, a, b)
    ids, rows, d2 = _search_table(
        kernel, k, cell_start, db_pos, db_X, db_orig, Xq, q_orig, probes, compiled, within
    )
    return q_pos, np.where(rows >= 0, db_pos[rows], -1), ids, d2


def _search_home(kernel, k, cell_start, read, compiled, a, b, lo, X, original, row_blocks, run):
    """A home task: rows ``run = (first, stop)`` of the reference block of ordered rows
    [a, b) searched in their probed cells (:func:`_row_blocks`) inside the block
    (:func:`_search_block`, without bounds): a row's own cell lies in its block, so its
    lists from here bound what its other blocks are asked for (:func:`_take_queries`)."""
    sel = np.arange(a - lo + run[0], a - lo + run[1])
    piece = (sel + lo, read_rows(X[sel], read), original[sel], row_blocks[0][sel])
    piece += (np.full(len(sel), np.inf),)
    return _search_block(kernel, k, cell_start, a, b, lo, X, original, [piece], read, compiled)


def _home_lists(plan, where, sources, settings):
    """Each ordered chunk's lists from its rows' home tasks (:class:`SearchPlan`), placed
    (:func:`_place_home`), and its rows' bounds (:func:`_kth`): per chunk a delayed
    ``(positions, original indices, squared distances)``, and one of bounds. ``where`` is
    ``(block_chunk, starts)``: each block's chunk and the chunks' ordered starts;
    ``sources`` each chunk's (rows, original indices, :func:`_row_blocks`); ``settings``
    :func:`_search_home`'s first five arguments."""
    block_chunk, starts = where
    k = settings[1]
    found = [[] for _ in range(len(starts) - 1)]
    for b, first, stop in plan.home:
        t = int(block_chunk[b])
        a, e = (int(x) for x in plan.block_starts[b : b + 2])
        place = (a, e, int(starts[t]), *(x[t] for x in sources), (first, stop))
        found[t].append(task("home", _search_home, *settings, *place))
    best = [
        task("fold", _place_home, int(starts[t + 1] - starts[t]), k, int(starts[t]), *f)
        for t, f in enumerate(found)
    ]
    # the bounds alone, not the home lists, wait for the packs of every wave
    return best, [task("bounds", _kth, b) for b in best]


def _kth(lists):
    """Each row's last (k-th) squared distance of its lists (:func:`_merge_lists`), inf
    where they hold fewer than k."""
    return lists[2][:, -1].copy()


def _place_home(n, k, lo, *found):
    """The lists of a chunk (of n rows from ordered position ``lo``) from its home tasks:
    each row has one, sorted by (distance, id) as :func:`_merge_lists` ranks, so they are
    placed, not merged."""
    out = (np.full((n, k), -1, dtype=np.int64), np.full((n, k), -1, dtype=np.int64))
    out += (np.full((n, k), np.inf),)
    for q_pos, *lists in found:
        for o, x in zip(out, lists, strict=True):
            o[q_pos - lo] = x
    return out


def _search_table(
    kernel, k, cell_start, db_pos, db_X, db_orig, X, original, probes, compiled=False, within=None
):
    """The k nearest neighbours of the query rows X (original indices ``original``) among
    the rows of their probed cells ``probes`` (n, M; -1 unused) in the table of ordered
    rows ``db_pos`` (increasing): (original indices, rows of the table, squared
    distances), each (n, k), padded with (-1, -1, inf).

    ``within`` (n,), optional: per query, the squared distance beyond which no row is wanted
    (the k-th nearest found elsewhere; inf: none); only rows whose product says they may lie
    within it are proposed. A query without one is searched in its first probed cell first,
    whose (k + 1)-th proposal then bounds what its other cells are asked to propose.
    ``kernel`` proposes (:class:`CellSearch`); ``compiled``:
    :func:`~elmscale.graph._select.decide` ranks by its compiled kernels (the same result).
    It ranks :func:`_table_keys`: ordered as the original indices, which are distinct, and
    carrying each neighbour's row, which then needs no lookup.
    """
    n, M = probes.shape
    original = np.asarray(original, dtype=np.int64)
    # one centring for the task: every query's error bound then holds for all its cells
    center = db_X.mean(axis=0, dtype=np.result_type(db_X.dtype, np.float32))
    Q, R = Operands(X, center, np.float32), Operands(db_X, center, np.float32)
    tau = Q.error_bound(ref_sq_max=float(R.sq.max()))
    where = np.full((n, M, k + 1), -1, dtype=np.int64)  # rows of the task's table
    g = np.full((n, M, k + 1), np.inf)
    span = {}  # cell -> its rows [r0, r1) in the task's table

    def propose_in(slots, bound, queries=slice(None)):
        """Each cell of these probe slots proposes k + 1 candidates to these queries."""
        slots = np.asarray(slots, dtype=np.int64)
        subset = np.arange(n)[queries]
        for c, q, j in _cell_runs(probes[queries][:, slots]):
            q = subset[q]
            if c not in span:
                span[c] = tuple(np.searchsorted(db_pos, cell_start[c : c + 2]))
            r0, r1 = span[c]
            cols, gc = kernel(
                Q.take(q),
                R.take(slice(r0, r1)),
                original[q],
                db_orig[r0:r1],
                k + 1,
                None if bound is None else bound[q],
            )
            where[q, slots[j]] = np.where(cols >= 0, cols + r0, -1)
            g[q, slots[j]] = gc

    def exact(rows, pos):
        return exact_sq_distances(X, rows, db_X, where.reshape(n, -1)[rows, pos])

    def fallback(rows, slots, limits):
        cells = probes[rows, slots]
        return _fallback(X, Q, R, original, db_X, db_orig, span, cells, rows, limits)

    bound = np.full(n, np.inf) if within is None else proposal_bound(within, tau)
    free = np.isinf(bound)
    propose_in([0], None, free)
    propose_in([0], bound, ~free)
    # the first cell's (k + 1)-th proposal (+ 2 tau) bounds what another cell can add
    propose_in(list(range(1, M)), np.minimum(bound, proposal_bound(g[:, 0].max(axis=1), tau)))
    ids = np.where(where >= 0, _table_keys(db_orig, np.maximum(where, 0)), -1)
    tau = np.broadcast_to(tau[:, None], (n, M))
    keys, d2 = decide(k, g, ids, tau, exact, fallback, compiled)
    ids, rows = np.divmod(keys, len(db_orig))
    found = keys >= 0
    return np.where(found, ids, -1), np.where(found, rows, -1), d2


def _fallback(X, Q, R, original, db_X, db_orig, span, cells, rows, limits):
    """Queries whose proposals from a cell may have cut a tie (query ``rows[i]``, its cell
    ``cells[i]``): every row of that cell whose proposed distance is within the query's
    limit, one product per cell, as flat ``(query, key, squared distance)`` triples
    (:func:`_table_keys`)."""
    found = []
    for c, j, _ in _cell_runs(cells[:, None]):
        r0, r1 = span[c]
        qi, ci = within_limits(
            Q.query[rows[j]],
            R.reference[r0:r1],
            original[rows[j]],
            db_orig[r0:r1],
            limits[j],
        )
        found.append((rows[j][qi], ci + r0))
    queries, cc = (np.concatenate(f) for f in zip(*found, strict=True))
    return queries, _table_keys(db_orig, cc), exact_sq_distances(X, queries, db_X, cc)


def _table_keys(db_orig, rows):
    """The key :func:`_search_table` ranks rows of its table by: ``original index * T +
    row`` (T rows in the table), ordered as the original indices and decoded by ``divmod``."""
    return db_orig[rows] * len(db_orig) + rows


class CellPartition:
    """Cells of X's rows and the order that sorts rows by cell (see :class:`CellSearch`).

    ``order`` is a :class:`~elmscale.graph._ordering.RowOrder`; ``probes`` (N x m, ordered
    rows) each row's nearest cells (its own only for ``n_probes="auto"``, whose search
    assigns the others); ``original`` the original index of each ordered row;
    ``cell_start`` where each cell's rows begin in the order (P + 1 positions); ``seed``
    the seed the cells and the recall sample are drawn from; ``recall_estimate_`` the
    estimate of the search run on it (:class:`CellSearch`)."""

    def __init__(self, order, probes, original, cell_start, centers, seed=0):
        self.order = order
        self.seed = seed
        self.recall_estimate_ = None
        self.probes = probes
        self.original = original
        self.cell_start = cell_start
        self.centers = centers

    @property
    def n_cells(self):
        return len(self.cell_start) - 1


class CellSearch:
    """Approximate kNN graph by exact search inside overlapping coarse cells, on the workers.

    Parameters
    ----------
    rows_per_cell : int, default=500
        Target cell size. Work per row grows with ``rows_per_cell * n_probes``, and so does
        recall.
    n_probes : int or "auto", default=6
        Cells each row is searched in: its own, then those whose boundary with it is nearest.
        "auto" takes the fewest (at most :data:`MAX_AUTO_PROBES`, or
        :data:`MAX_PROBES_BEFORE_ROUNDS` where refinement rounds follow) whose recall on the
        recall sample reaches ``target_recall``, or, short of it, the fewest after which one
        more cell adds less than :data:`MIN_PROBE_GAIN`. The search inside the cells is exact, so
        that recall is known before the search from where the sample's exact neighbours
        lie (:func:`probe_recall`); it is the estimate the search then reports. Above
        ``FLAT_MAX_CELLS`` cells "auto" takes each row's candidate cells from its own
        nearest groups of cells, which finds the cells to probe in high dimension at about
        twice the assignment's cost (:mod:`elmscale.graph._cells`).
    n_refine : "auto" or int, default=0
        Rounds of NN-descent's local join after the cell search (:meth:`refine`): rows that
        share a neighbour (forward or reverse) are compared, each row's hub set holding at
        most ``CANDIDATES_PER_K * k`` new and as many old entries, and only pairs with a
        new member are joined, so later rounds cost less than the first. They lift recall
        where cells cut many neighbourhoods (data of high intrinsic dimension). "auto" runs
        rounds while the recall estimate is below ``target_recall`` and rose by at least
        :data:`MIN_RECALL_GAIN` in the last round, at most :data:`MAX_AUTO_REFINE`: none
        where the cells already find the neighbours (low intrinsic dimension); an int runs
        that many. With rounds possible the cell search finds ``JOIN_WIDTH * k`` neighbours
        per row, and refinement keeps that many between rounds. The default runs none: the
        estimators' graphs do not need the recall and rounds cost several times the cell
        search on such data (look at ``recall_estimate_`` to decide).
    target_recall : float, default=0.98
        The recall estimate "auto" probes for and at which "auto" stops refining.
    recall_sample : int, default=500
        Rows whose lists are checked against an exact search of all rows to estimate
        recall@k (``recall_estimate_``): one pass over X for that many queries. 0 skips the
        estimate (then ``n_refine`` must be an int).
    kernel : callable, optional
        The in-cell search kernel, ``kernel(Q, R, q_ids, r_ids, m, bound) -> (cols, g)``;
        default the built-in one (:func:`elmscale.graph._select.propose`, its selection
        compiled unless ``config_context(compiled=False)``). ``Q`` and
        ``R`` are :class:`~elmscale.graph._select.Operands` of query and reference rows
        (``Q.rows``, ``R.rows``: centred float32 rows), ``q_ids`` and ``r_ids`` their global
        ids. For each query it returns the m references of smallest proposed squared
        distance, only those at most ``bound[i]`` when ``bound`` is given (then maybe
        fewer), never the reference with the query's own id: ``cols`` (nq, m) int64
        positions in R padded with -1, ``g`` (nq, m) float64 proposed squared distances
        padded with inf, the largest of a row's m in its last column (sorted rows qualify).
        A kernel that breaks that last rule is still exact, only slower: every such row
        then looks like a tie cut at its m-th proposal and is searched again. Any float32
        product of the centred rows keeps the proposals within the error bound the
        selection assumes; exact distances and global indices then decide, so every such
        kernel gives the same graph. It must pickle (the workers
        receive it), e.g. a module-level function of an installed package.
    memory_budget : int, optional
        Bytes one search task may hold (:func:`task_bytes`): a block of consecutive rows
        (cells) of the cell order within half of it, and as many of the rows that probe
        those cells as fit the rest; a block's queries that do not fit are split over
        several tasks. Default :data:`SEARCH_MEMORY_SHARE` of a worker thread's memory
        (memory limit / threads) up to :data:`DEFAULT_SEARCH_BYTES` (larger search tasks
        run slower), that cap without workers that state a limit; logged at INFO. It
        bounds a task whatever N and d (in high dimension a chunk's rows probe cells all
        over X); the refinement's join tasks hold at most the same when given, else the
        uncapped share (:func:`~elmscale.graph._local_join.plan_waves`). The graph is the
        same for any budget.

    Notes
    -----
    Cost: one pass over X for the cell assignment (each row's distances to the P centres,
    or above ``FLAT_MAX_CELLS`` cells to about 9 sqrt(P) of them), one shuffle of X's rows
    into cell order, and search tasks doing at most ``N * n_probes * rows_per_cell * d``
    multiply-adds in all: per reference block, its own rows searched where they are, then
    one task per run of the rows of other blocks that probe it (one per chunk where the
    budget holds a chunk and its queries), each row received with its bound once per other
    block it probes; each row's lists come back to its chunk. The cells are fitted on the
    workers on a sample of rows (at most 128 MiB); the client holds the centres and
    per-chunk tables of cell numbers. Each refinement round moves the rows' reverse edges,
    once each distinct row of X a chunk's hub sets name and it lacks, and the (row,
    candidate, distance) triples that pass the exact test
    (:mod:`elmscale.graph._local_join`). Use it through ``backend="cells"``;
    ``CellSearch(rows_per_cell=..., n_probes=...)`` is itself a backend callable.

    Attributes
    ----------
    recall_estimate_ : float or None
        Set by each search: the fraction of the exact k nearest neighbours of
        ``recall_sample`` sampled rows that their final lists hold (None without a sample).
        The same value is set on the search's :class:`CellPartition`.
    n_refine_ : int
        Set by each search: the refinement rounds it ran.
    n_probes_ : int
        Set by each search: the cells each row was searched in (``n_probes``, or what "auto"
        chose).
    """

    #: this backend provides its own locality order (see :func:`elmscale.graph.knn_graph`)
    provides_order = True

    def __init__(
        self,
        rows_per_cell=500,
        n_probes=6,
        n_refine=0,
        kernel=None,
        *,
        target_recall=0.98,
        recall_sample=500,
        memory_budget=None,
    ):
        checks = [("rows_per_cell", rows_per_cell, 1, ""), ("recall_sample", recall_sample, 0, "")]
        for name, value, low in (("n_probes", n_probes, 1), ("n_refine", n_refine, 0)):
            if not (isinstance(value, str) and value == "auto"):
                checks.append((name, value, low, ' or "auto"'))
        for name, value, low, also in checks:
            if not (
                isinstance(value, (int, np.integer))
                and not isinstance(value, bool)
                and value >= low
            ):
                raise ValueError(f"{name} must be an int >= {low}{also}, got {value!r}")
        if not (
            isinstance(target_recall, (float, int, np.floating, np.integer))
            and not isinstance(target_recall, bool)
            and 0 < target_recall <= 1
        ):
            raise ValueError(f"target_recall must be a float in (0, 1], got {target_recall!r}")
        for name, value in (("n_probes", n_probes), ("n_refine", n_refine)):
            if value == "auto" and recall_sample == 0:
                raise ValueError(f"{name}='auto' needs recall_sample > 0 (its rule is measured)")
        self.rows_per_cell = int(rows_per_cell)
        self.n_probes = n_probes if n_probes == "auto" else int(n_probes)
        self.n_refine = n_refine if n_refine == "auto" else int(n_refine)
        if kernel is not None and not callable(kernel):
            raise TypeError(f"kernel must be a callable or None, got {type(kernel).__name__}")
        self.kernel = kernel
        self.target_recall = float(target_recall)
        self.recall_sample = int(recall_sample)
        if memory_budget is not None and not (
            isinstance(memory_budget, (int, np.integer))
            and not isinstance(memory_budget, bool)
            and memory_budget >= 1
        ):
            raise ValueError(f"memory_budget must be an int >= 1 or None, got {memory_budget!r}")
        self.memory_budget = None if memory_budget is None else int(memory_budget)

    def without_recall_estimate(self):
        """This search without its recall estimate, where its rounds and probes do not
        depend on one (``n_refine`` and ``n_probes`` ints): a copy with ``recall_sample=0``,
        else ``self``. For callers that do not read ``recall_estimate_``; the estimate's
        exact search is one pass over X for ``recall_sample`` queries. The graph is the
        same."""
        if "auto" in (self.n_refine, self.n_probes) or not self.recall_sample:
            return self
        twin = copy.copy(self)
        twin.recall_sample = 0
        twin.recall_estimate_ = None
        return twin

    def __repr__(self):
        kernel = "" if self.kernel is None else f", kernel={self.kernel!r}"
        budget = "" if self.memory_budget is None else f", memory_budget={self.memory_budget}"
        return (
            f"CellSearch(rows_per_cell={self.rows_per_cell}, n_probes={self.n_probes!r}, "
            f"n_refine={self.n_refine!r}{kernel}, target_recall={self.target_recall}, "
            f"recall_sample={self.recall_sample}{budget})"
        )

    def __call__(self, X, n_neighbors, *, random_state=None):
        """``(indices, distances)`` in X's row order, chunked like X (the backend protocol)."""
        check_n_neighbors(X, n_neighbors)
        part = self.partition(X, random_state=random_state)
        # held once: the search's waves, rounds and recall sample each read the ordered rows
        ordered = persist_compact(part.order.apply(X), f"{PREFIX}-rows")
        pos, orig, dist = self.search(part, ordered, n_neighbors)
        back = part.order.inverse(part.original)
        return back.apply(orig), back.apply(dist)

    def partition(self, X, *, random_state=None):
        """Fit the cells on a sample of X's rows, assign every row and sort rows by cell."""
        seed = 0 if random_state is None else int(random_state)
        N = X.shape[0]
        n_cells = max(1, math.ceil(N / self.rows_per_cell))
        centers, n_sample = fit_cells_on_workers(X, n_cells, seed)
        # "auto" assigns the probes once it has chosen how many (:meth:`search`)
        width = 1 if self.n_probes == "auto" else self.n_probes + EXTRA_PROBES
        probes = assign_cells(X, centers, width).persist()
        order, sizes = order_by_cells(probes[:, 0], len(centers))
        cell_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        original = row_numbers(X.chunks[0])
        probes, original = dask.persist(order.apply(probes), order.apply(original))
        logger.info(
            "kNN cells: %d cells of %d-%d rows (target %d) from a sample of %d rows",
            len(centers),
            sizes.min(),
            sizes.max(),
            self.rows_per_cell,
            n_sample,
        )
        return CellPartition(order, probes, original, cell_start, centers, seed)

    def refine(self, part, X, lists, new, width, round_):
        """One round of NN-descent's local join (:func:`~elmscale.graph._local_join.local_join`):
        every pair of rows sharing a neighbour (forward or reverse), one of them new to that
        neighbour's list since the last round, is compared, and each row keeps the ``width``
        nearest of all it has seen. ``lists`` are (positions, original indices, squared
        distances), ``new`` their flags; returns the refined four."""
        return local_join(
            part.order.starts,
            part.original,
            X,
            lists,
            new,
            width,
            max_candidates=CANDIDATES_PER_K * (width // JOIN_WIDTH),
            salt=(part.seed * 1_000_003 + round_) % (1 << 63),
            memory_budget=search_budget(self.memory_budget, most=None),
        )

    def search(self, part, X, n_neighbors):
        """kNN of the rows of X, already in ``part``'s order and chunked like it:
        (ordered positions, original indices, distances), row-chunked dask arrays.

        The cell search, then refinement rounds as ``n_refine`` says; with a recall sample,
        each round's lists are persisted and checked against the sample's exact neighbours.
        Refinement works on lists of ``JOIN_WIDTH * k`` neighbours (the cell search then
        finds that many) and keeps the k nearest at the end.
        """
        k = n_neighbors
        auto = self.n_refine == "auto"
        cap = MAX_AUTO_REFINE if auto else self.n_refine
        width = min(JOIN_WIDTH * k, X.shape[0] - 1) if cap else k
        estimate = rows = exact = None
        if self.recall_sample:
            rows = recall_sample(X.shape[0], self.recall_sample, part.seed)
            exact = exact_sample_neighbours(X, rows, k)
        n_probes, probes = self.n_probes, part.probes
        if n_probes == "auto":
            n_probes = self._auto_probes(part, X, rows, exact)
            probes = assign_cells(
                X, part.centers, n_probes + EXTRA_PROBES, own_groups=True
            ).persist()
        # the cell search fills the lists: their last entries give the first round tight
        # thresholds (with free places every pair of a hub set would reach the exact stage)
        lists = self._search_cells(part, X, width, n_probes, probes)
        if rows is not None:
            lists = dask.persist(*lists)
            estimate = recall_estimate(lists[0][:, :k], rows, exact)
        new = lists[0] >= 0  # of the persisted lists: one graph per key
        rounds = 0
        while rounds < cap and not (auto and estimate >= self.target_recall):
            *lists, new = self.refine(part, X, lists, new, width, rounds)
            rounds += 1
            lists, new = dask.persist(lists, new)
            if rows is None:
                continue
            previous, estimate = estimate, recall_estimate(lists[0][:, :k], rows, exact)
            if auto and estimate - previous < MIN_RECALL_GAIN:
                break
        logger.info(
            "kNN search: %d refinement rounds, recall estimate %s",
            rounds,
            "not measured" if estimate is None else f"{estimate:.3f}",
        )
        self.recall_estimate_ = part.recall_estimate_ = estimate
        self.n_refine_ = rounds
        self.n_probes_ = n_probes
        pos, orig, sq_dist = (a[:, :k] for a in lists)
        return pos, orig, da.sqrt(sq_dist)

    def _auto_probes(self, part, X, rows, exact):
        """``n_probes="auto"``'s choice (:func:`chosen_probes`) from the recall each number
        of probes gives the sample ``rows`` of X (ordered) with exact neighbours ``exact``
        (ordered positions); their probes as the search would assign them, on the client
        (the sample's rows only)."""
        sample = np.asarray(X[rows].compute())
        cells = np.searchsorted(part.cell_start, exact, side="right") - 1
        sizes, groups = np.diff(part.cell_start), cell_groups(part.centers)
        recalls = []
        most = MAX_AUTO_PROBES if self.n_refine == 0 else MAX_PROBES_BEFORE_ROUNDS
        for n_probes in range(1, min(most, part.n_cells) + 1):
            probes = nearest_cells(sample, part.centers, n_probes + EXTRA_PROBES, groups, True)
            recalls.append(probe_recall(probes, sizes, cells, n_probes))
            if recalls[-1] >= self.target_recall:
                break
        chosen = chosen_probes(np.array(recalls), self.target_recall)
        logger.info(
            "kNN cells: %d probes, recall %.3f on the sample (1 probe %.3f, %d probes %.3f)",
            chosen,
            recalls[chosen - 1],
            recalls[0],
            len(recalls),
            recalls[-1],
        )
        return chosen

    def _search_cells(self, part, X, n_neighbors, n_probes, probes):
        """The cell search, one task per reference block and run of its queries
        (:func:`plan_search`), then each row's lists merged on its ordered chunk."""
        k = n_neighbors
        starts = part.order.starts
        sizes = np.diff(part.cell_start)
        shape = (X.shape[1], X.dtype.itemsize, probes.shape[1], k)
        budget = search_budget(self.memory_budget)
        block_starts, block_chunk = reference_blocks(starts, budget, *shape)
        X_blocks, read = held_blocks(X)
        orig_blocks = part.original.to_delayed(optimize_graph=False).ravel()
        probe_blocks = probes.to_delayed(optimize_graph=False).ravel()
        # the cells' bounds reach every task as one key (P + 1 numbers each: not per task)
        cell_start, sizes_key = one_key(part.cell_start), one_key(sizes)
        settings = (sizes_key, n_probes, k, cell_start, block_starts)
        row_blocks = dask.persist(
            *[
                task("probed", _row_blocks, p, *settings, int(starts[t]))
                for t, p in enumerate(probe_blocks)
            ]
        )
        counts = np.stack(dask.compute(*[task("counts", _block_counts, r) for r in row_blocks]))
        plan = plan_search(block_starts, counts, budget, *shape)
        compiled = get_config()["compiled"]
        kernel = self.kernel or (propose_compiled if compiled else propose)
        # first each row in its own block: its lists there bound what the other blocks it
        # probes are asked for, so no query is searched unbounded twice
        best, bounds = _home_lists(
            plan,
            (block_chunk, starts),
            (X_blocks, orig_blocks, row_blocks),
            (kernel, k, cell_start, read, compiled),
        )
        row_bytes = X.shape[1] * X.dtype.itemsize + 8 * (probes.shape[1] + 3)
        requests = [
            [(s, (int(starts[s]), b, q0, q1)) for s, q0, q1 in q]
            for b, q in zip(plan.blocks, plan.queries, strict=True)
        ]
        nbytes = [sum(q1 - q0 for _, q0, q1 in q) * row_bytes for q in plan.queries]
        # queries move in waves of about a task's worth per worker thread: the packs of wave
        # w + 2 wait for wave w's searches, so at most two waves of copies are held at once
        waves = split_by_bytes(range(len(plan.blocks)), nbytes, budget * max(cluster_threads(), 1))
        found, done = [None] * len(plan.blocks), []
        for w, wave in enumerate(waves):
            after = done[w - 2] if w >= 2 else None
            pieces = exchange(
                f"{PREFIX}-gather",
                functools.partial(_take_queries, read=read),
                [
                    (*src, after)
                    for src in zip(X_blocks, orig_blocks, row_blocks, bounds, strict=True)
                ],
                [requests[i] for i in wave],
                nbytes=[nbytes[i] for i in wave],
            )
            for i, got in zip(wave, pieces, strict=True):
                t = int(block_chunk[plan.blocks[i]])
                a, e = (int(x) for x in block_starts[plan.blocks[i] : plan.blocks[i] + 2])
                found[i] = task(
                    "search",
                    _search_block,
                    kernel,
                    k,
                    cell_start,
                    a,
                    e,
                    int(starts[t]),
                    X_blocks[t],
                    orig_blocks[t],
                    got,
                    read,
                    compiled,
                )
            done.append(task("wave", _after, *[found[i] for i in wave]))
            wave_found = [found[i] for i in wave]
            queries = [plan.queries[i] for i in wave]
            best = _fold_wave(best, wave_found, queries, starts, k, compiled)
        _log_search(budget, self.memory_budget is not None, block_starts, plan, counts, X.shape[0])
        return _merged(best, starts, k)


def _fold_wave(best, found, queries, starts, k, compiled=False):
    """Each ordered chunk's k best so far (``best``, per chunk a delayed ``(positions,
    original indices, squared distances)``) merged with the lists of one wave's
    search tasks (``found``, whose queries come from the chunks in ``queries``;
    ``compiled`` as :func:`_fold_lists`). Merging wave by wave lets each search task's
    lists go once its wave is folded, so a worker holds the chunks' k best and one wave's
    lists, not every list of the search."""
    wanted = [[] for _ in range(len(starts) - 1)]
    for i, q in enumerate(queries):
        for s in sorted({s for s, _, _ in q}):
            wanted[s].append((i, (int(starts[s]), int(starts[s + 1]))))
    lists = exchange(
        f"{PREFIX}-lists",
        _take_results,
        [(f,) for f in found],
        wanted,
        nbytes=[len(w) * int(n) * k * 24 for w, n in zip(wanted, np.diff(starts), strict=True)],
    )
    return [
        b
        if not w
        else task("fold", _fold_lists, int(starts[s + 1] - starts[s]), k, b, got, compiled)
        for s, (b, w, got) in enumerate(zip(best, wanted, lists, strict=True))
    ]


def _fold_lists(n, k, best, pieces, compiled=False):
    """The chunk's n rows' k best (:func:`_merge_lists`) of the lists ``pieces`` and the
    best so far (the home lists, :func:`_place_home`, with each earlier wave's folded in).
    Only the rows the pieces name can change, and each row's merge is independent of the
    others', so only those rows are merged; the rest are copied. ``compiled``: each entry
    is inserted into its row's sorted best
    (:func:`~elmscale.graph._select_compiled.fold_lists`, the same lists)."""
    if compiled_available(compiled):
        return _select_compiled.fold_lists(best, pieces)
    named = np.zeros(n, dtype=bool)
    for p in pieces:
        named[p[0]] = True
    rows = np.flatnonzero(named)
    if len(rows) == n:
        return _merge_lists(n, k, [(np.arange(n), *best), *pieces])
    local_of = np.cumsum(named) - 1  # a named row's place among the named rows
    local = [(local_of[p[0]], *p[1:]) for p in pieces]
    kept = (np.arange(len(rows)), *(b[rows] for b in best))
    merged = _merge_lists(len(rows), k, [kept, *local])
    out = tuple(b.copy() for b in best)
    for o, m in zip(out, merged, strict=True):
        o[rows] = m
    return out


def _merged(best, starts, k):
    """Each ordered chunk's rows' k best of their lists from every block (per chunk, the
    folded lists of :func:`_fold_wave`), as three dask arrays (positions in cell order,
    original indices, distances)."""
    pos_b, orig_b, dist_b = [], [], []
    for t in range(len(starts) - 1):
        n = int(starts[t + 1] - starts[t])
        out = best[t]
        pos_b.append(da.from_delayed(out[0], (n, k), dtype=np.int64))
        orig_b.append(da.from_delayed(out[1], (n, k), dtype=np.int64))
        dist_b.append(da.from_delayed(out[2], (n, k), dtype=np.float64))
    return da.concatenate(pos_b), da.concatenate(orig_b), da.concatenate(dist_b)


def _log_search(budget, given, block_starts, plan, counts, n_rows):
    """The search's plan at INFO: the budget, blocks, tasks, the largest task and the rows
    sent."""
    sent = int(counts.sum())
    largest = int(np.argmax(plan.held))
    h = len(plan.home)
    if largest < h:
        block, first, stop = plan.home[largest]
        queries = stop - first
    else:
        block = plan.blocks[largest - h]
        queries = sum(q1 - q0 for _, q0, q1 in plan.queries[largest - h])
    logger.info(
        "kNN search: %s per task (%s), %d reference blocks, %d home and %d remote tasks, the "
        "largest holding about %s (%d reference rows, %d queries); %d query rows sent (%.2f N)",
        format_bytes(budget),
        "memory_budget" if given else "default",
        len(block_starts) - 1,
        h,
        len(plan.blocks),
        format_bytes(plan.held[largest]),
        int(np.diff(block_starts)[block]),
        queries,
        sent,
        sent / max(n_rows, 1),
    )
