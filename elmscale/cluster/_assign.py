"""Steps on a clustered embedding shared by the clusterers: the nearest centre of each row,
the mean row of each cluster and k-means' score, for NumPy or row-chunked dask arrays."""

import dask
import dask.array as da
import numpy as np

from ..utils._dask import tree_sum


def nearest_center(E, centers):
    """Index of the nearest row of ``centers`` for each row of the block E (float64)."""
    d2 = ((E[:, None, :].astype(np.float64) - centers[None]) ** 2).sum(axis=2)
    return np.argmin(d2, axis=1)


def negative_sse(E, centers, labels=None):
    """``-sum_i ||E_i - centers[labels_i]||^2`` as a float, for NumPy or dask E and labels;
    ``labels=None`` takes each row's nearest centre.

    With the nearest centres this is k-means' score (``KMeans.score``): higher is better, 0
    when every point sits on its centre.
    """
    centers = np.asarray(centers, dtype=np.float64)
    if isinstance(E, da.Array) or isinstance(labels, da.Array):
        E = da.asarray(E)
        # labels as a column: map_blocks aligns lower-dimensional arrays on the last axis
        args = [E] if labels is None else [E, da.asarray(labels).rechunk((E.chunks[0],))[:, None]]
        parts = da.map_blocks(
            _block_sse, centers, *args, chunks=(E.chunks[0],), drop_axis=1, dtype=np.float64
        )
        return -float(parts.sum().compute())
    return -float(_block_sse(centers, np.asarray(E), labels).sum())


def _block_sse(centers, E, labels=None):
    E = np.asarray(E, dtype=np.float64)
    if labels is None:
        d2 = ((E[:, None, :] - centers[None]) ** 2).sum(axis=2)
        return d2.min(axis=1)
    diff = E - centers[np.asarray(labels).ravel()]
    return np.einsum("ij,ij->i", diff, diff)


def cluster_means(E, labels, n_clusters):
    """The mean row of E over each cluster of ``labels`` (zero for an empty cluster), an
    ``(n_clusters, n_features)`` NumPy array. For dask input each row block adds its
    clusters' sums and sizes on the worker and the partials are tree-reduced: only
    ``n_clusters`` rows reach the client."""
    if not isinstance(E, da.Array) and not isinstance(labels, da.Array):
        return _means(_cluster_sums(np.asarray(E), np.asarray(labels), n_clusters))
    E = da.asarray(E)
    labels = da.asarray(labels).rechunk((E.chunks[0],))
    sums = dask.delayed(_cluster_sums, pure=True)
    parts = [
        sums(e, lab, n_clusters)
        for e, lab in zip(E.to_delayed().ravel(), labels.to_delayed().ravel(), strict=True)
    ]
    return _means(dask.compute(tree_sum(parts))[0])


def _cluster_sums(E, labels, n_clusters):
    """Per-cluster row sums (float64) and sizes of one block."""
    sums = np.zeros((n_clusters, E.shape[1]))
    np.add.at(sums, labels, E)
    return {"sums": sums, "sizes": np.bincount(labels, minlength=n_clusters)}


def _means(parts):
    return parts["sums"] / np.maximum(parts["sizes"], 1)[:, None]
