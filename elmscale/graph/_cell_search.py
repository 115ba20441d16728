"""A kNN graph built across the workers: exact search inside overlapping coarse cells.

The design of NVIDIA cuVS's all-neighbours batching and faiss's IVF self-join
(``contrib/big_batch_search.py``), on row-chunked dask arrays:

1. **Cells.** A balanced k-means tree on a sample of rows gives P cells of about
   ``rows_per_cell`` rows (:mod:`elmscale.graph._cells`); every row learns its nearest cells.
2. **Locality order.** Rows move once, to chunks sorted by their nearest cell
   (:func:`~elmscale.graph._ordering.order_by_cells`); a cell's rows are then contiguous and
   sit in one or two chunks. This is also the order the Gram pass uses.
3. **Search.** One task per ordered chunk searches each of its rows in that row's
   ``n_probes`` nearest cells (more when those cells together hold fewer than k + 1 rows). It
   receives the rows of the cells its queries probe, from the chunks that hold them; since
   neighbouring cells are numbered consecutively these are mostly the adjacent chunks. Inside
   the task the search is exact, cell by cell: float32 products propose candidates, float64
   distances of the candidates decide, ties go to the smaller original row index
   (:func:`~elmscale.graph._select.block_topk`).

4. **Refinement.** Where cells cut many neighbourhoods (data of high intrinsic dimension),
   rounds of NN-descent's local join (:mod:`elmscale.graph._local_join`) compare each row
   with the neighbours of its neighbours and its reverse neighbours; a recall estimate on a
   sample of rows searched exactly decides how many rounds run.

A row's neighbours are thus the k nearest among the rows of its probed cells and the
candidates the refinement rounds propose: a function of the data and the seed alone, the same
for any chunking and any number of workers. A task holds
its own chunk plus the rows of the cells its queries probe (logged at INFO; where those are
most of another chunk, they are cut from that whole chunk on the task's worker,
:func:`~elmscale.graph._exchange.whole_sources`); no worker holds X and nothing with N rows
reaches the client.
Nothing is compiled at run time.
"""

import copy
import logging
import math
import warnings

import dask
import dask.array as da
import numpy as np
from dask.utils import format_bytes

from ..exceptions import ElmscaleWarning
from ..utils._dask import worker_memory_per_thread
from ._backends import check_n_neighbors
from ._cells import assign_cells, cell_groups, fit_cells_on_workers, nearest_cells
from ._exchange import exchange, whole_sources
from ._local_join import (
    _positions,
    _task_table,
    exact_sample_neighbours,
    local_join,
    recall_estimate,
    recall_sample,
)
from ._ordering import order_by_cells
from ._select import (
    Operands,
    decide,
    exact_sq_distances,
    propose,
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
#: copies of its table of rows a search task holds at once: the pieces it received, their
#: concatenation, the centred rows and their augmented form
TABLE_COPIES = 4
#: the most cells ``n_probes="auto"`` searches each row in
MAX_AUTO_PROBES = 24
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


def _probed_cells(probes, sizes, n_probes, k):
    p = effective_probes(probes, sizes, n_probes, k)
    return np.unique(p[p >= 0])


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


def _take_ranges(X, original, lo, ranges):
    """The rows of this chunk (starting at ordered position ``lo``) inside ``ranges``:
    (ordered positions, rows, original indices), each range copied as one slice."""
    pos = np.concatenate([np.arange(a, b) for a, b in ranges])
    rows = np.concatenate([X[a - lo : b - lo] for a, b in ranges])
    orig = np.concatenate([original[a - lo : b - lo] for a, b in ranges])
    return pos, rows, orig


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


def _search_chunk(kernel, k, n_probes, cell_start, lo, X, original, probes, pieces):
    """The k nearest neighbours of this ordered chunk's rows among their probed cells:
    (ordered positions, original indices, squared distances), each (n, k).

    Each query is searched in its own cell first; the (k + 1)-th proposal found there then
    bounds what the other probed cells are asked to propose. ``kernel`` proposes
    (:class:`CellSearch`).
    """
    n = X.shape[0]
    probes = effective_probes(probes, np.diff(cell_start), n_probes, k)
    probes = probes[:, : max(int((probes >= 0).sum(axis=1).max(initial=0)), 1)]
    M = probes.shape[1]
    db_pos, db_X, db_orig = _task_table(lo, X, original, pieces)
    db_orig = db_orig.astype(np.int64, copy=False)
    original = np.asarray(original, dtype=np.int64)
    # one centring for the task: every query's error bound then holds for all its cells
    center = db_X.mean(axis=0, dtype=np.result_type(db_X.dtype, np.float32))
    Q, R = Operands(X, center, np.float32), Operands(db_X, center, np.float32)
    tau = Q.error_bound(ref_sq_max=float(R.sq.max()))
    where = np.full((n, M, k + 1), -1, dtype=np.int64)  # rows of the task's table
    g = np.full((n, M, k + 1), np.inf)
    span = {}  # cell -> its rows [r0, r1) in the task's table

    def propose_in(slots, bound):
        """Each cell of these probe slots proposes k + 1 candidates to its queries."""
        slots = np.asarray(slots, dtype=np.int64)
        for c, q, j in _cell_runs(probes[:, slots]):
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

    def rank(width):
        """:func:`decide` over the first ``width`` probe slots."""
        flat_where = where[:, :width].reshape(n, -1)
        table = probes[:, :width]

        def exact(rows, pos):
            return exact_sq_distances(X, rows, db_X, flat_where[rows, pos])

        def fallback(rows, slots, limits):
            cells = table[rows, slots]
            return _fallback(X, Q, R, original, db_X, db_orig, span, cells, rows, limits)

        ids = np.where(flat_where >= 0, db_orig[np.maximum(flat_where, 0)], -1)
        return decide(
            k,
            g[:, :width],
            ids.reshape(n, width, k + 1),
            np.broadcast_to(tau[:, None], (n, width)),
            exact,
            fallback,
        )

    propose_in([0], None)
    # the own cell's (k + 1)-th proposal (+ 2 tau) bounds what another cell can add
    propose_in(list(range(1, M)), g[:, 0].max(axis=1) + 2 * tau)
    ids, d2 = rank(M)
    return _positions(db_pos, db_orig, ids), ids, d2


def _fallback(X, Q, R, original, db_X, db_orig, span, cells, rows, limits):
    """Queries whose proposals from a cell may have cut a tie (query ``rows[i]``, its cell
    ``cells[i]``): every row of that cell whose proposed distance is within the query's
    limit, one product per cell, as flat ``(query, original index, squared distance)``
    triples."""
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
    return queries, db_orig[cc], exact_sq_distances(X, queries, db_X, cc)


def _warn_if_too_large(rows, row_bytes):
    """Warn when a search task of ``rows`` rows would hold more than a worker thread's
    memory: a worker would pass its limit and restart rather than finish."""
    share, need = worker_memory_per_thread(), TABLE_COPIES * rows * row_bytes
    if share and need > share:
        warnings.warn(
            f"kNN search: a task will hold about {format_bytes(need)} ({rows} rows: its "
            f"chunk and the cells its rows probe), more than the {format_bytes(share)} of a "
            "worker thread; workers may pass their memory limit and restart. Fewer probes "
            "(CellSearch(n_probes=...)), more memory or fewer threads per worker lower it; in "
            "high dimension a row's nearest cells lie all over X.",
            ElmscaleWarning,
            stacklevel=2,
        )


def _ranges_outside(cells, cell_start, lo, hi):
    """Merged ordered-position ranges of ``cells`` that lie outside [lo, hi)."""
    out = []
    for c in cells:
        a, b = int(cell_start[c]), int(cell_start[c + 1])
        for x, y in ((a, min(b, lo)), (max(a, hi), b)):
            if x < y:
                if out and out[-1][1] == x:
                    out[-1] = (out[-1][0], y)
                else:
                    out.append((x, y))
    return out


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
        "auto" takes the fewest (at most :data:`MAX_AUTO_PROBES`) whose recall on the recall
        sample reaches ``target_recall``, or, short of it, the fewest after which one more
        cell adds less than :data:`MIN_PROBE_GAIN`. The search inside the cells is exact, so
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
        default the built-in NumPy one (:func:`elmscale.graph._select.propose`). ``Q`` and
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

    Notes
    -----
    Cost: one pass over X for the cell assignment (N x P distances to the centres), one
    shuffle of X's rows into cell order, and one search task per chunk doing about
    ``N * n_probes * rows_per_cell * d`` multiply-adds in all, plus the probed cells' rows
    received from other chunks. The cells are fitted on the workers on a sample of rows (at
    most 128 MiB); the client holds the centres and per-chunk tables of cell numbers. Each
    refinement round moves the rows' reverse edges, once each distinct row of X a chunk's
    hub sets name and it lacks, and the (row, candidate, distance) triples that pass the
    exact test
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
        return (
            f"CellSearch(rows_per_cell={self.rows_per_cell}, n_probes={self.n_probes!r}, "
            f"n_refine={self.n_refine!r}{kernel}, target_recall={self.target_recall}, "
            f"recall_sample={self.recall_sample})"
        )

    def __call__(self, X, n_neighbors, *, random_state=None):
        """``(indices, distances)`` in X's row order, chunked like X (the backend protocol)."""
        check_n_neighbors(X, n_neighbors)
        part = self.partition(X, random_state=random_state)
        pos, orig, dist = self.search(part, part.order.apply(X), n_neighbors)
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
        for n_probes in range(1, min(MAX_AUTO_PROBES, part.n_cells) + 1):
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
        k = n_neighbors
        starts = part.order.starts
        nb = len(part.order.chunks)
        sizes = np.diff(part.cell_start)
        X_blocks = X.to_delayed(optimize_graph=False).ravel()
        orig_blocks = part.original.to_delayed(optimize_graph=False).ravel()
        probe_blocks = probes.to_delayed(optimize_graph=False).ravel()
        probed = dask.compute(
            *[task("probed", _probed_cells, p, sizes, n_probes, k) for p in probe_blocks]
        )
        requests, asked = [], []
        for t in range(nb):
            lo, hi = int(starts[t]), int(starts[t + 1])
            ranges = _ranges_outside(probed[t], part.cell_start, lo, hi)
            requests.append([])
            asked.append({})
            for s in range(nb):
                s_lo, s_hi = int(starts[s]), int(starts[s + 1])
                mine = [(max(a, s_lo), min(b, s_hi)) for a, b in ranges if a < s_hi and b > s_lo]
                if mine:
                    requests[t].append((s, (s_lo, mine)))
                    asked[t][s] = sum(b - a for a, b in mine)
        whole = whole_sources(asked, np.diff(starts))
        rows_per_task = [int(starts[t + 1] - starts[t]) + sum(asked[t].values()) for t in range(nb)]
        row_bytes = X.dtype.itemsize * X.shape[1] + 16  # the row, its position and index
        pieces = exchange(
            f"{PREFIX}-gather",
            _take_ranges,
            list(zip(X_blocks, orig_blocks, strict=True)),
            requests,
            nbytes=[
                sum(n for s, n in asked[t].items() if s not in whole[t]) * row_bytes
                for t in range(nb)
            ],
            whole=whole,
        )
        pos_b, orig_b, dist_b = [], [], []
        for t in range(nb):
            lo, hi = int(starts[t]), int(starts[t + 1])
            out = task(
                "search",
                _search_chunk,
                propose if self.kernel is None else self.kernel,
                k,
                n_probes,
                part.cell_start,
                lo,
                X_blocks[t],
                orig_blocks[t],
                probe_blocks[t],
                pieces[t],
            )
            n = hi - lo
            pos_b.append(da.from_delayed(out[0], (n, k), dtype=np.int64))
            orig_b.append(da.from_delayed(out[1], (n, k), dtype=np.int64))
            dist_b.append(da.from_delayed(out[2], (n, k), dtype=np.float64))
        _warn_if_too_large(max(rows_per_task), X.shape[1] * X.dtype.itemsize)
        received = int(sum(rows_per_task)) - X.shape[0]
        logger.info(
            "kNN search: %d tasks, each holding at most %d rows; %d rows (%.2f N) "
            "received from other chunks",
            nb,
            max(rows_per_task),
            received,
            received / max(X.shape[0], 1),
        )
        return da.concatenate(pos_b), da.concatenate(orig_b), da.concatenate(dist_b)
