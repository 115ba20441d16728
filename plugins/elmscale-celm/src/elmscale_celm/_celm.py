"""C-ELM-FS: k-means clustering in the ELM feature space.

Written on elmscale's public estimator template, so it runs wherever elmscale runs (NumPy on
the client's threads, or dask arrays on a ``distributed`` cluster) and its fit is the
built-ins' fit: ``elmscale.BaseELM.fit`` validates the parameters and X, draws the hidden
layer H = g(XA + b) (``elmscale.hidden``) from the random state, runs the dask work with one
BLAS thread per task, records ``timings_``, and calls the one hook written here,
``solve_reduced``, which runs ``elmscale.cluster.kmeans`` (Lloyd's k-means on the cluster,
restarts batched per pass) on H.
"""

from numbers import Integral, Real

import numpy as np
from elmscale import BaseELM
from elmscale.cluster import kmeans
from elmscale.utils import draw_seed
from elmscale.validation import Interval
from sklearn.base import ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted


def elm_feature_kmeans(
    features, n_clusters, *, n_init=10, max_iter=300, tol=1e-4, init_size=None, random_state=None
):
    """k-means on the rows of H: the function half of :class:`CELM`.

    Parameters
    ----------
    features : elmscale.hidden.HiddenFeatures
        H of the data; its row blocks are built (or read from worker memory) where X lives.
    n_clusters, n_init, max_iter, tol, random_state
        As in ``elmscale.cluster.kmeans``.
    init_size : int or None
        Rows of H sampled to the client for the k-means++ starts;
        None uses ``max(1000, 3 * n_clusters)``.

    Returns
    -------
    centers : ndarray (n_clusters, n_hidden)
    labels : dask array of int64 (n_samples,)
    inertia : float
    n_iter : int
    """
    if init_size is None:
        init_size = max(1000, 3 * n_clusters)
    return kmeans(
        features.H,
        n_clusters,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        random_state=random_state,
        init_sample=init_size,
    )


class CELM(ClusterMixin, TransformerMixin, BaseELM):
    """C-ELM-FS: k-means on the hidden-layer features H = g(X A + b) of a random ELM layer.

    The simplest ELM clustering method (He, Jin, Du, Zhuang and Shi 2014, "Clustering in extreme
    learning machine feature space", the ELM-JEC paper's related work): map the data through
    a random hidden layer, then run k-means there. Unlike US-ELM it needs no graph.

    Parameters
    ----------
    n_clusters : int, default=8
    n_hidden : int, default=1000
        Hidden nodes n_h: the dimension k-means works in.
    activation : str or callable, default="sigmoid"
        A registered activation name (``elmscale.available("activation")``) or a callable.
    scaling : {"standard", "minmax"} or None, default="standard"
        Per-feature scaling of X before the hidden layer.
    n_init : int, default=10
        k-means restarts (all run in the same passes over H).
    max_iter : int, default=300
    tol : float, default=1e-4
        Relative to the mean feature variance of the initial sample.
    init_size : int or None, default=None
        Rows of H sampled to the client for k-means++; None uses ``max(1000, 3 n_clusters)``.
    cache : "auto" or bool, default="auto"
        Keep H's blocks in worker memory across the k-means passes (see
        ``elmscale.hidden.HiddenFeatures``).
    random_state : int, RandomState or None

    Attributes
    ----------
    hidden_layer_ : elmscale.hidden.RandomHiddenLayer
    cluster_centers_ : ndarray (n_clusters, n_hidden)
        Centres in the ELM feature space.
    labels_ : ndarray or dask array (n_samples,)
        NumPy for NumPy input, dask for dask input.
    inertia_ : float
    n_iter_ : int
    n_features_in_ : int

    Notes
    -----
    Cost: one pass over X for the scaling, then one pass over H per Lloyd iteration (all
    restarts together). H (N x n_hidden) is never gathered to the client: each task builds or
    reads its block of H, and only per-cluster sums and counts (n_init x n_clusters x
    n_hidden) come back. The only rows of H on the client are the ``init_size`` rows of the
    k-means++ sample.

    References
    ----------
    Q. He, X. Jin, C. Du, F. Zhuang and Z. Shi, "Clustering in extreme learning machine
    feature space", Neurocomputing 128, 2014.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from elmscale_celm import CELM
    >>> X, y = load_iris(return_X_y=True)
    >>> model = CELM(n_clusters=3, n_hidden=100, random_state=0).fit(X)
    >>> model.cluster_centers_.shape
    (3, 100)
    >>> sorted(set(model.labels_.tolist()))
    [0, 1, 2]
    """

    _parameter_constraints = {
        **BaseELM._parameter_constraints,  # n_hidden, activation, scaling, cache, random_state
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "init_size": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        n_hidden=1000,
        activation="sigmoid",
        scaling="standard",
        n_init=10,
        max_iter=300,
        tol=1e-4,
        init_size=None,
        cache="auto",
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.n_hidden = n_hidden
        self.activation = activation
        self.scaling = scaling
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.init_size = init_size
        self.cache = cache
        self.random_state = random_state

    def solve_reduced(self, reduction, rng):
        """k-means on H (the template has validated X and drawn the hidden layer)."""
        centers, labels, inertia, n_iter = elm_feature_kmeans(
            reduction.features,
            self.n_clusters,
            n_init=self.n_init,
            max_iter=self.max_iter,
            tol=self.tol,
            init_size=self.init_size,
            random_state=draw_seed(rng),
        )
        self.cluster_centers_ = centers
        self.labels_ = self.as_output(
            labels.persist() if reduction.was_dask else labels, reduction.was_dask
        )
        self.inertia_ = inertia
        self.n_iter_ = n_iter

    def _distances(self, X):
        check_is_fitted(self, "cluster_centers_")
        Xd, was_dask = self.validate_X(X, reset=False)
        H = self.hidden_layer_.transform(Xd)
        D = H.map_blocks(
            _center_distances,
            self.cluster_centers_,
            dtype=np.float64,
            chunks=(H.chunks[0], (self.n_clusters,)),
            meta=np.empty((0, 0), dtype=np.float64),
        )
        return D, was_dask

    def transform(self, X):
        """Distances from each row's hidden features to the cluster centres
        (n_samples x n_clusters), as ``sklearn.cluster.KMeans.transform``."""
        D, was_dask = self._distances(X)
        return self.as_output(D, was_dask)

    def predict(self, X):
        """Index of the nearest centre in the ELM feature space (works on unseen points)."""
        D, was_dask = self._distances(X)
        labels = D.map_blocks(
            np.argmin, axis=1, drop_axis=1, dtype=np.int64, meta=np.empty((0,), dtype=np.int64)
        )
        return self.as_output(labels, was_dask)

    def fit_transform(self, X, y=None):
        """Fit, then the distances of X to the cluster centres."""
        return self.fit(X).transform(X)


def _center_distances(H, centers):
    H = H.astype(np.float64, copy=False)
    d2 = (
        np.einsum("ij,ij->i", H, H)[:, None]
        - 2.0 * H @ centers.T
        + np.einsum("ij,ij->i", centers, centers)[None, :]
    )
    return np.sqrt(np.maximum(d2, 0.0, out=d2), out=d2)


__all__ = ["CELM", "elm_feature_kmeans"]
