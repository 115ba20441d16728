"""Steps on a clustered embedding shared by the clusterers: the nearest centre of each row,
the mean row of each cluster and k-means' score, for NumPy or row-chunked dask arrays, and new
names for a partition's clusters."""

import dask.array as da
import numpy as np


def nearest_center(E, centers):
    """Index of the nearest row of ``centers`` for each row of the block E (float64)."""
    d2 = ((E[:, None, :].astype(np.float64) - centers[None]) ** 2).sum(axis=2)
    return np.argmin(d2, axis=1)


def assign_nearest(E, centers):
    """Index of the nearest row of ``centers`` for each row of E: NumPy for NumPy E, lazy and
    chunked like E's rows for a row-chunked dask E (:func:`nearest_center` per block)."""
    if not isinstance(E, da.Array):
        return nearest_center(E, centers)
    return E.map_blocks(
        nearest_center, centers, drop_axis=1, dtype=np.int64, meta=np.empty((0,), dtype=np.int64)
    )


def rename_labels(labels, names):
    """The labels with cluster c named ``names[c]`` (an int64 array), lazy and chunked like
    the row-chunked dask array ``labels``: k-means numbers its clusters in no particular
    order, and a clusterer names them its own way (along an axis, or after the clusters of
    another partition they match)."""
    return labels.map_blocks(_take, names, dtype=np.int64)


def _take(labels, names):
    return names[labels]


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
