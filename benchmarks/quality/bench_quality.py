"""Quality without labels: every clustering estimator with its defaults against scikit-learn's
KMeans, SpectralClustering (nearest_neighbors) and UMAP + KMeans, on every shared dataset that
fits plus scikit-learn's bundled sets; ACC (Hungarian matching) and NMI.

Modes (each appends records to a JSON file in ``benchmarks/results/`` and skips the records
already there, so an interrupted run resumes and peers are computed once per dataset):

``peers``
    KMeans (n_init=10) on standardised X and on min-max-scaled X, SpectralClustering
    (affinity="nearest_neighbors", n_neighbors=10; amg above 10,000 rows) and UMAP(10 dims) +
    KMeans on standardised X, seeds 0..S-1 -> ``quality_peers.json``.
``estimators``
    ``USELM``, ``ELMJEC``, ``EMMC``, ``TUMKELM`` with ``n_clusters=c, random_state=seed`` and
    otherwise their defaults, or with ``--set est.param=value`` overrides (a variant; give it
    a ``--tag``) -> ``quality_estimators.json``.
``report``
    Markdown tables (mean ACC/NMI per method and dataset, wins/losses against each peer) of
    the records in ``benchmarks/results/``; a (dataset, method, tag) with no record there is
    taken from ``--reference`` (default ``reference_means.csv`` beside this script: the
    per-set means RESULTS.md's quality table quotes), so new estimator runs are compared with
    the peers without running the peers again (``--reference ""`` turns it off).

Run from the repository root, e.g.
``nice -n 10 python -m benchmarks.quality.bench_quality peers --seeds 3``.
"""

import argparse
import csv
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks._common import (
    RESULTS_DIR,
    DatasetMissing,
    clustering_accuracy,
    command_line,
    load_dataset,
    machine_info,
    nmi,
    parse_params,
    utc_now,
)

RESULTS = RESULTS_DIR
REFERENCE = Path(__file__).resolve().parent / "reference_means.csv"

# every set of ../shared/datasets except the whole of MNIST (quality.bench_seeds measures it)
# and scikit-learn's four
DATASETS = (
    "iris",
    "wine",
    "breast_cancer",
    "digits",
    "coil20",
    "uspst",
    "usps",
    "orl",
    "yale",
    "yaleb",
    "segment",
    "ecoli",
    "diabetes",
    "g50c",
    "ionosphere",
    "letter",
    "ringnorm",
    "frogs",
    "mnist10k",
    "shuttle",
)
ESTIMATORS = ("USELM", "ELMJEC", "EMMC", "TUMKELM")
PEERS = ("KMeans", "KMeans-minmax", "SpectralClustering", "UMAP+KMeans")


# -- data -----------------------------------------------------------------------------------
def load(name, rows=None):
    """(X float64, y) of a set (``rows``: see ``load_dataset``); MNIST pixels divided by 255;
    "mnist10k" is a fixed random 10,000-row sample of MNIST-70k (seed 0), small enough for
    every peer."""
    if name == "mnist10k":
        X, y = load("mnist")
        idx = np.random.RandomState(0).choice(X.shape[0], 10_000, replace=False)
        return X[idx], y[idx]
    X, y = load_dataset(name, rows=rows)
    X = np.asarray(X, dtype=np.float64)
    if name == "mnist":
        X /= 255.0
    return X, y


def standardise(X):
    s = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(s > 0, s, 1.0)


def minmax(X):
    lo, hi = X.min(axis=0), X.max(axis=0)
    return (X - (hi + lo) / 2) / np.where(hi > lo, (hi - lo) / 2, 1.0)


# -- the result store -----------------------------------------------------------------------
class Store:
    """Records ``{dataset, method, tag, params, seed, acc, nmi, seconds}`` in one JSON file;
    ``done`` tells whether a record is already there."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_file():
            self.data = json.loads(self.path.read_text())
        else:
            self.data = {"machine": machine_info(), "runs": [], "records": []}
        self.data["runs"].append({"command": command_line(), "started": utc_now()})
        self._keys = {self._key(r) for r in self.data["records"]}

    @staticmethod
    def _key(r):
        return (r["dataset"], r["method"], r.get("tag", ""), r["seed"])

    def done(self, dataset, method, tag, seed):
        return (dataset, method, tag, seed) in self._keys

    def add(self, record):
        self.data["records"].append(record)
        self._keys.add(self._key(record))
        self.path.write_text(json.dumps(self.data, indent=1))


def score(y, labels):
    labels = np.asarray(labels)
    return clustering_accuracy(y, labels), nmi(y, labels)


# -- peers ----------------------------------------------------------------------------------
def run_peer(method, X, c, seed):
    from sklearn.cluster import KMeans, SpectralClustering

    if method == "KMeans":
        return KMeans(c, n_init=10, random_state=seed).fit_predict(standardise(X))
    if method == "KMeans-minmax":
        return KMeans(c, n_init=10, random_state=seed).fit_predict(minmax(X))
    if method == "SpectralClustering":
        solver = "amg" if X.shape[0] > 10_000 else None
        return SpectralClustering(
            c,
            affinity="nearest_neighbors",
            n_neighbors=10,
            eigen_solver=solver,
            random_state=seed,
            n_jobs=1,
        ).fit_predict(standardise(X))
    if method == "UMAP+KMeans":
        import umap

        E = umap.UMAP(n_components=10, random_state=seed, n_jobs=1).fit_transform(standardise(X))
        return KMeans(c, n_init=10, random_state=seed).fit_predict(E)
    raise ValueError(method)


def make_estimator(method, c, seed, overrides):
    import elmscale

    cls = getattr(elmscale, method)
    params = {"n_clusters": c, "random_state": seed}
    params.update(overrides.get(method, {}))
    return cls(**params)


def parse_sets(items):
    """``["USELM.lam=1", ...]`` -> ``{"USELM": {"lam": 1}}`` (values as Python literals)."""
    out = {}
    for item in items:
        est, _, param = item.partition(".")
        out.setdefault(est, {}).update(parse_params(param))
    return out


def run_records(store, names, methods, seeds, tag, fit_one, log):
    for name in names:
        try:
            X, y = load(name)
        except DatasetMissing as exc:
            log(f"{name}: skipped ({exc})")
            continue
        c = len(np.unique(y))
        for method in methods:
            for seed in seeds:
                if store.done(name, method, tag, seed):
                    continue
                t0 = time.perf_counter()
                try:
                    labels = fit_one(method, X, c, seed)
                except Exception as exc:  # a failing method is a result, not a crash
                    log(f"{name} {method} seed {seed}: FAILED {type(exc).__name__}: {exc}")
                    store.add(
                        dict(
                            dataset=name,
                            method=method,
                            tag=tag,
                            seed=seed,
                            error=f"{type(exc).__name__}: {exc}",
                        )
                    )
                    continue
                sec = time.perf_counter() - t0
                acc, mi = score(y, labels)
                store.add(
                    dict(
                        dataset=name,
                        method=method,
                        tag=tag,
                        seed=seed,
                        acc=acc,
                        nmi=mi,
                        seconds=sec,
                    )
                )
                log(f"{name} {method} {tag} seed {seed}: ACC {acc:.4f} NMI {mi:.4f} {sec:.1f} s")


def table(records, key="acc"):
    """{(dataset, method, tag): mean over seeds}."""
    acc = {}
    for r in records:
        if key in r:
            acc.setdefault((r["dataset"], r["method"], r.get("tag", "")), []).append(r[key])
    return {k: float(np.mean(v)) for k, v in acc.items()}


# -- report ---------------------------------------------------------------------------------
def reference_records(path, skip):
    """One record per row of a means file (dataset, method, tag, seeds, acc, nmi: the mean over
    the seeds), but none for the (dataset, method, tag) keys in ``skip``."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [
        dict(r, seeds=int(r["seeds"]), acc=float(r["acc"]), nmi=float(r["nmi"]))
        for r in rows
        if (r["dataset"], r["method"], r["tag"]) not in skip
    ]


def report(peer_records, est_records, sets, methods):
    ta, tn = table(peer_records + est_records), table(peer_records + est_records, "nmi")
    cols = [(m, tag) for m, tag in methods]
    head = "| dataset | " + " | ".join(f"{m}{' ' + tag if tag else ''}" for m, tag in cols)
    lines = [head + " |", "|---" * (len(cols) + 1) + "|"]
    for d in sets:
        cells = [f"{100 * ta[(d, m, tag)]:.1f}" if (d, m, tag) in ta else "-" for m, tag in cols]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    for label, t in (("mean ACC", ta), ("mean NMI", tn)):
        cells = []
        for m, tag in cols:
            v = [t[(d, m, tag)] for d in sets if (d, m, tag) in t]
            cells.append(f"{100 * np.mean(v):.1f} ({len(v)})" if v else "-")
        lines.append(f"| **{label}** | " + " | ".join(cells) + " |")
    common = [d for d in sets if all((d, m, tag) in ta for m, tag in cols)]
    if common:
        cells = [f"{100 * np.mean([ta[(d, m, tag)] for d in common]):.1f}" for m, tag in cols]
        lines.append(
            f"| **mean ACC, the {len(common)} sets of every column** | " + " | ".join(cells) + " |"
        )
    for peer in ("KMeans", "SpectralClustering", "UMAP+KMeans"):
        cells = []
        for m, tag in cols:
            both = [d for d in sets if (d, m, tag) in ta and (d, peer, "") in ta]
            w = sum(ta[(d, m, tag)] > ta[(d, peer, "")] + 1e-9 for d in both)
            lo = sum(ta[(d, m, tag)] < ta[(d, peer, "")] - 1e-9 for d in both)
            cells.append(f"{w}/{lo}")
        lines.append(f"| wins/losses vs {peer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["peers", "estimators", "report"])
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--exclude", default="")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--methods", default="")
    p.add_argument("--set", action="append", default=[], metavar="EST.PARAM=VALUE")
    p.add_argument("--tag", default="")
    p.add_argument("--json", default="")
    p.add_argument("--reference", default=str(REFERENCE), help="report: per-set means to add")
    args = p.parse_args(argv)
    names = [d for d in args.datasets.split(",") if d and d not in args.exclude.split(",")]
    seeds = range(args.seeds)
    warnings.filterwarnings("ignore")

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    if args.mode == "peers":
        store = Store(args.json or RESULTS / "quality_peers.json")
        methods = args.methods.split(",") if args.methods else PEERS
        run_records(store, names, methods, seeds, "", lambda m, X, c, s: run_peer(m, X, c, s), log)
    elif args.mode == "estimators":
        store = Store(args.json or RESULTS / "quality_estimators.json")
        methods = args.methods.split(",") if args.methods else ESTIMATORS
        overrides = parse_sets(args.set)
        run_records(
            store,
            names,
            methods,
            seeds,
            args.tag,
            lambda m, X, c, s: make_estimator(m, c, s, overrides).fit(X).labels_,
            log,
        )
    elif args.mode == "report":
        peers = [
            r
            for f in sorted(RESULTS.glob("quality_peers*.json"))
            for r in json.loads(f.read_text())["records"]
        ]
        ests = [
            r
            for f in sorted(RESULTS.glob("quality_estimators*.json"))
            for r in json.loads(f.read_text())["records"]
        ]
        if args.reference:
            fresh = {(r["dataset"], r["method"], r.get("tag", "")) for r in peers + ests}
            for r in reference_records(args.reference, fresh):
                (peers if r["method"] in PEERS else ests).append(r)
        methods = [(m, "") for m in PEERS]
        methods += sorted({(r["method"], r.get("tag", "")) for r in ests})
        if args.methods:
            keep = args.methods.split(",")
            methods = [mt for mt in methods if mt[0] in keep or f"{mt[0]} {mt[1]}" in keep]
        print(report(peers, ests, names, methods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
