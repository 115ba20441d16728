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
``uselm-grid``
    USELM candidate defaults: for each dataset, seed and hidden layer, one ``reduce`` (graph
    and Gram matrices) and then a ``solve`` for every (lam, n_components, row_normalize) of
    the grid -> ``quality_uselm_grid.json``.
``lodo``
    Leave-one-dataset-out choice over a grid file: for each dataset, the setting with the best
    mean ACC over the other datasets, scored on the left-out one; reports how often the choice
    is the same setting and how the left-out scores compare with the current defaults.
``report``
    Markdown tables (mean ACC/NMI per method and dataset, wins/losses against each peer) of
    the records in ``benchmarks/results/``; a (dataset, method, tag) with no record there is
    taken from ``--reference`` (default ``reference_means.csv`` beside this script: the
    per-set means RESULTS.md's quality table quotes), so new estimator runs are compared with
    the peers without running the peers again (``--reference ""`` turns it off).
``mnist``
    MNIST-70k (pixels / 255) with one USELM configuration, timed, for the headline.

Run from the repository root, e.g.
``nice -n 10 python -m benchmarks.quality.bench_quality peers --seeds 3``.
"""

import argparse
import ast
import csv
import itertools
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.base import clone

from benchmarks._common import (
    RESULTS_DIR,
    DatasetMissing,
    clustering_accuracy,
    command_line,
    load_dataset,
    machine_info,
    nmi,
    utc_now,
)

RESULTS = RESULTS_DIR
REFERENCE = Path(__file__).resolve().parent / "reference_means.csv"
SHARED = Path("/work/shared/datasets")

# every set of ../shared/datasets except MNIST (its own mode) and scikit-learn's four
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
def load(name, datasets_dir=None):
    """(X float64, y) of a set; MNIST pixels divided by 255; "mnist10k" is a fixed random
    10,000-row sample of MNIST-70k (seed 0), small enough for every peer and the grid."""
    if name == "mnist10k":
        X, y = load("mnist", datasets_dir)
        idx = np.random.RandomState(0).choice(X.shape[0], 10_000, replace=False)
        return X[idx], y[idx]
    for d in (datasets_dir, None, SHARED):
        try:
            X, y = load_dataset(name, d)
            break
        except DatasetMissing:
            continue
    else:
        raise DatasetMissing(name)
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
        key, value = item.split("=", 1)
        est, param = key.split(".", 1)
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
        out.setdefault(est, {})[param] = value
    return out


def run_records(store, names, methods, seeds, tag, fit_one, log):
    for name in names:
        X, y = load(name)
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


# -- USELM grid and leave-one-dataset-out -------------------------------------------------------
LAYERS = {
    "sigmoid": dict(rbf_fraction=0.0),
    "rbf1": dict(rbf_fraction=1.0, rbf_width=1.0),
    "rbf0.5": dict(rbf_fraction=1.0, rbf_width=0.5),
    "half": dict(rbf_fraction=0.5, rbf_width=1.0),
}
LAMS = (0.01, 1.0, 100.0)
N_OS = ("c", "2c")


def setting_name(layer, lam, n_o, row_norm):
    return f"{layer}|lam={lam:g}|n_o={n_o}|rownorm={int(row_norm)}"


def run_uselm_grid(store, names, seeds, layers, log):
    import elmscale

    for name in names:
        X, y = load(name)
        c = len(np.unique(y))
        for seed, layer in itertools.product(seeds, layers):
            settings = list(itertools.product(LAMS, N_OS, (False, True)))
            if all(store.done(name, setting_name(layer, *s), "grid", seed) for s in settings):
                continue
            # the primal solve for every set (the dual, taken by default below n_hidden rows,
            # gives the same eigenvectors for finite gamma and cannot reuse the Grams)
            base = elmscale.USELM(c, random_state=seed, solver="primal", **LAYERS[layer])
            reduction = base.reduce(X)
            for lam, n_o, rn in settings:
                method = setting_name(layer, lam, n_o, rn)
                n_comp = c if n_o == "c" else 2 * c
                n_comp = min(n_comp, X.shape[0] - 1, base.n_hidden - 1)
                model = clone(base).set_params(lam=lam, n_components=n_comp, row_normalize=rn)
                t0 = time.perf_counter()
                model.solve(reduction)
                sec = time.perf_counter() - t0
                acc, mi = score(y, model.labels_)
                store.add(
                    dict(
                        dataset=name,
                        method=method,
                        tag="grid",
                        seed=seed,
                        acc=acc,
                        nmi=mi,
                        seconds=sec,
                    )
                )
            log(f"{name} seed {seed} {layer}: done")


def table(records, key="acc"):
    """{(dataset, method, tag): mean over seeds}."""
    acc = {}
    for r in records:
        if key in r:
            acc.setdefault((r["dataset"], r["method"], r.get("tag", "")), []).append(r[key])
    return {k: float(np.mean(v)) for k, v in acc.items()}


def lodo(grid_records, baseline, datasets=None, log=print):
    """Leave-one-dataset-out: the setting with the best mean ACC over the other sets, scored
    on the left-out one. ``baseline`` names the setting that stands for today's default."""
    t = table(grid_records)
    sets = sorted({d for d, _, _ in t} if datasets is None else datasets)
    methods = sorted({m for _, m, _ in t})
    methods = [m for m in methods if all((d, m, "grid") in t for d in sets)]
    M = np.array([[t[(d, m, "grid")] for m in methods] for d in sets])
    full = methods[int(np.argmax(M.mean(axis=0)))]
    rows, same = [], 0
    for i, d in enumerate(sets):
        rest = np.delete(M, i, axis=0).mean(axis=0)
        j = int(np.argmax(rest))
        same += methods[j] == full
        rows.append((d, methods[j], M[i, j], t[(d, baseline, "grid")]))
    return dict(
        full_choice=full,
        held=same,
        n_sets=len(sets),
        rows=rows,
        full_mean=float(M[:, methods.index(full)].mean()),
        baseline_mean=float(np.mean([t[(d, baseline, "grid")] for d in sets])),
        lodo_mean=float(np.mean([r[2] for r in rows])),
        ranking=sorted(zip(M.mean(axis=0), methods, strict=True), reverse=True)[:10],
    )


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


# -- MNIST ----------------------------------------------------------------------------------
def run_mnist(configs, seeds, n_sub, log):
    """Each configuration (a dict of USELM parameters) on MNIST (pixels / 255, float32), in
    this order in one process: the first fit's time includes the first use of every import.
    When a configuration uses ``graph="pynndescent"``, numba compiles it first (timed apart as
    ``warm_up``)."""
    import elmscale

    X, y = load("mnist")
    if n_sub:
        idx = np.random.RandomState(0).choice(X.shape[0], n_sub, replace=False)
        X, y = X[idx], y[idx]
    X = X.astype(np.float32)
    warm = 0.0
    if any(params.get("graph") == "pynndescent" for params in configs):
        t0 = time.perf_counter()
        from pynndescent import NNDescent

        NNDescent(X[:2000], n_neighbors=10, random_state=0).neighbor_graph  # noqa: B018
        warm = time.perf_counter() - t0
        log(f"numba warm-up {warm:.1f} s")
    out = []
    for params, seed in itertools.product(configs, seeds):
        t0 = time.perf_counter()
        model = elmscale.USELM(10, random_state=seed, **params).fit(X)
        sec = time.perf_counter() - t0
        acc, mi = score(y, model.labels_)
        log(
            f"mnist n={X.shape[0]} seed {seed} {params}: ACC {acc:.4f} NMI {mi:.4f} "
            f"{sec:.1f} s {model.timings_}"
        )
        out.append(
            dict(
                dataset=f"mnist{n_sub or ''}",
                method="USELM",
                params={
                    k: v if isinstance(v, (int, float, str, bool)) else repr(v)
                    for k, v in params.items()
                },
                seed=seed,
                acc=acc,
                nmi=mi,
                seconds=sec,
                timings=model.timings_,
                warm_up=warm,
            )
        )
    return out


def parse_config(text):
    """``"lam=100,rbf_fraction=1.0"`` -> ``{"lam": 100, "rbf_fraction": 1.0}``; a graph
    backend with parameters is written ``graph=CellSearch(n_probes=10)`` (``:`` separates
    its keywords: ``CellSearch(n_probes=10:rows_per_cell=1000)``)."""
    config = {}
    for kv in filter(None, text.split(",")):
        key, value = kv.split("=", 1)
        config[key] = (
            graph_backend(value) if value.startswith("CellSearch(") else (ast.literal_eval(value))
        )
    return config


def graph_backend(text):
    """``"CellSearch(n_probes=10:n_refine=1)"`` -> that :class:`elmscale.graph.CellSearch`."""
    from elmscale.graph import CellSearch

    inner = text[len("CellSearch(") : -1]
    kwargs = {
        k: ast.literal_eval(v) for k, v in (kv.split("=", 1) for kv in inner.split(":") if kv)
    }
    return CellSearch(**kwargs)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["peers", "estimators", "uselm-grid", "lodo", "report", "mnist"])
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--exclude", default="")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--methods", default="")
    p.add_argument("--set", action="append", default=[], metavar="EST.PARAM=VALUE")
    p.add_argument("--tag", default="")
    p.add_argument("--layers", default="sigmoid,rbf1,rbf0.5")
    p.add_argument("--baseline", default="sigmoid|lam=0.01|n_o=c|rownorm=0")
    p.add_argument("--n-sub", type=int, default=0, help="MNIST subsample (0 = all 70k)")
    p.add_argument(
        "--configs",
        default="",
        help='MNIST: USELM settings, e.g. "lam=100,rbf_fraction=1.0;" (";" '
        "separates configurations, an empty one is the defaults)",
    )
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
    elif args.mode == "uselm-grid":
        store = Store(args.json or RESULTS / "quality_uselm_grid.json")
        run_uselm_grid(store, names, seeds, args.layers.split(","), log)
    elif args.mode == "lodo":
        paths = (args.json or str(RESULTS / "quality_uselm_grid.json")).split(",")
        recs = [r for p_ in paths for r in json.loads(Path(p_).read_text())["records"]]
        out = lodo(recs, args.baseline, names)
        print(
            f"choice on all {out['n_sets']} sets: {out['full_choice']} "
            f"(mean ACC {100 * out['full_mean']:.2f}; baseline {args.baseline} "
            f"{100 * out['baseline_mean']:.2f}); the choice holds when each set is left "
            f"out on {out['held']} of {out['n_sets']}; mean left-out ACC "
            f"{100 * out['lodo_mean']:.2f}"
        )
        wins = sum(r[2] > r[3] + 1e-9 for r in out["rows"])
        losses = sum(r[2] < r[3] - 1e-9 for r in out["rows"])
        print(f"left-out choice vs baseline: {wins} wins, {losses} losses")
        print("| left-out set | chosen on the others | its ACC there | baseline ACC |")
        print("|---|---|---|---|")
        for d, m, a, b in out["rows"]:
            print(f"| {d} | {m} | {100 * a:.1f} | {100 * b:.1f} |")
        print("top settings on all sets:")
        for v, m in out["ranking"]:
            print(f"  {100 * v:.2f} {m}")
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
    elif args.mode == "mnist":
        configs = [parse_config(c) for c in args.configs.split(";")]
        out = run_mnist(configs, seeds, args.n_sub, log)
        path = Path(args.json or RESULTS / "quality_mnist.json")
        data = (
            json.loads(path.read_text())
            if path.is_file()
            else {"machine": machine_info(), "records": []}
        )
        for r in out:
            r["command"], r["date"] = command_line(), utc_now()
        data["records"] += out
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
