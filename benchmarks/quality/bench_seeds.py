"""How much USELM's defaults depend on the seed: every shared set, seeds 0..S-1 and unseeded fits,
each set's mean, worst and spread of ACC (Hungarian matching) and NMI.

    python -m benchmarks.quality.bench_seeds --seeds 10 --unseeded 3 --csv seeds.csv
    python -m benchmarks.quality.bench_seeds --datasets mnist --seeds 10 --unseeded 3 --predict
    python -m benchmarks.quality.bench_seeds --datasets mnist --holdout --seeds 10

One fit per (set, seed): ``USELM(n_clusters=c, random_state=seed)`` with its defaults, or with
``--set param=value`` overrides (give the variant a ``--tag``). ``--predict`` also records how
often ``predict`` on the training rows agrees with ``labels_``; ``--holdout`` fits on the rows
the set marks as its training rows (``is_test`` false: mnist, usps, shuttle) and records the
ACC of ``labels_`` on them and of ``predict`` on the test rows. Each fit appends one row to the
CSV file (``benchmarks/results/quality_seeds.csv`` by default) and fits already there (same set,
tag, mode and seed) are skipped, so an interrupted run resumes; the summary at the end reads
the whole file. Sets: bench_quality's ``load`` (float64; MNIST pixels / 255 in float32, as the
MNIST headline is measured). ``--datasets large`` are the sets of at least 1,000 rows,
``small`` the others.
"""

import argparse
import csv
import logging
import time
from pathlib import Path

import numpy as np

from benchmarks._common import RESULTS_DIR, command_line
from benchmarks.quality.bench_quality import SHARED, load, parse_config, score

LARGE = (
    "digits",
    "coil20",
    "uspst",
    "usps",
    "yaleb",
    "segment",
    "letter",
    "ringnorm",
    "frogs",
    "shuttle",
    "mnist",
)
SMALL = (
    "iris",
    "wine",
    "breast_cancer",
    "orl",
    "yale",
    "ecoli",
    "diabetes",
    "g50c",
    "ionosphere",
)
FIELDS = (
    "dataset",
    "n",
    "tag",
    "mode",
    "seed",
    "acc",
    "nmi",
    "agree",
    "test_acc",
    "test_nmi",
    "n_components",
    "seconds",
)


class _Cuts(logging.Handler):
    """Keeps the estimator's log line on the normalised cuts of ``n_components="auto"``."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        text = record.getMessage()
        if text.startswith("n_components"):
            self.lines.append(text)


def _data(name, holdout):
    """``(X, y, X_test, y_test)``; the test part only with ``holdout``."""
    X, y = load(name)
    if name == "mnist":
        X = X.astype(np.float32)
    if not holdout:
        return X, y, None, None
    with np.load(SHARED / f"{name}.npz") as d:
        if "is_test" not in d:
            raise SystemExit(f"{name} has no is_test rows: --holdout needs mnist, usps or shuttle")
        test = np.asarray(d["is_test"], dtype=bool)
    return X[~test], y[~test], X[test], y[test]


def fit_one(name, data, seed, params, mode, cuts):
    """One fit and its record."""
    import elmscale

    X, y, X_test, y_test = data
    c = len(np.unique(y))
    cuts.lines.clear()
    t0 = time.perf_counter()
    model = elmscale.USELM(c, random_state=seed, **params).fit(X)
    sec = time.perf_counter() - t0
    labels = np.asarray(model.labels_)
    acc, mi = score(y, labels)
    rec = dict(acc=acc, nmi=mi, n_components=model.n_components_, seconds=sec)
    if mode == "predict":
        rec["agree"] = float(np.mean(np.asarray(model.predict(X)) == labels))
    if mode == "holdout":
        rec["test_acc"], rec["test_nmi"] = score(y_test, np.asarray(model.predict(X_test)))
    return rec


def _done(path):
    if not Path(path).is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _append(path, row):
    new = not Path(path).is_file()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        if new:
            w.writeheader()
        w.writerow({k: row.get(k, "") for k in FIELDS})


def _num(rows, key):
    return np.array([float(r[key]) for r in rows if r.get(key) not in ("", None)])


def summary(rows):
    """One line per (set, tag, mode): fits, mean / worst / std of ACC and NMI, and more."""
    lines = [
        "| set | tag | mode | fits | ACC mean | ACC worst | ACC std | NMI mean | NMI worst "
        "| n_components | agree (worst) | test ACC mean (worst) | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["dataset"], r["tag"], r["mode"]) for r in rows)
    for key in keys:
        sel = [r for r in rows if (r["dataset"], r["tag"], r["mode"]) == key]
        acc, mi, sec = _num(sel, "acc"), _num(sel, "nmi"), _num(sel, "seconds")
        ncomp = np.unique(_num(sel, "n_components").astype(int), return_counts=True)
        agree, test = _num(sel, "agree"), _num(sel, "test_acc")
        lines.append(
            f"| {key[0]} | {key[1] or '-'} | {key[2]} | {len(sel)} | {acc.mean():.4f} "
            f"| {acc.min():.4f} | {acc.std():.4f} | {mi.mean():.4f} | {mi.min():.4f} "
            f"| {dict(zip(ncomp[0].tolist(), ncomp[1].tolist(), strict=True))} "
            f"| {f'{agree.mean():.4f} ({agree.min():.4f})' if agree.size else '-'} "
            f"| {f'{test.mean():.4f} ({test.min():.4f})' if test.size else '-'} "
            f"| {sec.mean():.1f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="large", help="comma list, or large / small / all")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..S-1")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--unseeded", type=int, default=3, help="fits with random_state=None")
    p.add_argument("--set", default="", help="USELM parameters, e.g. 'n_components=15'")
    p.add_argument("--tag", default="")
    p.add_argument("--predict", action="store_true", help="predict(X) vs labels_ agreement")
    p.add_argument("--holdout", action="store_true", help="fit on train rows, predict test rows")
    p.add_argument("--csv", default=str(RESULTS_DIR / "quality_seeds.csv"))
    p.add_argument("--summary", action="store_true", help="only print the summary of --csv")
    args = p.parse_args(argv)
    groups = {"large": LARGE, "small": SMALL, "all": LARGE + SMALL}
    names = [n for item in args.datasets.split(",") for n in groups.get(item, (item,))]
    mode = "holdout" if args.holdout else "predict" if args.predict else "fit"
    params = parse_config(args.set) if args.set else {}
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    cuts = _Cuts()
    logging.getLogger("elmscale").addHandler(cuts)
    logging.getLogger("elmscale").setLevel(logging.INFO)
    seeds = [*range(args.first_seed, args.first_seed + args.seeds)]
    seeds += [f"none-{i}" for i in range(args.unseeded)]
    print(command_line(), flush=True)
    if not args.summary:
        done = {(r["dataset"], r["tag"], r["mode"], r["seed"]) for r in _done(args.csv)}
        for name in names:
            todo = [s for s in seeds if (name, args.tag, mode, str(s)) not in done]
            if not todo:
                continue
            data = _data(name, args.holdout)
            for seed in todo:
                state = None if isinstance(seed, str) else seed
                rec = fit_one(name, data, state, params, mode, cuts)
                row = dict(dataset=name, n=data[0].shape[0], tag=args.tag, mode=mode, seed=seed)
                row.update(rec)
                _append(args.csv, row)
                print(
                    f"{name} {args.tag} {mode} seed {seed}: ACC {rec['acc']:.4f} "
                    f"NMI {rec['nmi']:.4f} n_o {rec['n_components']} "
                    + (f"agree {rec['agree']:.4f} " if "agree" in rec else "")
                    + (f"test ACC {rec['test_acc']:.4f} " if "test_acc" in rec else "")
                    + f"{rec['seconds']:.1f} s {' '.join(cuts.lines)}",
                    flush=True,
                )
    rows = [r for r in _done(args.csv) if r["dataset"] in names]
    print(summary(rows))


if __name__ == "__main__":
    main()
