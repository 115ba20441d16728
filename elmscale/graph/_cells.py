"""Coarse cells: the partition that the distributed kNN search and the locality order share.

Cells are the leaves of a k-means tree fitted on a sample of rows on the client. A node with
more than ``leaf_size`` sample rows is split by k-means into at most :data:`BRANCHING`
children, ordered along a Ward dendrogram of their centres, so that leaves numbered depth
first put nearby cells next to each other. Leaves smaller than a quarter of ``leaf_size`` are
folded into their nearest sibling, so cells are balanced to within a small factor.

Every row is then assigned on the cluster to its nearest cell centres, ranked by exact
distance and then by cell number (:func:`~elmscale.graph._select.block_topk`): the
assignment of a row depends on that row and the centres only, never on the chunking.
"""

import warnings

import dask.array as da
import numpy as np
from scipy.cluster.hierarchy import leaves_list, linkage
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from ._select import block_topk, exact_sq_distances
from ._tasks import task_name

#: children per split of the k-means tree
BRANCHING = 16
#: sampled rows per cell the tree is fitted on (at least MIN_SAMPLE rows in all)
SAMPLE_PER_CELL = 40
MIN_SAMPLE = 4_000
#: the sample that reaches the client is kept under this many bytes
MAX_SAMPLE_BYTES = 2**27


def sample_rows(X, n_cells, seed):
    """A sorted sample of row indices (global, drawn from ``seed`` alone) and those rows of X
    as float64 on the client: at most ``MAX_SAMPLE_BYTES``."""
    N, d = X.shape
    size = min(N, max(SAMPLE_PER_CELL * n_cells, MIN_SAMPLE), max(MAX_SAMPLE_BYTES // (8 * d), 1))
    idx = np.sort(np.random.default_rng(seed).choice(N, size=size, replace=False))
    return idx, np.asarray(X[idx].compute(), dtype=np.float64)


def _kmeans(points, n_clusters, seed):
    """Labels and centres of a k-means on the client, on one thread: OpenMP's reduction order
    would otherwise make the centres depend on the machine's core count."""
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate points: fewer distinct clusters than asked
        km = KMeans(n_clusters, n_init=1, max_iter=15, random_state=seed).fit(points)
    return km.labels_, km.cluster_centers_


def _fold_small(labels, centers, min_size):
    """Move the points of children smaller than ``min_size`` to the nearest larger child."""
    sizes = np.bincount(labels, minlength=len(centers))
    big = np.flatnonzero(sizes >= min_size)
    if len(big) == 0 or len(big) == len(centers):
        return labels
    d2 = ((centers[:, None, :] - centers[None, big, :]) ** 2).sum(-1)
    target = np.arange(len(centers))
    small = np.flatnonzero(sizes < min_size)
    target[small] = big[np.argmin(d2[small], axis=1)]
    return target[labels]


def fit_cells(sample, leaf_size, seed):
    """Centres of the leaves of a balanced k-means tree on ``sample``, numbered depth first.

    Returns ``(P, d)`` float64 centres, each the mean of its leaf's sample rows.
    """
    leaf_size = max(int(leaf_size), 1)
    min_size = max(leaf_size // 4, 1)
    leaves = []

    def split(rows, depth):
        n_children = min(BRANCHING, -(-len(rows) // leaf_size))
        if n_children < 2:
            leaves.append(sample[rows].mean(axis=0))
            return
        labels, centers = _kmeans(sample[rows], n_children, seed + depth)
        labels = _fold_small(labels, centers, min_size)
        kept = np.unique(labels)
        if len(kept) < 2:  # identical points: nothing to split
            leaves.append(sample[rows].mean(axis=0))
            return
        centers = np.array([sample[rows[labels == c]].mean(axis=0) for c in kept])
        if len(kept) > 2:
            kept = kept[leaves_list(linkage(centers, method="ward"))]
        for c in kept:
            split(rows[labels == c], depth + 1)

    split(np.arange(len(sample)), 0)
    return np.array(leaves)


def _nearest_cells(block, centers, n_nearest, n_candidates):
    """Each row's cell (nearest centre) followed by the cells whose boundary with it is
    nearest to the row.

    A neighbour at distance r from x can lie in cell j only if x is within r of the
    bisecting hyperplane between its own centre c_1 and c_j, at distance
    ``(|x - c_j|^2 - |x - c_1|^2) / (2 |c_j - c_1|)``: ranking cells by that distance, not by
    ``|x - c_j|``, probes the cells where neighbours can be. Candidates are the
    ``n_candidates`` nearest centres; all distances are exact, ties go to the lower cell.
    """
    ids, d2 = block_topk(block, np.full(block.shape[0], -1), centers,
                         np.arange(len(centers)), n_candidates)
    if n_nearest == 1 or n_candidates == 1:
        return ids[:, :n_nearest].astype(np.int32)
    own = centers[ids[:, 0]]
    gap = np.sqrt(exact_sq_distances(centers, ids[:, 1:].ravel(),
                                     own, np.repeat(np.arange(len(ids)), ids.shape[1] - 1)))
    gap = gap.reshape(len(ids), -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        boundary = (d2[:, 1:] - d2[:, :1]) / (2 * gap)
    boundary[~np.isfinite(boundary)] = np.inf  # padding, or a centre equal to the row's own
    order = np.lexsort((ids[:, 1:], boundary), axis=1)[:, : n_nearest - 1]
    rest = np.take_along_axis(ids[:, 1:], order, axis=1)
    return np.concatenate([ids[:, :1], rest], axis=1).astype(np.int32)


def assign_cells(X, centers, n_nearest, n_candidates=None):
    """Each row's cell, then the ``n_nearest - 1`` cells whose boundary is nearest
    (:func:`_nearest_cells`): an (N, n_nearest) int32 dask array chunked like X's rows."""
    n_nearest = min(n_nearest, len(centers))
    n_candidates = min(max(n_candidates or 2 * n_nearest, n_nearest), len(centers))
    return da.map_blocks(_nearest_cells, X, centers, n_nearest, n_candidates, dtype=np.int32,
                         chunks=(X.chunks[0], (n_nearest,)), name=task_name("assign"))
