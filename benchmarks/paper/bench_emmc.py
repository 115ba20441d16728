"""EMMC benchmarks: the protocol of Tables 7-9 of Zhang, Xia, Liu and Zhang (2013), a timing
run for an idle machine and a scale run.

Protocol (paper): C from {2^-10, ..., 2^10}; L = N for the small sets, 300 for letter and
Ringnorm, 1000 for USPS; 20 runs; clustering accuracy (best one-to-one matching) and Rand
index; seconds per fit. The paper reports the best C; so does the "tuned" column here (an
oracle: it looks at the labels), next to a "default" column (``EMMC(n_clusters=k)`` with
every other parameter at its default: no labels used). Each run (seed) reduces the data once
(``EMMC.reduce``: one hidden layer, one initialisation, one Gram pass) and solves every C of
the grid on that reduction; the seconds per fit of the tuned column are the reduction plus
that C's solve, which is what a separate fit at that C costs (its results are identical).

    python -m benchmarks.paper.bench_emmc --quick              # 2 runs, 5 values of C, small sets
    python -m benchmarks.paper.bench_emmc --runs 20 --c-step 1 # the full protocol
    python -m benchmarks.paper.bench_emmc --tables none --levers --runs 5  # scaling/balance/L
    python -m benchmarks.paper.bench_emmc --tables none --starts --runs 6 --datasets ...  # starts
    python -m benchmarks.paper.bench_emmc --tables none --timing  # seconds per fit (idle machine)
    python -m benchmarks.paper.bench_emmc --tables none --scale   # only the scale run

Datasets come from ../shared/datasets (relative to the repository); a missing file is skipped.
Every timing records wall and CPU seconds (``time.process_time``) and the load average.
The scale run fits 1,000,000 points (a 10-d Gaussian mixture) with 2 and 10 clusters, with and
without caching H, each in a fresh process so that peak RSS is that fit's own.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks._common import DATASETS_DIR, REPO_ROOT, clustering_accuracy, results_file

DATASETS = DATASETS_DIR

# name: (loader spec, n_clusters, L ("N" = n_samples), balance, paper ACC %, paper seconds)
SETS = {
    "Ionosphere": ("ionosphere", None, "N", 0.15, 74.73, None),
    "Digits1-7": ("digits", (1, 7), "N", 0.03, 99.26, None),
    "Digits8-9": ("digits", (8, 9), "N", 0.03, 98.36, None),
    "LetterA-B": ("letter", (0, 1), 300, 0.03, 95.06, None),
    "Ringnorm": ("ringnorm", None, 300, 0.03, 98.40, 73.0),
    "Digits0689": ("digits", (0, 6, 8, 9), "N", 0.03, 96.25, None),
    "Digits1279": ("digits", (1, 2, 7, 9), "N", 0.03, 96.37, None),
    "LetterABCD": ("letter", (0, 1, 2, 3), 300, 0.03, 78.76, 43.3),
    "USPS": ("usps", None, 1000, 0.15, 96.20, 536.6),
}


def load(spec, classes):
    if spec == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
    else:
        path = DATASETS / f"{spec}.npz"
        if not path.exists():
            return None
        data = np.load(path)
        X, y = data["X"], data["y"]
    X = np.asarray(X, dtype=np.float64)
    if classes is not None:
        keep = np.isin(y, classes)
        X, y = X[keep], y[keep]
    return X, np.unique(y, return_inverse=True)[1]


accuracy = clustering_accuracy


def present_sets(names, *, verbose=True):
    """``(name, X, y, k, SETS[name])`` for each named set whose data is present."""
    for name in names:
        spec, classes = SETS[name][:2]
        data = load(spec, classes)
        if data is None:
            if verbose:
                print(f"{name}: dataset absent, skipped", flush=True)
            continue
        X, y = data
        yield name, X, y, len(np.unique(y)), SETS[name]


def _scores(y, model):
    from sklearn.metrics import rand_score

    return accuracy(y, model.labels_), rand_score(y, model.labels_)


def fit_scores(X, y, **params):
    """One separate fit: (acc, RI, wall s, CPU s, iterations)."""
    from elmscale import get

    EMMC = get("algorithm", "emmc")
    t, c = time.perf_counter(), time.process_time()
    model = EMMC(**params).fit(X)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return (*_scores(y, model), wall, cpu, model.n_iter_)


def sweep_scores(X, y, Cs, **params):
    """One run over the whole C grid, one reduction: {C: (acc, RI, wall s, CPU s,
    iterations)}, seconds = the reduction + that C's solve."""
    from sklearn.base import clone

    from elmscale import EMMC

    base = EMMC(**params)
    t, c = time.perf_counter(), time.process_time()
    reduction = base.reduce(X)
    shared_wall, shared_cpu = time.perf_counter() - t, time.process_time() - c
    out = {}
    try:
        for C in Cs:
            t, c = time.perf_counter(), time.process_time()
            model = clone(base).set_params(C=C).solve(reduction)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            out[C] = (*_scores(y, model), shared_wall + wall, shared_cpu + cpu, model.n_iter_)
    finally:
        reduction.release()
    return out


def summarise(rows):
    def sd(v):
        return statistics.stdev(v) if len(v) > 1 else 0.0

    acc, ri, sec, cpu, iters = (list(col) for col in zip(*rows, strict=True))
    return {
        "acc": statistics.mean(acc),
        "acc_sd": sd(acc),
        "ri": statistics.mean(ri),
        "ri_sd": sd(ri),
        "sec": statistics.median(sec),
        "cpu": statistics.median(cpu),
        "iters": statistics.mean(iters),
    }


def tuned_grid(X, y, Cs, runs, **params):
    per_run = [sweep_scores(X, y, Cs, random_state=r, **params) for r in range(runs)]
    return {C: summarise([run[C] for run in per_run]) for C in Cs}


def run_tables(args):
    import dask

    names = list(SETS) if args.datasets == "all" else args.datasets.split(",")
    exps = list(range(-10, 11, args.c_step))
    Cs = [2.0**e for e in exps]
    results = {}
    with dask.config.set(scheduler="sync"):  # one core: other jobs share the machine
        for name, X, y, k, (_, _, L, balance, paper_acc, paper_sec) in present_sets(names):
            L = X.shape[0] if L == "N" else L
            runs = args.runs_large if X.shape[0] > 5000 else args.runs
            t0, load0 = time.perf_counter(), os.getloadavg()[0]
            common = dict(
                n_clusters=k,
                n_hidden=L,
                balance=balance,
                activation=args.activation,
                rbf_fraction=args.rbf_fraction,
                scaling=args.scaling,
            )
            by_C = tuned_grid(X, y, Cs, runs, output=args.output, **common)
            grid = dict(zip(exps, (by_C[C] for C in Cs), strict=True))
            best = max(grid, key=lambda e: grid[e]["acc"])
            default = summarise(
                [fit_scores(X, y, n_clusters=k, random_state=r) for r in range(runs)]
            )
            entry = {
                "n": X.shape[0],
                "d": X.shape[1],
                "k": k,
                "L": L,
                "balance": balance,
                "runs": runs,
                "best_log2C": best,
                "tuned": grid[best],
                "default": default,
                "grid": grid,
                "paper_acc": paper_acc,
                "paper_sec": paper_sec,
                "rbf_fraction": args.rbf_fraction,
                "activation": args.activation,
            }
            if k > 2 and args.multi:
                multi = tuned_grid(X, y, Cs, runs, output="multi", **common)
                mbest = max(multi, key=lambda C: multi[C]["acc"])
                entry["tuned_multi"] = {**multi[mbest], "log2C": int(np.log2(mbest))}
            entry["loadavg"] = [load0, os.getloadavg()[0]]
            results[name] = entry
            print(
                json.dumps({name: {key: v for key, v in entry.items() if key != "grid"}}),
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    return results


def table_markdown(results):
    lines = [
        "| data set | n, d, k | L | l/n | runs | paper ACC % (s) | tuned: log2 C | ACC % | "
        "RI | s/fit (CPU s) | default: ACC % | RI | s/fit (CPU s) | multi-output, "
        "best C: ACC % (log2 C) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in results.items():
        t, d = e["tuned"], e["default"]
        paper = f"{e['paper_acc']:.2f}"
        if e["paper_sec"] is not None:
            paper += f" ({e['paper_sec']} s)"
        multi = e.get("tuned_multi")
        multi = (
            "-"
            if multi is None
            else (f"{100 * multi['acc']:.2f} +- {100 * multi['acc_sd']:.2f} ({multi['log2C']})")
        )
        lines.append(
            f"| {name} | {e['n']}, {e['d']}, {e['k']} | {e['L']} | {e['balance']} | "
            f"{e['runs']} | {paper} | {e['best_log2C']} | "
            f"{100 * t['acc']:.2f} +- {100 * t['acc_sd']:.2f} | {t['ri']:.3f} | "
            f"{t['sec']:.2f} ({t['cpu']:.2f}) | {100 * d['acc']:.2f} +- {100 * d['acc_sd']:.2f} | "
            f"{d['ri']:.3f} | {d['sec']:.2f} ({d['cpu']:.2f}) | {multi} |"
        )
    return "\n".join(lines)


# -- the evidence for the default hidden layer ------------------------------------------------
ABLATION = {
    "sigmoid only (rbf_fraction=0)": dict(rbf_fraction=0.0),
    "half sigmoid, half Gaussian on rows (rbf_fraction=0.5)": dict(rbf_fraction=0.5),
    "Gaussian on rows only (rbf_fraction=1)": dict(rbf_fraction=1.0),
    "rbf_fraction=0.5, rbf_width=0.5": dict(rbf_fraction=0.5, rbf_width=0.5),
    "default (rbf_fraction=0.25)": {},
}

# -- the label-free levers besides the hidden layer (session 4): input scaling, balance, L ----
LEVERS = {
    "default": {},
    "scaling=minmax": dict(scaling="minmax"),
    "scaling=None": dict(scaling=None),
    "balance=0.03": dict(balance=0.03),
    "balance=0.3": dict(balance=0.3),
    "balance=1": dict(balance=1.0),
    "n_hidden=100": dict(n_hidden=100),
    "n_hidden=400": dict(n_hidden=400),
    "n_hidden=1000": dict(n_hidden=1000),
}


def run_ablation(args, variants=ABLATION):
    """Mean accuracy of ``EMMC(n_clusters=k, **variant)`` over ``--runs`` seeds on every set
    for each of ``variants``: all other parameters at their defaults (no labels used anywhere)."""
    import dask

    names = list(SETS) if args.datasets == "all" else args.datasets.split(",")
    out = {}
    with dask.config.set(scheduler="sync"):
        for name, X, y, k, _ in present_sets(names, verbose=False):
            out[name] = {
                label: summarise(
                    [fit_scores(X, y, n_clusters=k, random_state=r, **v) for r in range(args.runs)]
                )
                for label, v in variants.items()
            }
            out[name]["loadavg"] = os.getloadavg()[0]
            print(
                name,
                json.dumps(
                    {
                        lab: round(100 * e["acc"], 2)
                        for lab, e in out[name].items()
                        if lab != "loadavg"
                    }
                ),
                flush=True,
            )
    labels = list(variants)
    lines = ["| data set | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for name, row in out.items():
        lines.append(
            f"| {name} | "
            + " | ".join(
                f"{100 * row[lab]['acc']:.2f} +- {100 * row[lab]['acc_sd']:.2f}" for lab in labels
            )
            + " |"
        )
    lines.append(
        "| mean | "
        + " | ".join(
            f"{100 * statistics.mean(row[lab]['acc'] for row in out.values()):.2f}"
            for lab in labels
        )
        + " |"
    )
    print("\n".join(lines))
    return out


# -- is the gap in the start or in the alternation? (many starts, one hidden layer) ---------
def elm_objective(H, labels, k, output, gram_factor):
    """EMMC's objective for fixed labels: the ridge ELM's training loss
    ``min_beta ||H beta - T||^2 + ||beta||^2 / C`` divided by N (dense: small sets only).
    ``gram_factor`` is ``factor_gram(H^T H, C)``, shared by every labelling of one H."""
    from scipy.linalg import cho_solve

    from elmscale.algorithms import emmc_targets

    T = emmc_targets(k, output)[labels]
    rhs = H.T @ T
    solved = cho_solve(gram_factor, rhs, check_finite=False)
    return float((T * T).sum() - (rhs * solved).sum()) / H.shape[0]


def run_starts(args):
    """Per seed: the default fit, then EMMC from 15 other starts on the same hidden layer
    (5 k-means++ runs on H, 5 on the standardised X, k-means on the top k-1, 2k, 10 and 20
    principal components of H). Reports the default's accuracy, the accuracy of the run with
    the lowest objective (label-free choice), the best accuracy of all runs (an oracle), the
    k-means-on-X starts before and after EMMC, and the default's iterations."""
    import dask
    from sklearn.cluster import KMeans
    from sklearn.preprocessing import StandardScaler

    from elmscale import EMMC
    from elmscale.algorithms import factor_gram

    names = list(SETS) if args.datasets == "all" else args.datasets.split(",")
    out = {}
    with dask.config.set(scheduler="sync"):
        for name, X, y, k, _ in present_sets(names, verbose=False):
            rows = []
            Xs = StandardScaler().fit_transform(X)
            for seed in range(args.runs):
                base = EMMC(n_clusters=k, random_state=seed).fit(X)
                H = base.hidden_layer_(X)
                output = "multi" if base.targets_.shape[1] > 1 else "single"
                # every run below uses this H and C: one Gram matrix and factor per seed
                gram = factor_gram(H.T @ H, base.C)
                starts = {}
                for j in range(5):
                    km = KMeans(k, n_init=1, random_state=1000 * seed + j)
                    starts[f"kmH{j}"] = km.fit_predict(H)
                    starts[f"kmX{j}"] = km.fit_predict(Xs)
                Hc = H - H.mean(axis=0)
                V = np.linalg.eigh(Hc.T @ Hc)[1][:, ::-1]
                for p in sorted({k - 1, 2 * k, 10, 20}):
                    starts[f"pc{p}"] = KMeans(k, n_init=10, random_state=seed).fit_predict(
                        Hc @ V[:, :p]
                    )
                runs = {
                    "default": (
                        elm_objective(H, base.labels_, k, output, gram),
                        accuracy(y, base.labels_),
                        base.n_iter_,
                        None,
                    )
                }
                for label, start in starts.items():
                    m = EMMC(n_clusters=k, random_state=seed, init=start.astype(np.int64)).fit(X)
                    runs[label] = (
                        elm_objective(H, m.labels_, k, output, gram),
                        accuracy(y, m.labels_),
                        m.n_iter_,
                        accuracy(y, start),
                    )
                rows.append(runs)
            kmx = [v for r in rows for lab, v in r.items() if lab.startswith("kmX")]
            out[name] = {
                "default": statistics.mean(r["default"][1] for r in rows),
                "lowest_objective": statistics.mean(
                    min(r.values(), key=lambda v: v[0])[1] for r in rows
                ),
                "oracle": statistics.mean(max(v[1] for v in r.values()) for r in rows),
                "kmX_start": statistics.mean(v[3] for v in kmx),
                "kmX_emmc": statistics.mean(v[1] for v in kmx),
                "default_iterations": statistics.mean(r["default"][2] for r in rows),
                "runs": rows,
                "loadavg": os.getloadavg()[0],
            }
            print(
                name,
                json.dumps({a: round(b, 4) for a, b in out[name].items() if a != "runs"}),
                flush=True,
            )
    cols = ("default", "lowest_objective", "oracle", "kmX_start", "kmX_emmc")
    print("| data set | " + " | ".join(cols) + " | default iterations |")
    for name, row in out.items():
        print(
            f"| {name} | "
            + " | ".join(f"{100 * row[c]:.2f}" for c in cols)
            + f" | {row['default_iterations']:.1f} |"
        )
    return out


# -- seconds per fit, for an idle machine ---------------------------------------------------
TIMED = ("Ringnorm", "LetterABCD", "USPS")


def run_timing(args):
    """Seconds per separate fit, median of ``--timing-repeats``, on Ringnorm, LetterABCD and
    USPS: the defaults (``EMMC(n_clusters=k)``) and the paper's L with C = 1. Threaded dask
    scheduler with 2 workers, BLAS pinned to 1 thread per worker."""
    import dask
    from threadpoolctl import threadpool_limits

    rows = []
    with threadpool_limits(1), dask.config.set(scheduler="threads", num_workers=2):
        for name, X, y, k, (_, _, L, balance, _paper_acc, paper_sec) in present_sets(TIMED):
            for label, params in (
                ("defaults", {}),
                ("paper L, C=1", dict(n_hidden=L, balance=balance)),
            ):
                fits = [
                    fit_scores(X, y, n_clusters=k, random_state=r, **params)
                    for r in range(args.timing_repeats)
                ]
                row = {
                    "set": name,
                    "setting": label,
                    "n_hidden": params.get("n_hidden", 200),
                    "wall_s": statistics.median(f[2] for f in fits),
                    "cpu_s": statistics.median(f[3] for f in fits),
                    "acc": statistics.mean(f[0] for f in fits),
                    "paper_s": paper_sec,
                    "loadavg": os.getloadavg(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                }
                row["speedup"] = paper_sec / row["wall_s"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    lines = [
        f"| data set | setting | L | s/fit (median of {args.timing_repeats}) | CPU s | "
        "paper s | speed-up | ACC % | load avg (1 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['setting']} | {r['n_hidden']} | {r['wall_s']:.2f} | "
            f"{r['cpu_s']:.2f} | {r['paper_s']} | {r['speedup']:.0f}x | "
            f"{100 * r['acc']:.2f} | {r['loadavg'][0]:.2f} |"
        )
    print("\n".join(lines))
    with open(args.timing_out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


# -- the scale run ---------------------------------------------------------------------------
def scale_child(n, k, cache, n_hidden, n_init, max_iter, seed=0):
    """One fit in this (fresh) process; prints one JSON line."""
    import dask
    import dask.array as da
    from threadpoolctl import threadpool_limits

    from elmscale import config_context, get

    EMMC = get("algorithm", "emmc")

    rng = np.random.RandomState(seed)
    d = 10
    centres = rng.randn(k, d) * 2.0  # overlapping clusters: EMMC has to iterate
    y = rng.randint(k, size=n)
    X = (centres[y] + rng.randn(n, d)).astype(np.float32)
    Xd = da.from_array(X, chunks=(100_000, d))
    with (
        threadpool_limits(1),
        dask.config.set(scheduler="threads", num_workers=2),
        config_context(compute_dtype="float32"),
    ):
        t = time.perf_counter()
        model = EMMC(
            k,
            n_hidden=n_hidden,
            n_init=n_init,
            max_iter=max_iter,
            cache=cache,
            output="multi" if k > 2 else "single",
            random_state=seed,
        ).fit(Xd)
        labels = model.labels_.compute()
        total = time.perf_counter() - t
    iters = [h["seconds"] for h in model.history_]
    print(
        json.dumps(
            {
                "n": n,
                "k": k,
                "cache": cache,
                "n_hidden": n_hidden,
                "n_init": n_init,
                "total_s": total,
                "n_iter": model.n_iter_,
                "converged": bool(model.converged_),
                "iter_s_median": statistics.median(iters),
                "iter_s": iters,
                "init_and_gram_s": total - sum(iters),
                "acc": accuracy(y, labels),
                "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                "sizes": model.cluster_sizes_.tolist(),
            }
        ),
        flush=True,
    )


def run_scale(args):
    out = []
    for k in [int(v) for v in args.scale_clusters.split(",")]:
        for cache in (True, False):
            cmd = [
                sys.executable,
                "-m",
                __spec__.name,
                "--scale-child",
                str(args.scale_n),
                str(k),
                str(int(cache)),
                str(args.scale_hidden),
                str(args.scale_n_init),
                str(args.scale_max_iter),
            ]
            res = subprocess.run(
                cmd, capture_output=True, text=True, env=os.environ.copy(), cwd=REPO_ROOT
            )
            line = [v for v in res.stdout.splitlines() if v.startswith("{")]
            if res.returncode or not line:
                print(res.stderr[-2000:], flush=True)
                continue
            out.append(json.loads(line[-1]))
            print(line[-1], flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 runs, C in {2^-10, 2^-5, ..., 2^10}, the small sets only",
    )
    parser.add_argument("--runs", type=int, default=20, help="runs per setting (small sets)")
    parser.add_argument(
        "--runs-large",
        type=int,
        default=None,
        help="runs per setting for sets above 5000 points (default: --runs)",
    )
    parser.add_argument("--c-step", type=int, default=1, help="step of the exponent of C")
    parser.add_argument("--datasets", default="all", help=f"comma list of {list(SETS)}")
    parser.add_argument("--tables", default="run", choices=["run", "none"])
    parser.add_argument("--activation", default="sigmoid")
    parser.add_argument(
        "--rbf-fraction",
        type=float,
        default=0.25,
        help="share of Gaussian nodes on data rows (EMMC's default 0.25)",
    )
    parser.add_argument("--scaling", default="standard")
    parser.add_argument(
        "--output", default="single", help="output of the tuned column (the paper's tables: single)"
    )
    parser.add_argument(
        "--multi",
        action="store_true",
        help="add a column: the tuned setting with output='multi' (k > 2)",
    )
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="defaults with sigmoid / mixed / Gaussian hidden layers, all sets",
    )
    parser.add_argument(
        "--levers",
        action="store_true",
        help="defaults vs input scaling / balance / n_hidden variants, all sets",
    )
    parser.add_argument(
        "--starts",
        action="store_true",
        help="EMMC from 16 starts per seed: start vs alternation (small sets)",
    )
    parser.add_argument(
        "--timing",
        action="store_true",
        help="seconds per fit on Ringnorm, LetterABCD, USPS (idle machine)",
    )
    parser.add_argument("--timing-repeats", type=int, default=3)
    parser.add_argument("--timing-out", default=str(results_file("emmc_timing.jsonl")))
    parser.add_argument("--scale", action="store_true", help="run the 1M-point scale run")
    parser.add_argument("--scale-n", type=int, default=1_000_000)
    parser.add_argument("--scale-clusters", default="2,10")
    parser.add_argument("--scale-hidden", type=int, default=200)
    parser.add_argument("--scale-n-init", type=int, default=3)
    parser.add_argument("--scale-max-iter", type=int, default=50)
    parser.add_argument("--json", default=None, help="write all results to this file")
    parser.add_argument("--scale-child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scale_child:
        n, k, cache, L, n_init, max_iter = (int(v) for v in args.scale_child)
        scale_child(n, k, bool(cache), L, n_init, max_iter)
        return
    if args.quick:
        args.runs, args.c_step = 2, 5
        if args.datasets == "all":
            args.datasets = "Ionosphere,Digits1-7,Digits8-9,Digits0689,Digits1279"
    if args.runs_large is None:
        args.runs_large = args.runs
    warnings.filterwarnings("ignore", module="elmscale.registry")
    from threadpoolctl import threadpool_info, threadpool_limits

    results = {
        "blas": [
            {k: i.get(k) for k in ("internal_api", "architecture", "num_threads")}
            for i in threadpool_info()
        ],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if args.tables == "run":
        with threadpool_limits(1):
            results["tables"] = run_tables(args)
        print(table_markdown(results["tables"]))
    if args.ablation:
        with threadpool_limits(1):
            results["ablation"] = run_ablation(args)
    if args.levers:
        with threadpool_limits(1):
            results["levers"] = run_ablation(args, LEVERS)
    if args.starts:
        with threadpool_limits(1):
            results["starts"] = run_starts(args)
    if args.timing:
        results["timing"] = run_timing(args)
    if args.scale:
        results["scale"] = run_scale(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
