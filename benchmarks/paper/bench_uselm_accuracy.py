"""US-ELM clustering accuracy against Huang, Song, Gupta and Wu 2014 (Table V).

Protocol (the paper's): n_h = 1000 for iris and wine, 2000 otherwise; lam in {1e-4, ..., 1e4};
n_o in {2, 4, 8, 16, 32}; the best (lam, n_o) per dataset by mean clustering accuracy; mean
+- std of the accuracy over 10 seeds. Each seed draws its own hidden layer and k-means
initialisation.

The grid costs one Gram pass per seed: the hidden layer, the kNN graph and the reduced
matrices H^T H and H^T L H are computed once per seed (``hidden_stats``), then
``uselm_embedding`` is solved once per lam for the largest n_o (32); the smaller n_o are the
leading columns of that solution (the same eigenvectors, each scaled on its own: checked by
``--mode check-slicing`` of ``git show 2abc8e5:benchmarks/paper/bench_uselm_accuracy.py``).
The embedding ``E = H beta`` is ``features.project(beta)`` and k-means is scikit-learn's
``KMeans(n_init=10)``. The primal solver is used for every dataset, also
when N < n_h (yale, orl, iris, wine): the reversed pencil handles the rank-deficient H^T H,
and its solutions with finite gamma lie in the row space of H, i.e. equal the dual's.

Modes (``--mode``):

- ``grid``: the tuned protocol above for one graph setting (``--n-neighbors``, ``--weights``,
  ``--normalized``, ``--scaling``);
- ``defaults``: ``elmscale.USELM(n_clusters=c, random_state=seed)``, untuned (``--set`` changes
  a parameter);
- ``spectral``: scikit-learn ``SpectralClustering(affinity="nearest_neighbors",
  n_neighbors=10)`` on standardised X.

Everything runs in this one process on dask's synchronous scheduler with BLAS pinned to one
thread (the machine is shared). Results go to stdout as markdown and, with ``--json``, to a
JSON file.

Examples::

    python -m benchmarks.paper.bench_uselm_accuracy --mode grid --quick
    python -m benchmarks.paper.bench_uselm_accuracy --mode grid --seeds 10 --json /tmp/grid.json
    python -m benchmarks.paper.bench_uselm_accuracy --mode defaults --seeds 10
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks._common import (
    DatasetMissing,
    blas_info,
    clustering_accuracy,
    command_line,
    load_dataset,
    machine_info,
    nmi,
    peak_memory_mb,
    timed,
    utc_now,
)

DATASETS = ("iris", "wine", "segment", "coil20", "uspst", "yale", "orl")
LABELS = {
    "iris": "IRIS",
    "wine": "WINE",
    "segment": "SEGMENT",
    "coil20": "COIL20",
    "uspst": "USPST",
    "yale": "YALEB (yale.npz)",
    "orl": "ORL",
}
PAPER = {
    "iris": 86.06,
    "wine": 96.63,
    "segment": 64.22,
    "coil20": 87.58,
    "uspst": 75.78,
    "yale": 44.08,
    "orl": 59.26,
}
LAMS = tuple(10.0**p for p in range(-4, 5))
N_OS = (2, 4, 8, 16, 32)


def paper_n_hidden(name):
    return 1000 if name in ("iris", "wine") else 2000


# -- the tuned grid ------------------------------------------------------------------------
def grid_one_seed(
    X,
    y,
    seed,
    *,
    n_hidden,
    n_neighbors,
    weights,
    normalized,
    scaling,
    lams=LAMS,
    n_os=N_OS,
    n_clusters=None,
    n_init=10,
    activation="sigmoid",
):
    """ACC and NMI (arrays len(lams) x len(n_os)) of US-ELM for one seed, one Gram pass.

    ``USELM.reduce`` (scaling, hidden layer, exact kNN graph on the scaled X, H^T H and
    H^T L H) once, then the solve of every lam and k-means for every n_o.
    """
    from sklearn.cluster import KMeans

    from elmscale import USELM, uselm_embedding
    from elmscale.utils import draw_seed

    c = int(n_clusters or len(np.unique(y)))
    t = {}
    with timed() as tg:
        reduction = USELM(
            c,
            n_hidden=n_hidden,
            activation=activation,
            graph="exact",
            n_neighbors=n_neighbors,
            weights=weights,
            normalized=normalized,
            scaling=scaling,
            solver="primal",
            cache=True,
            random_state=seed,
        ).reduce(X)
        features, stats = reduction.features, reduction.stats
    t["graph+gram"] = tg.seconds
    km_seed = draw_seed(reduction.random_state())
    n_o_max = max(n_os)
    acc = np.full((len(lams), len(n_os)), np.nan)
    nm = np.full_like(acc, np.nan)
    t_solve = t_km = 0.0
    for i, lam in enumerate(lams):
        with timed() as ts:
            beta, _ = uselm_embedding(stats["hth"], stats["htlh"], lam, n_o_max)
            E = np.asarray(features.project(beta).compute(), dtype=np.float64)
        t_solve += ts.seconds
        with timed() as tk:
            for j, n_o in enumerate(n_os):
                labels = KMeans(c, n_init=n_init, random_state=km_seed).fit_predict(E[:, :n_o])
                acc[i, j] = clustering_accuracy(y, labels)
                nm[i, j] = nmi(y, labels)
        t_km += tk.seconds
    t["solve"], t["kmeans"] = t_solve, t_km
    return acc, nm, t


def run_grid(name, X, y, seeds, cfg, log, lams=LAMS, n_os=N_OS):
    accs, nmis, times = [], [], []
    n_hidden = cfg.get("n_hidden") or paper_n_hidden(name)
    for seed in seeds:
        acc, nm, t = grid_one_seed(
            X,
            y,
            seed,
            n_hidden=n_hidden,
            n_neighbors=cfg["n_neighbors"],
            weights=cfg["weights"],
            normalized=cfg["normalized"],
            scaling=cfg["scaling"],
            lams=lams,
            n_os=n_os,
        )
        accs.append(acc)
        nmis.append(nm)
        times.append(t)
        log(
            f"  {name} seed {seed}: best ACC this seed {100 * np.nanmax(acc):.2f} "
            f"({', '.join(f'{k} {v:.1f}s' for k, v in t.items())})"
        )
    accs, nmis = np.array(accs), np.array(nmis)  # seeds x lams x n_os
    mean = accs.mean(axis=0)
    i, j = np.unravel_index(np.nanargmax(mean), mean.shape)
    return {
        "dataset": name,
        "n_hidden": n_hidden,
        "config": cfg,
        "seeds": list(seeds),
        "lams": list(lams),
        "n_os": list(n_os),
        "acc": accs.tolist(),
        "nmi": nmis.tolist(),
        "best": {
            "lam": lams[i],
            "n_o": n_os[j],
            "acc_mean": float(accs[:, i, j].mean()),
            "acc_std": float(accs[:, i, j].std()),
            "nmi_mean": float(nmis[:, i, j].mean()),
            "nmi_std": float(nmis[:, i, j].std()),
        },
        "seconds": {k: float(sum(t[k] for t in times)) for k in times[0]},
    }


# -- default model, spectral clustering ----------------------------------------------------
def run_defaults(name, X, y, seeds, log, **overrides):
    from elmscale import USELM

    c = len(np.unique(y))
    accs, nmis = [], []
    with timed() as tt:
        for seed in seeds:
            model = USELM(n_clusters=c, random_state=seed, **overrides).fit(X)
            accs.append(clustering_accuracy(y, model.labels_))
            nmis.append(nmi(y, model.labels_))
    log(
        f"  {name} USELM defaults{overrides or ''}: {100 * np.mean(accs):.2f} +- "
        f"{100 * np.std(accs):.2f} ({tt.seconds:.1f} s)"
    )
    return {
        "dataset": name,
        "overrides": overrides,
        "acc": accs,
        "nmi": nmis,
        "seconds": tt.seconds,
    }


def run_spectral(name, X, y, seeds, log):
    from sklearn.cluster import SpectralClustering
    from sklearn.preprocessing import StandardScaler

    c = len(np.unique(y))
    Xs = StandardScaler().fit_transform(np.asarray(X, dtype=np.float64))
    accs, nmis = [], []
    with timed() as tt:
        for seed in seeds:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "graph is not fully connected"
                labels = SpectralClustering(
                    c, affinity="nearest_neighbors", n_neighbors=10, random_state=seed
                ).fit_predict(Xs)
            accs.append(clustering_accuracy(y, labels))
            nmis.append(nmi(y, labels))
    log(
        f"  {name} SpectralClustering: {100 * np.mean(accs):.2f} +- {100 * np.std(accs):.2f} "
        f"({tt.seconds:.1f} s)"
    )
    return {"dataset": name, "acc": accs, "nmi": nmis, "seconds": tt.seconds}


# -- reporting -----------------------------------------------------------------------------
def fmt(accs):
    a = 100 * np.asarray(accs, dtype=np.float64)
    return f"{a.mean():.2f} +- {a.std():.2f}"


def grid_table(results):
    lines = [
        "| dataset | n_h | paper | ours (tuned) | best lam | best n_o | NMI | time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b = r["best"]
        lines.append(
            f"| {LABELS[r['dataset']]} | {r['n_hidden']} | {PAPER[r['dataset']]:.2f} | "
            f"{100 * b['acc_mean']:.2f} +- {100 * b['acc_std']:.2f} | {b['lam']:g} | {b['n_o']} | "
            f"{100 * b['nmi_mean']:.2f} | {sum(r['seconds'].values()):.0f} |"
        )
    return "\n".join(lines)


def parse_overrides(items):
    """``["lam=0.01", "normalized=true", "scaling=minmax"]`` -> USELM keyword arguments."""
    out = {}
    for item in items:
        key, value = item.split("=", 1)
        if value.lower() in ("true", "false"):
            out[key] = value.lower() == "true"
        elif value.lower() == "none":
            out[key] = None
        else:
            try:
                out[key] = int(value)
            except ValueError:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("grid", "defaults", "spectral"), default="grid")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--seeds", type=int, default=10, help="number of seeds")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument(
        "--quick", action="store_true", help="2 seeds, lam in {1e-2, 1, 1e2}, n_o in {2, 8, 32}"
    )
    p.add_argument("--n-neighbors", type=int, default=10)
    p.add_argument("--weights", default="binary", choices=("binary", "heat"))
    p.add_argument("--normalized", action="store_true")
    p.add_argument("--scaling", default="standard", choices=("standard", "minmax", "none"))
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="defaults: override a USELM parameter (repeatable), e.g. lam=0.01",
    )
    p.add_argument("--json", default=None, help="write the raw results here")
    args = p.parse_args(argv)

    import dask
    import scipy.linalg  # noqa: F401  (load every BLAS before pinning them all to one thread)
    import sklearn.cluster  # noqa: F401
    from threadpoolctl import threadpool_limits

    import elmscale  # noqa: F401

    def log(msg):
        print(msg, flush=True)

    seeds = list(range(args.first_seed, args.first_seed + (2 if args.quick else args.seeds)))
    lams = (1e-2, 1.0, 1e2) if args.quick else LAMS
    n_os = (2, 8, 32) if args.quick else N_OS
    cfg = {
        "n_neighbors": args.n_neighbors,
        "weights": args.weights,
        "normalized": args.normalized,
        "scaling": None if args.scaling == "none" else args.scaling,
    }
    names = [n for n in args.datasets.split(",") if n]
    results = []
    start = time.perf_counter()
    with threadpool_limits(1), dask.config.set(scheduler="synchronous"):
        header = {
            "date": utc_now(),
            "command": command_line(),
            "machine": machine_info(),
            "mode": args.mode,
            "seeds": seeds,
            "blas": blas_info(),
        }
        log(f"# {args.mode}  {header['date']}\n# {header['command']}\n# {header['machine']}")
        for name in names:
            try:
                X, y = load_dataset(name)
            except DatasetMissing as exc:
                log(f"  skipping {name}: {exc}")
                continue
            with timed() as td:
                if args.mode == "grid":
                    results.append(run_grid(name, X, y, seeds, cfg, log, lams, n_os))
                elif args.mode == "defaults":
                    results.append(
                        run_defaults(name, X, y, seeds, log, **parse_overrides(args.set))
                    )
                elif args.mode == "spectral":
                    results.append(run_spectral(name, X, y, seeds, log))
            log(f"  {name}: wall {td.seconds:.1f} s, peak RSS {peak_memory_mb():.0f} MiB")
    header["wall_seconds"] = time.perf_counter() - start
    header["peak_rss_mib"] = peak_memory_mb()
    if args.mode == "grid" and results:
        log(grid_table(results))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"header": header, "results": results}, indent=1, default=str)
        )
    log(
        f"# done in {header['wall_seconds']:.0f} s, peak RSS {header['peak_rss_mib']:.0f} MiB, "
        f"BLAS {header['blas']}"
    )
    return results


if __name__ == "__main__":
    main()
