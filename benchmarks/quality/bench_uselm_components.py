"""How USELM's ``n_components="auto"`` chooses: k-means in c, ceil(1.5 c) and 2c dimensions of
one reduction, each partition's normalised cut on an exact 10-NN graph, and its ACC / NMI.

    python -m benchmarks.quality.bench_uselm_components --datasets digits,usps --json out.jsonl
    python -m benchmarks.quality.bench_uselm_components --datasets mnist --seeds 3

For each set (bench_quality's ``load``; "mnist" is the whole MNIST-70k) and seed, one
``elmscale.sweep`` fits ``USELM(n_clusters=c, random_state=seed)`` with each
``n_components`` (one Gram pass; the same k-means seed); the cut is that of the symmetrised
binary exact 10-NN graph of the min-max scaled rows (the estimator's own graph up to 10,000
rows). "auto" keeps the lower of the cuts of c and ceil(1.5 c). No label is used before
scoring. One JSON line per (set, seed, n_components); a summary per set at the end.
"""

import argparse
import json
import math

import dask.array as da
import numpy as np

import elmscale
from benchmarks.quality.bench_quality import load, minmax, score
from elmscale.graph import knn_graph, normalized_cut


def _exact_graph(X):
    return knn_graph(da.from_array(minmax(X)), 10, backend="exact", normalized=False)


def _records(name, seeds):
    X, y = load(name)
    c = len(np.unique(y))
    graph = _exact_graph(X)
    dims = [c, math.ceil(1.5 * c), 2 * c]
    for seed in seeds:
        base = elmscale.USELM(n_clusters=c, random_state=seed)
        for setting, model in elmscale.sweep(base, X, {"n_components": dims}):
            labels = np.asarray(model.labels_)
            acc, mi = score(y, labels)
            cut = normalized_cut(graph, da.from_array(labels, chunks=graph.chunks), c)
            n = setting["n_components"]
            yield dict(
                dataset=name, seed=seed, n_components=n, ratio=n / c, acc=acc, nmi=mi, ncut=cut
            )


def summary(records):
    """Per set: mean ACC of c, ceil(1.5 c), 2c and of the lower cut of the first two."""
    out = {}
    for name in dict.fromkeys(r["dataset"] for r in records):
        rows = [r for r in records if r["dataset"] == name]
        dims = sorted({r["n_components"] for r in rows})
        by = {(r["seed"], r["n_components"]): r for r in rows}
        seeds = sorted({r["seed"] for r in rows})
        chosen = [min((by[s, d] for d in dims[:2]), key=lambda r: r["ncut"]) for s in seeds]
        out[name] = {
            **{f"n={d}": np.mean([by[s, d]["acc"] for s in seeds]) for d in dims},
            "auto": np.mean([r["acc"] for r in chosen]),
            "auto_spread": np.ptp([r["acc"] for r in chosen]),
        }
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="digits")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", default=None, help="append one JSON line per fit")
    args = parser.parse_args(argv)
    records = []
    for name in args.datasets.split(","):
        for rec in _records(name, range(args.seeds)):
            records.append(rec)
            print(json.dumps(rec), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    for name, row in summary(records).items():
        print(name, {k: round(100 * v, 1) for k, v in row.items()})


if __name__ == "__main__":
    main()
