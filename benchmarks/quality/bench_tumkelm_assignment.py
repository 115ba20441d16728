"""TUMK-ELM's stage-1 assignments compared, and whether the paper's loss can choose between them.

    python -m benchmarks.quality.bench_tumkelm_assignment --seeds 3
    python -m benchmarks.quality.bench_tumkelm_assignment --datasets iris,breast_cancer --seeds 1
    python -m benchmarks.quality.bench_tumkelm_assignment --kernels linear \
        --datasets ionosphere,ecoli --seeds 1 --out /tmp/linear.jsonl

For every set of bench_quality.py (``--datasets``, default: the 17 of its TUMK-ELM table) and
seed, ``TUMKELM(n_clusters=c, random_state=seed, assignment=a)`` is fitted with its defaults
for each assignment ``a`` in argmax, kmeans, kmeans-unit (``--kernels``: other base kernels
than the paper's 15), and records ACC, NMI and the loss of eq. 10 relative to the trace of the
combined kernel it was measured under,
``loss_ / Tr(K^)`` (the fraction of the kernel's energy the clusters leave unexplained: the
fits end with different kernel weights, so their raw losses are on different scales).

The summary scores a label-free rule: per set and seed, keep the assignment with the lowest
relative loss, among argmax and kmeans-unit and among all three, against each assignment alone
(mean ACC over seeds, wins and losses against the default, kmeans-unit).
"""

import argparse
import json
import sys
import time
import warnings
from collections import defaultdict

import numpy as np

from benchmarks._common import accuracy_table, results_file
from benchmarks.quality.bench_quality import load, score

ASSIGNMENTS = ("argmax", "kmeans", "kmeans-unit")
DEFAULT_SETS = (
    "iris,wine,breast_cancer,digits,coil20,uspst,usps,orl,yale,yaleb,segment,ecoli,diabetes,"
    "g50c,ionosphere,ringnorm,frogs"
)


def relative_loss(model, X):
    """``loss_ / Tr(K^)`` of a fitted model: the combined kernel's diagonal on scaled X."""
    from elmscale.hidden import apply_scaling

    Xs = np.asarray(apply_scaling(X, *model.scaling_), dtype=np.float64)
    pairs = zip(model.kernel_weights_, model.kernels_, strict=True)
    trace = sum(w * kernel.diagonal(Xs).sum() for w, kernel in pairs)
    return float(model.loss_) / float(trace)


def run(names, seeds, kernels, out, log):
    from elmscale import TUMKELM

    for name in names:
        X, y = load(name)
        c = len(np.unique(y))
        for seed in range(seeds):
            for a in ASSIGNMENTS:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = TUMKELM(
                        n_clusters=c, random_state=seed, assignment=a, kernels=kernels
                    ).fit(X)
                acc, nmi = score(y, model.labels_)
                record = {
                    "dataset": name,
                    "seed": seed,
                    "assignment": a,
                    "kernels": kernels,
                    "acc": acc,
                    "nmi": nmi,
                    "relative_loss": relative_loss(model, X),
                    "mode": model.mode_,
                    "seconds": time.perf_counter() - t0,
                }
                out.write(json.dumps(record) + "\n")
                out.flush()
                log(json.dumps(record))


def summary(records, log):
    """Mean ACC per set of each assignment and of the lowest-relative-loss rules."""
    by = defaultdict(dict)
    for r in records:
        by[(r["dataset"], r["seed"])][r["assignment"]] = r
    rules = {
        **{a: (a,) for a in ASSIGNMENTS},
        "lowest loss of argmax, kmeans-unit": ("argmax", "kmeans-unit"),
        "lowest loss of the three": ASSIGNMENTS,
    }
    per_set = defaultdict(lambda: defaultdict(list))
    for (name, _), fits in by.items():
        if set(fits) != set(ASSIGNMENTS):
            continue
        for rule, candidates in rules.items():
            pick = min(candidates, key=lambda a: fits[a]["relative_loss"])
            per_set[name][rule].append(fits[pick]["acc"])
    for line in accuracy_table(per_set, list(rules), "kmeans-unit"):
        log(line)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", default=DEFAULT_SETS)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument(
        "--kernels",
        default="paper",
        help='TUMK-ELM\'s base kernels: "paper" or registered names, comma separated',
    )
    p.add_argument("--out", default=str(results_file("tumkelm_assignment.jsonl")))
    p.add_argument("--summary-only", action="store_true", help="summarise --out, fit nothing")
    args = p.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    if not args.summary_only:
        with open(args.out, "a") as out:
            kernels = "paper" if args.kernels == "paper" else args.kernels.split(",")
            run(args.datasets.split(","), args.seeds, kernels, out, log)
    with open(args.out) as f:
        summary([json.loads(line) for line in f], log)


if __name__ == "__main__":
    sys.exit(main())
