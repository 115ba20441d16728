"""Any estimator at scale: one cold fit on a 2-worker LocalCluster, from generated or on-disk data.

    python -m benchmarks.scale.bench_scale --estimator ELMClassifier --n 1000000
    python -m benchmarks.scale.bench_scale --n 10000000 --write parquet:/data/mix10m  # once
    python -m benchmarks.scale.bench_scale --estimator SSELM --n 10000000 \
        --input parquet:/data/mix10m
    python -m benchmarks.scale.bench_scale --estimator all --n 1000000

The data: the 50-d mixture of ``_mixture.py`` generated on the workers, or ``--input
parquet:PATH`` / ``zarr:PATH`` as ``--write`` wrote it (one file or chunk per ``--chunk-rows``
rows), read as a user would and not persisted. Each estimator runs at its defaults but for
``n_clusters``, ``random_state`` and ``--n-hidden`` (1000 for US-ELM, SS-ELM and ELMClassifier
unless given). Clusterers are scored by the ACC of ``labels_`` (US-ELM fitted as ``reduce`` +
``solve``, to report its graph's chunks, halo rows and recall@k); SSELM fits with 1 % of the
rows labelled (``_labelled``) and is scored on the rest; ELMClassifier on its training rows.
Scores are counted on the workers: nothing with N rows reaches the client but SS-ELM's labels.

Each fit runs in a fresh cluster (cold). One JSON line per estimator: the fit's wall and
stage seconds, the score, peak RSS of every worker and of the client (per stage:
``client_rss_mb_by_stage``; the scheduler's apart with ``--scheduler-process``), workers a
nanny restarted, bytes spilled to disk, the load average. With ``--floors`` (US-ELM), each
stage's same-run floor (``_floors.py``) and the stage's time over it.
"""

import argparse
import contextlib
import json
import os
import sys
import threading
import time

import numpy as np

from benchmarks._common import (
    RSSSampler,
    accuracy_from_contingency,
    cluster_arguments,
    dask_contingency,
    load_average,
    local_cluster,
    log_header,
    peak_memory_mb,
    recall_at_k,
    recall_rows,
)
from benchmarks._mixture import mixture_dask
from benchmarks.scale._floors import stage_floors

ESTIMATORS = ("USELM", "SSELM", "ELMClassifier", "ELMJEC", "EMMC", "TUMKELM")
WIDE = ("USELM", "SSELM", "ELMClassifier")  # n_hidden 1000 by default, as the issue states


def _path(spec):
    kind, _, path = spec.partition(":")
    if kind not in ("parquet", "zarr") or not path:
        raise SystemExit(f"expected parquet:PATH or zarr:PATH, got {spec!r}")
    return kind, path


def read_input(spec):
    """``(X, y)``: X as the user hands it to ``fit`` (a dask DataFrame of the feature
    columns, or a dask array), y as a dask Series or array; nothing is read yet."""
    import dask.array as da

    kind, path = _path(spec)
    if kind == "parquet":
        import dask.dataframe as dd

        df = dd.read_parquet(path)
        return df[[c for c in df.columns if c != "y"]], df["y"]
    return da.from_zarr(path, component="X"), da.from_zarr(path, component="y")


def write_input(args):
    """Generate the mixture on the workers and write it in blocks of ``--chunk-rows`` rows."""
    import dask
    import dask.array as da
    import dask.dataframe as dd

    kind, path = _path(args.write)
    with local_cluster(args.workers, args.worker_gb):
        X, y = mixture_dask(args.n, args.d, args.clusters, args.seed)
        X, y = X.rechunk({0: args.chunk_rows, 1: -1}), y.rechunk(args.chunk_rows)
        start = time.perf_counter()
        if kind == "parquet":
            columns = [f"x{i}" for i in range(args.d)] + ["y"]
            Xy = da.concatenate([X, y[:, None].astype(X.dtype)], axis=1)
            df = dd.from_dask_array(Xy, columns=columns)
            df["y"] = df["y"].astype("int64")
            df.to_parquet(path, write_index=False)
        else:
            dask.compute(
                X.to_zarr(path, component="X", overwrite=True, compute=False),
                y.to_zarr(path, component="y", overwrite=True, compute=False),
            )
    out = {"written": args.write, "rows": args.n, "chunk_rows": args.chunk_rows}
    out["seconds"] = time.perf_counter() - start
    print(json.dumps(out), flush=True)
    return out


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


def _data(args):
    """``(X, y)`` on the cluster: read (``--input``) or generated and persisted."""
    import dask

    if args.input:
        return read_input(args.input)
    X, y = mixture_dask(args.n, args.d, args.clusters, args.seed)
    X, y = dask.persist(X.rechunk({0: args.chunk_rows, 1: -1}), y.rechunk(args.chunk_rows))
    dask.compute(X.sum())
    return X, y


def fit(name, model, X, y, out):
    """Fit ``model`` as the module docstring says: ``(score, graph)``, the functions that give
    the score's fields and (US-ELM) the graph's, both called after the fit's clock stops."""
    import dask
    import dask.array as da

    # a Series's lengths computed by to_dask_array(lengths=True) can disagree with its
    # partitions once dask-expr has combined small Parquet files: count the chunks instead
    y_arr = y if isinstance(y, da.Array) else y.to_dask_array().compute_chunk_sizes()
    out["n"] = int(y_arr.shape[0])
    if name == "SSELM":  # its labels go to fit as NumPy, and the rows that pick them
        y_true = np.asarray(y_arr.compute())
        first = X[X.columns[0]] if hasattr(X, "columns") else X[:, 0]
        unlabelled = ~_labelled(np.asarray(first.compute()))
        model.fit(X, np.where(unlabelled, -1, y_true))
        pred = lambda: np.asarray(dask.compute(model.predict(X))[0])  # noqa: E731
        return lambda: {"accuracy": float(np.mean(pred()[unlabelled] == y_true[unlabelled]))}, None
    if name == "ELMClassifier":
        model.fit(X, y)
        pred = lambda: da.asarray(model.predict(X)).rechunk({0: y_arr.chunks[0]})  # noqa: E731
        return lambda: {"accuracy": float((pred() == y_arr).mean().compute())}, None
    graph = None
    if name == "USELM":  # reduce + solve: the reduction keeps the graph for halo and recall
        with _recall_rows_kept(RECALL_ROWS):
            reduction = model.reduce(X)
        model.solve(reduction)
        graph = lambda: _graph_fields(reduction, model.n_neighbors)  # noqa: E731
    else:
        model.fit(X)
    return lambda: {"acc": accuracy_from_contingency(dask_contingency(y_arr, model.labels_))}, graph


#: rows whose kNN lists the recall is measured on
RECALL_ROWS = 1000


@contextlib.contextmanager
def _recall_rows_kept(n_sample):
    """The fit's graph lets go of its kNN lists once built (``KNNGraph.release_lists``);
    here it keeps the lists of the rows :func:`recall_at_k` samples (n_sample x k integers,
    persisted on the workers) as ``recall_lists``, so the fit holds what it holds unmeasured."""
    from elmscale.graph import KNNGraph

    release = KNNGraph.release_lists

    def keeping_sample(graph):
        rows = recall_rows(graph.n_samples, n_sample)
        graph.recall_lists = graph.indices[rows].persist()
        return release(graph)

    KNNGraph.release_lists = keeping_sample
    try:
        yield
    finally:
        KNNGraph.release_lists = release


def _graph_fields(reduction, k):
    """The graph's chunks, halo rows and recall@k on :data:`RECALL_ROWS` rows; the reduction
    released."""
    graph = reduction.graph
    out = {"n_chunks": len(graph.chunks), "halo_rows": graph.halo_size()}
    out["recall"] = recall_at_k(graph.X, graph.recall_lists, k, n_sample=RECALL_ROWS)
    reduction.release()
    return out


def _over_floors(model, X, out):
    """``floors_s`` (:func:`benchmarks.scale._floors.stage_floors`), each stage's time over
    its floor (``over_floor``) and the fit's over the streamed ``H^T H`` (``fit_over_floor``)."""
    floors = stage_floors(model, X, smoothing_steps=model._smoothing)
    stages = out["stages_s"]
    over = {k: round(stages[k] / f, 2) for k, f in floors.items() if k in stages and f > 0}
    return {
        "floors_s": floors,
        "over_floor": over,
        "fit_over_floor": round(out["fit_s"] / floors["hth"], 2),
    }


def run_one(name, args):
    """One cold fit of estimator ``name`` in a fresh cluster: its record (printed)."""
    import elmscale

    out = {"estimator": name, "n": args.n, "input": args.input or "generated"}
    with local_cluster(
        args.workers, args.worker_gb, scheduler_process=args.scheduler_process
    ) as client:
        pids = client.run(os.getpid)
        X, y = _data(args)
        model = make_estimator(name, args)
        out["params"] = {k: v for k, v in model.get_params().items() if v is not None}
        watch = memory_watch(client, out, args.worker_gb) if args.watch_memory else None
        with (
            elmscale.config_context(compute_dtype=args.dtype, graph_chunks=args.graph_chunks),
            watch or contextlib.nullcontext(),
            RSSSampler() as rss,
        ):
            t0 = time.perf_counter()
            score, graph = fit(name, model, X, y, out)
            out["fit_s"] = time.perf_counter() - t0
            # scored on the workers (but SS-ELM's, whose labels the client holds anyway):
            # the client's peak is then the fit's, not that of N labels gathered to score
            out.update(score())
            out["score_s"] = time.perf_counter() - t0 - out["fit_s"]
        out.update(graph() if graph else {})
        out["stages_s"] = dict(getattr(model, "timings_", {}) or {})
        if args.floors and name == "USELM":
            with elmscale.config_context(compute_dtype=args.dtype):
                out.update(_over_floors(model, X, out))
        stages = list(out["stages_s"].items())
        out["client_rss_mb_by_stage"] = rss.peak_by_stage(t0 - rss._t0, stages)
        out["load_avg"] = load_average()
        out["worker_peak_mb"] = sorted(client.run(peak_memory_mb).values())
        out["workers_restarted"] = len(set(pids.values()) - set(client.run(os.getpid).values()))
        out["spilled_mb"] = sorted(client.run(_spilled_mb).values())
        out["client_peak_mb"] = peak_memory_mb()
        if args.scheduler_process:
            out["scheduler_peak_mb"] = client.run_on_scheduler(peak_memory_mb)
    print(json.dumps(out, default=float), flush=True)
    return out


def scale_arguments(parser, every=False):
    """The options of bench_scale.py and bench_parallel.py: cluster_arguments's, the estimator
    (``every``: also "all", the default), the compute dtype and where the scheduler runs."""
    choices = ESTIMATORS + ("all",) * every
    parser.add_argument("--estimator", default=choices[-1] if every else "USELM", choices=choices)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument(
        "--scheduler-process",
        action="store_true",
        help="run the scheduler in its own process: client and scheduler peaks apart",
    )
    return cluster_arguments(parser, n=1_000_000, worker_gb=10, chunk_rows=16_384)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    scale_arguments(p, every=True)
    p.add_argument("--input", default=None, help="parquet:PATH or zarr:PATH: read X and y")
    p.add_argument("--write", default=None, help="parquet:PATH or zarr:PATH: write the data, exit")
    p.add_argument(
        "--graph-chunks",
        choices=("auto", "data"),
        default="auto",
        help="elmscale's graph_chunks setting: 'data' builds the graph on the data's chunks",
    )
    p.add_argument(
        "--floors",
        action="store_true",
        help="US-ELM: time each stage's floor after the fit, in the same cluster "
        "(floors_s, over_floor, fit_over_floor)",
    )
    p.add_argument(
        "--watch-memory",
        action="store_true",
        help="poll the workers' RSS and running tasks during the fit (rss_by_task_mb)",
    )
    args = p.parse_args(argv)
    log_header(args)
    if args.write:
        return write_input(args)
    names = ESTIMATORS if args.estimator == "all" else (args.estimator,)
    return [run_one(name, args) for name in names]


if __name__ == "__main__":
    main()
