"""The kNN graph as a scikit-learn transformer, for libraries that take a precomputed sparse
neighbours graph (scikit-learn's SpectralClustering, HDBSCAN, Isomap, TSNE; umap-learn)."""

from numbers import Integral

import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state

from .. import registry
from ..utils._random import draw_seed
from ..utils._threads import blas_for_dask
from ..utils._validation import as_row_chunked, validate_data
from ..validation import Interval, Registered, StrOptions, fit_context
from ._backends import exact_kneighbors
from ._build import resolve_backend
from ._chunking import graph_chunks


def _csr_rows(idx, dist, n_columns, mode):
    """One row block of the graph: row i holds columns ``idx[i]`` in that (nearest-first)
    order, with the distances or ones."""
    n, k = idx.shape
    data = dist.ravel() if mode == "distance" else np.ones(n * k)
    indptr = np.arange(0, n * k + 1, k)
    return sp.csr_matrix((data, idx.ravel(), indptr), shape=(n, n_columns))


class KNNGraphTransformer(TransformerMixin, BaseEstimator):
    """The kNN graph of X, built on the cluster, as a sparse matrix for other libraries.

    A drop-in for :class:`sklearn.neighbors.KNeighborsTransformer` (Euclidean metric) whose
    graph of the training data is searched with elmscale's graph backends, on the dask
    workers when a ``distributed.Client`` is active: exact up to 10,000 rows and the
    distributed cell search above (``graph="auto"``), as the estimators' graphs. Its output
    follows ``KNeighborsTransformer``'s convention exactly, so it can be fed to anything that
    accepts that transformer's output: ``SpectralClustering(affinity=
    "precomputed_nearest_neighbors")``, ``HDBSCAN(metric="precomputed")``,
    ``Isomap(metric="precomputed")``, ``TSNE(metric="precomputed")``, or umap-learn's
    ``precomputed_knn`` (see :func:`~elmscale.neighbors.knn_arrays`).

    Parameters
    ----------
    n_neighbors : int, default=5
        Neighbours of each point. In ``mode="distance"`` each row holds the point itself (at
        distance 0) and its ``n_neighbors`` nearest other points; in ``mode="connectivity"``
        it holds ``n_neighbors`` points, the point itself among them, as
        ``KNeighborsTransformer`` does.
    mode : {"distance", "connectivity"}, default="distance"
        Edge values: Euclidean distances, or ones.
    graph : "auto", str or callable, default="auto"
        The search backend for the training data, as the estimators' ``graph`` parameter: a
        registered graph backend (``elmscale.available("graph")``: "exact", "cells",
        "pynndescent", ...) or a callable with the backend protocol. "auto" is exact up to
        10,000 rows and "cells" above.
    random_state : int, RandomState or None, default=None
        Seed of approximate backends.

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen in ``fit``.
    n_samples_fit_ : int
        Number of training points (the graph's columns).
    fit_X_ : ndarray or dask array
        The training data, searched by :meth:`transform` for new points.
    recall_estimate_ : float or None
        After :meth:`fit_transform` with an approximate backend that estimates it (the
        "cells" search): the share of true nearest neighbours found for a sample of rows
        against an exact search. None otherwise.

    See Also
    --------
    elmscale.graph.knn_graph : the symmetrised graph and its Laplacian, as the estimators use it.

    Notes
    -----
    :meth:`fit_transform` searches the training data with ``graph``: the whole graph costs what
    the estimators' graph costs. :meth:`transform` of other points searches them exactly
    against every training row (O(n_query N d) work, split into blocks across the workers);
    call :meth:`fit_transform`, not ``fit(X).transform(X)``, for the graph of large training
    data. With an exact backend both give the same graph, ties ranked by row index.

    NumPy (or pandas) input gives a ``scipy.sparse`` CSR matrix of shape (n_query,
    ``n_samples_fit_``); dask input gives a lazy dask array of the same shape, chunked like X's
    rows, whose blocks are CSR matrices: ``.compute()`` stacks them into one CSR matrix and
    ``.blocks[i].compute()`` (or ``to_delayed()``) gives the rows of chunk i, for graphs too
    large for one machine. Within a row, columns are in neighbour order (nearest first), as in
    ``KNeighborsTransformer``.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from elmscale.neighbors import KNNGraphTransformer
    >>> X, _ = make_blobs(200, centers=3, random_state=0)
    >>> G = KNNGraphTransformer(n_neighbors=10).fit_transform(X)
    >>> G.shape, G.nnz
    ((200, 200), 2200)
    """

    _parameter_constraints = {
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "mode": [StrOptions({"distance", "connectivity"})],
        "graph": [StrOptions({"auto"}), Registered("graph"), callable],
        "random_state": ["random_state"],
    }

    def __init__(self, n_neighbors=5, *, mode="distance", graph="auto", random_state=None):
        self.n_neighbors = n_neighbors
        self.mode = mode
        self.graph = graph
        self.random_state = random_state

    @property
    def _n_others(self):
        """Neighbours per row other than the point itself."""
        return self.n_neighbors if self.mode == "distance" else self.n_neighbors - 1

    def _check_size(self, n_samples):
        if self._n_others >= n_samples:
            raise ValueError(
                f"n_neighbors={self.n_neighbors} with mode={self.mode!r} needs more than "
                f"{self._n_others} training samples, got n_samples={n_samples}"
            )

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Keep the training data X (n_samples, n_features) for :meth:`transform`.

        Parameters
        ----------
        X : array-like or dask array (n_samples, n_features)
        y : ignored

        Returns
        -------
        self : KNNGraphTransformer
        """
        self._fit(X)
        return self

    def _fit(self, X):
        """Validate X and keep it; returns ``(X as a row-chunked dask array, was_dask)``."""
        Xd, was_dask = validate_data(self, X, reset=True)
        self._check_size(Xd.shape[0])
        self.fit_X_ = Xd if was_dask else Xd.compute()
        self.n_samples_fit_ = Xd.shape[0]
        self.recall_estimate_ = None  # set by fit_transform's search when it estimates one
        return Xd, was_dask

    def transform(self, X):
        """The graph from the rows of X to their nearest training points (exact search).

        Parameters
        ----------
        X : array-like or dask array (n_query, n_features)

        Returns
        -------
        graph : scipy.sparse CSR matrix or dask array (n_query, ``n_samples_fit_``)
            Row i holds the ``n_neighbors`` nearest training points of X[i] (one more in
            ``mode="distance"``), nearest first.
        """
        Xq, was_dask = validate_data(self, X, reset=False)
        reference, _ = as_row_chunked(self.fit_X_, name="fit_X_")
        idx, dist = exact_kneighbors(Xq, reference, self._n_others + 1)
        return self._output(idx, dist, was_dask)

    @fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None):
        """Fit to X and return its graph, searched with the ``graph`` backend.

        Parameters
        ----------
        X : array-like or dask array (n_samples, n_features)
        y : ignored

        Returns
        -------
        graph : scipy.sparse CSR matrix or dask array (n_samples, n_samples)
            Row i holds i itself and its nearest other points (see ``n_neighbors``),
            nearest first; the diagonal is explicit.
        """
        Xd, was_dask = self._fit(X)
        n, rows = Xd.shape[0], Xd.chunks[0]
        idx = da.arange(n, chunks=(rows,))[:, None]  # the point itself, at distance 0
        dist = da.zeros((n, 1), chunks=(rows, 1))
        if self._n_others > 0:
            backend = registry.resolve("graph", resolve_backend(self.graph, n), "graph")
            seed = self.random_state
            if seed is not None and not isinstance(seed, Integral):
                seed = draw_seed(check_random_state(seed))
            # searched on the runs of chunks knn_graph searches on (fewer, larger exchanges)
            Xg = Xd.rechunk({0: graph_chunks(rows)})
            others, d = backend(Xg, self._n_others, random_state=seed)
            self.recall_estimate_ = getattr(backend, "recall_estimate_", None)
            idx = da.concatenate([idx, others.rechunk((rows, -1))], axis=1)
            dist = da.concatenate([dist, d.rechunk((rows, -1))], axis=1)
        return self._output(idx, dist, was_dask)

    def _output(self, idx, dist, was_dask):
        """The graph of the (n, k) neighbour lists: CSR blocks per row chunk, stacked into one
        CSR matrix for NumPy input."""
        graph = da.map_blocks(
            _csr_rows,
            idx.rechunk({1: -1}),
            dist.rechunk({1: -1}),
            self.n_samples_fit_,
            self.mode,
            dtype=np.float64,
            chunks=(idx.chunks[0], (self.n_samples_fit_,)),
            meta=sp.csr_matrix((0, 0)),
        )
        if was_dask:
            return graph
        with blas_for_dask(graph):
            return graph.compute()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.transformer_tags.preserves_dtype = []
        return tags


def knn_arrays(graph):
    """``(indices, distances)`` arrays (n_samples, k) of a graph from
    :meth:`KNNGraphTransformer.fit_transform` (``mode="distance"``), the point itself first:
    the form umap-learn's ``UMAP(precomputed_knn=(indices, distances, None))`` and
    pynndescent take.

    Parameters
    ----------
    graph : scipy.sparse CSR matrix
        Every row with the same number of entries, in neighbour order.

    Returns
    -------
    indices : int64 ndarray (n_samples, k)
    distances : float ndarray (n_samples, k)
    """
    graph = sp.csr_matrix(graph)
    counts = np.diff(graph.indptr)
    if len(counts) == 0 or (counts != counts[0]).any():
        raise ValueError(
            "graph must have the same number of entries in every row (the output of "
            "KNNGraphTransformer), got rows with between "
            f"{counts.min(initial=0)} and {counts.max(initial=0)}"
        )
    k = int(counts[0])
    return graph.indices.reshape(-1, k).astype(np.int64), graph.data.reshape(-1, k)


__all__ = ["KNNGraphTransformer", "knn_arrays"]
