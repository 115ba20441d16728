"""Does sigmoid saturation cost US-ELM accuracy on image data? (RESULTS.md, US-ELM)

Dense NumPy US-ELM with input weights s * U(-1, 1): min-max scaling to [-1, 1], 10-NN binary
symmetrised graph, normalised Laplacian, n_h hidden sigmoid nodes, lam in {1e-4, 1e-2, 1, 100}
x n_o in {8, 16, 32}, 3 seeds (``--seeds``), KMeans(n_init=10) on the embedding. Prints, per s,
the fraction of H outside (0.01, 0.99) and the best grid cell of the mean ACC over the seeds.

    python -m benchmarks.paper.bench_uselm_weight_scale uspst 1,0.3,0.1,0.03 [n_hidden]
"""

import argparse

import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.neighbors import kneighbors_graph

from benchmarks._common import clustering_accuracy, load_dataset
from elmscale.solvers import uselm_primal

LAMS = (1e-4, 1e-2, 1.0, 100.0)
N_COMPONENTS = (8, 16, 32)


def normalised_laplacian(Xs, k=10):
    W = kneighbors_graph(Xs, k, include_self=False)
    W = ((W + W.T) > 0).astype(float)
    d_inv_sqrt = sp.diags(1.0 / np.sqrt(np.asarray(W.sum(1)).ravel()))
    return sp.eye(W.shape[0]) - d_inv_sqrt @ W @ d_inv_sqrt


def grid_accuracy(X, y, Xs, L, weight_scale, n_hidden, seed):
    """ACC of every (lam, n_o) cell for one seed, and the saturated fraction of H."""
    rng = np.random.RandomState(seed)
    A = rng.uniform(-1, 1, (X.shape[1], n_hidden)) * weight_scale
    b = rng.uniform(-1, 1, n_hidden)
    H = 1.0 / (1.0 + np.exp(-(Xs @ A + b)))
    saturated = np.mean((H < 0.01) | (H > 0.99))
    hth, htlh = H.T @ H, H.T @ (L @ H)
    n_clusters = len(np.unique(y))
    accs = []
    for lam in LAMS:
        for n_o in N_COMPONENTS:
            beta, _ = uselm_primal(hth, htlh, lam, n_o)
            labels = KMeans(n_clusters, n_init=10, random_state=seed).fit_predict(H @ beta)
            accs.append(clustering_accuracy(y, labels))
    return np.array(accs), saturated


def main(name, scales, n_hidden=2000, seeds=3):
    X, y = load_dataset(name)
    X = X.astype(np.float64)
    lo, hi = X.min(0), X.max(0)
    Xs = 2 * (X - lo) / np.where(hi > lo, hi - lo, 1) - 1
    L = normalised_laplacian(Xs)
    for s in scales:
        runs = [grid_accuracy(X, y, Xs, L, s, n_hidden, seed) for seed in range(seeds)]
        mean = np.mean([acc for acc, _ in runs], axis=0)
        print(
            f"{name} scale {s} saturated {runs[-1][1]:.2f} best {mean.max():.3f} "
            f"grid {np.round(mean, 3).tolist()}",
            flush=True,
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", help="a dataset name of benchmarks/_common.load_dataset")
    ap.add_argument("scales", help="comma-separated input-weight scales s, e.g. 1,0.3,0.1")
    ap.add_argument("n_hidden", type=int, nargs="?", default=2000)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    main(args.dataset, [float(s) for s in args.scales.split(",")], args.n_hidden, args.seeds)
