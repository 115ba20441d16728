"""US-ELM clustering accuracy against Huang, Song, Gupta and Wu 2014 (Table V).

Protocol (the paper's): n_h = 1000 for iris and wine, 2000 otherwise; lam in {1e-4, ..., 1e4};
n_o in {2, 4, 8, 16, 32}; the best (lam, n_o) per dataset by mean clustering accuracy; mean
+- std of the accuracy over 10 seeds. Each seed draws its own hidden layer and k-means
initialisation.

The grid costs one Gram pass per seed: the hidden layer, the kNN graph and the reduced
matrices H^T H and H^T L H are computed once per seed (``USELM.reduce``), then
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
- ``spectral``: scikit-learn ``SpectralClustering(affinity="nearest_neighbors",
  n_neighbors=10)`` on standardised X (``quality.bench_quality``'s peer).

USELM untuned on the same sets is ``quality.bench_seeds --datasets
iris,wine,segment,coil20,uspst,yale,orl``. Everything runs in this one process on dask's
synchronous scheduler with BLAS pinned to one thread (the machine is shared). Results go to
stdout as markdown and, with ``--json``, to a JSON file.

Examples::

    python -m benchmarks.paper.bench_uselm_accuracy --mode grid --quick
    python -m benchmarks.paper.bench_uselm_accuracy --mode grid --seeds 10 --json /tmp/grid.json
    python -m benchmarks.paper.bench_uselm_accuracy --mode spectral --seeds 10
"""

import argparse
import time

import numpy as np

from benchmarks._common import clustering_accuracy, load_dataset, nmi, peak_memory_mb, run_info
from benchmarks.paper import _protocol as protocol

# name: (its name in the paper's Table V, the paper's ACC %)
PAPER = {
    "iris": ("IRIS", 86.06),
    "wine": ("WINE", 96.63),
    "segment": ("SEGMENT", 64.22),
    "coil20": ("COIL20", 87.58),
    "uspst": ("USPST", 75.78),
    "yale": ("YALEB (yale.npz)", 44.08),
    "orl": ("ORL", 59.26),
}
LAMS = tuple(10.0**p for p in range(-4, 5))
N_OS = (2, 4, 8, 16, 32)


def grid_one_seed(X, y, seed, cfg, lams=LAMS, n_os=N_OS, n_init=10):
    """ACC and NMI (arrays len(lams) x len(n_os)) of US-ELM for one seed, one Gram pass, and
    the seconds of its steps.

    ``USELM.reduce`` (scaling, hidden layer, exact kNN graph on the scaled X, H^T H and
    H^T L H) once, then the solve of every lam and k-means for every n_o.
    """
    from sklearn.cluster import KMeans

    from elmscale import USELM, uselm_embedding
    from elmscale.utils import draw_seed

    c = len(np.unique(y))
    model = USELM(c, graph="exact", solver="primal", cache=True, random_state=seed, **cfg)
    reduction, t_gram, _ = protocol.timed_call(model.reduce, X)
    features, stats = reduction.features, reduction.stats
    km_seed = draw_seed(reduction.random_state())
    acc = np.full((len(lams), len(n_os)), np.nan)
    nm = np.full_like(acc, np.nan)
    t = {"graph+gram": t_gram, "solve": 0.0, "kmeans": 0.0}
    for i, lam in enumerate(lams):
        start = time.perf_counter()
        beta, _ = uselm_embedding(stats["hth"], stats["htlh"], lam, max(n_os))
        E = np.asarray(features.project(beta).compute(), dtype=np.float64)
        solved = time.perf_counter()
        for j, n_o in enumerate(n_os):
            labels = KMeans(c, n_init=n_init, random_state=km_seed).fit_predict(E[:, :n_o])
            acc[i, j], nm[i, j] = clustering_accuracy(y, labels), nmi(y, labels)
        t["solve"] += solved - start
        t["kmeans"] += time.perf_counter() - solved
    return acc, nm, t


def run_grid(name, X, y, seeds, cfg, log, lams=LAMS, n_os=N_OS):
    """The tuned protocol on one set: every seed's grid, the best (lam, n_o) by mean ACC."""
    n_hidden = cfg.get("n_hidden") or (1000 if name in ("iris", "wine") else 2000)
    accs, nmis, times = [], [], []
    for seed in seeds:
        acc, nm, t = grid_one_seed(X, y, seed, {**cfg, "n_hidden": n_hidden}, lams, n_os)
        accs.append(acc)
        nmis.append(nm)
        times.append(t)
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in t.items())
        log(f"  {name} seed {seed}: best ACC this seed {100 * np.nanmax(acc):.2f} ({steps})")
    accs, nmis = np.array(accs), np.array(nmis)  # seeds x lams x n_os
    mean = accs.mean(axis=0)
    i, j = np.unravel_index(np.nanargmax(mean), mean.shape)
    best = {"lam": lams[i], "n_o": n_os[j]}
    for key, values in (("acc", accs), ("nmi", nmis)):
        best.update({f"{key}_mean": float(values[:, i, j].mean())})
        best.update({f"{key}_std": float(values[:, i, j].std())})
    return {
        "dataset": name,
        "n_hidden": n_hidden,
        "config": cfg,
        "seeds": list(seeds),
        "lams": list(lams),
        "n_os": list(n_os),
        "acc": accs.tolist(),
        "nmi": nmis.tolist(),
        "best": best,
        "seconds": {k: float(sum(t[k] for t in times)) for k in times[0]},
    }


def run_spectral(name, X, y, seeds, log):
    """bench_quality's SpectralClustering peer over ``seeds``."""
    from benchmarks.quality.bench_quality import run_peer

    c = len(np.unique(y))
    start = time.perf_counter()
    X = np.asarray(X, dtype=np.float64)
    labels = [run_peer("SpectralClustering", X, c, seed) for seed in seeds]
    seconds = time.perf_counter() - start
    accs = [clustering_accuracy(y, lab) for lab in labels]
    log(f"  {name} SpectralClustering: {protocol.mean_std(accs, 100)} ({seconds:.1f} s)")
    return {
        "dataset": name,
        "acc": accs,
        "nmi": [nmi(y, lab) for lab in labels],
        "seconds": seconds,
    }


def grid_table(results):
    columns = ["dataset", "n_h", "paper", "ours (tuned)", "best lam", "best n_o", "NMI", "time (s)"]
    rows = []
    for r in results:
        b = r["best"]
        label, paper = PAPER[r["dataset"]]
        rows.append(
            [label, r["n_hidden"], f"{paper:.2f}"]
            + [f"{100 * b['acc_mean']:.2f} +- {100 * b['acc_std']:.2f}", f"{b['lam']:g}"]
            + [b["n_o"], f"{100 * b['nmi_mean']:.2f}", f"{sum(r['seconds'].values()):.0f}"]
        )
    return protocol.markdown(columns, rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("grid", "spectral"), default="grid")
    protocol.datasets_option(p, PAPER)
    p.add_argument("--seeds", type=int, default=10, help="number of seeds, from 0")
    p.add_argument(
        "--quick", action="store_true", help="2 seeds, lam in {1e-2, 1, 1e2}, n_o in {2, 8, 32}"
    )
    p.add_argument("--n-neighbors", type=int, default=10)
    p.add_argument("--weights", default="binary", choices=("binary", "heat"))
    p.add_argument("--normalized", action="store_true")
    p.add_argument("--scaling", default="standard", choices=("standard", "minmax", "none"))
    p.add_argument("--json", default=None, help="write the raw results here")
    args = p.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    seeds = list(range(2 if args.quick else args.seeds))
    lams, n_os = ((1e-2, 1.0, 1e2), (2, 8, 32)) if args.quick else (LAMS, N_OS)
    cfg = {
        "n_neighbors": args.n_neighbors,
        "weights": args.weights,
        "normalized": args.normalized,
        "scaling": None if args.scaling == "none" else args.scaling,
    }
    header = run_info(mode=args.mode, seeds=seeds)
    log(f"# {args.mode}  {header['date']}\n# {header['command']}\n# {header['machine']}")
    results = []
    start = time.perf_counter()
    with protocol.one_core():
        for name, X, y in protocol.present(protocol.dataset_names(args), load_dataset, log):
            if args.mode == "grid":
                results.append(run_grid(name, X, y, seeds, cfg, log, lams, n_os))
            else:
                results.append(run_spectral(name, X, y, seeds, log))
            log(f"  {name}: peak RSS {peak_memory_mb():.0f} MiB")
    header.update(wall_seconds=time.perf_counter() - start, peak_rss_mib=peak_memory_mb())
    if args.mode == "grid" and results:
        log(grid_table(results))
    if args.json:
        protocol.write_json(args.json, {"header": header, "results": results})
    log(f"# done in {header['wall_seconds']:.0f} s, peak RSS {header['peak_rss_mib']:.0f} MiB")
    return results


if __name__ == "__main__":
    main()
