"""EMMC's start against KMeans: which scaling of X, and whether EMMC's own objective can choose.

    python -m benchmarks.quality.bench_emmc_start --seeds 3
    python -m benchmarks.quality.bench_emmc_start --datasets frogs,coil20 --seeds 3 \
        --set n_init=50 --out /tmp/n_init50.jsonl

For every set (``--datasets``, default: the shared sets of at least 1,000 rows but MNIST) and
seed, ``EMMC(n_clusters=c, random_state=seed, scaling=s)`` is fitted with its defaults (and
``--set`` overrides) for s in standard and minmax, and ``KMeans(n_init=10)`` on the
standardised X as bench_quality.py runs it. Each fit records ACC, NMI, the objective of the
returned labels (``objective_``: the ELM's ridge fit to their target codes per point) and that
of its k-means start (``objectives_[0]``).

The summary scores, per set (mean over seeds), each scaling alone and the label-free rule
"keep the fit of the lower objective", against KMeans: the sets where a column is more than
one point below KMeans, and leave-one-dataset-out: for each set, the column with the best
mean ACC over the others, scored on it.
"""

import argparse
import json
import sys
import time
import warnings
from collections import defaultdict

import numpy as np

from benchmarks._common import accuracy_table, results_file
from benchmarks.quality.bench_quality import load, parse_sets, run_peer, score

SCALINGS = ("standard", "minmax")
DEFAULT_SETS = "segment,uspst,coil20,yaleb,frogs,ringnorm,digits,usps,letter,shuttle"


def run(names, seeds, params, out, log):
    from elmscale import EMMC

    for name in names:
        X, y = load(name)
        c = len(np.unique(y))
        for seed in range(seeds):
            base = {"dataset": name, "seed": seed, "params": params}
            acc, nmi = score(y, run_peer("KMeans", X, c, seed))
            records = [dict(base, method="KMeans", acc=acc, nmi=nmi)]
            for s in SCALINGS:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = EMMC(c, random_state=seed, scaling=s, **params).fit(X)
                acc, nmi = score(y, model.labels_)
                records.append(
                    dict(
                        base,
                        method=s,
                        acc=acc,
                        nmi=nmi,
                        objective=float(model.objective_),
                        start_objective=float(model.objectives_[0]),
                        seconds=time.perf_counter() - t0,
                    )
                )
            for r in records:
                out.write(json.dumps(r) + "\n")
                log(json.dumps(r))
            out.flush()


def per_set_scores(records):
    """``{set: {column: [ACC per seed]}}`` for each scaling, the lower-objective rule and
    KMeans."""
    fits = defaultdict(dict)
    for r in records:
        fits[(r["dataset"], r["seed"])][r["method"]] = r
    per_set = defaultdict(lambda: defaultdict(list))
    for (name, _), by in fits.items():
        if not all(m in by for m in (*SCALINGS, "KMeans")):
            continue
        for m in (*SCALINGS, "KMeans"):
            per_set[name][m].append(by[m]["acc"])
        pick = min(SCALINGS, key=lambda s: by[s]["objective"])
        per_set[name]["lower objective"].append(by[pick]["acc"])
    return per_set


def leave_one_out(per_set, columns):
    """Per left-out set: the column of best mean ACC over the other sets, and its ACC there."""
    names = list(per_set)
    M = np.array([[np.mean(per_set[n][c]) for c in columns] for n in names])
    rows = []
    for i, n in enumerate(names):
        j = int(np.argmax(np.delete(M, i, axis=0).mean(axis=0)))
        rows.append((n, columns[j], M[i, j]))
    return rows


def summary(records, log):
    per_set = per_set_scores(records)
    columns = [*SCALINGS, "lower objective"]
    for line in accuracy_table(per_set, [*columns, "KMeans"], "KMeans"):
        log(line)
    for c in columns:
        below = [n for n, by in per_set.items() if np.mean(by[c]) < np.mean(by["KMeans"]) - 0.01]
        spread = max(np.ptp(by[c]) for by in per_set.values())
        log(
            f"{c}: more than 1 point below KMeans on {below or 'none'}; largest seed spread "
            f"{100 * spread:.1f}"
        )
    rows = leave_one_out(per_set, columns)
    log("leave one set out: " + ", ".join(f"{n} -> {c} {100 * a:.1f}" for n, c, a in rows))
    log(f"left-out mean ACC {100 * np.mean([a for *_, a in rows]):.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", default=DEFAULT_SETS)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE")
    p.add_argument("--out", default=str(results_file("emmc_start.jsonl")))
    p.add_argument("--summary-only", action="store_true", help="summarise --out, fit nothing")
    args = p.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    if not args.summary_only:
        params = parse_sets([f"EMMC.{kv}" for kv in args.set]).get("EMMC", {})
        with open(args.out, "a") as out:
            run(args.datasets.split(","), args.seeds, params, out, log)
    with open(args.out) as f:
        summary([json.loads(line) for line in f], log)


if __name__ == "__main__":
    sys.exit(main())
