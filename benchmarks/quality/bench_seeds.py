"""How much an estimator's defaults depend on the seed: every shared set, seeds 0..S-1 and
unseeded fits, each set's mean, worst and spread of ACC (Hungarian matching) and NMI.

    python -m benchmarks.quality.bench_seeds --seeds 10 --unseeded 3 --csv seeds.csv
    python -m benchmarks.quality.bench_seeds --datasets mnist --seeds 10 --unseeded 3 --predict
    python -m benchmarks.quality.bench_seeds --datasets mnist --holdout --seeds 10
    python -m benchmarks.quality.bench_seeds --peer KMeans --seeds 10 --unseeded 0
    python -m benchmarks.quality.bench_seeds --estimator EMMC --datasets mnist --set tol=0

One fit per (set, seed): ``USELM(n_clusters=c, random_state=seed)`` (or ``--estimator``'s) with
its defaults, or with ``--set param=value`` overrides (give the variant a ``--tag``; another
estimator's rows are tagged with its name). ``--predict`` also records how
often ``predict`` on the training rows agrees with ``labels_``, and on the training rows moved
by noise of 1e-3 of each feature's spread (``agree_moved``: the vote among the nearest
training rows, where a training row itself takes its own label); ``--holdout`` fits on the rows
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
import time
from pathlib import Path

import numpy as np

import elmscale
from benchmarks._common import RESULTS_DIR, command_line, parse_params
from benchmarks.quality.bench_quality import DATASETS, PEERS, load, run_peer, score

#: the sets of fewer than 1,000 rows; ``large`` are the others of bench_quality's (the whole of
#: MNIST for its 10,000-row sample)
SMALL = ("iris", "wine", "breast_cancer", "orl", "yale", "ecoli", "diabetes", "g50c", "ionosphere")
LARGE = tuple("mnist" if n == "mnist10k" else n for n in DATASETS if n not in SMALL)


def set_names(text):
    """``--datasets``: a comma list of set names, ``large`` / ``small`` / ``all`` expanded."""
    groups = {"large": LARGE, "small": SMALL, "all": LARGE + SMALL}
    return [n for item in text.split(",") for n in groups.get(item, (item,))]


FIELDS = (
    "dataset",
    "n",
    "tag",
    "mode",
    "seed",
    "acc",
    "nmi",
    "agree",
    "agree_moved",
    "test_acc",
    "test_nmi",
    "n_components",
    "seconds",
)


def _data(name, holdout):
    """``(X, y, X_test, y_test)``; with ``holdout`` the set's training rows and its test rows
    (``is_test``: mnist, usps, shuttle). MNIST in float32, as its headline is measured."""
    parts = [load(name, rows) for rows in (("train", "test") if holdout else (None,))]
    if name == "mnist":
        parts = [(X.astype(np.float32), y) for X, y in parts]
    return (*parts[0], *(parts[1] if holdout else (None, None)))


#: ``--predict``'s moved rows: each feature moved by this share of its standard deviation
MOVE_SCALE = 1e-3


def moved(X, seed):
    """X's rows moved off themselves by Gaussian noise of :data:`MOVE_SCALE` times each
    feature's standard deviation: rows close to the training rows that are none of them, where
    ``predict`` casts its vote among the nearest training rows."""
    rng = np.random.default_rng([0 if seed is None else seed, 7])
    noise = rng.standard_normal(X.shape) * (MOVE_SCALE * X.std(axis=0))
    return (X + noise).astype(X.dtype, copy=False)


def fit_one(name, data, seed, params, mode, estimator="USELM"):
    """One fit and its record."""
    import elmscale

    X, y, X_test, y_test = data
    c = len(np.unique(y))
    t0 = time.perf_counter()
    model = getattr(elmscale, estimator)(c, random_state=seed, **params).fit(X)
    sec = time.perf_counter() - t0
    labels = np.asarray(model.labels_)
    acc, mi = score(y, labels)
    n_o = getattr(model, "n_components_", 0)
    rec = dict(acc=acc, nmi=mi, n_components=n_o, seconds=sec)
    if mode == "predict":
        rec["agree"] = float(np.mean(np.asarray(model.predict(X)) == labels))
        rec["agree_moved"] = float(np.mean(np.asarray(model.predict(moved(X, seed))) == labels))
    if mode == "holdout":
        rec["test_acc"], rec["test_nmi"] = score(y_test, np.asarray(model.predict(X_test)))
    return rec


def peer_one(name, data, seed, peer):
    """One fit of a peer (bench_quality's ``run_peer``) and its record."""
    X, y, _, _ = data
    t0 = time.perf_counter()
    labels = run_peer(peer, np.asarray(X, dtype=np.float64), len(np.unique(y)), seed)
    acc, mi = score(y, labels)
    return dict(acc=acc, nmi=mi, seconds=time.perf_counter() - t0)


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
        "| n_components | agree (worst) | moved rows agree (worst) | test ACC mean (worst) | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["dataset"], r["tag"], r["mode"]) for r in rows)
    for key in keys:
        sel = [r for r in rows if (r["dataset"], r["tag"], r["mode"]) == key]
        acc, mi, sec = _num(sel, "acc"), _num(sel, "nmi"), _num(sel, "seconds")
        ncomp = np.unique(_num(sel, "n_components").astype(int), return_counts=True)
        agree, test = _num(sel, "agree"), _num(sel, "test_acc")
        shifted = _num(sel, "agree_moved")
        lines.append(
            f"| {key[0]} | {key[1] or '-'} | {key[2]} | {len(sel)} | {acc.mean():.4f} "
            f"| {acc.min():.4f} | {acc.std():.4f} | {mi.mean():.4f} | {mi.min():.4f} "
            f"| {dict(zip(ncomp[0].tolist(), ncomp[1].tolist(), strict=True))} "
            f"| {f'{agree.mean():.4f} ({agree.min():.4f})' if agree.size else '-'} "
            f"| {f'{shifted.mean():.4f} ({shifted.min():.4f})' if shifted.size else '-'} "
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
    p.add_argument("--estimator", default="USELM", choices=("USELM", "EMMC", "ELMJEC", "TUMKELM"))
    p.add_argument("--set", default="", help="parameters, e.g. 'n_components=15'")
    p.add_argument("--tag", default="")
    p.add_argument("--predict", action="store_true", help="predict(X) vs labels_ agreement")
    p.add_argument("--holdout", action="store_true", help="fit on train rows, predict test rows")
    p.add_argument("--peer", choices=PEERS, help="fit this peer instead of USELM")
    p.add_argument("--csv", default=str(RESULTS_DIR / "quality_seeds.csv"))
    p.add_argument("--summary", action="store_true", help="only print the summary of --csv")
    p.add_argument(
        "--compute-dtype",
        choices=("float32", "float64"),
        help="elmscale's compute_dtype for the fits (default: the library's); tag the runs",
    )
    args = p.parse_args(argv)
    names = set_names(args.datasets)
    mode = "holdout" if args.holdout else "predict" if args.predict else "fit"
    if args.peer:
        mode, args.tag = "peer", args.peer
    elif args.estimator != "USELM":
        args.tag = ":".join(filter(None, (args.estimator, args.tag)))
    params = parse_params(args.set)
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    seeds = [*range(args.first_seed, args.first_seed + args.seeds)]
    seeds += [f"none-{i}" for i in range(args.unseeded)]
    print(command_line(), flush=True)
    if not args.summary:
        with elmscale.config_context(compute_dtype=args.compute_dtype):  # None: the default
            _fit_all(args, names, seeds, mode, params)
    rows = [r for r in _done(args.csv) if r["dataset"] in names]
    if rows:
        print(summary(rows))
    return rows


def _fit_all(args, names, seeds, mode, params):
    """Every seed of every set not yet in ``args.csv``, appended to it as it finishes."""
    done = {(r["dataset"], r["tag"], r["mode"], r["seed"]) for r in _done(args.csv)}
    for name in names:
        todo = [s for s in seeds if (name, args.tag, mode, str(s)) not in done]
        if not todo:
            continue
        data = _data(name, args.holdout)
        for seed in todo:
            state = None if isinstance(seed, str) else seed
            if mode == "peer":
                rec = peer_one(name, data, state, args.peer)
                rec["n_components"] = 0
            else:
                rec = fit_one(name, data, state, params, mode, args.estimator)
            row = dict(dataset=name, n=data[0].shape[0], tag=args.tag, mode=mode, seed=seed)
            row.update(rec)
            _append(args.csv, row)
            print(
                f"{name} {args.tag} {mode} seed {seed}: ACC {rec['acc']:.4f} "
                f"NMI {rec['nmi']:.4f} n_o {rec['n_components']} "
                + (f"agree {rec['agree']:.4f} " if "agree" in rec else "")
                + (f"test ACC {rec['test_acc']:.4f} " if "test_acc" in rec else "")
                + f"{rec['seconds']:.1f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
