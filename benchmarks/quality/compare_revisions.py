"""Do two git revisions give the same fits? Every built-in estimator, at its default
parameters, on the shared datasets, fitted by each revision in a fresh interpreter.

    python -m benchmarks.quality.compare_revisions --rev 9516c93   # against this checkout
    python -m benchmarks.quality.compare_revisions --rev main~3 --max-rows 5000 \
        --datasets iris,segment

For a refactor that should change nothing: the clusterers' ``labels_``, SSELM's predictions
(10 labelled points per class, the rest unlabelled) and ELMClassifier's predictions of the
training rows are compared element by element, and the largest difference of the embeddings
(``transform``) is printed. Both revisions run on dask's local threaded scheduler (NumPy input),
one dataset at a time, in alternation. Datasets with more rows than ``--max-rows`` are left
out. Prints one JSON line per (estimator, dataset) and a markdown table at the end.
"""

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
    revision_checkout,
    utc_now,
)

ESTIMATORS = ("USELM", "ELMJEC", "EMMC", "TUMKELM", "SSELM", "ELMClassifier")

# Run in a fresh interpreter with the revision's tree first on sys.path: fits every estimator
# on one dataset (argv: data.npz, out.npz) and saves what it predicted.
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


def fit(tree, data_path, out_path, estimators):
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-c", _FIT, str(data_path), str(out_path), str(tree), estimators]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stderr[-2000:]}")
    return dict(np.load(out_path))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="the git revision to compare against")
    ap.add_argument("--against", default=None, help="second revision (default: this checkout)")
    ap.add_argument("--datasets", default=None, help="comma-separated (default: all that fit)")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS))
    ap.add_argument("--max-rows", type=int, default=12_000)
    args = ap.parse_args(argv)
    names = args.datasets.split(",") if args.datasets else [*SKLEARN_SETS, *_stored_sets()]
    rows = []
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        trees = {"base": stack.enter_context(revision_checkout(args.rev))}
        trees["new"] = (
            stack.enter_context(revision_checkout(args.against)) if args.against else REPO_ROOT
        )
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
                side: fit(tree, data, Path(tmp) / f"{side}.npz", args.estimators)
                for side, tree in trees.items()
            }
            for est in args.estimators.split(","):
                rows.append(compare(name, len(X), est, got["base"], got["new"]))
                print(json.dumps(rows[-1]), flush=True)
    print_table(rows, args.estimators.split(","))
    return rows


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
