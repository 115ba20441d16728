"""Why US-ELM filters its rows over the graph: eq. 20 on raw and on filtered rows, against the
graph's own spectral embedding, in dense NumPy on the exact kNN graph.

    python -m benchmarks.quality.bench_uselm_filter --datasets mnist --steps 0,8,16
    python -m benchmarks.quality.bench_uselm_filter --datasets usps,uspst,coil20,orl --steps 0,4,8
    python -m benchmarks.quality.bench_uselm_filter --datasets mnist-deformed-70000 --spectral

For each set (bench_quality's ``load``; "mnist" is the whole MNIST-70k, "mnist-deformed-N"
the first N rows of the deformed MNIST-1M of ``bench_mnist1m``) the rows are min-max
scaled to [-1, 1], the symmetrised exact 10-NN graph is built once, and for each number of
steps t the rows are filtered t times by ``x <- (x + P x) / 2`` (P: the normalised graph
weights with unit row sums, as :func:`elmscale.graph.smooth_rows`), 1,000 sigmoid nodes drawn
on them (seed 0), eq. 20 solved with lam = 0.01 and n_components = c (as USELM's defaults), and
k-means (10 restarts, seeds 0-2) run on the embedding's unit rows. ``--spectral`` adds the
graph's own spectral embedding (scikit-learn's ``spectral_embedding``, amg) with c and 2c
dimensions: what eq. 20 could find if the span of H held the graph's eigenvectors. Also printed:
the share of the scaled variance the 8-step filter keeps (``smoothing="auto"``'s guard). No
label is used before scoring. One JSON line per setting, ACC and NMI per seed.
"""

import argparse
import json

import numpy as np
import scipy.sparse as sp

from benchmarks._common import clustering_accuracy, nmi
from benchmarks.quality.bench_quality import load


def minmax(X):
    lo, hi = X.min(axis=0), X.max(axis=0)
    scale = (hi - lo) / 2
    scale[scale == 0] = 1
    return (X - (hi + lo) / 2) / scale


def knn_lists(Xs, k):
    """Each row's k nearest other rows, exactly (scikit-learn's NearestNeighbors)."""
    from sklearn.neighbors import NearestNeighbors

    return NearestNeighbors(n_neighbors=k + 1).fit(Xs).kneighbors(Xs)[1][:, 1:]


def knn_weights(idx):
    """The symmetrised ("or") binary graph of the kNN lists ``idx`` (N x k), normalised
    ``D^-1/2 W D^-1/2``, and W."""
    N, k = idx.shape
    W = sp.csr_matrix((np.ones(N * k), (np.repeat(np.arange(N), k), idx.ravel())), (N, N))
    W = ((W + W.T) > 0).astype(np.float64)
    inv = 1 / np.sqrt(np.asarray(W.sum(axis=1)).ravel())
    return (sp.diags(inv) @ W @ sp.diags(inv)).tocsr(), W


def kmeans_scores(E, y, c, seeds):
    from sklearn.cluster import KMeans

    U = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    out = []
    for seed in seeds:
        labels = KMeans(c, n_init=10, random_state=seed).fit_predict(U)
        out.append((clustering_accuracy(y, labels), nmi(y, labels)))
    return out


def uselm_on(Xt, Wn, c, lam=0.01, n_hidden=1000):
    """Eq. 20 (elmscale.solvers.uselm_primal) on sigmoid nodes of the rows Xt; L = I - Wn."""
    from elmscale.solvers import uselm_primal

    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (Xt.shape[1], n_hidden)).astype(np.float32)
    b = rng.uniform(-1, 1, n_hidden).astype(np.float32)
    H = 1 / (1 + np.exp(-(Xt.astype(np.float32) @ A + b)))
    hth = (H.T @ H).astype(np.float64)
    LH = H - Wn.astype(np.float32) @ H
    beta, _ = uselm_primal(hth, (H.T @ LH).astype(np.float64), lam, c)
    return H @ beta.astype(np.float32)


def load_set(name):
    """bench_quality's ``load``, and ``mnist-deformed-N``: the first N rows of MNIST-1M
    (:mod:`benchmarks._deformed_mnist`, seed 0), pixels in [0, 1]."""
    prefix = "mnist-deformed-"
    if name.startswith(prefix):
        from benchmarks._deformed_mnist import deformed_mnist_numpy

        X, y = deformed_mnist_numpy(int(name[len(prefix) :]))
        return np.asarray(X, dtype=np.float64), y
    return load(name)


def run_set(name, steps, seeds, spectral, log, neighbors=(10,)):
    X, y = load_set(name)
    _, y = np.unique(y, return_inverse=True)
    c = int(y.max()) + 1
    Xs = minmax(np.asarray(X, dtype=np.float64))
    idx = knn_lists(Xs, max(neighbors))
    for k in neighbors:
        tag = {"dataset": name} if neighbors == (10,) else {"dataset": name, "n_neighbors": k}
        run_graph(Xs, y, c, knn_weights(idx[:, :k]), steps, seeds, spectral, log, tag)


def run_graph(Xs, y, c, weights, steps, seeds, spectral, log_record, tag):
    """Eq. 20 on the rows filtered ``steps`` times over one graph, and its spectral embedding;
    each record logged with ``tag``'s fields first."""

    def log(record):
        log_record(tag | record)

    Wn, W = weights
    P = (sp.diags(1 / np.asarray(Wn.sum(axis=1)).ravel()) @ Wn).tocsr()
    total = Xs.var(axis=0).sum()
    Xt, t = Xs.copy(), 0
    for target in sorted(set(steps) | {8}):
        while t < target:
            Xt = 0.5 * (Xt + P @ Xt)
            t += 1
        if t == 8:
            log({"retained_variance_8": float(Xt.var(axis=0).sum() / total)})
        if t in steps:
            log(
                {
                    "method": f"uselm steps={t}",
                    "scores": kmeans_scores(uselm_on(Xt, Wn, c), y, c, seeds),
                }
            )
    if spectral:
        from sklearn.manifold import spectral_embedding

        E = spectral_embedding(W, n_components=2 * c + 1, eigen_solver="amg", random_state=0)
        for dims in (c, 2 * c):
            scores = kmeans_scores(E[:, 1 : dims + 1], y, c, seeds)
            log({"method": f"spectral embedding {dims}", "scores": scores})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", default="mnist")
    p.add_argument("--steps", default="0,8", help="filter steps, comma-separated")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--spectral", action="store_true")
    p.add_argument("--neighbors", default="10", help="graph sizes k, comma-separated")
    args = p.parse_args(argv)
    neighbors = tuple(int(k) for k in args.neighbors.split(","))
    steps = {int(s) for s in args.steps.split(",")}

    def log(record):
        if "scores" in record:
            acc, nm = np.array(record["scores"]).T
            record.update(acc_mean=round(float(acc.mean()), 4), nmi_mean=round(float(nm.mean()), 4))
        print(json.dumps(record), flush=True)

    for name in args.datasets.split(","):
        run_set(name, steps, range(args.seeds), args.spectral, log, neighbors)


if __name__ == "__main__":
    main()
