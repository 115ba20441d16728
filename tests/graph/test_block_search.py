"""The cell search by reference blocks: each task holds one block of consecutive cells and
the queries that probe it, within a memory budget; the graph is the same for any budget,
chunking and cluster, and equals an exact search over each row's probed cells."""

import tracemalloc

import dask
import dask.array as da
import numpy as np
import pytest
from dask.utils import key_split

from elmscale.graph import CellSearch, _select
from elmscale.graph import _cell_search as cs
from elmscale.utils._compiled import compiled_available

#: a budget small enough to cut every chunk into several blocks and split their queries
TINY = 200_000
#: a budget that joins each chunk's hub sets in several waves
JOIN_SMALL = 8 * 2**20


@pytest.fixture(scope="module")
def ties():
    """1,000 rows of 16 small integers: exact squared distances, many tied; enough rows that
    the tiny budget cuts each chunking's chunks into several blocks and JOIN_SMALL joins in
    several waves."""
    return np.random.RandomState(0).randint(0, 4, (1000, 16)).astype(np.float64)


def _planned(monkeypatch):
    """The plans of the searches run after this call, recorded."""
    plans, plan = [], cs.plan_search

    def spy(*args):
        plans.append(plan(*args))
        return plans[-1]

    monkeypatch.setattr(cs, "plan_search", spy)
    return plans


def _graph(X, chunks, search, k=8):
    idx, dist = search(da.from_array(X, chunks=(chunks, X.shape[1])), k, random_state=1)
    return dask.compute(idx, dist)


def _probed_reference(X, search, chunks, k):
    """Each row's k nearest among the rows of its probed cells (the cells the search
    assigns, :func:`~elmscale.graph._cell_search.effective_probes`), by (exact squared
    distance, index), from one dense NumPy pass per row."""
    part = search.partition(da.from_array(X, chunks=(chunks, X.shape[1])), random_state=1)
    probes, original = dask.compute(part.probes, part.original)
    probed = cs.effective_probes(probes, np.diff(part.cell_start), search.n_probes, k)
    idx = np.empty((len(X), k), dtype=np.int64)
    dist = np.empty((len(X), k))
    for row, cells in zip(original, probed, strict=True):
        rows = np.concatenate(
            [np.arange(part.cell_start[c], part.cell_start[c + 1]) for c in cells if c >= 0]
        )
        ids = original[rows]
        ids = ids[ids != row]
        d2 = ((X[ids] - X[row]) ** 2).sum(axis=1)  # integers: exact in any order
        best = np.lexsort((ids, d2))[:k]
        idx[row], dist[row] = ids[best], np.sqrt(d2[best])
    return idx, dist


@pytest.mark.parametrize("compiled", [False, True])
def test_folding_lists_wave_by_wave_equals_merging_them_at_once(compiled):
    """A chunk's k best, from its placed home lists, folded one wave at a time, each wave naming a few of its rows (some
    twice, from two tasks; some in none), then a wave naming every row, equal the k best of
    all the lists merged at once, ties by original index; the rows a wave does not name keep
    their lists. The compiled fold inserts into the sorted lists; the same result."""
    rng = np.random.RandomState(1)
    n, k = 50, 4
    waves, start = [], 0
    for _ in range(5):
        pieces = []
        for _ in range(2):
            q = np.sort(rng.choice(40, 12, replace=False))  # rows 40..49 in no wave
            ids = start + np.arange(len(q) * k).reshape(len(q), k)
            start += ids.size
            ids[rng.rand(*ids.shape) < 0.2] = -1  # padding of short lists
            e = rng.randint(0, 5, ids.shape).astype(np.float64)  # many ties
            e[ids < 0] = np.inf
            pieces.append((q, ids + 7, ids, e))
        waves.append(pieces)
    ids = start + np.arange(n * k).reshape(n, k)  # a last wave naming every row
    waves.append([(np.arange(n), ids + 7, ids, rng.randint(0, 5, ids.shape).astype(float))])
    # every row's home list, placed first (some short: padded)
    home_d = np.sort(rng.randint(0, 5, (n, k)).astype(np.float64), axis=1)
    home_d[rng.rand(n) < 0.2, -1] = np.inf
    home_ids = np.where(np.isinf(home_d), -1, 10**9 + np.arange(n * k).reshape(n, k))
    home = (np.arange(n), np.where(home_ids >= 0, home_ids + 7, -1), home_ids, home_d)
    best = cs._place_home(n, k, 0, home)
    for pieces in waves:
        before = best
        best = cs._fold_lists(n, k, best, pieces, compiled)
        named = np.unique(np.concatenate([p[0] for p in pieces]))
        others = np.setdiff1d(np.arange(n), named)
        for b, a in zip(best, before, strict=True):
            np.testing.assert_array_equal(b[others], a[others])
    at_once = cs._merge_lists(n, k, [home] + [p for pieces in waves for p in pieces])
    for b, a in zip(best, at_once, strict=True):
        np.testing.assert_array_equal(b, a)
    assert (best[1][40:] >= start).all() and (best[1][:40] < start).any()


@pytest.mark.parametrize("chunks", [500, 777])
@pytest.mark.parametrize("budget", [None, TINY])
def test_block_search_equals_an_exact_search_of_the_probed_cells(ties, chunks, budget, monkeypatch):
    """Any chunking and budget (the tiny one cuts chunks into several blocks, a block's
    queries over several tasks and the search into waves whose lists are folded into each
    chunk's best one wave at a time): each row's k nearest of its probed cells, ties by
    index; where the probes cover every cell, the dense exact graph."""
    plans = _planned(monkeypatch)
    folds, fold = [], cs._fold_wave
    monkeypatch.setattr(cs, "_fold_wave", lambda *a: folds.append(1) or fold(*a))
    search = CellSearch(rows_per_cell=100, n_probes=3, recall_sample=0, memory_budget=budget)
    got = _graph(ties, chunks, search)
    if budget == TINY:
        plan = plans[-1]
        assert len(plan.block_starts) - 1 > -(-len(ties) // chunks)  # chunks cut into blocks
        assert len(plan) > len(set(plan.blocks))  # some block's queries split over tasks
        assert max(plan.held) <= TINY
        assert len(folds) > 1  # lists merged wave by wave
    want = _probed_reference(ties, search, chunks, 8)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])

    everything = CellSearch(rows_per_cell=300, n_probes=20, recall_sample=0, memory_budget=budget)
    got = _graph(ties, chunks, everything)
    d2 = ((ties[:, None, :] - ties[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(d2, np.inf)
    ids = np.broadcast_to(np.arange(len(ties)), d2.shape)
    dense = np.lexsort((ids, d2), axis=1)[:, :8]
    np.testing.assert_array_equal(got[0], dense)
    np.testing.assert_array_equal(got[1], np.sqrt(np.take_along_axis(d2, dense, axis=1)))


@pytest.mark.parametrize(
    ("d", "n", "budget"),
    [(64, 6000, 5 * 2**18), (4096, 1100, 16 * 2**20)],
)
@pytest.mark.slow
def test_a_search_task_holds_at_most_its_budget_whatever_d(d, n, budget, monkeypatch):
    """Each search task's peak memory, measured (tracemalloc, its inputs included), stays
    within the budget at any d, where a chunk and its rows' probed cells alone exceed it."""
    from elmscale.graph import _select_compiled

    if compiled_available(True):  # the kernels' code loaded (or compiled) once a process
        _select_compiled.select_smallest(np.zeros((1, 2), np.float32), [-1], [np.inf], 1)
        _select_compiled.close_candidates(1, np.zeros((1, 1, 2)), np.zeros(1))
        _select_compiled.topk_of_pairs(1, 1, [0], [0], [0.0])
    X = np.random.RandomState(d).randn(n, d).astype(np.float32)
    assert X.nbytes > budget  # a chunk and another's rows: more than a task may hold
    peaks, search_block = [], cs._search_block

    def measured(kernel, k, cell_start, a, b, lo, Xc, original, pieces, read=None, compiled=False):
        held = X[a - lo : b - lo].nbytes + 8 * (b - a) + sum(x.nbytes for p in pieces for x in p)
        _select._workspace.__dict__.clear()  # the products' buffers count too
        tracemalloc.start()
        try:
            out = search_block(
                kernel, k, cell_start, a, b, lo, Xc, original, pieces, read, compiled
            )
            peaks.append(held + tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        return out

    plans = _planned(monkeypatch)
    monkeypatch.setattr(cs, "_search_block", measured)
    search = CellSearch(rows_per_cell=n // 12, n_probes=3, recall_sample=0, memory_budget=budget)
    got = _graph(X, n // 2, search, k=5)
    assert len(peaks) == len(plans[-1]) > 2  # home tasks and remote tasks alike
    assert max(plans[-1].held) <= budget
    assert max(peaks) <= budget, (max(peaks), budget)
    monkeypatch.setattr(cs, "_search_block", search_block)
    whole = _graph(X, n // 2, CellSearch(rows_per_cell=n // 12, n_probes=3, recall_sample=0), k=5)
    np.testing.assert_array_equal(got[0], whole[0])
    np.testing.assert_array_equal(got[1], whole[1])


@pytest.mark.parametrize(
    ("d", "n", "budget"),
    [(64, 2400, 2**19), (1024, 750, 2 * 2**20)],
)
@pytest.mark.slow
def test_a_join_task_holds_at_most_its_budget_whatever_d(d, n, budget, monkeypatch):
    """Each local-join task's peak memory, measured (tracemalloc, the rows it received
    included), stays within the budget at any d, where a chunk's hub sets name more rows than
    the budget holds; the refined graph is the one of an unbounded join."""
    from elmscale.graph import _join_compiled
    from elmscale.graph import _local_join as lj

    if compiled_available(True):  # the kernel's code loaded (or compiled) once a process
        one = np.zeros((1, 2), dtype=np.int64)
        _join_compiled.join_pairs(one, one == 0, np.zeros((1, 1)), np.zeros(1), np.zeros(1))
    X = np.random.RandomState(d).randn(n, d).astype(np.float32)
    assert X.nbytes > budget  # every chunk's hub sets name rows of every other chunk
    peaks, join_wave = [], lj._join_wave

    def measured(*args, **kwargs):
        pieces = args[8]
        held = sum(x.nbytes for p in pieces for x in p)
        tracemalloc.start()
        try:
            out = join_wave(*args, **kwargs)
            peaks.append(held + tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        return out

    monkeypatch.setattr(lj, "_join_wave", measured)
    search = CellSearch(
        rows_per_cell=n // 12, n_probes=2, n_refine=1, recall_sample=0, memory_budget=budget
    )
    got = _graph(X, n // 3, search, k=5)
    assert len(peaks) > 3 * 3  # several waves per chunk
    assert max(peaks) <= budget, (max(peaks), budget)
    monkeypatch.setattr(lj, "_join_wave", join_wave)
    whole = CellSearch(rows_per_cell=n // 12, n_probes=2, n_refine=1, recall_sample=0)
    ref = _graph(X, n // 3, whole, k=5)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


@pytest.mark.distributed
def test_block_search_is_the_same_on_a_cluster(ties, dask_client):
    """On two worker processes, default and tiny budgets, with and without a round of the
    local join (the tiny budget joins each chunk in several waves): the graph of the local
    search."""
    for n_refine in (0, 1):
        params = {"rows_per_cell": 100, "n_probes": 3, "n_refine": n_refine}
        with dask.config.set(scheduler="sync"):
            ref = _graph(ties, 500, CellSearch(**params, recall_sample=0))
        # a round of the join under TINY would take a wave per hub set or two: thousands of
        # tasks; JOIN_SMALL cuts each chunk's hub sets into a few waves
        for budget in (None, TINY if n_refine == 0 else JOIN_SMALL):
            got = _graph(ties, 777, CellSearch(**params, memory_budget=budget))
            np.testing.assert_array_equal(got[0], ref[0])
            np.testing.assert_array_equal(got[1], ref[1])


@pytest.mark.parametrize(
    "thread_memory, search, join",
    [
        (None, cs.DEFAULT_SEARCH_BYTES, cs.DEFAULT_SEARCH_BYTES),  # no limit stated
        (10 * 2**30, cs.DEFAULT_SEARCH_BYTES, 10 * 2**30 // 4),  # the search's cap binds
        (2**29, 2**27, 2**27),  # a small worker: its share binds both
    ],
)
def test_default_budget_is_a_share_of_a_thread_s_memory_capped_for_the_search(
    thread_memory, search, join, monkeypatch
):
    """A search task takes a quarter of a worker thread's memory up to the cap (larger
    search tasks are slower); the join takes the share uncapped; a budget given is kept."""
    monkeypatch.setattr(cs, "worker_memory_per_thread", lambda: thread_memory)
    assert cs.search_budget() == search
    assert cs.search_budget(most=None) == join
    assert cs.search_budget(12345) == cs.search_budget(12345, most=None) == 12345


def test_memory_budget_is_checked_and_shown():
    with pytest.raises(ValueError, match="memory_budget"):
        CellSearch(memory_budget=0)
    assert "memory_budget=1000" in repr(CellSearch(memory_budget=1000))
    assert "memory_budget" not in repr(CellSearch())


@pytest.mark.distributed
def test_the_protocol_call_moves_the_rows_once(dask_client):
    """``CellSearch()(X, k)`` with rounds and a recall sample (several computations read
    the rows in cell order) moves X's rows as often as one that reads them once."""
    from distributed import get_task_stream

    X = da.from_array(np.random.RandomState(0).randn(3_000, 8), chunks=(500, 8)).persist()

    def moves(search):
        with get_task_stream() as stream:
            dask.compute(*search(X, 8, random_state=0))
        return sum(key_split(t["key"]) == "elmscale-graph-order-place" for t in stream.data)

    once = moves(CellSearch(rows_per_cell=300, n_probes=2, n_refine=0, recall_sample=0))
    assert moves(CellSearch(rows_per_cell=300, n_probes=2, n_refine=2, recall_sample=200)) == once
