"""The task-stream analysis of benchmarks/scale/bench_parallel.py: the replay of measured tasks
on W workers and the serial seconds, on hand-made streams whose answers are known."""

import pytest

from benchmarks.scale import _taskstream as ts


def record(key, start, stop, transfer=0.0):
    ss = [{"action": "compute", "start": start, "stop": stop}]
    if transfer:
        ss.insert(0, {"action": "transfer", "start": start - transfer, "stop": start})
    return {"key": key, "worker": "w", "startstops": ss}


def graph(time, deps):
    return {"time": time, "requested": 1, "deps": deps}


def sequential(n, seconds=1.0, prefix="task"):
    """``n`` independent tasks run one after another on one worker, from t = 0."""
    keys = [f"{prefix}-{i}" for i in range(n)]
    return [record(k, i * seconds, (i + 1) * seconds) for i, k in enumerate(keys)], keys


def replay(records, graphs, end, w, measured=1, dispatch=0.0):
    tasks = ts.build_tasks(records, graphs)
    return ts.replay(tasks, graphs, 0.0, end, w, measured, dispatch=dispatch)


@pytest.mark.parametrize("w", [1, 2, 4, 8])
def test_independent_tasks_divide_over_workers(w):
    records, keys = sequential(8)
    graphs = [graph(0.0, {k: [] for k in keys})]
    assert replay(records, graphs, 8.0, w) == pytest.approx(8.0 / w)


@pytest.mark.parametrize("w", [1, 3, 16])
def test_a_chain_does_not_speed_up(w):
    records, keys = sequential(5)
    deps = {k: ([keys[i - 1]] if i else []) for i, k in enumerate(keys)}
    assert replay(records, [graph(0.0, deps)], 5.0, w) == pytest.approx(5.0)


def test_the_client_time_between_graphs_stays_serial():
    # graph 0: 4 tasks (0-4 s); the client works 2 s; graph 1: 4 tasks (6-10 s); end + 0.5 s
    first, a = sequential(4, prefix="a")
    second = [record(f"b-{i}", 6 + i, 7 + i) for i in range(4)]
    graphs = [graph(0.0, {k: [] for k in a}), graph(6.0, {f"b-{i}": [] for i in range(4)})]
    records = first + second
    assert replay(records, graphs, 10.5, 1) == pytest.approx(10.5)
    # on 4 workers: 1 s + 2 s of client + 1 s + 0.5 s
    assert replay(records, graphs, 10.5, 4) == pytest.approx(4.5)


def test_dispatch_cost_bounds_the_start_rate():
    records, keys = sequential(100, seconds=0.01)
    graphs = [graph(0.0, {k: [] for k in keys})]
    assert replay(records, graphs, 1.0, 100) == pytest.approx(0.01)
    assert replay(records, graphs, 1.0, 100, dispatch=0.01) == pytest.approx(1.0)


def test_transfers_scale_with_the_remote_share():
    # b depends on a and waited 1 s for its input on a 2-worker run; on 1 worker nothing is
    # remote, on many workers almost all inputs are
    records = [record("a", 0.0, 1.0), record("b", 2.0, 3.0, transfer=1.0)]
    graphs = [graph(0.0, {"a": [], "b": ["a"]})]
    assert replay(records, graphs, 3.0, 2, measured=2) == pytest.approx(3.0)
    assert replay(records, graphs, 3.0, 1, measured=2) == pytest.approx(2.0)
    assert replay(records, graphs, 3.0, 1000, measured=2) == pytest.approx(2 + 2 * 0.999)


def test_serial_seconds_and_stage_rows():
    records = [record("x-1", 0.0, 2.0), record("x-2", 1.0, 3.0), record("y-1", 5.0, 6.0)]
    graphs = [graph(0.0, {"x-1": [], "x-2": []}), graph(5.0, {"y-1": []})]
    tasks = ts.build_tasks(records, graphs)
    assert ts.interval_union([(t.start, t.stop) for t in tasks]) == pytest.approx(4.0)
    rows = ts.stage_table(tasks, graphs, ts.stage_windows(0.0, {"first": 4.0, "second": 3.0}))
    assert [r["tasks"] for r in rows] == [2, 1]
    assert rows[0]["serial_s"] == pytest.approx(1.0) and rows[1]["serial_s"] == pytest.approx(2.0)
    assert rows[0]["busy_s"] == pytest.approx(4.0) and rows[0]["longest_s"] == pytest.approx(2.0)
    assert ts.barrier_model(tasks, 3.0, 2) == pytest.approx(3.0 + 2.0 + 1.0)


def test_every_task_counts_in_one_stage_though_the_workers_clock_is_offset():
    # the worker's corrected clock puts the fit's first task a little before its start and
    # its last after the last stage's end: they count in the first and the last stage
    records = [record("a", -0.004, 1.0), record("b", 4.5, 6.9), record("c", 7.003, 7.004)]
    graphs = [graph(0.0, {"a": [], "b": [], "c": []})]
    tasks = ts.build_tasks(records, graphs)
    rows = ts.stage_table(tasks, graphs, ts.stage_windows(0.0, {"first": 4.0, "second": 3.0}))
    assert [r["tasks"] for r in rows] == [1, 2]
    assert rows[1]["longest_s"] == pytest.approx(2.4)


def test_a_graph_recorded_after_its_first_task_started():
    # the scheduler records a graph after dispatching its first tasks: the task still belongs
    # to that graph, and the replay does not wait on it
    records = [record("a", 0.0, 1.0), record("b", 1.0, 2.0)]
    graphs = [graph(0.0, {"a": []}), graph(1.01, {"b": []})]
    assert replay(records, graphs, 2.0, 1) == pytest.approx(2.0)


def test_overhead_between_ready_tasks_is_measured_and_replayed():
    # one worker runs 4 independent tasks of 1 s with 0.1 s between them (all ready from
    # t = 0), then one that waited 2 s for the client's second graph: that wait is not
    # the workers' overhead
    records = [record(f"a-{i}", 1.1 * i, 1.1 * i + 1) for i in range(4)]
    records.append(record("b", 6.3, 7.3))
    graphs = [graph(0.0, {f"a-{i}": [] for i in range(4)}), graph(6.3, {"b": []})]
    tasks = ts.build_tasks(records, graphs)
    overhead = ts.task_overhead(tasks, graphs)
    assert overhead == pytest.approx(0.1)
    # the replay reproduces the measured wall with it, and falls short by the gaps without
    kw = {"n_workers": 1, "measured_workers": 1}
    assert ts.replay(tasks, graphs, 0.0, 7.3, **kw, overhead=overhead) == pytest.approx(7.3)
    assert ts.replay(tasks, graphs, 0.0, 7.3, **kw) == pytest.approx(7.3 - 0.3)
    # on 4 workers the a-tasks run side by side: 1 s, then the client's 2 s, then b
    assert ts.replay(tasks, graphs, 0.0, 7.3, 4, 1, overhead=overhead) == pytest.approx(4.0)


def test_the_workers_start_when_the_first_task_did():
    # graph submitted at 0, the fresh workers import for 2 s, then 4 tasks of 1 s on one
    # worker: on 4 workers the import stays, the tasks run side by side
    records = [record(f"a-{i}", 2.0 + i, 3.0 + i) for i in range(4)]
    graphs = [graph(0.0, {f"a-{i}": [] for i in range(4)})]
    assert replay(records, graphs, 6.0, 1) == pytest.approx(6.0)
    assert replay(records, graphs, 6.0, 4) == pytest.approx(3.0)


def test_round_trips_are_counted_by_kind_and_stage():
    windows = ts.stage_windows(0.0, {"graph": 2.0, "embed": 2.0})
    calls = [
        {"kind": "persist", "start": 0.1, "stop": 0.1, "keys": []},
        {"kind": "compute", "start": 0.5, "stop": 1.0, "keys": ["elmscale-graph-probed"]},
        {"kind": "compute", "start": 2.5, "stop": 2.6, "keys": ["elmscale-kmeans-sum"]},
        {"kind": "compute", "start": 2.7, "stop": 2.8, "keys": ["elmscale-kmeans-lloyd"]},
        {"kind": "compute", "start": 3.0, "stop": 3.1, "keys": ["finalize-hlgfinalizecompute"]},
        {"kind": "compute", "start": 4.5, "stop": 4.6, "keys": ["getitem"]},
    ]
    assert ts.calls_by_stage(calls, windows) == {
        ("graph", "persist"): 1,
        ("graph", "compute"): 1,
        ("embed", "kmeans-pass"): 2,
        ("embed", "compute"): 1,
        ("after", "compute"): 1,
    }


def _fit_calls(client, n):
    """The calls by stage of a US-ELM fit of ``n`` rows of the benchmark's mixture, in
    chunks of 2,048 rows (so more rows are more chunks), and the fit's k-means passes.
    k-means draws its starts from samples of 4,000 rows (``KMEANS_SAMPLE_ROWS``, patched), so
    that at every size here each start has its own sample and the starts near the least
    inertia are compared by their cut, as above 20,000 rows by default."""
    import time

    import elmscale
    from benchmarks._mixture import mixture_dask

    X, _ = mixture_dask(n, 20, 5, seed=0)
    X = X.rechunk({0: 2048, 1: -1}).persist()
    model = elmscale.USELM(n_clusters=5, n_hidden=100, random_state=0)
    with ts.RoundTrips(client) as trips:
        start = time.time()
        model.fit(X)
    return ts.calls_by_stage(trips.calls, ts.stage_windows(start, model.timings_))


@pytest.mark.slow
@pytest.mark.distributed
def test_a_fits_blocking_round_trips_do_not_grow_with_the_rows(dask_client, monkeypatch):
    """The computes the client waits for, stage by stage, are the same at 3x the rows and 3x
    the chunks (the cells graph and the graph filter both times: above 10,000 rows). Left
    out: k-means' passes over the embedding (here all Lloyd iterations in one task, above
    two blocks one pass per iteration, as many as the data's convergence takes, bounded by
    ``max_iter``; counted apart), and persists, which the client does not wait for (some
    are choices by size, such as keeping H's blocks in memory)."""
    from elmscale.algorithms import _uselm

    monkeypatch.setattr(_uselm, "KMEANS_SAMPLE_ROWS", 4_000)
    small, large = (_fit_calls(dask_client, n) for n in (11_000, 33_000))
    blocking = lambda calls: {k: v for k, v in calls.items() if k[1] == "compute"}  # noqa: E731
    assert blocking(small) == blocking(large)
    assert sum(blocking(large).values()) > 0
    assert small.get(("embed_cluster", "kmeans-pass"), 0) > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_the_benchmark_analyses_and_projects_a_small_fit(tmp_path):
    """bench_parallel end to end on a one-worker cluster: the stages' tasks add up to the
    fit's, the replay on the measured worker reproduces its wall, more workers do not slow
    the replay, and the raw records are written for a later replay."""
    import json

    from benchmarks.scale import bench_parallel as bench

    small = ["--n", "6000", "--d", "10", "--n-hidden", "50", "--chunk-rows", "1500"]
    argv = [*small, "--workers", "1", "--worker-gb", "1", "--project", "2", "4"]
    out = bench.main([*argv, "--stream", str(tmp_path / "stream.json")])
    assert out["estimator"] == "USELM" and 0.15 < out["acc"] <= 1
    assert [s["stage"] for s in out["stages"]][: len(out["timings"])] == list(out["timings"])
    assert sum(s["tasks"] for s in out["stages"]) == out["tasks"] > 0
    assert 0 < out["serial_share"] < 1 and out["busy_s"] > 0 and out["round_trips"] > 0
    assert abs(out["replay_error"]) < 0.25
    two, four = out["projection"][2], out["projection"][4]
    assert four["replay_s"] <= two["replay_s"] <= out["replay_measured_workers_s"] * 1.01
    assert four["amdahl_s"] < two["amdahl_s"] < out["fit_s"]
    saved = json.loads((tmp_path / "stream.json").read_text())
    assert set(saved) == {"record", "stream", "graphs", "span"} and saved["stream"]
