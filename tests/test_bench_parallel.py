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


def test_a_graph_recorded_after_its_first_task_started():
    # the scheduler records a graph after dispatching its first tasks: the task still belongs
    # to that graph, and the replay does not wait on it
    records = [record("a", 0.0, 1.0), record("b", 1.0, 2.0)]
    graphs = [graph(0.0, {"a": []}), graph(1.01, {"b": []})]
    assert replay(records, graphs, 2.0, 1) == pytest.approx(2.0)
