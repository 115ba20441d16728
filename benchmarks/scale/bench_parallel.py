"""Where a fit's time goes on a cluster, and what more workers would buy: the task stream of
one cold fit, analysed per stage and replayed on W workers.

    python -m benchmarks.scale.bench_parallel --n 1000000 --workers 2 --project 4 8 16 64
    python -m benchmarks.scale.bench_parallel --n 200000 --estimator ELMJEC

The data (the mixture of ``_mixture.py``, generated on the workers) is persisted first,
untimed. The fit runs under distributed's task stream, a scheduler plugin recording every
graph the client submits (``_taskstream.GraphRecorder``) and a count of the client's blocking
round trips (``_taskstream.RoundTrips``). Reported per stage of ``timings_`` and for the fit:
wall, worker-busy and serial seconds (no worker computing, fetching or spilling), tasks, the
longest task against the median, graphs, round trips; the client's and the scheduler's CPU
seconds; projections to W workers: Amdahl's ``S + B/W``, the per-stage barrier model and a
replay of the measured tasks (``_taskstream.replay``), checked against the measured wall on
the measured worker count.

One JSON line with everything; ``--stream FILE`` also writes the raw records (tasks, graphs,
windows) for a later replay with other parameters.
"""

import argparse
import functools
import json
import resource
import time

from benchmarks._common import clustering_accuracy, local_cluster, log_header
from benchmarks._mixture import mixture_dask
from benchmarks.scale import _taskstream as ts
from benchmarks.scale.bench_scale import make_estimator, scale_arguments

#: Task-stream records the scheduler keeps (distributed's default 100,000 is enough for 1M
#: rows; 10M fits run more tasks).
STREAM_LENGTH = 2_000_000


def _thread_cpu():
    return time.thread_time()


def _process_cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(args):
    """One cold fit under the task stream: ``(record, tasks, graphs, windows)``."""
    import dask
    import numpy as np
    from distributed import get_task_stream

    import elmscale

    config = {"distributed.scheduler.dashboard.tasks.task-stream-length": STREAM_LENGTH}
    with (
        dask.config.set(config),
        local_cluster(
            args.workers, args.worker_gb, scheduler_process=args.scheduler_process
        ) as client,
    ):
        X, y = mixture_dask(args.n, args.d, args.clusters, args.seed)
        X, y = dask.persist(X.rechunk({0: args.chunk_rows, 1: -1}), y.rechunk(args.chunk_rows))
        dask.compute(X.sum())
        y_true = np.asarray(y.compute())
        model = make_estimator(args.estimator, args)
        recorder = ts.GraphRecorder()
        client.register_plugin(recorder)
        sched_cpu = client.run_on_scheduler(_process_cpu if args.scheduler_process else _thread_cpu)
        client_cpu = time.thread_time()
        with (
            elmscale.config_context(compute_dtype=args.dtype, plan_workers=args.plan_workers),
            get_task_stream(client) as stream,
            ts.RoundTrips(client) as trips,
        ):
            t0 = time.time()
            model.fit(X)
            t1 = time.time()
        client_cpu = time.thread_time() - client_cpu
        sched_cpu = (
            client.run_on_scheduler(_process_cpu if args.scheduler_process else _thread_cpu)
            - sched_cpu
        )
        graphs = client.run_on_scheduler(_graphs)
        labels = getattr(model, "labels_", None)
        acc = None
        if labels is not None:
            labels = labels.compute() if hasattr(labels, "compute") else labels
            acc = clustering_accuracy(y_true, np.asarray(labels))
        record = {
            "estimator": args.estimator,
            "n": args.n,
            "workers": args.workers,
            "fit_s": t1 - t0,
            "acc": acc,
            "client_cpu_s": client_cpu,
            "scheduler_cpu_s": sched_cpu,
            "timings": dict(getattr(model, "timings_", {}) or {}),
            "calls": trips.calls,
        }
    windows = ts.stage_windows(t0, record["timings"])
    records = [
        {
            "key": str(r["key"]),
            "worker": r.get("worker"),
            "startstops": [{k: s[k] for k in ("action", "start", "stop")} for s in r["startstops"]],
        }
        for r in stream.data
    ]
    return record, records, [g for g in graphs if t0 <= g["time"] <= t1], (t0, t1, windows)


def _graphs(dask_scheduler):
    return dask_scheduler.plugins[ts.GraphRecorder.name].records()


def analyse(record, stream, graphs, span, project):
    """The figures of the module docstring from one measured fit."""
    t0, t1, windows = span
    tasks = ts.build_tasks(stream, graphs)
    wall = t1 - t0
    busy = sum(t.busy for t in tasks)
    serial = wall - ts.interval_union(
        [(max(t.start, t0), min(t.stop, t1)) for t in tasks if t.stop > t0]
    )
    W = record["workers"]
    dispatch = record["scheduler_cpu_s"] / max(len(tasks), 1)
    overhead = ts.task_overhead(tasks, graphs)
    replayed = {
        w: ts.replay(tasks, graphs, t0, t1, w, W, dispatch=dispatch, overhead=overhead)
        for w in sorted({W, *project})
    }
    at = lambda w, f: f / w  # noqa: E731
    record.update(
        tasks=len(tasks),
        graphs=len(graphs),
        busy_s=busy,
        serial_s=serial,
        serial_share=serial / wall,
        dispatch_s_per_task=dispatch,
        overhead_s_per_task=overhead,
        round_trips=sum(c["kind"] == "compute" for c in record["calls"]),
        persists=sum(c["kind"] == "persist" for c in record["calls"]),
        stages=ts.stage_table(tasks, graphs, windows, record["calls"]),
        replay_measured_workers_s=replayed[W],
        replay_error=replayed[W] / wall - 1,
        projection={
            w: {
                "amdahl_s": serial + at(w, busy),
                "barrier_s": ts.barrier_model(tasks, serial, w),
                "replay_s": replayed[w],
                "replay_efficiency": (replayed[W] * W) / (replayed[w] * w),
                "barrier_efficiency": (ts.barrier_model(tasks, serial, W) * W)
                / (ts.barrier_model(tasks, serial, w) * w),
            }
            for w in sorted(project)
        },
    )
    return record


def main(argv=None):
    p = scale_arguments(
        argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    )
    p.add_argument("--project", type=int, nargs="+", default=[4, 8, 16, 64])
    p.add_argument("--stream", default=None, help="write the raw records to this JSON file")
    p.add_argument(
        "--plan-workers",
        type=int,
        default=0,
        help="size the fit's tasks for this many worker threads (elmscale.config_context"
        "(plan_workers=...)); default: the measured cluster's",
    )
    args = p.parse_args(argv)
    log = functools.partial(print, flush=True)
    log_header(args)
    record, stream, graphs, span = measure(args)
    if args.stream:
        with open(args.stream, "w") as f:
            json.dump({"record": record, "stream": stream, "graphs": graphs, "span": span}, f)
    out = analyse(record, stream, graphs, span, args.project)
    log(json.dumps(out, default=float))
    _print_summary(out, log)
    return out


def _print_summary(out, log):
    log(
        f"# fit {out['fit_s']:.1f} s on {out['workers']} workers: busy {out['busy_s']:.1f} "
        f"worker-s, serial {out['serial_s']:.1f} s ({100 * out['serial_share']:.1f} %), "
        f"{out['tasks']} tasks, {out['graphs']} graphs, {out['round_trips']} blocking round "
        f"trips, {out['persists']} persists; client CPU {out['client_cpu_s']:.1f} s, "
        f"scheduler CPU {out['scheduler_cpu_s']:.1f} s; replay on {out['workers']}: "
        f"{out['replay_measured_workers_s']:.1f} s ({100 * out['replay_error']:+.1f} %; "
        f"{1000 * out['overhead_s_per_task']:.1f} ms per task between tasks)"
    )
    for s in out["stages"]:
        log(
            f"#   {s['stage']:<12} wall {s['wall_s']:6.1f}  busy {s['busy_s']:6.1f}  serial "
            f"{s['serial_s']:5.1f}  tasks {s['tasks']:5d}  longest {s['longest_s']:.2f} / median "
            f"{s['median_s']:.3f}  graphs {s['graphs']}  round trips {s['round_trips']}"
        )
    for w, p in out["projection"].items():
        log(
            f"#   W={w:<3} amdahl {p['amdahl_s']:6.1f} s  barrier {p['barrier_s']:6.1f} s "
            f"(eff {p['barrier_efficiency']:.2f})  replay {p['replay_s']:6.1f} s "
            f"(eff {p['replay_efficiency']:.2f})"
        )


if __name__ == "__main__":
    main()
