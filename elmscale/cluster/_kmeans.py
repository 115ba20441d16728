"""k-means on a row-chunked dask array.

The restarts run where they are cheap: scikit-learn's k-means (``n_init`` k-means++ starts)
on a random sample of at most ``init_sample`` rows of the small embedding, gathered to the
client. Its best centres then start Lloyd's iterations on all rows on the cluster, where each
pass reduces per-cluster sums and counts (n_clusters x n_features) from every chunk. Starting
from centres that are already good, the full-data phase needs few passes. Several explicit
starting points (``init`` of shape (R, k, d)) are refined together, in one pass per
iteration.
"""

import logging

import dask
import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.utils import check_random_state

from ..utils._dask import tree_sum

logger = logging.getLogger(__name__)


def _nearest(block, centers):
    """Index of and squared distance to the nearest centre, per row, for each restart."""
    block = block.astype(np.float64, copy=False)
    R, k, d = centers.shape
    x2 = np.einsum("ij,ij->i", block, block)
    cross = (block @ centers.reshape(R * k, d).T).reshape(-1, R, k).transpose(1, 0, 2)
    d2 = x2[None, :, None] - 2.0 * cross + np.einsum("rkj,rkj->rk", centers,
                                                      centers)[:, None, :]
    lab = np.argmin(d2, axis=2)
    best = np.take_along_axis(d2, lab[:, :, None], axis=2)[:, :, 0]
    return lab, np.maximum(best, 0.0)


def _lloyd_partials(block, centers):
    R, k, d = centers.shape
    lab, best = _nearest(block, centers)
    n = block.shape[0]
    # one sparse one-hot product per restart: far faster than np.add.at
    onehot = sp.csr_matrix((np.ones(R * n), (lab.ravel() + np.repeat(np.arange(R) * k, n),
                                             np.tile(np.arange(n), R))), shape=(R * k, n))
    sums = np.asarray(onehot @ block.astype(np.float64, copy=False)).reshape(R, k, d)
    counts = np.asarray(onehot.sum(axis=1)).reshape(R, k)
    return {"sums": sums, "counts": counts, "inertia": best.sum(axis=1),
            "sumsq": np.einsum("ij,ij->", block, block, dtype=np.float64)}


def _labels_block(block, centers):
    return _nearest(block, centers[None])[0][0]


def _draw_sample(E, size, rng):
    N = E.shape[0]
    if size >= N:
        return np.asarray(E.compute(), dtype=np.float64)
    idx = np.sort(rng.choice(N, size=size, replace=False))
    return np.asarray(E[idx].compute(), dtype=np.float64)


def kmeans(E, n_clusters, *, n_init=10, max_iter=100, tol=1e-4, init=None, random_state=None,
           init_sample=20000):
    """Cluster the rows of a dask array with Lloyd's algorithm.

    Parameters
    ----------
    E : dask array (n_samples, n_features), chunked by rows. Persist it first if it is
        expensive to compute: every iteration reads it once.
    n_clusters, n_init, max_iter, tol : as in ``sklearn.cluster.KMeans`` (tol is relative to
        the mean feature variance of the sample).
    init : ndarray (n_clusters, n_features) or (n_starts, n_clusters, n_features), or None
        Start from these centres (n_init is then ignored; the best start wins); None runs
        scikit-learn's k-means with n_init k-means++ starts on a sample of rows.

    Returns
    -------
    centers : ndarray (n_clusters, n_features)
    labels : dask array of int64 (n_samples,)
    inertia : float
    n_iter : int
    """
    rng = check_random_state(random_state)
    if init is not None:
        starts = np.asarray(init, dtype=np.float64)
        starts = starts[None] if starts.ndim == 2 else starts
    else:
        sample = _draw_sample(E, init_sample, rng)
        if sample.shape[0] < n_clusters:
            raise ValueError(f"n_clusters={n_clusters} is larger than n_samples={E.shape[0]}")
        km = KMeans(n_clusters, n_init=n_init, random_state=rng.randint(2**31 - 1)).fit(sample)
        starts = km.cluster_centers_[None]
    blocks = E.to_delayed().ravel().tolist()
    centers = starts
    active = np.ones(len(centers), dtype=bool)
    inertia = np.full(len(centers), np.inf)
    n_iter = np.zeros(len(centers), dtype=int)
    for it in range(max_iter):
        c = dask.delayed(centers, pure=True)
        total = dask.compute(tree_sum([dask.delayed(_lloyd_partials, pure=True)(b, c)
                                       for b in blocks]))[0]
        counts = total["counts"]
        new = np.where(counts[:, :, None] > 0, total["sums"] / np.maximum(counts, 1)[:, :, None],
                       centers)  # an empty cluster keeps its centre
        if it == 0:  # tol is relative to the mean feature variance, as in scikit-learn
            n = counts[0].sum()
            mean = total["sums"][0].sum(axis=0) / n
            var = max((total["sumsq"] / n - mean @ mean) / mean.size, 0.0) or 1.0
        inertia = np.where(active, total["inertia"], inertia)
        shift = ((new - centers) ** 2).sum(axis=(1, 2))
        n_iter = n_iter + active
        centers = np.where(active[:, None, None], new, centers)
        active &= shift > tol * var
        if not active.any():
            break
    # the inertia recorded belongs to the centres before their last update; recompute once
    c = dask.delayed(centers, pure=True)
    inertia = dask.compute(tree_sum([dask.delayed(_lloyd_partials, pure=True)(b, c)
                                     for b in blocks]))[0]["inertia"]
    best = int(np.argmin(inertia))
    best_centers = centers[best]
    labels = E.map_blocks(_labels_block, best_centers, drop_axis=1, dtype=np.int64,
                          meta=np.empty((0,), dtype=np.int64))
    logger.info("k-means: best of %d restarts, inertia %.6g after %d iterations", len(centers),
                inertia[best], n_iter[best])
    return best_centers, labels, float(inertia[best]), int(n_iter[best])
