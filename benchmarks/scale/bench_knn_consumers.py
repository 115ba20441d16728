"""Libraries fed elmscale's kNN graph against the same libraries on their own search.

    python -m benchmarks.scale.bench_knn_consumers --n 200000 --consumers umap hdbscan spectral
    python -m benchmarks.scale.bench_knn_consumers --n 1000000 --consumers umap --budget 1800
    python -m benchmarks.scale.bench_knn_consumers --n 100000 --data deformed --rounds 2

For each consumer, two runs on the same rows (X in this process, as a user holds it): ``own``,
the library alone (``umap.UMAP(n_neighbors=k)``, scikit-learn's ``HDBSCAN`` on X,
``SpectralClustering(affinity="nearest_neighbors")``), and ``elmscale``, the library fed
``KNNGraphTransformer(n_neighbors=k - 1, symmetric=False).fit_transform(X)`` built on a
LocalCluster of ``--workers`` (dask's threads with ``--workers 0``): umap through
``precomputed_knn``, HDBSCAN with ``metric="precomputed"`` on ``G.maximum(G.T)``,
SpectralClustering with ``affinity="precomputed_nearest_neighbors"``. The graph's seconds are
added to each consumer's for the ``elmscale`` end-to-end time.

Each consumer run is a fresh process given ``--budget`` seconds (one that runs out is recorded
as "timeout", never waited for), after an untimed fit on 5,000 rows (numba's compilation).
Quality: UMAP's ``trustworthiness`` on ``--sample`` rows and ACC / NMI of KMeans on its
embedding; HDBSCAN's and SpectralClustering's ACC / NMI, HDBSCAN's noise counted as wrong in
ACC and as one more cluster in NMI; the graph's seconds, ``recall_estimate_`` and recall@10
against brute force. One JSON line per run goes to ``--out``. Data: ``mixture``
(``_mixture.py``) or ``deformed`` (``_deformed_mnist.py``; needs mnist.npz).
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks._common import (
    REPO_ROOT,
    clustering_accuracy,
    local_cluster,
    nmi,
    peak_memory_mb,
    recall_at_k,
    results_file,
    run_info,
)

CONSUMERS = ("umap", "hdbscan", "spectral")
VARIANTS = ("own", "elmscale")
WARMUP_ROWS = 5000


def load_data(kind, n, seed=0):
    """``(X float32, y int64)`` of ``n`` rows of ``kind`` ("mixture" or "deformed")."""
    if kind == "mixture":
        from benchmarks._mixture import mixture_numpy

        return mixture_numpy(n, seed=seed)
    from benchmarks._deformed_mnist import deformed_mnist_numpy

    X, y = deformed_mnist_numpy(n, seed=seed)
    return X.astype(np.float32, copy=False), y


def _quiet_umap():
    # precomputed_knn without a search index, and n_jobs with random_state: umap's notices
    warnings.filterwarnings("ignore", message="precomputed_knn\\[2\\]")
    warnings.filterwarnings("ignore", message="n_jobs value")
    warnings.filterwarnings("ignore", category=UserWarning, module="umap")


# -- one consumer run, in its own process -------------------------------------------------
def _umap(X, G, k, spec):
    import umap

    from elmscale.neighbors import knn_arrays

    if G is None:
        return umap.UMAP(n_neighbors=k).fit_transform(X)
    indices, distances = knn_arrays(G)
    return umap.UMAP(n_neighbors=k, precomputed_knn=(indices, distances, None)).fit_transform(X)


def _hdbscan(X, G, k, spec):
    from sklearn.cluster import HDBSCAN

    kw = {"min_cluster_size": spec["min_cluster_size"], "min_samples": spec["min_samples"]}
    if G is None:
        return HDBSCAN(**kw).fit_predict(X)
    return HDBSCAN(metric="precomputed", **kw).fit_predict(G.maximum(G.T).tocsr())


def _spectral(X, G, k, spec):
    from sklearn.cluster import SpectralClustering

    kw = {
        "n_clusters": spec["n_clusters"],
        "n_neighbors": spec["spectral_k"],
        "eigen_solver": "amg",
        "random_state": 0,
    }
    if G is None:
        return SpectralClustering(affinity="nearest_neighbors", **kw).fit_predict(X)
    return SpectralClustering(affinity="precomputed_nearest_neighbors", **kw).fit_predict(G)


RUNNERS = {"umap": _umap, "hdbscan": _hdbscan, "spectral": _spectral}


def _small_graph(X, k):
    from elmscale.neighbors import KNNGraphTransformer

    return KNNGraphTransformer(n_neighbors=k - 1, symmetric=False).fit_transform(X)


def score(consumer, X, y, out, spec):
    """The quality fields of one run's output (an embedding for umap, labels otherwise)."""
    from sklearn.cluster import KMeans
    from sklearn.manifold import trustworthiness

    res = {}
    if consumer == "umap":
        rows = np.sort(
            np.random.RandomState(spec["seed"]).choice(len(X), min(spec["sample"], len(X)), False)
        )
        res["trustworthiness"] = float(trustworthiness(X[rows], out[rows], n_neighbors=10))
        labels = KMeans(spec["n_clusters"], n_init=10, random_state=0).fit_predict(out)
    else:
        labels = np.asarray(out)
    clustered = labels >= 0
    res["n_clusters_found"] = int(np.unique(labels[clustered]).size)
    res["noise_fraction"] = float(1 - clustered.mean())
    # noise is wrong in ACC (matched rows over all rows), one more cluster in NMI
    res["acc"] = (
        clustering_accuracy(y[clustered], labels[clustered]) * float(clustered.mean())
        if clustered.any()
        else 0.0
    )
    res["nmi"] = nmi(y, labels)
    return res


def _own_peak_mb():
    """This process's peak RSS in MiB: the kernel's high-water mark of its own memory
    (``VmHWM``), as ``ru_maxrss`` keeps the parent's peak across ``exec``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_memory_mb()


def child(spec_path):
    """Run one (consumer, variant) as described by the JSON file at ``spec_path``; print one
    ``RESULT {...}`` line."""
    import scipy.sparse as sp

    _quiet_umap()
    spec = json.loads(Path(spec_path).read_text())
    X = np.load(spec["X"])
    y = np.load(spec["y"])
    G = sp.load_npz(spec["graph"]) if spec["variant"] == "elmscale" else None
    run, k = RUNNERS[spec["consumer"]], spec["k"]
    # numba compilation and first imports, outside the timing, for both variants
    Xw = X[: spec["warmup_rows"]]
    if len(Xw) > k:
        run(Xw, None if G is None else _small_graph(Xw, k), k, {**spec, "min_cluster_size": 20})
    t0 = time.perf_counter()
    out = run(X, G, k, spec)
    seconds = time.perf_counter() - t0
    res = {"seconds": seconds, "peak_rss_mb": _own_peak_mb()}
    res.update(score(spec["consumer"], X, y, out, spec))
    print("RESULT " + json.dumps(res), flush=True)


def run_one(spec, tmp, budget):
    """One consumer run in a fresh process, killed after ``budget`` seconds: its result dict,
    with ``status`` "ok", "timeout" or "error"."""
    path = Path(tmp) / f"{spec['consumer']}-{spec['variant']}.json"
    path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "benchmarks.scale.bench_knn_consumers", "--child", str(path)]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=budget)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": None, "wall_s": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if done.returncode < 0:  # SIGKILL: most often the kernel's out-of-memory killer
            tail = f"killed by signal {-done.returncode}; {tail}"
        return {
            "status": "error",
            "error": tail[-300:],
            "returncode": done.returncode,
            "seconds": None,
            "wall_s": wall,
        }
    return {"status": "ok", "wall_s": wall, **json.loads(lines[-1][len("RESULT ") :])}


# -- the graph, in this process ------------------------------------------------------------
def build_graph(X, args, log):
    """elmscale's graph of X, timed (after an untimed graph of 20,000 rows that does the
    workers' imports): ``(G, fields)``."""
    from elmscale.neighbors import KNNGraphTransformer

    def transformer():
        k = args.k - 1
        return KNNGraphTransformer(n_neighbors=k, symmetric=False, graph=args.graph, random_state=0)

    cluster = local_cluster(args.workers, args.worker_gb, dashboard_address=None)
    with cluster if args.workers else contextlib.nullcontext():
        if args.workers:
            transformer().fit_transform(X[:20_000])
        t = transformer()
        t0 = time.perf_counter()
        G = t.fit_transform(X)
        seconds = time.perf_counter() - t0
    log(f"graph: {seconds:.1f} s (recall estimate {t.recall_estimate_})")
    return G, {"graph_s": seconds, "graph_recall_estimate": t.recall_estimate_}


def graph_recall(X, G, k, n_queries):
    """recall@k of the graph's lists (the point itself left out) on ``n_queries`` rows."""
    import dask
    import dask.array as da

    from elmscale.neighbors import knn_arrays

    indices, _ = knn_arrays(G)
    others = indices[:, 1 : k + 1]
    chunk = 50_000
    with dask.config.set(scheduler="threads"):
        return recall_at_k(
            da.from_array(X, chunks=(chunk, -1)),
            da.from_array(others, chunks=(chunk, -1)),
            min(k, others.shape[1]),
            n_sample=n_queries,
        )


def parse(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--data", choices=["mixture", "deformed"], default="mixture")
    p.add_argument("--consumers", nargs="+", choices=CONSUMERS, default=list(CONSUMERS))
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--k", type=int, default=15, help="UMAP's n_neighbors; the graph's columns")
    p.add_argument("--spectral-k", type=int, default=10, help="SpectralClustering's n_neighbors")
    p.add_argument("--min-cluster-size", type=int, default=None, help="default max(20, n/100)")
    p.add_argument("--min-samples", type=int, default=5)
    p.add_argument("--graph", default="auto", help="KNNGraphTransformer's graph backend")
    p.add_argument("--workers", type=int, default=2, help="0: dask's threads, no cluster")
    p.add_argument("--worker-gb", type=float, default=8)
    p.add_argument("--budget", type=float, default=1500, help="seconds per consumer run")
    p.add_argument("--rounds", type=int, default=1, help="variants alternate between rounds")
    p.add_argument(
        "--warmup-rows", type=int, default=WARMUP_ROWS, help="untimed fit first; 0: none"
    )
    p.add_argument("--sample", type=int, default=3000, help="rows for trustworthiness")
    p.add_argument("--recall-queries", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0, help="data seed")
    p.add_argument("--out", default=None, help="JSON lines (default results/knn_consumers.jsonl)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.child and (args.k < 2 or args.spectral_k > args.k):
        p.error(f"--k must be >= 2 and >= --spectral-k, got {args.k} and {args.spectral_k}")
    return args


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main(argv=None):
    args = parse(argv)
    if args.child:
        return child(args.child)
    base = run_info(data=args.data, n=args.n, k=args.k, graph=args.graph, workers=args.workers)
    base.update(budget_s=args.budget, load_average_start=list(os.getloadavg()))
    X, y = load_data(args.data, args.n, args.seed)
    base["d"] = X.shape[1]
    G = None
    if "elmscale" in args.variants:
        G, graph_fields = build_graph(X, args, log)
        graph_fields["graph_recall"] = graph_recall(X, G, 10, args.recall_queries)
        log(f"graph recall@10: {graph_fields['graph_recall']:.3f}")
        base.update(graph_fields)
    spec = {
        "k": args.k,
        "spectral_k": args.spectral_k,
        "n_clusters": int(np.unique(y).size),
        "min_cluster_size": args.min_cluster_size or max(20, args.n // 100),
        "min_samples": args.min_samples,
        "sample": args.sample,
        "warmup_rows": args.warmup_rows,
        "seed": args.seed,
    }
    base.update({f"{key}_param": v for key, v in spec.items() if key != "seed"})
    with tempfile.TemporaryDirectory() as tmp:
        spec.update(X=f"{tmp}/X.npy", y=f"{tmp}/y.npy", graph=f"{tmp}/graph.npz")
        np.save(spec["X"], X)
        np.save(spec["y"], y)
        if G is not None:
            import scipy.sparse as sp

            sp.save_npz(spec["graph"], G, compressed=False)
        del X, G
        return run_all(args, spec, base, tmp)


def run_all(args, spec, base, tmp):
    """Every (round, consumer, variant) run, each a record appended to ``--out``."""
    out = Path(args.out) if args.out else results_file("knn_consumers.jsonl")
    rows = []
    for r in range(args.rounds):
        for consumer in args.consumers:
            for variant in args.variants if r % 2 == 0 else args.variants[::-1]:
                load = list(os.getloadavg())
                res = run_one({**spec, "consumer": consumer, "variant": variant}, tmp, args.budget)
                row = {**base, "round": r, "consumer": consumer, "variant": variant}
                row.update(load_average=load, load_average_end=list(os.getloadavg()), **res)
                if res["seconds"] is not None:
                    extra = base.get("graph_s", 0.0) if variant == "elmscale" else 0.0
                    row["end_to_end_s"] = res["seconds"] + extra
                    log(f"{consumer} {variant}: {res['status']} {row['end_to_end_s']:.1f} s")
                else:
                    log(f"{consumer} {variant}: {res['status']}")
                print(json.dumps(row), flush=True)
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                rows.append(row)
    return rows


if __name__ == "__main__":
    main()
