"""Two git revisions side by side: do they give the same fits, and how fast is the same fit?

    python -m benchmarks.quality.compare_revisions --rev 9516c93   # against this checkout
    python -m benchmarks.quality.compare_revisions --rev main~3 --datasets iris,segment
    python -m benchmarks.quality.compare_revisions --time --rev d97dc16 --fits 1 --rounds 1 \
        --data mixture:1000000 --data subspace:1000000 --fit "USELM(n_clusters=10)"

``--rev`` is checked out into a temporary git worktree and compared with this checkout (or
with ``--against``); each side runs in fresh interpreters importing its own ``elmscale``.

**Same fits** (the default), for a refactor that should change nothing: every built-in
estimator at its defaults on each dataset of at most ``--max-rows`` rows (NumPy input). The
clusterers' ``labels_``, SSELM's predictions (10 labelled points per class) and
ELMClassifier's of its training rows are compared element by element, and the largest
difference of the embeddings is given; one JSON line per (estimator, dataset), then a table.

**Wall time** (``--time``): ``--fit`` (an expression over ``elmscale``'s names) fitted
``--fits`` times per process on each ``--data``: MNIST-70k (pixels / 255, float32, the
default), an ``.npz`` path, or ``mixture:N`` / ``subspace:N`` of ``_mixture.py`` persisted on
a LocalCluster of ``--workers`` before the clock starts. A process's first fit includes its
warm-up. Which side runs first swaps each round; the host's
speed drifts, so only ratios within a round mean much. Run it alone on the machine."""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks._common import (
    DATASETS_DIR,
    REPO_ROOT,
    SKLEARN_SETS,
    DatasetMissing,
    load_dataset,
    machine_info,
    revision_checkout,
    utc_now,
)

ESTIMATORS = ("USELM", "ELMJEC", "EMMC", "TUMKELM", "SSELM", "ELMClassifier")
#: ``--data`` kinds generated on a LocalCluster: ``kind:N``
GENERATED = ("mixture", "subspace")

# Fits every estimator on one dataset (argv: data.npz, out.npz, the tree, the estimators)
# and saves what it predicted.
_FIT = r"""
import sys, warnings
import numpy as np
import elmscale
assert elmscale.__file__.startswith(sys.argv[3]), elmscale.__file__
warnings.simplefilter("ignore")
data = np.load(sys.argv[1])
X, y = data["X"], data["y"]
classes = np.unique(y)
k = len(classes)
out = {}
for name in sys.argv[4].split(","):
    cls = getattr(elmscale, name)
    if name == "SSELM":
        rng = np.random.RandomState(0)
        y_semi = np.full(len(y), -1)
        for c in classes:
            keep = rng.choice(np.flatnonzero(y == c), min(10, int((y == c).sum())), replace=False)
            y_semi[keep] = y[keep]
        model = cls(random_state=0).fit(X, y_semi)
        out[name + ".labels"] = np.asarray(model.predict(X))
    elif name == "ELMClassifier":
        out[name + ".labels"] = np.asarray(cls(random_state=0).fit(X, y).predict(X))
    else:
        model = cls(n_clusters=k, random_state=0).fit(X)
        out[name + ".labels"] = np.asarray(model.labels_)
        if hasattr(model, "transform"):
            out[name + ".embedding"] = np.asarray(model.transform(X))
np.savez(sys.argv[2], **out)
"""

# Times a fit (argv: the data, the fit's expression, fits, workers); prints one JSON line.
_TIME = """
import json, sys, time
import numpy as np
import elmscale
spec, fit, n_fits, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
kind, _, n = spec.partition(":")
if kind in ("mixture", "subspace"):
    from distributed import Client, LocalCluster
    from benchmarks._mixture import generated_dask, mixture_chunk, subspace_chunk
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, memory_limit="10GB", dashboard_address=None
    )
    client = Client(cluster)
    chunk_fn = mixture_chunk if kind == "mixture" else subspace_chunk
    X = generated_dask(chunk_fn, int(n))[0].persist()
    client.wait_for_workers(workers)
    X.sum().compute()
else:
    data = np.load(spec)
    X = (data["X"] / 255).astype(np.float32)
names = {name: getattr(elmscale, name) for name in elmscale.__all__}  # estimators load lazily
walls = []
for _ in range(n_fits):
    model = eval(fit, names)
    t0 = time.perf_counter()
    model.fit(X)
    walls.append(time.perf_counter() - t0)
timings = {k: round(v, 2) for k, v in getattr(model, "timings_", {}).items()}
print(json.dumps({"data": spec, "walls": walls, "timings": timings}))
"""


def run_in(tree, code, *argv):
    """The standard output of ``code`` run in a fresh interpreter in ``tree`` (a checkout),
    which imports that tree's ``elmscale``: ``""`` heads ``sys.path``, not the caller's."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-c", code, *map(str, argv)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stderr[-2000:]}")
    return done.stdout


def fit(tree, data_path, out_path, estimators):
    """What every estimator of ``estimators`` predicted on ``data_path``, fitted in ``tree``."""
    run_in(tree, _FIT, data_path, out_path, tree, estimators)
    return dict(np.load(out_path))


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="the git revision to compare against")
    ap.add_argument("--against", default=None, help="second revision (default: this checkout)")
    ap.add_argument("--datasets", default=None, help="comma-separated (default: all that fit)")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS))
    ap.add_argument("--max-rows", type=int, default=12_000)
    timing = ap.add_argument_group("wall time (--time)")
    timing.add_argument("--time", action="store_true", help="time --fit instead")
    timing.add_argument("--fit", default="USELM(n_clusters=10, random_state=0)")
    timing.add_argument("--fits", type=int, default=2, help="fits per process")
    timing.add_argument("--rounds", type=int, default=3)
    timing.add_argument(
        "--data",
        action="append",
        help="an .npz path, mixture:N or subspace:N (repeatable; default MNIST-70k)",
    )
    timing.add_argument("--workers", type=int, default=2, help="workers for generated data")
    args = ap.parse_args(argv)
    args.data = args.data or [str(DATASETS_DIR / "mnist.npz")]
    missing = [
        d for d in args.data if d.partition(":")[0] not in GENERATED and not Path(d).exists()
    ]
    if args.time and missing:
        ap.error(f"not found: {', '.join(missing)}")
    return args


def main(argv=None):
    args = parse(argv)
    with contextlib.ExitStack() as stack:
        trees = {args.rev: stack.enter_context(revision_checkout(args.rev))}
        new = args.against or "this checkout"
        trees[new] = stack.enter_context(revision_checkout(new)) if args.against else REPO_ROOT
        return time_fits(args, trees, new) if args.time else same_fits(args, trees, new)


def same_fits(args, trees, new):
    """Every estimator on each dataset in both trees: one record per (dataset, estimator)."""
    names = args.datasets.split(",") if args.datasets else [*SKLEARN_SETS, *_stored_sets()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            try:
                X, y = load_dataset(name)
            except DatasetMissing:
                continue
            if len(X) > args.max_rows:
                continue
            data = Path(tmp) / f"{name}.npz"
            np.savez(data, X=X, y=y)
            got = {
                rev: fit(tree, data, Path(tmp) / f"{i}.npz", args.estimators)
                for i, (rev, tree) in enumerate(trees.items())
            }
            for est in args.estimators.split(","):
                rows.append(compare(name, len(X), est, got[args.rev], got[new]))
                print(json.dumps(rows[-1]), flush=True)
    print_table(rows, args.estimators.split(","))
    return rows


def time_fits(args, trees, new):
    """``--rounds`` rounds of ``--fit`` on each ``--data`` in both trees; the ratios of the
    walls of ``new`` (this checkout, or ``--against``) to those of ``--rev``, per round."""
    rounds = []
    for r in range(args.rounds):
        for data in args.data:
            # odd rounds run --rev first: a slot that is slower whatever runs in it (the
            # first fit after data is generated) then weighs on both revisions alike
            order = [new, args.rev][:: (-1) ** r]
            res = {}
            for name in order:
                out = run_in(trees[name], _TIME, data, args.fit, args.fits, args.workers)
                res[name] = json.loads(out.strip().splitlines()[-1])
                print(json.dumps({"round": r, "revision": name, **res[name]}), flush=True)
            walls = zip(res[new]["walls"], res[args.rev]["walls"], strict=True)
            rounds.append({"round": r, "data": data, "ratios": [round(a / b, 3) for a, b in walls]})
    out = {"benchmark": "revisions", "when": utc_now(), "machine": machine_info()}
    out.update(fit=args.fit, rev=args.rev, ratio_this_over_rev_per_round=rounds)
    print(json.dumps(out))
    return out


def _stored_sets():
    return sorted(p.stem for p in DATASETS_DIR.glob("*.npz"))


def compare(name, n, est, base, new):
    """The record of one (dataset, estimator): labels identical, and the embeddings' gap."""
    a, b = base[est + ".labels"], new[est + ".labels"]
    row = {"utc": utc_now(), "dataset": name, "n": n, "estimator": est}
    row.update(labels_identical=bool(np.array_equal(a, b)), labels_differing=int((a != b).sum()))
    if est + ".embedding" in base:
        ea, eb = base[est + ".embedding"], new[est + ".embedding"]
        row["embedding_max_abs_diff"] = (
            float(np.abs(ea - eb).max()) if ea.shape == eb.shape else None
        )
    return row


def print_table(rows, estimators):
    same = sum(r["labels_identical"] for r in rows)
    print(f"\n{same} of {len(rows)} (estimator, dataset) fits give identical labels\n")
    print("| estimator | datasets | identical labels | largest embedding difference |")
    print("|---|---|---|---|")
    for est in estimators:
        mine = [r for r in rows if r["estimator"] == est]
        diffs = [
            r["embedding_max_abs_diff"] for r in mine if r.get("embedding_max_abs_diff") is not None
        ]
        largest = f"{max(diffs):.1e}" if diffs else "-"
        print(f"| {est} | {len(mine)} | {sum(r['labels_identical'] for r in mine)} | {largest} |")


if __name__ == "__main__":
    main()
