"""Any estimator at scale: one cold fit on a 2-worker LocalCluster, from generated or on-disk data.

    python -m benchmarks.scale.bench_scale --estimator ELMClassifier --n 1000000
    python -m benchmarks.scale.bench_scale --estimator SSELM --n 10000000 \
        --input parquet:/data/mix10m
    python -m benchmarks.scale.bench_scale --estimator all --n 1000000

The data is bench_uselm_scale.py's 50-d Gaussian mixture of ``--clusters`` classes, generated
on the workers, or read from files that ``bench_uselm_scale.py --write parquet:PATH`` wrote
(``--input``: a dask DataFrame from ``read_parquet`` handed to ``fit`` as a user would, not
persisted, so every pass reads the files).

Each estimator runs at its defaults but for ``n_clusters`` (the mixture's), ``random_state``
and ``--n-hidden`` where given (1000 for US-ELM, SS-ELM and ELMClassifier by default, the
estimator's own default for the others). What is fitted and scored:

- clusterers (USELM, ELMJEC, EMMC, TUMKELM): ``fit(X)``, ACC of ``labels_`` (Hungarian-matched);
- SSELM: ``fit(X, y)`` with 1 % of the rows labelled (chosen from the data by a hash-like
  rule, see ``_labelled``) and the rest ``-1``, accuracy
  of ``predict(X)`` on the unlabelled rows;
- ELMClassifier: ``fit(X, y)`` on every row, accuracy of ``predict(X)`` on the same rows.

Scores are counted on the workers (a clusterer's table of (cluster, class) counts, the
classifier's matches), so that nothing with N rows reaches the client after the fit either;
only SS-ELM's run holds its labels (and predictions) on the client, as its ``fit`` takes them.

Each fit runs in its own fresh cluster (cold: imports and any compilation included). Reported:
wall time of the fit, the estimator's stage times (``timings_``), the score and its time, peak
RSS of every worker and of the client (``client_rss_mb_by_stage``: its peak within each stage),
whose process also runs the scheduler unless ``--scheduler-process`` gives the scheduler a
process of its own, whose peak is then reported apart; the workers that a nanny restarted
(their process ids changed: killed for memory, or crashed) and the bytes each worker spilled to
disk (``--worker-gb`` below the working set), load average.
One JSON line per estimator.
"""

import argparse
import contextlib
import functools
import json
import os
import sys
import threading
import time

import numpy as np

from benchmarks._common import (
    RSSSampler,
    accuracy_from_contingency,
    blas_info,
    dask_contingency,
    local_cluster,
    machine_info,
    peak_memory_mb,
    utc_now,
)
from benchmarks._mixture import mixture_dask
from benchmarks.scale.bench_uselm_scale import read_input

ESTIMATORS = ("USELM", "SSELM", "ELMClassifier", "ELMJEC", "EMMC", "TUMKELM")
WIDE = ("USELM", "SSELM", "ELMClassifier")  # n_hidden 1000 by default, as the issue states


def make_estimator(name, args):
    import elmscale

    params = {"random_state": args.seed}
    if name not in ("SSELM", "ELMClassifier"):
        params["n_clusters"] = args.clusters
    n_hidden = args.n_hidden or (1000 if name in WIDE else None)
    if n_hidden and name != "TUMKELM":  # TUMK-ELM has kernels, not a hidden layer
        params["n_hidden"] = n_hidden
    if name == "TUMKELM":
        params["mode"] = "scalable"
    return getattr(elmscale, name)(**params)


def _labelled(first_feature):
    """The 1 % of rows SS-ELM sees labelled, chosen from the data alone (so the same rows
    whether X is generated, a dask array or a DataFrame read from disk): those whose first
    feature has 0 in its 1e6-th place modulo 100. The labels go to ``fit`` as NumPy: a
    Series masked lazily from the same frame as X (``y.where(...)``) fails in dask's
    scheduler with a KeyError."""
    return (abs(first_feature) * 1e6).astype("int64") % 100 == 0


def _spilled_mb(dask_worker):
    """MiB this worker process has written to disk since it started (its spill buffer's
    ``disk-write`` bytes, summed over the metrics it digests)."""
    total = sum(
        v
        for k, v in dask_worker.digests_total.items()
        if isinstance(k, tuple) and k[-2:] == ("disk-write", "bytes")
    )
    return round(total / 2**20, 1)


def _memory_now(dask_worker):
    """This worker's resident MiB and the names of the tasks it is executing."""
    import psutil
    from dask.utils import key_split

    rss = psutil.Process().memory_info().rss / 2**20
    return rss, sorted({key_split(ts.key) for ts in dask_worker.state.executing})


@contextlib.contextmanager
def memory_watch(client, out, limit_gb, every=0.5):
    """Poll the workers' RSS and executing tasks every ``every`` s while the block runs;
    ``out["rss_by_task_mb"]``: per task name, the highest RSS of a worker executing it
    (the 8 highest), which names the stage and the task that hold the memory when a worker
    nears its limit. A new highest above 80 % of ``limit_gb`` is printed to stderr at once
    (a run that a nanny's restarts never let finish still says which task it was)."""
    peaks, stop, near = {}, threading.Event(), 0.8 * limit_gb * 1024

    def poll():
        while not stop.wait(every):
            with contextlib.suppress(Exception):  # a worker restarting: next poll
                for rss, names in client.run(_memory_now, on_error="ignore").values():
                    for name in names or ["(idle)"]:
                        if rss > max(peaks.get(name, 0.0), near):
                            print(f"# memory: {name} {rss:.0f} MiB", file=sys.stderr, flush=True)
                        peaks[name] = max(peaks.get(name, 0.0), rss)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        top = sorted(peaks.items(), key=lambda kv: -kv[1])[:8]
        out["rss_by_task_mb"] = {k: round(v) for k, v in top}


def run_one(name, args, log):
    import dask
    import dask.array as da

    import elmscale

    out = {"estimator": name, "n": args.n, "input": args.input or "generated"}
    with local_cluster(
        args.workers, args.worker_gb, scheduler_process=args.scheduler_process
    ) as client:
        pids = client.run(os.getpid)
        if args.input:
            Xd, yd = read_input(args.input)
        else:
            Xd, yd = mixture_dask(args.n, args.d, args.clusters, args.seed)
            rows = args.chunk_rows
            Xd, yd = Xd.rechunk({0: rows, 1: -1}), yd.rechunk(rows)
            Xd, yd = dask.persist(Xd, yd)
            dask.compute(Xd.sum())
        y_arr = yd if isinstance(yd, da.Array) else yd.to_dask_array(lengths=True)
        out["n"] = int(y_arr.shape[0])
        if name == "SSELM":  # its labels go to fit as NumPy, and the rows that pick them
            y_true = np.asarray(y_arr.compute())
            first = Xd[Xd.columns[0]] if hasattr(Xd, "columns") else Xd[:, 0]
            labelled = _labelled(np.asarray(first.compute()))
        model = make_estimator(name, args)
        out["params"] = {k: v for k, v in model.get_params().items() if v is not None}
        watch = memory_watch(client, out, args.worker_gb) if args.watch_memory else None
        with (
            elmscale.config_context(compute_dtype=args.dtype, graph_chunks=args.graph_chunks),
            watch or contextlib.nullcontext(),
            RSSSampler() as rss,
        ):
            t0 = time.perf_counter()
            fit_start = t0 - rss._t0
            if name == "SSELM":
                model.fit(Xd, np.where(labelled, y_true, -1))
            elif name == "ELMClassifier":
                model.fit(Xd, yd)
            else:
                model.fit(Xd)
            out["fit_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            # scored on the workers (but SS-ELM's, whose labels the client holds anyway):
            # the client's peak is then the fit's, not that of N labels gathered to score
            if name == "SSELM":
                pred = np.asarray(dask.compute(model.predict(Xd))[0])
                keep = ~labelled
                out["accuracy"] = float(np.mean(pred[keep] == y_true[keep]))
            elif name == "ELMClassifier":
                pred = da.asarray(model.predict(Xd)).rechunk({0: y_arr.chunks[0]})
                out["accuracy"] = float((pred == y_arr).mean().compute())
            else:
                out["acc"] = accuracy_from_contingency(dask_contingency(y_arr, model.labels_))
            out["score_s"] = time.perf_counter() - t0
        out["stages_s"] = dict(getattr(model, "timings_", {}) or {})
        out["client_rss_mb_by_stage"] = rss.peak_by_stage(fit_start, list(out["stages_s"].items()))
        out["load_avg"] = [round(x, 2) for x in os.getloadavg()]
        out["worker_peak_mb"] = sorted(client.run(peak_memory_mb).values())
        out["workers_restarted"] = len(set(pids.values()) - set(client.run(os.getpid).values()))
        out["spilled_mb"] = sorted(client.run(_spilled_mb).values())
        out["client_peak_mb"] = peak_memory_mb()
        if args.scheduler_process:
            out["scheduler_peak_mb"] = client.run_on_scheduler(peak_memory_mb)
    log(json.dumps(out, default=float))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--estimator", default="all", choices=ESTIMATORS + ("all",))
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--clusters", type=int, default=10)
    p.add_argument("--n-hidden", type=int, default=None)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--chunk-rows", type=int, default=16_384, help="rows per chunk (generated)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--worker-gb", type=float, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--input", default=None, help="parquet:PATH or zarr:PATH: read X and y")
    p.add_argument(
        "--graph-chunks",
        choices=("auto", "data"),
        default="auto",
        help="elmscale's graph_chunks setting: 'data' builds the graph on the data's chunks",
    )
    p.add_argument(
        "--watch-memory",
        action="store_true",
        help="poll the workers' RSS and running tasks during the fit (rss_by_task_mb)",
    )
    p.add_argument(
        "--scheduler-process",
        action="store_true",
        help="run the scheduler in its own process: client and scheduler peaks apart",
    )
    args = p.parse_args(argv)
    log = functools.partial(print, flush=True)
    log(f"# {utc_now()} {machine_info()}")
    log(f"# BLAS: {blas_info()}")
    log(f"# args: {vars(args)}")
    names = ESTIMATORS if args.estimator == "all" else (args.estimator,)
    return [run_one(name, args, log) for name in names]


if __name__ == "__main__":
    main()
