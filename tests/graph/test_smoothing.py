"""The graph filter ((I + P) / 2)^t X: equal to a dense NumPy product, in any chunking and row
order, and its variance share equal to NumPy's."""

import dask.array as da
import numpy as np
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin

import elmscale
from elmscale.graph import input_order, knn_graph, retained_variance, smooth_rows, smoothed_graph


def _dense_filter(graph, X, steps):
    """((I + P) / 2)^steps X with P the graph's W (from its Laplacian) scaled to unit row sums."""
    L = graph.laplacian().toarray()
    W = np.diag(np.diag(L)) - L
    np.fill_diagonal(W, 0.0)
    sums = W.sum(1)
    P = np.where(sums[:, None] > 0, W / np.where(sums > 0, sums, 1)[:, None], np.eye(len(W)))
    for _ in range(steps):
        X = 0.5 * (X + P @ X)
    return X


@pytest.fixture
def mixture():
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(1500, n_features=4, centers=4, random_state=3)
    return X


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("order", [False, True])
@pytest.mark.parametrize("rows", [200, 50])  # 8 chunks, one per task; 30, three per task
def test_filter_equals_dense_product_in_any_row_order(mixture, order, normalized, rows):
    from elmscale.graph._smoothing import _RandomWalk

    Xd = da.from_array(mixture, chunks=(rows, 4))
    graph = knn_graph(Xd, 6, backend="cells", order=order, normalized=normalized, random_state=0)
    with elmscale.config_context(plan_workers=1):  # runs of several chunks: 8 tasks at least
        walk_runs = _RandomWalk(graph, 4, np.dtype(np.float64)).groups
        Xg = graph.X.compute()
        Z = smooth_rows(graph, 3)
        graph_f, to_input = smoothed_graph(graph, 3), input_order(graph)
    assert max(map(len, walk_runs)) == (rows == 50) * 2 + 1
    assert Z.chunks == graph.X.chunks
    np.testing.assert_allclose(Z.compute(), _dense_filter(graph, Xg, 3), rtol=1e-12, atol=1e-12)
    # in the input's order: the filtered row of each input row, wherever the graph put it
    assert (to_input is None) == (graph.order is None)
    X_f = graph_f.X if to_input is None else to_input.apply(graph_f.X)
    assert X_f.chunks == Xd.chunks
    expected = np.empty_like(mixture)
    positions = np.arange(len(mixture))
    if graph.order is not None:
        positions = graph.order.apply(da.from_array(positions, chunks=Xd.chunks[0])).compute()
    expected[positions] = _dense_filter(graph, Xg, 3)
    np.testing.assert_allclose(X_f.compute(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(graph_f.X.compute(), Z.compute())
    assert graph_f.source_name == graph_f.X.name and graph_f.blocks is graph.blocks
    assert graph.X.name != graph_f.X.name  # the input graph is left as it was


def test_zero_steps_and_constant_rows(mixture):
    Xd = da.from_array(mixture, chunks=(500, 4))
    graph = knn_graph(Xd, 6, backend="exact")
    np.testing.assert_array_equal(smooth_rows(graph, 0).compute(), mixture)
    ones = da.ones_like(Xd)  # averaging keeps constants exactly
    np.testing.assert_allclose(smooth_rows(graph, 4, ones).compute(), 1.0, rtol=1e-14)


def test_retained_variance_equals_numpy(mixture):
    Xd = da.from_array(mixture, chunks=(500, 4))
    graph = knn_graph(Xd, 6, backend="exact")
    Z = smooth_rows(graph, 2)
    scale = np.array([1.0, 2.0, 0.5, 3.0])
    expected = (Z.compute().var(0) / scale**2).sum() / (mixture.var(0) / scale**2).sum()
    assert retained_variance(Xd, Z, scale) == pytest.approx(expected, rel=1e-12)
    assert 0 < expected < 1


@pytest.mark.parametrize("steps", [-1, 1.5, True, "2"])
def test_bad_steps_are_refused(mixture, steps):
    graph = knn_graph(da.from_array(mixture, chunks=(500, 4)), 6, backend="exact")
    with pytest.raises((TypeError, ValueError), match="steps must be an integer >= 0"):
        smooth_rows(graph, steps)


def test_filter_if_kept_equals_the_filter_or_stops_at_the_first_step_below(mixture, monkeypatch):
    """With a share no step falls below, the graph of smoothed_graph (the same rows, bit for
    bit) and retained_variance's share; with a share above the first step's, None after one
    step and that step's share."""
    from elmscale.graph import _smoothing, smoothed_graph_if_kept

    Xd = da.from_array(mixture, chunks=(300, 4))
    graph = knn_graph(Xd, 6, backend="cells", order=True, random_state=0)
    scale = np.array([1.0, 2.0, 0.5, 3.0])
    graph_f, kept, taken = smoothed_graph_if_kept(graph, 3, 0.0, scale)
    Z3 = smooth_rows(graph, 3)
    np.testing.assert_array_equal(graph_f.X.compute(), Z3.compute())
    assert taken == 3 and graph_f.blocks is graph.blocks
    assert kept == pytest.approx(retained_variance(graph.X, Z3, scale), rel=1e-12)
    first = retained_variance(graph.X, smooth_rows(graph, 1), scale)
    # on larger data the share is estimated on every s-th row: within a few percent
    monkeypatch.setattr(_smoothing, "SHARE_SAMPLE_ROWS", 300)
    _, sampled, _ = smoothed_graph_if_kept(graph, 3, 0.0, scale)
    assert sampled == pytest.approx(kept, rel=0.1) and sampled != kept
    monkeypatch.undo()
    assert first < 1
    none, kept_1, taken_1 = smoothed_graph_if_kept(graph, 3, (1 + first) / 2, scale)
    assert none is None and taken_1 == 1
    assert kept_1 == pytest.approx(first, rel=1e-12)


def test_sampled_share_equals_numpy_on_the_same_rows(mixture, monkeypatch):
    """Estimated on every s-th row, the share is NumPy's variance share of exactly those rows
    of X and of the filtered rows (the moments of each chunk merged, in float64)."""
    from elmscale.graph import _smoothing, smoothed_graph_if_kept

    Xd = da.from_array(mixture, chunks=(170, 4))  # chunks that do not start on a sampled row
    graph = knn_graph(Xd, 6, backend="cells", order=True, random_state=0)
    scale = np.array([1.0, 2.0, 0.5, 3.0])
    monkeypatch.setattr(_smoothing, "SHARE_SAMPLE_ROWS", 200)  # every 7th row
    graph_f, kept, _ = smoothed_graph_if_kept(graph, 2, 0.0, scale)
    X, Z = graph.X.compute()[::7], graph_f.X.compute()[::7]
    w = 1 / scale**2
    assert kept == pytest.approx((Z.var(0) * w).sum() / (X.var(0) * w).sum(), rel=1e-12)


@pytest.mark.distributed
@pytest.mark.parametrize("min_variance", [0.0, 0.999])
def test_the_filter_and_its_checks_are_one_round_trip(mixture, dask_client, min_variance):
    """All steps and their variance checks go to the scheduler together: the client waits
    once, whether every step is kept or the first one already falls below, and the share is
    that of the steps taken."""
    from benchmarks.scale._taskstream import RoundTrips
    from elmscale.graph import smoothed_graph_if_kept

    Xd = da.from_array(mixture, chunks=(200, 4))
    graph = knn_graph(Xd, 6, backend="exact", random_state=0)
    with RoundTrips(dask_client) as trips:
        graph_f, kept, taken = smoothed_graph_if_kept(graph, 4, min_variance)
    assert len(trips.blocking()) == 1
    assert kept == pytest.approx(retained_variance(graph.X, smooth_rows(graph, taken)), rel=1e-12)
    assert taken == (4 if min_variance == 0 else 1) and (graph_f is None) == (min_variance > 0)


class _SmoothPlacement(SchedulerPlugin):
    """Scheduler plugin: the worker restrictions each filter step's task carries when it
    starts processing."""

    name = "smooth-placement"

    def __init__(self):
        self.seen = {}

    def start(self, scheduler):
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs):
        import re

        if finish == "processing" and re.fullmatch(r"elmscale-graph-smooth-[0-9a-f]+", str(key)):
            ts = self.scheduler.tasks[key]
            self.seen[key] = (tuple(sorted(ts.worker_restrictions or ())), ts.loose_restrictions)


def _placements(dask_scheduler):
    return list(dask_scheduler.plugins["smooth-placement"].seen.values())


@pytest.mark.distributed
def test_each_run_prefers_the_worker_its_halo_goes_to(dask_client):
    """On a cluster each run's step prefers the worker its halo pieces are delivered to (the
    same worker every step, runs spread over both workers), loosely: a busy worker's task
    may still move, never wait for a lost worker. The first step reads the rows chunked like
    the graph, the later ones chunked by the runs; the steps equal the dense filter."""
    from distributed import wait
    from sklearn.datasets import make_blobs

    from elmscale.graph._smoothing import _RandomWalk

    X, _ = make_blobs(3000, n_features=16, centers=4, random_state=3)
    graph = knn_graph(da.from_array(X, chunks=(375, 16)), 6, backend="exact", random_state=0)
    walk = _RandomWalk(graph, 16, np.dtype(np.float64))
    assert len(walk.groups) == 8 and sorted(set(walk.workers)) == sorted(
        dask_client.scheduler_info()["workers"]
    )
    dask_client.register_plugin(_SmoothPlacement())
    try:
        Z = graph.X
        for _ in range(3):
            Z = walk.step(Z).persist(optimize_graph=False)
        wait(Z)
        seen = dask_client.run_on_scheduler(_placements)
    finally:
        dask_client.unregister_scheduler_plugin("smooth-placement")
    assert sorted(seen) == sorted(((w,), True) for w in walk.workers for _ in range(3))
    np.testing.assert_allclose(
        walk.by_graph_chunks(Z).compute(), _dense_filter(graph, graph.X.compute(), 3), atol=1e-12
    )


def test_float32_steps_agree_with_float64(mixture):
    """US-ELM filters in float32 whatever X's dtype: the result stays within float32's
    rounding of the float64 filter; smoothed_graph_if_kept hands back X's dtype."""
    from elmscale.graph import smoothed_graph_if_kept

    Xd = da.from_array(mixture, chunks=(300, 4))
    graph = knn_graph(Xd, 6, backend="cells", order=True, random_state=0)
    Z32 = smooth_rows(graph, 4, dtype=np.float32)
    assert Z32.dtype == np.float32
    Z64 = smooth_rows(graph, 4).compute()
    np.testing.assert_allclose(Z32.compute(), Z64, rtol=0, atol=1e-5 * np.abs(Z64).max())
    graph_f, _, _ = smoothed_graph_if_kept(graph, 4, 0.0, dtype=np.float32)
    assert graph_f.X.dtype == np.float64
    np.testing.assert_array_equal(graph_f.X.compute(), Z32.compute().astype(np.float64))
    with pytest.raises(ValueError, match="dtype must be float32 or float64"):
        smooth_rows(graph, 1, dtype=np.int64)


def _held_arrays(X):
    """The NumPy blocks a persisted dask array holds in this process."""
    values = (getattr(v, "value", v) for v in dict(X.__dask_graph__()).values())
    return [v for v in values if isinstance(v, np.ndarray)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_filter_lets_go_of_the_graphs_copy_of_the_rows(mixture, dtype):
    """The graph's rows in its order are a held copy of the input's; ``rows_source`` reads the
    same values lazily. While the filter's later steps run the graph lets go of its copy (the
    blocks are freed), and gives the same rows after; when the filter is not kept the graph
    holds its rows again."""
    import gc
    import weakref

    from elmscale.graph import smoothed_graph_if_kept

    Xd = da.from_array(mixture.astype(dtype), chunks=(200, 4))
    graph = knn_graph(Xd, 6, backend="cells", order=True, random_state=0)
    rows = graph.X.compute()
    assert graph.rows_source is not None and graph.rows_source.dtype == graph.X.dtype
    np.testing.assert_array_equal(graph.rows_source.compute(), rows)  # bit for bit
    held = [weakref.ref(block) for block in _held_arrays(graph.X)]
    assert held
    graph_f, _, taken = smoothed_graph_if_kept(graph, 3, 0.0)
    gc.collect()
    assert taken == 3 and graph.X is graph.rows_source and graph_f.rows_source is None
    assert not any(ref() is not None for ref in held)
    np.testing.assert_array_equal(graph.X.compute(), rows)
    np.testing.assert_array_equal(graph_f.X.compute(), smooth_rows(graph, 3).compute())
    none, _, _ = smoothed_graph_if_kept(graph, 3, 0.999)
    assert none is None and graph.X is not graph.rows_source and _held_arrays(graph.X)
    np.testing.assert_array_equal(graph.X.compute(), rows)


def test_a_graph_on_the_input_rows_holds_no_copy(mixture):
    """Without a row order (and in the input's chunks) the graph's X is the input's rows:
    nothing to let go of."""
    Xd = da.from_array(mixture, chunks=(200, 4))
    graph = knn_graph(Xd, 6, backend="cells", order=False, random_state=0)
    assert graph.rows_source is None and not graph.release_rows()


def test_the_first_step_holds_no_rechunked_copy_of_the_rows(mixture):
    """A walk's first step reads the rows in the graph's chunks, each run stacking its own
    (no rechunk of the input is computed, which would hold a whole copy of it while the step
    runs); later steps read its runs. Rows chunked any other way are refused by name."""
    from elmscale.graph._smoothing import _RandomWalk

    Xd = da.from_array(mixture, chunks=(50, 4))
    graph = knn_graph(Xd, 6, backend="cells", order=True, random_state=0)
    with elmscale.config_context(plan_workers=1):  # 8 tasks at least, not 8 a local thread
        walk = _RandomWalk(graph, 4, np.dtype(np.float64))
    assert len(walk.groups) < len(graph.chunks)  # runs of several chunks
    first = walk.step(graph.X)
    assert not any("rechunk" in name for name in first.dask.layers)
    assert tuple(first.chunks[0]) == walk.run_chunks
    second = walk.step(first)
    np.testing.assert_allclose(
        walk.by_graph_chunks(second).compute(),
        _dense_filter(graph, graph.X.compute(), 2),
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="chunked like the graph's rows or by the walk's runs"):
        walk.step(graph.X.rechunk({0: 100}))


def test_the_filter_agrees_with_and_without_compiled_kernels(mixture):
    """A step adds its halo's products with the compiled kernel or with SciPy: the same
    filter up to float rounding."""
    from elmscale import config_context

    Xd = da.from_array(mixture, chunks=(100, 4))
    graph = knn_graph(Xd, 6, backend="cells", order=True, random_state=0)
    with config_context(compiled=False):
        slow = smooth_rows(graph, 3).compute()
    fast = smooth_rows(graph, 3).compute()
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12 * np.abs(slow).max())
    np.testing.assert_allclose(fast, _dense_filter(graph, graph.X.compute(), 3), atol=1e-12)
