"""The Gram pass (H^T H and H^T L H) against its same-run floor, with a per-task profile.

    python -m benchmarks.scale.bench_gram --n 1000000                  # 1M x 50, n_hidden 1000
    python -m benchmarks.scale.bench_gram --n 300000 --baseline-rev main  # against main's gram.py
    python -m benchmarks.scale.bench_gram --n 1000000 --graph auto      # the graph to time on

On a LocalCluster of 2 worker processes x 1 thread (or in one process with ``--sync``): the
mixture of ``_mixture.py`` generated on the workers (or ``--input``, as ``bench_scale.py
--write`` wrote it) in row chunks of 64 MiB of float32 H; the graph of the USELM defaults
built once, persisted and timed cold; then ``--rounds`` alternated rounds of the floor (each
chunk's hidden rows, ``H^T H`` and a GEMM of H's shape, as ``H^T (W H)`` takes:
``_floors.gram_floor``), the Gram pass
(``hidden_stats(features, ("hth", "htlh"), graph=graph)``) and, with ``--baseline-rev``, the
same pass by that revision's ``elmscale/gram.py``; the first round is the cold one. Then a
profile: the Gram task's steps timed one by one (hidden layer, syrk, halo hidden rows rebuilt
from X, ``D H - W H``, the GEMM), summed over tasks in CPU seconds, and the task stream of one
pass grouped by key prefix (scheduler and idle time: ``workers * wall - sum(compute)``); halo
rows / N, peak RSS of every worker and of the client, the load average.

One JSON line per measurement is printed; the last line starts with ``RESULT``.
"""

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np

from benchmarks._common import (
    REPO_ROOT,
    blas_info,
    cluster_arguments,
    load_average,
    local_cluster,
    log_header,
    peak_memory_mb,
    utc_now,
)
from benchmarks._mixture import mixture_dask
from benchmarks.scale._floors import gram_floor
from benchmarks.scale.bench_scale import read_input


def _baseline_gram(rev, client):
    """``elmscale/gram.py`` of git revision ``rev`` as a top-level module, imported here and
    uploaded to the workers (``Client.upload_file``), its relative imports made absolute."""
    import importlib
    import tempfile

    src = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "show", f"{rev}:elmscale/gram.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    src = src.replace("from ..", "from elmscale.").replace("from .", "from elmscale.")
    name = "_elmscale_baseline_gram"
    path = os.path.join(tempfile.mkdtemp(), name + ".py")
    with open(path, "w") as f:
        f.write(src)
    sys.path.insert(0, os.path.dirname(path))
    if client is not None:
        client.upload_file(path)
    return importlib.import_module(name)


def _profiled_block(X_blocks, half, layer, compiled, halo_X):
    """The Gram task's steps (``gram._block_partials`` for ("hth", "htlh"), p = 1) with
    timers, the halo's hidden rows built before ``D H - W H`` (the pass interleaves them);
    returns CPU seconds per step, the halo rows rebuilt and the nonzeros used."""
    from elmscale.gram import laplacian_rows

    t = {}
    clock = [time.perf_counter()]

    def lap(name):
        now = time.perf_counter()
        t[name] = t.get(name, 0.0) + now - clock[0]
        clock[0] = now

    H = layer(np.concatenate(X_blocks))
    lap("hidden")
    (H.T @ H).astype(np.float64)
    lap("syrk")
    halo = np.concatenate(halo_X) if halo_X else np.zeros((0, H.shape[1]), H.dtype)
    lap("halo_concat")
    step = max(H.shape[0], 1)
    pieces = [layer(halo[s : s + step]) for s in range(0, halo.shape[0], step)]
    lap("halo_hidden")
    VH = laplacian_rows(half[2], H, half[0], half[1], pieces, compiled=compiled)
    lap("dh_minus_wh")
    (H.T @ VH).astype(np.float64)
    lap("gemm")
    return t, int(halo.shape[0]), int(half[0].nnz + half[1].nnz), int(H.shape[0])


def profile(graph, features):
    """One pass of :func:`_profiled_block` tasks over the same groups as the Gram pass."""
    import dask

    from elmscale import get_config

    X_blocks = graph.X.to_delayed().ravel()
    lay = dask.delayed(features.layer, pure=True)
    compiled = get_config()["compiled"]
    patterns = group_patterns(graph, features, 4 * get_config()["chunk_bytes"])
    halos = graph.groups_halo([g for g, _, _ in patterns], [need for _, _, need in patterns])
    tasks = [
        dask.delayed(_profiled_block)([X_blocks[b] for b in group], half, lay, compiled, halo)
        for (group, half, _), halo in zip(patterns, halos, strict=True)
    ]
    t0 = time.perf_counter()
    out = dask.compute(*tasks)
    wall = time.perf_counter() - t0
    steps = defaultdict(float)
    for t, *_ in out:
        for k, v in t.items():
            steps[k] += v
    return {
        "profile_cpu_s": dict(steps),
        "profile_wall_s": wall,
        "n_tasks": len(tasks),
        "rows_per_task": max(o[3] for o in out),
        "halo_rows_rebuilt": sum(o[1] for o in out),
        "nnz_used": sum(o[2] for o in out),
    }


def group_patterns(graph, features, group_bytes):
    """The Gram pass's tasks for float32 H of ``group_bytes`` per task: ``(group, half,
    need)`` per task, the half graph and halo indices delayed."""

    from elmscale import gram

    groups = gram._task_groups(features.chunks, features.layer.n_hidden, 4, group_bytes)
    return [(g, *graph.group_pattern(g)) for g in groups]


def task_stream(client, fn):
    """Run ``fn()`` under the task stream; seconds of compute and transfer per key prefix."""
    from dask.utils import key_split
    from distributed import get_task_stream

    t0 = time.perf_counter()
    with get_task_stream(client) as ts:
        fn()
    wall = time.perf_counter() - t0
    compute, transfer, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for rec in ts.data:
        name = key_split(rec["key"])
        count[name] += 1
        for s in rec["startstops"]:
            if s["action"] == "compute":
                compute[name] += s["stop"] - s["start"]
            elif s["action"] == "transfer":
                transfer[name] += s["stop"] - s["start"]
    n_workers = len(client.scheduler_info()["workers"])
    busy = sum(compute.values())
    return {
        "wall_s": wall,
        "compute_s": dict(compute),
        "transfer_s": dict(transfer),
        "tasks": dict(count),
        "idle_or_scheduler_s": n_workers * wall - busy,
    }


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    cluster_arguments(p, n=1_000_000, worker_gb=8, n_hidden=1000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--graph", default="pynndescent", help="graph backend to time the pass on")
    p.add_argument("--chunk-mb", type=int, default=64, help="bytes of one float32 H block")
    p.add_argument(
        "--sync",
        action="store_true",
        help="no cluster: dask's sync scheduler, BLAS on 1 thread, CPU seconds "
        "reported beside wall seconds (for a shared machine)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--baseline-rev", default=None, help="also time this git revision's gram.py, alternated"
    )
    p.add_argument(
        "--input", default=None, help="parquet:PATH or zarr:PATH instead of generating the mixture"
    )
    p.add_argument(
        "--power",
        type=int,
        default=1,
        help="p of the pass's H^T L^p H (SS-ELM's default is 2); the profile covers p = 1",
    )
    p.add_argument("--no-profile", dest="profile", action="store_false")
    p.add_argument(
        "--compute-dtype",
        choices=("float32", "float64"),
        default="float32",
        help="H's blocks; float64 also validates the float32 rows to float64 as a fit does "
        "(the library's default)",
    )
    return p.parse_args(argv)


@contextlib.contextmanager
def where(args):
    """The client of a fresh LocalCluster, or None with ``--sync``: one process and one
    thread, so that CPU seconds do not depend on the machine's load."""
    if not args.sync:
        with local_cluster(args.workers, args.worker_gb) as client:
            yield client
        return
    import dask
    from threadpoolctl import threadpool_limits

    with dask.config.set(scheduler="sync"), threadpool_limits(1, user_api="blas"):
        yield None


def data(args):
    """X persisted in row chunks of ``--chunk-mb`` of float32 H (or ``--chunk-rows``)."""
    import dask

    import elmscale

    if args.input:
        X = read_input(args.input)[0]  # as bench_scale.py --write wrote it
        X = X.to_dask_array(lengths=True) if hasattr(X, "to_dask_array") else X
        X = X.astype(np.float32)
    else:
        X = mixture_dask(args.n, args.d, args.clusters, args.seed)[0]
    rows = args.chunk_rows or max(1000, args.chunk_mb * 2**20 // (args.n_hidden * 4))
    X = X.rechunk({0: rows, 1: -1}).persist()
    dask.compute(X.sum())
    if args.compute_dtype == "float64":  # validated as a fit does: float64 rows of float32
        with elmscale.config_context(compute_dtype="float64"):
            X, _ = elmscale.utils.as_row_chunked(X)
    return X


def graph_and_features(X, args, result, log):
    """The USELM defaults' graph of X (timed cold) and the hidden features of its layer."""
    from elmscale.graph import knn_graph
    from elmscale.hidden import HiddenFeatures, RandomHiddenLayer, apply_scaling, fit_scaling

    offset, scale = fit_scaling(X, "minmax")
    layer = RandomHiddenLayer.draw(
        X.shape[1], args.n_hidden, "sigmoid", args.seed, offset=offset, scale=scale
    )
    t0 = time.perf_counter()
    graph = knn_graph(
        X,
        args.k,
        backend=args.graph,
        normalized=True,
        target_recall=None,  # the estimators' fixed search
        random_state=args.seed,
        transform=lambda A: apply_scaling(A, offset, scale),
    )
    result["graph_cold_s"] = time.perf_counter() - t0
    result["n_chunks"] = len(X.chunks[0])
    result["halo_over_n"] = graph.halo_size() / X.shape[0]
    log(json.dumps({k: result[k] for k in ("graph_cold_s", "n_chunks", "halo_over_n")}))
    return graph, HiddenFeatures(X, layer, cache=False)


def time_rounds(runs, args, log):
    """``--rounds`` alternated rounds of every run; each variant's matrices against the
    first's (``*_rel_gap``)."""
    rounds, ref = [], None
    for r in range(args.rounds):
        times = {"load": load_average()}
        for name, fn in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            out = fn()
            times[name] = time.perf_counter() - t0
            if args.sync:
                times[f"{name}_cpu"] = time.process_time() - c0
            if name != "floor":  # every variant must give the same matrices
                ref = ref or out
                gap = max(np.abs(out[k] - ref[k]).max() / np.abs(ref[k]).max() for k in ref)
                times[f"{name}_rel_gap"] = float(gap)
        times["gram_over_floor"] = times["gram"] / times["floor"]
        if args.sync:
            times["gram_over_floor_cpu"] = times["gram_cpu"] / times["floor_cpu"]
        rounds.append(times)
        log(json.dumps({"round": r, **times}))
    return rounds


def main(argv=None):
    import elmscale
    from elmscale.gram import hidden_stats

    args = parse(argv)
    log = functools.partial(print, flush=True)
    log_header(args)
    result = {"args": vars(args), "date": utc_now()}
    with where(args) as client:
        result["worker_blas"] = (
            list(set(client.run(blas_info).values())) if client else [blas_info()]
        )
        baseline = _baseline_gram(args.baseline_rev, client) if args.baseline_rev else None
        X = data(args)
        graph, features = graph_and_features(X, args, result, log)
        runs = {
            "floor": gram_floor(features),
            "gram": lambda: hidden_stats(
                features, ("hth", "htlh"), graph=graph, laplacian_power=args.power
            ),
        }
        if baseline is not None:
            runs["baseline"] = lambda: baseline.hidden_stats(features, ("hth", "htlh"), graph=graph)
        with elmscale.config_context(compute_dtype=args.compute_dtype):
            result["rounds"] = time_rounds(runs, args, log)
            if args.profile and args.power == 1:
                if client is not None:
                    result["task_stream"] = task_stream(client, runs["gram"])
                    log(json.dumps({"task_stream": result["task_stream"], "load": load_average()}))
                prof = profile(graph, features)
                prof["halo_rebuilt_over_n"] = prof["halo_rows_rebuilt"] / X.shape[0]
                result["profile"] = prof
                log(json.dumps({**prof, "load": load_average()}))
        if client is not None:
            result["worker_peak_mb"] = sorted(client.run(peak_memory_mb).values())
        result["client_peak_mb"] = peak_memory_mb()
    for key in ("floor", "gram", "baseline"):
        if key in result["rounds"][0]:
            result[f"{key}_median_s"] = float(np.median([r[key] for r in result["rounds"]]))
    ratios = [r["gram_over_floor"] for r in result["rounds"]]
    result["gram_over_floor_median"] = float(np.median(ratios))
    log("RESULT " + json.dumps(result, default=float))
    return result


if __name__ == "__main__":
    main()
