"""ELM-JEC benchmarks: the Table 4 protocol, one-Gram-pass sweeps against fits from scratch,
and a scale run on a synthetic Gaussian mixture.

    python benchmarks/bench_elmjec.py table   [--grid full|reduced] [--runs 10] [--datasets ...]
    python benchmarks/bench_elmjec.py sweep   [--dataset segment]
    python benchmarks/bench_elmjec.py scale   [--n 1000000] [--d 50] [--n-hidden 1000]
    python benchmarks/bench_elmjec.py report  (markdown from the JSON lines)

Datasets are read from ../shared/datasets relative to the repository (iris comes from
scikit-learn); a missing file is skipped with a message. Every table run appends its numbers as
JSON lines to --out (default: benchmarks/results/elmjec_raw.jsonl).
"""

import argparse
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import clustering_accuracy

HERE = Path(__file__).resolve().parent
DATASETS = HERE.parent.parent / "shared" / "datasets"
PAPER = {"iris": 97.20, "ecoli": 62.23, "diabetes": 74.26, "segment": 68.95, "coil20": 80.79,
         "orl": 58.38}
POW = [2.0**p for p in range(-4, 5)]
N_O = [2, 4, 8, 16, 32]


def load(name):
    if name == "iris":
        from sklearn.datasets import load_iris

        X, y = load_iris(return_X_y=True)
        return X.astype(np.float64), y
    path = DATASETS / f"{name}.npz"
    if not path.exists():
        print(f"skip {name}: {path} not found", file=sys.stderr)
        return None
    d = np.load(path)
    return d["X"].astype(np.float64), d["y"]


def acc(y, labels):
    """Clustering accuracy (%) under the best one-to-one matching of clusters to classes."""
    return 100.0 * clustering_accuracy(y, labels)


def minmax(X):
    lo, hi = X.min(0), X.max(0)
    scale = np.where(hi > lo, (hi - lo) / 2, 1.0)
    return (X - (hi + lo) / 2) / scale


def n_hidden_for(name):
    return 1000 if name == "iris" else 2000


def blas_info():
    try:
        from threadpoolctl import threadpool_info

        return [(i.get("internal_api"), i.get("architecture"), i.get("num_threads"))
                for i in threadpool_info()]
    except ImportError:
        return "threadpoolctl not installed"


def grid_for(kind, c):
    if kind == "full":
        return {"lam": POW, "gamma": POW, "n_components": N_O}
    if kind == "tiny":
        return {"lam": [0.25, 1.0, 4.0], "gamma": [0.0625, 1.0],
                "n_components": [min(max(c, 2), 32)]}
    # reduced: every other power of two, and n_o in {2, c, 32-capped}
    return {"lam": [2.0**p for p in (-4, -2, 0, 2, 4)], "gamma": [2.0**p for p in (-4, -2, 0, 2, 4)],
            "n_components": sorted({2, min(max(c, 2), 32), 8})}


def elmjec_base(name, X, c, seed, **kw):
    from elmscale.algorithms._elmjec import ELMJEC

    params = dict(n_clusters=c, n_hidden=n_hidden_for(name), graph="exact", n_neighbors=5,
                  weights="binary", scaling="minmax", random_state=seed)
    params.update(kw)
    return ELMJEC(**params)


def run_table(args):
    import dask

    from elmscale import USELM
    from elmscale.algorithms._elmjec import elmjec_sweep
    from sklearn.cluster import KMeans

    out = open(args.out, "a")
    for name in args.datasets:
        data = load(name)
        if data is None:
            continue
        X, y = data
        c = len(np.unique(y))
        Xs = minmax(X)
        row = {"dataset": name, "n": X.shape[0], "d": X.shape[1], "c": c,
               "n_hidden": n_hidden_for(name), "grid": args.grid, "runs": args.runs,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        with dask.config.set(scheduler="sync"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # 1. ELM-JEC: select (lam, gamma, n_o) on the grid with seed 0 (one Gram pass)
            t0 = time.perf_counter()
            grid = grid_for(args.grid, c)
            fits = elmjec_sweep(X, grid, elmjec_base(name, X, c, 0))
            scores = [(acc(y, m.labels_), s) for s, m in fits if not isinstance(m, Exception)]
            n_failed = sum(isinstance(m, Exception) for _, m in fits)
            best_acc0, best = max(scores, key=lambda t: t[0])
            row.update(select_seconds=time.perf_counter() - t0, n_settings=len(fits),
                       n_no_positive=n_failed, best_setting=best, select_acc_seed0=best_acc0)
            print(f"[{name}] grid of {len(fits)} in {row['select_seconds']:.1f}s; best {best} "
                  f"acc {best_acc0:.2f}", flush=True)
            # 2. ELM-JEC at the selected setting: runs with seeds 1..runs (fresh layers)
            t0 = time.perf_counter()
            accs, iters = [], []
            for seed in range(1, args.runs + 1):
                m = elmjec_base(name, X, c, seed, **best).fit(X)
                accs.append(acc(y, m.labels_))
                iters.append(m.n_iter_)
            row.update(elmjec_acc=accs, elmjec_iters=iters,
                       elmjec_seconds_per_fit=(time.perf_counter() - t0) / args.runs)
            # 3. ELM-JEC with default lam, gamma, n_components
            accs = [acc(y, elmjec_base(name, X, c, seed).fit(X).labels_)
                    for seed in range(1, args.runs + 1)]
            row.update(default_acc=accs)
            # 4. k-means on the min-max scaled features
            row.update(kmeans_acc=[acc(y, KMeans(c, n_init=10, random_state=seed).fit(Xs).labels_)
                                   for seed in range(1, args.runs + 1)])
            # 5. US-ELM: select lam (2^-4..2^4) and n_o (n_o grid of the paper) with seed 0,
            #    then runs at the selection
            t0 = time.perf_counter()
            us_scores = []
            solver = "dual" if X.shape[0] < n_hidden_for(name) / 2 else "primal"
            for n_o in ([c] if args.grid != "full" else N_O):
                for lam in (POW if args.grid != "tiny" else [0.25, 1.0, 4.0]):
                    m = USELM(c, n_components=n_o, n_hidden=n_hidden_for(name), lam=lam,
                              graph="exact", n_neighbors=5, scaling="minmax", solver=solver,
                              random_state=0).fit(X)
                    us_scores.append((acc(y, m.labels_), {"lam": lam, "n_components": n_o}))
            us0, us_best = max(us_scores, key=lambda t: t[0])
            row.update(uselm_setting=us_best, uselm_select_seconds=time.perf_counter() - t0)
            row.update(uselm_acc=[acc(y, USELM(c, n_hidden=n_hidden_for(name), graph="exact",
                                                 n_neighbors=5, scaling="minmax", solver=solver,
                                                 random_state=seed, **us_best).fit(X).labels_)
                                  for seed in range(1, args.runs + 1)])
        for key in ("elmjec_acc", "default_acc", "kmeans_acc", "uselm_acc"):
            v = np.array(row[key])
            print(f"[{name}] {key}: {v.mean():.2f} +- {v.std():.2f}", flush=True)
        out.write(json.dumps(row) + "\n")
        out.flush()


def run_sweep(args):
    """Wall time of one grid through elmjec_sweep (one Gram pass) against fitting every
    setting from scratch."""
    import dask

    from elmscale.algorithms._elmjec import elmjec_sweep

    X, y = load(args.dataset)
    c = len(np.unique(y))
    grid = {"lam": [0.25, 1.0, 4.0], "gamma": [0.0625, 0.25, 1.0], "n_components": [2, 8]}
    base = elmjec_base(args.dataset, X, c, 0)
    with dask.config.set(scheduler="sync"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        fits = elmjec_sweep(X, grid, base)
        t_sweep = time.perf_counter() - t0
        t0 = time.perf_counter()
        same = 0
        for setting, fitted in fits:
            try:
                alone = elmjec_base(args.dataset, X, c, 0, **setting).fit(X)
            except ValueError:
                same += isinstance(fitted, Exception)
                continue
            same += bool(np.array_equal(alone.labels_, fitted.labels_))
        t_scratch = time.perf_counter() - t0
    res = {"dataset": args.dataset, "n_settings": len(fits), "sweep_seconds": t_sweep,
           "scratch_seconds": t_scratch, "identical_labels": same,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(res), flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps({"sweep": res}) + "\n")


def run_scale(args):
    """Synthetic Gaussian mixture, float32, threaded scheduler in this one process."""
    import dask
    import dask.array as da

    import elmscale
    from elmscale.algorithms._elmjec import ELMJEC

    rng = np.random.default_rng(0)
    k = args.clusters
    centres = rng.normal(scale=args.spread, size=(k, args.d)).astype(np.float32)
    chunk = args.chunk
    y = rng.integers(0, k, size=args.n)

    def block(i):
        r = np.random.default_rng([1, i])
        lab = y[i * chunk:(i + 1) * chunk]
        return (centres[lab] + r.normal(size=(len(lab), args.d)).astype(np.float32))

    nb = -(-args.n // chunk)
    X = da.concatenate([da.from_delayed(dask.delayed(block)(i),
                                        shape=(min(chunk, args.n - i * chunk), args.d),
                                        dtype=np.float32) for i in range(nb)]).persist()
    timings = []
    import logging

    class Clock(logging.Handler):
        def emit(self, record):
            timings.append((time.perf_counter(), record.getMessage()))

    log = logging.getLogger("elmscale")
    log.setLevel(logging.INFO)
    log.addHandler(Clock())
    with elmscale.config_context(compute_dtype="float32"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ELMJEC(k, n_components=args.components, n_hidden=args.n_hidden, lam=0.5, gamma=0.1,
                   graph=args.graph, n_neighbors=5, n_restarts=args.restarts,
                   max_iter=args.max_iter, cache=args.cache, random_state=0)
        t0 = time.perf_counter()
        m.fit(X)
        labels = m.labels_.compute()
        total = time.perf_counter() - t0
    it_times = [t for t, msg in timings if msg.startswith("ELM-JEC iteration")]
    start = [t for t, msg in timings if msg.startswith("ELM-JEC: numerical rank")]
    per_iter = np.diff(np.r_[start[-1:] if start else [t0], it_times]).tolist()
    res = {"n": args.n, "d": args.d, "clusters": k, "spread": args.spread, "n_hidden": args.n_hidden,
           "graph": args.graph, "cache": args.cache, "restarts": args.restarts,
           "max_iter": args.max_iter, "n_iter": m.n_iter_, "total_seconds": total,
           "seconds_to_fixed_grams": (start[-1] - t0) if start else None,
           "seconds_per_iteration": per_iter, "acc": acc(y, labels),
           "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
           "history": {k_: [str(v) for v in vals] for k_, vals in m.history_.items()},
           "blas": blas_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(res), flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps({"scale": res}) + "\n")


def run_report(args):
    """Markdown tables from the JSON lines written by the other modes."""
    rows, sweeps, scales = [], [], []
    for line in open(args.out):
        rec = json.loads(line)
        if "sweep" in rec:
            sweeps.append(rec["sweep"])
        elif "scale" in rec:
            scales.append(rec["scale"])
        else:
            rows.append(rec)
    ms = lambda v: f"{np.mean(v):.2f} +- {np.std(v):.2f}"  # noqa: E731
    print("| dataset | n x d, c | paper ELM-JEC | ELM-JEC (selected) | selected (lam, gamma, n_o) "
          "| ELM-JEC defaults | k-means | US-ELM (selected lam, n_o = c) | runs | grid time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = r["best_setting"]
        print(f"| {r['dataset']} | {r['n']} x {r['d']}, {r['c']} | {PAPER[r['dataset']]:.2f} | "
              f"{ms(r['elmjec_acc'])} | ({b['lam']:g}, {b['gamma']:g}, {b['n_components']}) | "
              f"{ms(r['default_acc'])} | {ms(r['kmeans_acc'])} | {ms(r['uselm_acc'])} "
              f"(lam={r['uselm_setting']['lam']:g}) | {r['runs']} | {r['n_settings']} settings, "
              f"{r['select_seconds']:.0f} s |")
    for s_ in sweeps:
        print(f"\nsweep {s_['dataset']}: {s_['n_settings']} settings, one Gram pass "
              f"{s_['sweep_seconds']:.1f} s, from scratch {s_['scratch_seconds']:.1f} s "
              f"({s_['scratch_seconds'] / s_['sweep_seconds']:.1f}x), identical labels "
              f"{s_['identical_labels']}/{s_['n_settings']}")
    for s_ in scales:
        print(f"\nscale: {json.dumps(s_)}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("what", choices=["table", "sweep", "scale", "report"])
    p.add_argument("--out", default=str(HERE / "results" / "elmjec_raw.jsonl"))
    p.add_argument("--datasets", nargs="+",
                   default=["iris", "ecoli", "diabetes", "segment", "coil20", "orl"])
    p.add_argument("--grid", choices=["full", "reduced", "tiny"], default="reduced")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--dataset", default="segment")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--clusters", type=int, default=10)
    p.add_argument("--components", type=int, default=10)
    p.add_argument("--n-hidden", type=int, default=1000)
    p.add_argument("--chunk", type=int, default=50_000)
    p.add_argument("--spread", type=float, default=0.35,
                   help="std of the mixture centres (unit-variance clusters)")
    p.add_argument("--graph", default="pynndescent")
    p.add_argument("--restarts", type=int, default=20)
    p.add_argument("--max-iter", type=int, default=20)
    p.add_argument("--cache", default="auto", type=lambda s: {"true": True, "false": False}.get(
        s.lower(), s))
    p.add_argument("--blas-threads", type=int, default=1,
                   help="BLAS threads (1: the machine is shared; 2 threads oversubscribe)")
    args = p.parse_args()
    from threadpoolctl import threadpool_limits

    threadpool_limits(args.blas_threads)
    os.makedirs(Path(args.out).parent, exist_ok=True)
    print("BLAS:", blas_info(), flush=True)
    {"table": run_table, "sweep": run_sweep, "scale": run_scale,
     "report": run_report}[args.what](args)


if __name__ == "__main__":
    main()
