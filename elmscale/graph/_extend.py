"""Values at new rows from their nearest training rows: the out-of-sample step of a graph filter.

A function f known on the rows of a kNN graph (the embedding of rows the graph filter smoothed)
extends to a new row x as the walk does inside the graph: ``f(x) = sum_j w(x, j) f(j) /
sum_j w(x, j)`` over the ``k`` nearest training rows j of x, ``w`` the graph's edge weights (ones,
or the heat kernel of the fit's width). Where f is smooth on the graph, which is what the filter
makes of it, this is close to f at the training rows themselves and carries f to rows the fit
did not see (the Nystrom extension of a low-pass function, Bengio et al., NIPS 2003). Like the
Nystrom extension, it reproduces f at the rows f was computed on: a new row equal to training
rows (at distance 0) takes their mean of f, not its neighbourhood's, so that the extension of
the fit's own rows gives back what the fit computed for them.

The search is exact and blockwise: one task per pair of a query chunk and a training chunk
proposes that chunk's k best rows with their values, and one task per query chunk merges them,
so no task holds more than two chunks and the values of k candidates per query row, and nothing
N-sized reaches the client. Work is O(n_query N d), as for
:meth:`elmscale.neighbors.KNNGraphTransformer.transform`.
"""

import functools

import dask.array as da
import numpy as np

from ._backends import blockwise_search
from ._laplacian import list_weights


def _weighted_mean(weights, sigma, n_labels, k, *candidates):
    """The weighted mean of the values of each query row's k nearest candidates, ranked by
    (distance, id) as the graph's search ranks them; with ``n_labels``, the values' last
    column holds labels and is replaced by their counts among the k (one vote each), and one
    more column counts the candidates equal to the row. A row with candidates at distance 0
    (a training row itself, or its duplicates) takes the mean and the counts over those only."""
    ids = np.concatenate([c[0] for c in candidates], axis=1)
    d2 = np.concatenate([c[1] for c in candidates], axis=1)
    values = np.concatenate([c[2] for c in candidates], axis=1)
    best = np.lexsort((ids, d2), axis=-1)[:, :k]
    d2 = np.take_along_axis(d2, best, axis=1)
    values = np.take_along_axis(values, best[:, :, None], axis=1)
    w = list_weights(np.sqrt(d2), weights, sigma)  # weighed as a graph row before the union
    total = w.sum(axis=1, keepdims=True)
    # heat weights that all underflow: the neighbours count alike
    w = np.where(total > 0, w, np.isfinite(d2))
    equal = d2 == 0
    n_equal = equal.sum(axis=1)
    w = np.where(n_equal[:, None] > 0, equal, w)
    w /= w.sum(axis=1, keepdims=True)
    if not n_labels:
        return np.einsum("ik,ikj->ij", w, values)
    means = np.einsum("ik,ikj->ij", w, values[:, :, :-1])
    n = values.shape[0]
    voting = np.isfinite(d2) & ((n_equal[:, None] == 0) | equal)
    rows = np.broadcast_to(np.arange(n)[:, None], voting.shape)[voting]
    labels = values[:, :, -1][voting].astype(np.int64)
    votes = np.bincount(rows * n_labels + labels, minlength=n * n_labels)
    return np.hstack([means, votes.reshape(n, n_labels), n_equal[:, None]]).astype(np.float64)


def neighbour_mean(
    X,
    X_fit,
    values,
    n_neighbors,
    *,
    weights="binary",
    sigma=None,
    transform=None,
    labels=None,
    n_labels=None,
):
    """The mean of ``values`` over each row's nearest rows of ``X_fit``, weighted as the graph.

    Parameters
    ----------
    X : dask array (n_query, n_features), chunked by rows
        The new rows.
    X_fit : dask array (n_samples, n_features), chunked by rows
        The rows ``values`` belong to (the graph's training rows, in the input's order).
    values : dask array (n_samples, n_values), chunked like ``X_fit``'s rows
        The function to extend, e.g. the fit's embedding.
    n_neighbors : int
        Training rows each new row averages over.
    weights, sigma
        The graph's edge weights: "binary" (ones), "heat" (``exp(-d^2 / (2 sigma^2))``, sigma
        the fit's width) or "fuzzy" (the new row's memberships among its candidates).
    transform : callable or None
        Applied to each block of ``X`` and ``X_fit`` before distances are taken (the scaling the
        graph was searched in).
    labels : dask array of int (n_samples,) or None
        Labels in ``[0, n_labels)`` of the training rows, chunked like ``X_fit``'s rows: the
        same search then also counts them among each new row's nearest training rows, one
        vote each whatever the edge's weight (as :func:`elmscale.cluster.refine_labels`
        counts a row's neighbours), and how many training rows equal each new row.
    n_labels : int or None
        Required with ``labels``.

    Returns
    -------
    dask array of float64 (n_query, n_values), chunked like X's rows; with ``labels``,
    (n_query, n_values + n_labels + 1): the means, each label's count, then the number of
    training rows equal to the row. A row equal to training rows (distance 0 after
    ``transform``; a training row finds itself) has the mean and counts over those rows only.
    """
    if labels is not None:
        if not n_labels or n_labels < 1:
            raise ValueError(f"n_labels must be a positive integer with labels, got {n_labels!r}")
        column = da.asarray(labels).astype(np.float64)[:, None].rechunk({0: X_fit.chunks[0]})
        values = da.hstack([values.rechunk({0: X_fit.chunks[0]}), column])
    if tuple(values.chunks[0]) != tuple(X_fit.chunks[0]):
        values = values.rechunk({0: X_fit.chunks[0]})
    if len(values.chunks[1]) > 1:
        values = values.rechunk({1: -1})
    k = min(int(n_neighbors), X_fit.shape[0])
    means = blockwise_search(
        "extend",
        X,
        X_fit,
        k,
        functools.partial(_weighted_mean, weights, sigma, n_labels if labels is not None else 0),
        values=values,
        transform=transform,
        dtype=np.float32,
    )
    n_out = values.shape[1] if labels is None else values.shape[1] + n_labels
    return da.concatenate(
        [
            da.from_delayed(m, (n, n_out), dtype=np.float64)
            for m, n in zip(means, X.chunks[0], strict=True)
        ]
    )


__all__ = ["neighbour_mean"]
