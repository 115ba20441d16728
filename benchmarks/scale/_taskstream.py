"""What a fit's task stream says about scale-out: busy and serial seconds, per-stage figures,
and a replay of the measured tasks on W workers. The inputs are plain records, so that the
analysis runs (and is tested) without a cluster: the task runs as
``distributed.get_task_stream`` gives them (``key``, ``worker``, ``startstops``), and the
graphs the client submitted (``time``, ``deps``) as :class:`GraphRecorder` records them.

The replay is list scheduling on W single-threaded workers. A task is ready once its graph is
submitted and its dependencies have finished, plus its inputs' transfer time scaled to the
share of remote inputs, ``(W - 1) / W`` against the measured run's; a free worker takes the
ready task that started first in the measured run and holds it for its busy time plus the
measured overhead per task (:func:`task_overhead`). The client is replayed as measured: each
graph is submitted, and the fit ends, a fixed lag after the task that finished last before
it; no worker starts before the first measured task did (fresh workers import the code). The
scheduler's CPU seconds per task bound the rate at which tasks start on any number of workers.
"""

import bisect
import functools
import heapq
import itertools
import statistics
import time

from dask.utils import key_split
from distributed.diagnostics.plugin import SchedulerPlugin

#: Seconds by which a graph's recorded time may follow the start of its first task.
SUBMIT_SLACK = 0.5

#: Actions of a task's startstops that occupy its worker's thread.
BUSY_ACTIONS = ("compute", "disk-read", "disk-write", "deserialize")


class GraphRecorder(SchedulerPlugin):
    """A scheduler plugin (``client.register_plugin``) that records, for every graph a
    client submits, the time and each task's dependencies; :meth:`records` returns them."""

    name = "elmscale-graph-recorder"
    idempotent = False

    def __init__(self):
        self.graphs = []

    async def start(self, scheduler):
        self.scheduler = scheduler

    def update_graph(self, scheduler, *, keys, tasks, **kwargs):
        deps = {}
        for key in tasks:
            ts = scheduler.tasks.get(key)
            if ts is not None:
                deps[str(key)] = [str(d.key) for d in ts.dependencies]
        self.graphs.append({"time": time.time(), "requested": len(keys), "deps": deps})

    def records(self):
        return list(self.graphs)


class RoundTrips:
    """A context manager that records what a client submits while it is active: each
    ``Client.get`` (what ``dask.compute`` and ``.compute()`` call on a distributed client)
    is a blocking round trip, the client waiting for its results; each ``Client.persist`` a
    submission it does not wait for. ``calls`` holds ``{"kind": "compute" | "persist",
    "start", "stop", "keys"}`` (``keys``: ``key_split`` of the requested keys or of the
    persisted collections' names, sorted), in call order.

    The methods are wrapped on the class for the duration (``dask.persist`` recognises the
    client's scheduler by its bound ``get``), and calls of other clients pass through
    unrecorded.
    """

    def __init__(self, client):
        self.client, self.calls, self._saved = client, [], None

    def __enter__(self):
        from distributed import Client

        self._saved = {name: Client.__dict__[name] for name in ("get", "persist")}
        recorder = self

        def wrap(name, kind):
            method = self._saved[name]

            @functools.wraps(method)
            def recorded(client, *args, **kwargs):
                if client is not recorder.client:
                    return method(client, *args, **kwargs)
                start = time.time()
                try:
                    return method(client, *args, **kwargs)
                finally:
                    recorder.calls.append(
                        {"kind": kind, "start": start, "stop": time.time(), "keys": []}
                    )
                    recorder.calls[-1]["keys"] = _requested(kind, args, kwargs)

            return recorded

        Client.get = wrap("get", "compute")
        Client.persist = wrap("persist", "persist")
        return self

    def __exit__(self, *exc):
        from distributed import Client

        for name, method in self._saved.items():
            setattr(Client, name, method)

    def blocking(self):
        """The calls the client waited for (``kind == "compute"``)."""
        return [c for c in self.calls if c["kind"] == "compute"]


def _requested(kind, args, kwargs):
    """``key_split`` of what a recorded call asked for: the keys of a ``get``, the names of
    the collections of a ``persist``."""
    if kind == "compute":
        keys = args[1] if len(args) > 1 else kwargs.get("keys", [])
    else:
        collections = args[0] if args else kwargs.get("collections", [])
        if not isinstance(collections, (list, tuple, set, frozenset)):
            collections = [collections]
        keys = [c.__dask_layers__()[0] for c in collections]
    return sorted({key_split(k) for k in keys})


#: Key prefixes of the computes that are k-means passes over the embedding (Lloyd
#: iterations and the choice between restarts): their number follows k-means' convergence.
KMEANS_PASS_PREFIXES = ("elmscale-kmeans-sum", "elmscale-kmeans-lloyd")


def calls_by_stage(calls, windows):
    """``{(stage, what): count}`` of :attr:`RoundTrips.calls` by the stage window (of
    :func:`stage_windows`; "after" past the last) each started in; ``what`` is "persist",
    "compute", or "kmeans-pass" for a compute of k-means' passes
    (:data:`KMEANS_PASS_PREFIXES`)."""
    counts = {}
    for c in calls:
        stage = next((n for n, a, b in windows if a <= c["start"] < b), "after")
        what = c["kind"]
        if what == "compute" and c["keys"] and all(k in KMEANS_PASS_PREFIXES for k in c["keys"]):
            what = "kmeans-pass"
        counts[stage, what] = counts.get((stage, what), 0) + 1
    return counts


def interval_union(intervals):
    """Total length covered by ``intervals`` (pairs ``(start, stop)``), overlaps once."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


class Task:
    """One task run of the stream, as the replay needs it."""

    __slots__ = ("key", "prefix", "worker", "start", "stop", "busy", "transfer", "deps", "graph")

    def __init__(self, record):
        ss = record["startstops"]
        self.key = str(record["key"])
        self.worker = record.get("worker")
        self.prefix = key_split(record["key"])
        self.start = min(s["start"] for s in ss)
        self.stop = max(s["stop"] for s in ss)
        self.busy = sum(s["stop"] - s["start"] for s in ss if s["action"] in BUSY_ACTIONS)
        self.transfer = sum(s["stop"] - s["start"] for s in ss if s["action"] == "transfer")
        self.deps = []
        self.graph = 0

    @property
    def compute_start(self):
        return self.stop - self.busy


def build_tasks(records, graphs):
    """The stream's tasks in measured start order, each with the index of the graph that
    submitted it and its dependencies as indices of earlier task runs (the latest run of
    the key that finished before it started); keys not run in the stream (data persisted
    before) are dropped."""
    tasks = sorted((Task(r) for r in records), key=lambda t: t.start)
    runs = {}
    for i, t in enumerate(tasks):
        runs.setdefault(t.key, []).append(i)
    graphs_of, deps_of = {}, {}
    for g, graph in enumerate(graphs):
        for key, deps in graph["deps"].items():
            graphs_of.setdefault(key, []).append(g)
            deps_of.setdefault(key, deps)
    for t in tasks:
        # a key submitted again (recomputed) belongs to the last of its graphs before it
        # ran; the scheduler records a graph's time after it has dispatched its first tasks
        mine = graphs_of.get(t.key, [0])
        t.graph = max(
            (g for g in mine if graphs and graphs[g]["time"] <= t.start + SUBMIT_SLACK),
            default=mine[0],
        )
        for d in deps_of.get(t.key, ()):
            before = [j for j in runs.get(d, ()) if tasks[j].stop <= t.compute_start + 1e-3]
            if before:
                t.deps.append(before[-1])
    return tasks


def submit_times(tasks, graphs):
    """When each graph reached the scheduler: its recorded time, or the first start of its
    tasks when that is earlier (the record is made after the first tasks are dispatched)."""
    times = [g["time"] for g in graphs]
    for t in tasks:
        if t.graph < len(times):
            times[t.graph] = min(times[t.graph], t.start)
    return times


def client_lags(tasks, graphs, fit_end):
    """For each graph and for the fit's end: ``(anchor, lag)``, the task of an earlier graph
    that finished last before it was submitted (None before any) and the seconds from that
    task's end to the submission: what the client waited for, and its own time after."""
    out = []
    for g, when in enumerate(submit_times(tasks, graphs) + [fit_end]):
        earlier = [(t.stop, i) for i, t in enumerate(tasks) if t.graph < g and t.stop <= when]
        if not earlier:
            out.append((None, when))
        else:
            stop, i = max(earlier)
            out.append((i, when - stop))
    return out


def task_overhead(tasks, graphs):
    """The mean seconds a worker spent between two tasks of its own when the second was
    already ready as the first ended (its graph submitted, its dependencies finished and
    its inputs fetched): what running a task costs beyond its compute (the scheduler's
    decision, the messages to and from the worker, the worker's bookkeeping)."""
    submitted = submit_times(tasks, graphs)
    by_worker = {}
    for t in tasks:
        by_worker.setdefault(t.worker, []).append(t)
    gaps = []
    for runs in by_worker.values():
        runs.sort(key=lambda t: t.compute_start)
        for a, b in itertools.pairwise(runs):
            inputs = max((tasks[j].stop for j in b.deps), default=float("-inf")) + b.transfer
            if max(inputs, submitted[b.graph]) <= a.stop:
                gaps.append(max(b.compute_start - a.stop, 0.0))
    return statistics.fmean(gaps) if gaps else 0.0


def replay(
    tasks, graphs, fit_start, fit_end, n_workers, measured_workers, dispatch=0.0, overhead=0.0
):
    """The wall seconds of the fit replayed on ``n_workers`` (see the module docstring);
    ``overhead``: seconds each task holds its worker beyond its busy time
    (:func:`task_overhead`)."""
    sim = _Replay(tasks, graphs, n_workers, measured_workers, dispatch, overhead)
    # no worker computes before the first measured task did: fresh workers import the
    # code the first tasks need (all of them at once, whatever their number)
    first = min((t.compute_start for t in tasks), default=fit_start) - fit_start
    sim.workers = [max(first, 0.0)] * n_workers
    return sim.run(client_lags(tasks, graphs, fit_end), fit_start)


class _Replay:
    """The event loop of :func:`replay`. Events are ``(time, kind, payload)``: kind 0 a
    graph submitted (payload its index; ``len(graphs)`` is the fit's end), 1 a task done,
    2 a task ready (its inputs arrived), 3 a wake-up when the dispatcher or a worker is free
    again."""

    def __init__(self, tasks, graphs, n_workers, measured_workers, dispatch, overhead=0.0):
        remote = lambda w: (w - 1) / w  # noqa: E731 - share of a task's inputs on other workers
        self.scale = remote(n_workers) / remote(measured_workers) if measured_workers > 1 else 1.0
        self.tasks, self.n_graphs = tasks, len(graphs)
        self.dispatch, self.overhead = dispatch, overhead
        self.waiting = [len(t.deps) for t in tasks]
        self.dependents = [[] for _ in tasks]
        self.by_graph = {}
        for i, t in enumerate(tasks):
            self.by_graph.setdefault(t.graph, []).append(i)
            for d in t.deps:
                self.dependents[d].append(i)
        self.arrival = [0.0] * len(tasks)  # when a task's last input arrives
        self.submit = [None] * (self.n_graphs + 1)
        self.workers = [0.0] * n_workers
        self.events, self.ready = [], []
        self.free_dispatch = self.last_submit = 0.0

    def run(self, lags, fit_start):
        anchored = {}  # task index -> (graph, lag) submitted a lag after it finishes
        for g, (anchor, lag) in enumerate(lags):
            if anchor is None:
                heapq.heappush(self.events, (lag - fit_start, 0, g))
            else:
                anchored.setdefault(anchor, []).append((g, lag))
        self.anchored = anchored
        now = 0.0
        while self.events:
            now, kind, payload = heapq.heappop(self.events)
            if kind == 0:
                self._submitted(payload, now)
            elif kind == 1:
                self._done(payload, now)
            elif kind == 2:
                heapq.heappush(self.ready, (self.tasks[payload].start, payload))
            self._start_ready(now)
        return self.submit[-1] if self.submit[-1] is not None else now

    def _submitted(self, g, when):
        when = max(when, self.last_submit)
        self.last_submit = self.submit[g] = when
        for i in self.by_graph.get(g, ()) if g < self.n_graphs else ():
            if self.waiting[i] == 0:
                heapq.heappush(self.events, (max(when, self.arrival[i]), 2, i))

    def _done(self, i, when):
        for g, lag in self.anchored.get(i, ()):
            heapq.heappush(self.events, (when + lag, 0, g))
        for j in self.dependents[i]:
            self.waiting[j] -= 1
            self.arrival[j] = max(self.arrival[j], when + self.tasks[j].transfer * self.scale)
            g = self.tasks[j].graph
            if self.waiting[j] == 0 and self.submit[g] is not None:
                heapq.heappush(self.events, (max(self.arrival[j], self.submit[g]), 2, j))

    def _start_ready(self, now):
        while self.ready:
            w = min(range(len(self.workers)), key=self.workers.__getitem__)
            if self.workers[w] > now:  # wake when it is free (after a task and its overhead)
                heapq.heappush(self.events, (self.workers[w], 3, None))
                return
            if self.free_dispatch > now:
                heapq.heappush(self.events, (self.free_dispatch, 3, None))
                return
            _, i = heapq.heappop(self.ready)
            self.free_dispatch = now + self.dispatch
            self.workers[w] = now + self.tasks[i].busy + self.overhead
            heapq.heappush(self.events, (now + self.tasks[i].busy, 1, i))


def stage_windows(fit_start, laps):
    """``timings_`` (stage -> seconds, in order) as ``(stage, start, stop)`` windows."""
    out, t = [], fit_start
    for name, seconds in laps.items():
        out.append((name, t, t + seconds))
        t += seconds
    return out


def stage_table(tasks, graphs, windows, calls=()):
    """Per stage window: wall, worker-busy seconds, serial seconds (no worker computing,
    fetching or spilling), tasks started, the longest and the median task, graphs
    submitted, and of ``calls`` (:attr:`RoundTrips.calls`) the blocking round trips that
    started in it.

    Every task of the stream counts in exactly one stage: the worker's clock, which dask
    corrects by its estimate of the worker's delay to the scheduler, may put a task a few
    milliseconds before the fit's first window or after its last, and such a task counts in
    the window nearest to it."""
    rows = []
    starts = [start for _, start, _ in windows]
    stage_of = [max(bisect.bisect_right(starts, t.start) - 1, 0) for t in tasks]
    for i, (name, start, stop) in enumerate(windows):
        inside = [t for t, s in zip(tasks, stage_of, strict=True) if s == i]
        busy_intervals = [
            (max(t.start, start), min(t.stop, stop))
            for t in tasks
            if t.stop > start and t.start < stop
        ]
        durations = [t.busy for t in inside]
        rows.append(
            {
                "stage": name,
                "wall_s": stop - start,
                "busy_s": sum(durations),
                "serial_s": (stop - start) - interval_union(busy_intervals),
                "tasks": len(inside),
                "longest_s": max(durations, default=0.0),
                "median_s": statistics.median(durations) if durations else 0.0,
                "graphs": sum(start <= g["time"] < stop for g in graphs),
                "round_trips": sum(
                    c["kind"] == "compute" and start <= c["start"] < stop for c in calls
                ),
            }
        )
    return rows


def barrier_model(tasks, serial, n_workers):
    """The per-stage barrier projection: ``serial + sum over task-name prefixes of
    max(longest task, the prefix's work / W)``."""
    work, longest = {}, {}
    for t in tasks:
        work[t.prefix] = work.get(t.prefix, 0.0) + t.busy
        longest[t.prefix] = max(longest.get(t.prefix, 0.0), t.busy)
    return serial + sum(max(longest[p], work[p] / n_workers) for p in work)
