"""The kNN graph as a scikit-learn transformer, for libraries that take a precomputed sparse
neighbours graph (scikit-learn's SpectralClustering, HDBSCAN, Isomap, TSNE; umap-learn)."""

from numbers import Integral, Real

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state

from ..utils._random import draw_seed
from ..utils._threads import blas_for_dask
from ..utils._validation import as_row_chunked, validate_data
from ..validation import Interval, Registered, StrOptions, fit_context
from ._backends import exact_kneighbors
from ._build import DEFAULT_TARGET_RECALL, backend_callable, union_blocks
from ._chunking import graph_chunks
from ._select import BLOCK_VALUES, _error_bound, exact_sq_distances
from ._tasks import task


def _csr_rows(idx, dist, n_columns, mode):
    """One row block of the graph: row i holds columns ``idx[i]`` in that (nearest-first)
    order, with the distances or ones."""
    n, k = idx.shape
    data = dist.ravel() if mode == "distance" else np.ones(n * k)
    indptr = np.arange(0, n * k + 1, k)
    return sp.csr_matrix((data, idx.ravel(), indptr), shape=(n, n_columns))


def _union_rows(rows, cols, dist, n_rows, n_columns, mode):
    """The CSR matrix (n_rows, n_columns) of the edges ``(rows[e], cols[e])`` at distance
    ``dist[e]``, each pair once with the larger of its distances (the two directions of a
    distance agree up to rounding; one value for both keeps the union exactly symmetric),
    and each row's columns nearest first, ties by column: scikit-learn's precomputed-graph
    consumers want rows sorted by value. Zero distances (the point itself) stay explicit."""
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    dist = np.asarray(dist, np.float64)
    order = np.argsort(rows * n_columns + cols, kind="stable")
    key = (rows * n_columns + cols)[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    d = np.maximum.reduceat(dist[order], np.flatnonzero(first)) if len(key) else dist
    r, c = rows[order[first]], cols[order[first]]
    order = np.lexsort((c, d, r))
    r, c, d = r[order], c[order], d[order]
    data = d if mode == "distance" else np.ones(len(d))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n_rows))])
    return sp.csr_matrix((data, c, indptr), shape=(n_rows, n_columns))


def _union_block(idx, dist, start, stop, n_columns, mode, source_starts, reverse):
    """Rows [start, stop) of the symmetric graph: their own lists and the reverse edges of
    the chunks (first rows ``source_starts``) whose lists hold them."""
    n, k = idx.shape
    rows, cols, dists = [np.repeat(np.arange(n), k)], [idx.ravel()], [dist.ravel()]
    for s_start, (target, source, d) in zip(source_starts, reverse, strict=True):
        rows.append(target - start)
        cols.append(source + s_start)
        dists.append(d)
    return _union_rows(
        np.concatenate(rows), np.concatenate(cols), np.concatenate(dists), n, n_columns, mode
    )


def _within_radius(Xq, Xr, radius, r_start):
    """The pairs of a query row and a reference row no farther apart than the reference
    row's ``radius``: ``(query rows, global reference rows, distances)``. A matrix product
    proposes the pairs (with a bound on its rounding error); their distances are recomputed
    as the search computes them (``sum((x - y)^2)``, a function of the two rows alone)."""
    Xq, Xr = np.asarray(Xq, np.float64), np.asarray(Xr, np.float64)
    q_sq, r_sq = np.einsum("ij,ij->i", Xq, Xq), np.einsum("ij,ij->i", Xr, Xr)
    step = max(1, BLOCK_VALUES // max(len(Xr), 1))
    found = [np.empty(0, np.int64), np.empty(0, np.int64)]
    for lo in range(0, len(Xq), step):
        a_sq = q_sq[lo : lo + step, None]
        d2 = a_sq + r_sq - 2.0 * (Xq[lo : lo + step] @ Xr.T)
        slack = _error_bound(a_sq, r_sq, Xq.shape[1], np.float64)
        i, j = np.nonzero(d2 <= radius**2 + slack)
        found = [np.concatenate([found[0], i + lo]), np.concatenate([found[1], j])]
    i, j = found
    d = np.sqrt(exact_sq_distances(Xq, i, Xr, j))
    keep = d <= radius[j]
    return i[keep], j[keep] + r_start, d[keep]


def _query_rows(idx, dist, n_columns, mode, *hits):
    """A query chunk's rows of the symmetric graph: its nearest training points and the
    training points whose radius reaches it (``hits``, one per reference chunk)."""
    n, k = idx.shape
    parts = [(np.repeat(np.arange(n), k), idx.ravel(), dist.ravel()), *hits]
    rows, cols, dists = (np.concatenate(p) for p in zip(*parts, strict=True))
    return _union_rows(rows, cols, dists, n, n_columns, mode)


class KNNGraphTransformer(TransformerMixin, BaseEstimator):
    """The kNN graph of X, built on the cluster, as a sparse matrix for other libraries.

    :class:`sklearn.neighbors.KNeighborsTransformer`'s graph (Euclidean metric) whose
    graph of the training data is searched with elmscale's graph backends, on the dask
    workers when a ``distributed.Client`` is active: exact up to 10,000 rows and the
    distributed cell search above (``graph="auto"``), as the estimators' graphs. By default
    it is symmetric (the union of both directions' edges), the form every precomputed-graph
    consumer accepts, so that it goes straight into a pipeline::

        make_pipeline(KNNGraphTransformer(n_neighbors=15), umap.UMAP(metric="precomputed"))

    as into ``HDBSCAN(metric="precomputed")``, ``SpectralClustering(affinity=
    "precomputed_nearest_neighbors")``, ``Isomap(metric="precomputed")`` or
    ``TSNE(metric="precomputed")``. umap-learn and HDBSCAN reject a graph that is not
    symmetric, which ``KNeighborsTransformer``'s (``symmetric=False`` here) is not.

    Parameters
    ----------
    n_neighbors : int, default=5
        Neighbours of each point. In ``mode="distance"`` each row holds the point itself (at
        distance 0) and its ``n_neighbors`` nearest other points; in ``mode="connectivity"``
        it holds ``n_neighbors`` points, the point itself among them, as
        ``KNeighborsTransformer`` does. With ``symmetric=True`` a row also holds the points
        that have it among theirs.
    mode : {"distance", "connectivity"}, default="distance"
        Edge values: Euclidean distances, or ones.
    symmetric : bool, default=True
        True: the union graph, ``G[i, j] = G[j, i] = ||xi - xj||`` when j is among the
        neighbours of i or i among those of j; every row keeps scikit-learn's conventions
        (the point itself as an explicit 0, at least its own ``n_neighbors`` nearest, nearest
        first), so a consumer that keeps each row's k nearest entries still finds the kNN
        graph. False: exactly ``KNeighborsTransformer``'s directed graph, ``n_neighbors`` (+1)
        entries per row, the form :func:`~elmscale.neighbors.knn_arrays` reads for
        umap-learn's ``precomputed_knn``.
    graph : "auto", str or callable, default="auto"
        The search backend for the training data, as the estimators' ``graph`` parameter: a
        registered graph backend (``elmscale.available("graph")``: "exact", "cells",
        "pynndescent", ...) or a callable with the backend protocol. "auto" is exact up to
        10,000 rows and above it the cell search for ``target_recall``.
    target_recall : float in (0, 1] or None, default=0.98
        With ``graph="auto"`` above 10,000 rows: the recall@k the search aims for, as
        :func:`~elmscale.graph.knn_graph`'s; None for the estimators' fixed search (faster,
        with whatever recall the data gives). ``recall_estimate_`` reports what it reached.
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
        After :meth:`fit_transform` (or :meth:`fit` with ``symmetric=True``) with an
        approximate backend that estimates it (the "cells" search): the share of true nearest
        neighbours found for a sample of rows against an exact search. None otherwise.
    radius_ : ndarray or dask array (n_samples,) or None
        With ``symmetric=True``: each training point's distance to its farthest listed
        neighbour. A query is among a training point's neighbours when it is no farther than
        that; :meth:`transform` adds those training points to the query's row.

    See Also
    --------
    elmscale.graph.knn_graph : the symmetrised graph and its Laplacian, as the estimators use it.

    Notes
    -----
    :meth:`fit_transform` searches the training data with ``graph``: the whole graph costs what
    the estimators' graph costs. :meth:`transform` of other points searches them exactly
    against every training row (O(n_query N d) work, split into blocks across the workers);
    call :meth:`fit_transform`, not ``fit(X).transform(X)``, for the graph of large training
    data. With an exact backend both give the same graph, ties ranked by row index (with
    ``symmetric=True``, up to points tied at a training point's ``radius_``, which
    :meth:`transform` keeps). With ``symmetric=True``, :meth:`fit` searches the training
    graph too (for ``radius_``), and the symmetric graph of a dask array takes one exchange of
    the reverse edges between its row chunks (the data does not move).

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
    >>> G = KNNGraphTransformer(n_neighbors=10, symmetric=False).fit_transform(X)
    >>> G.shape, G.nnz
    ((200, 200), 2200)
    >>> S = KNNGraphTransformer(n_neighbors=10).fit_transform(X)
    >>> (S != S.T).nnz, S.nnz > G.nnz
    (0, True)
    """

    _parameter_constraints = {
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "mode": [StrOptions({"distance", "connectivity"})],
        "symmetric": ["boolean"],
        "graph": [StrOptions({"auto"}), Registered("graph"), callable],
        "target_recall": [Interval(Real, 0, 1, closed="right"), None],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_neighbors=5,
        *,
        mode="distance",
        symmetric=True,
        graph="auto",
        target_recall=DEFAULT_TARGET_RECALL,
        random_state=None,
    ):
        self.n_neighbors = n_neighbors
        self.mode = mode
        self.symmetric = symmetric
        self.graph = graph
        self.target_recall = target_recall
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
        """Keep the training data X (n_samples, n_features) for :meth:`transform`; with
        ``symmetric=True`` also search its graph for ``radius_``.

        Parameters
        ----------
        X : array-like or dask array (n_samples, n_features)
        y : ignored

        Returns
        -------
        self : KNNGraphTransformer
        """
        Xd, was_dask = self._fit(X)
        if self.symmetric:
            self._neighbour_lists(Xd, was_dask)
        return self

    def _fit(self, X):
        """Validate X and keep it; returns ``(X as a row-chunked dask array, was_dask)``."""
        Xd, was_dask = validate_data(self, X, reset=True)
        self._check_size(Xd.shape[0])
        self.fit_X_ = Xd if was_dask else Xd.compute()
        self.n_samples_fit_ = Xd.shape[0]
        self.recall_estimate_ = None  # set by the search when it estimates one
        self.radius_ = None
        return Xd, was_dask

    def _neighbour_lists(self, Xd, was_dask):
        """The training graph's directed lists ``(idx, dist)`` (n, 1 + others), the point
        itself first, searched with the ``graph`` backend and chunked like Xd's rows. With
        ``symmetric=True`` they are persisted and set ``radius_``."""
        n, rows = Xd.shape[0], Xd.chunks[0]
        idx = da.arange(n, chunks=(rows,))[:, None]  # the point itself, at distance 0
        dist = da.zeros((n, 1), chunks=(rows, 1))
        if self._n_others > 0:
            backend = backend_callable(
                self.graph, n, target_recall=self.target_recall, param="graph"
            )
            seed = self.random_state
            if seed is not None and not isinstance(seed, Integral):
                seed = draw_seed(check_random_state(seed))
            # searched on the runs of chunks knn_graph searches on (fewer, larger exchanges)
            Xg = Xd.rechunk({0: graph_chunks(rows)})
            others, d = backend(Xg, self._n_others, random_state=seed)
            self.recall_estimate_ = getattr(backend, "recall_estimate_", None)
            idx = da.concatenate([idx, others.rechunk((rows, -1))], axis=1)
            dist = da.concatenate([dist, d.rechunk((rows, -1))], axis=1)
        if self.symmetric:
            idx, dist = dask.persist(idx.rechunk({1: -1}), dist.rechunk({1: -1}))
            # no other neighbours: no training point has a query among them
            radius = dist[:, -1] if self._n_others > 0 else da.full(n, -np.inf, chunks=rows)
            with blas_for_dask(radius):
                self.radius_ = radius.persist() if was_dask else radius.compute()
        return idx, dist

    def transform(self, X):
        """The graph from the rows of X to their nearest training points (exact search).

        Parameters
        ----------
        X : array-like or dask array (n_query, n_features)

        Returns
        -------
        graph : scipy.sparse CSR matrix or dask array (n_query, ``n_samples_fit_``)
            Row i holds the ``n_neighbors`` nearest training points of X[i] (one more in
            ``mode="distance"``), nearest first; with ``symmetric=True`` also the training
            points that would have X[i] among their neighbours (no farther than their
            ``radius_``), so that the rows of the training data are those of
            :meth:`fit_transform`.
        """
        Xq, was_dask = validate_data(self, X, reset=False)
        reference, _ = as_row_chunked(self.fit_X_, name="fit_X_")
        idx, dist = exact_kneighbors(Xq, reference, self._n_others + 1)
        if not self.symmetric:
            return self._output(idx, dist, was_dask)
        radius = da.asarray(self.radius_).rechunk((reference.chunks[0],))
        r_starts = np.concatenate([[0], np.cumsum(reference.chunks[0])]).astype(np.int64)
        pieces = list(
            zip(
                reference.to_delayed(optimize_graph=False).ravel(),
                radius.to_delayed(optimize_graph=False).ravel(),
                r_starts[:-1].tolist(),
                strict=True,
            )
        )
        blocks = [
            task(
                "query-rows",
                _query_rows,
                i,
                d,
                self.n_samples_fit_,
                self.mode,
                *(task("within-radius", _within_radius, q, *piece) for piece in pieces),
            )
            for q, i, d in zip(
                *(arr.to_delayed(optimize_graph=False).ravel() for arr in (Xq, idx, dist)),
                strict=True,
            )
        ]
        return self._stacked(blocks, Xq.chunks[0], was_dask)

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
            Row i holds i itself and its nearest other points (see ``n_neighbors``), with
            ``symmetric=True`` also the points that have i among theirs, nearest first; the
            diagonal is explicit.
        """
        Xd, was_dask = self._fit(X)
        idx, dist = self._neighbour_lists(Xd, was_dask)
        if not self.symmetric:
            return self._output(idx, dist, was_dask)
        starts = np.concatenate([[0], np.cumsum(Xd.chunks[0])]).astype(np.int64)
        blocks = union_blocks(
            "union", _union_block, idx, dist, starts, self.n_samples_fit_, self.mode
        )
        return self._stacked(blocks, Xd.chunks[0], was_dask)

    def _stacked(self, blocks, rows, was_dask):
        """Delayed CSR row blocks as a dask array of these row chunks, or, for NumPy input,
        computed and stacked into one CSR matrix."""
        graph = da.concatenate(
            [
                da.from_delayed(
                    blk, (n, self.n_samples_fit_), dtype=np.float64, meta=sp.csr_matrix((0, 0))
                )
                for blk, n in zip(blocks, rows, strict=True)
            ]
        )
        if was_dask:
            return graph
        with blas_for_dask(graph):
            return graph.compute()

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
    :meth:`KNNGraphTransformer.fit_transform` (``mode="distance"``, ``symmetric=False``), the
    point itself first: the form umap-learn's ``UMAP(precomputed_knn=(indices, distances,
    None))`` and pynndescent take.

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
            "KNNGraphTransformer(symmetric=False)), got rows with between "
            f"{counts.min(initial=0)} and {counts.max(initial=0)}"
        )
    k = int(counts[0])
    return graph.indices.reshape(-1, k).astype(np.int64), graph.data.reshape(-1, k)


__all__ = ["KNNGraphTransformer", "knn_arrays"]
