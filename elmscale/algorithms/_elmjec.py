"""ELM-JEC: joint embedding and clustering (Liu, Lekamalage, Huang and Lin 2017, Algorithm 1)."""

import logging
import warnings
from numbers import Integral, Real

import dask
import numpy as np
import scipy.linalg as sla
from sklearn.exceptions import ConvergenceWarning

from ..base import BaseELM
from ..cluster import kmeans
from ..exceptions import ElmscaleWarning
from ..gram import contingency, hidden_stats, matched_label_sums, name_match
from ..hidden import HiddenFeatures, ProjectedLayer
from ..mixins import EmbeddingClusterMixin, GraphMixin
from ..solvers import sign_flip
from ..sweep import sweep
from ..utils._random import draw_seed
from ..validation import Interval, StrOptions
from ._embedding import resolve_n_components

logger = logging.getLogger(__name__)

#: Directions v of the centred hidden space with ||H~ v||^2 <= RANGE_RTOL * ||H~||_2^2 are
#: treated as the null space of H~ (see :class:`ELMJECReduced`).
RANGE_RTOL = 1e-10
#: Eigenvalues of H~^T M H~ at most this times its largest |eigenvalue| count as non-positive.
POSITIVE_RTOL = 1e-10
#: ``n_basis="auto"``: the whole range up to this many rows (H is small there and the
#: iterations over it cheap); above, this many directions per embedding component, and at
#: least BASIS_MIN (see :meth:`ELMJECReduced.restrict`)
BASIS_MIN_ROWS = 10_000
BASIS_PER_COMPONENT = 4
BASIS_MIN = 64
#: Lloyd iterations allowed to each k-means run inside ELM-JEC.
KMEANS_MAX_ITER = 100

HISTORY_KEYS = (
    "objective",
    "kmeans_objective",
    "baseline_kmeans_objective",
    "accepted",
    "n_changed",
    "n_components",
)


class FewerComponentsWarning(ElmscaleWarning):
    """H~^T M H~ had fewer than ``n_components`` positive eigenvalues (see ELMJEC's Notes)."""


class ELMJECReduced:
    """The part of ELM-JEC that depends on the data only through H^T H, H^T 1, N, H^T L H.

    Built once per fit (and once for a whole (lam, gamma, n_components) grid). It centres the
    Gram matrix, ``H~^T H~ = H^T H - N mu mu^T`` with ``mu = H^T 1 / N``, uses
    ``H~^T L H~ = H^T L H`` (L annihilates constants), and restricts every later
    eigenproblem to the numerical range of H~^T: the eigenvectors V_r of H~^T H~ whose
    eigenvalue exceeds ``range_rtol`` times the largest. A direction outside that range gives
    an (almost) all-zero embedding column ``H~ v`` whatever lam and gamma are, so nothing is
    lost, and each iteration then solves an r x r eigenproblem (r = ``rank_``) instead of an
    n_hidden x n_hidden one.

    Every solve works in the coordinates of ``basis`` (V_r, or a subspace of it from
    :meth:`restrict`): beta = basis Y, and a labelling F enters only through
    ``T = basis^T H~^T F`` (:meth:`in_basis`), so an iteration that knows T and the rows
    ``H~ basis`` needs nothing of H itself.

    Parameters
    ----------
    hth : ndarray (n_hidden, n_hidden)
        H^T H.
    colsum : ndarray (n_hidden,)
        H^T 1.
    count : float
        N.
    htlh : ndarray (n_hidden, n_hidden)
        H^T L H.
    range_rtol : float
    """

    def __init__(self, hth, colsum, count, htlh, *, range_rtol=RANGE_RTOL):
        hth = np.asarray(hth, dtype=np.float64)
        self.count = float(count)
        self.mean = np.asarray(colsum, dtype=np.float64) / self.count
        hth_c = hth - self.count * np.outer(self.mean, self.mean)
        w, V = sla.eigh(0.5 * (hth_c + hth_c.T), check_finite=False)
        keep = w > range_rtol * max(w[-1], np.finfo(float).tiny)
        self.basis = V[:, keep]  # V_r, n_hidden x r, orthonormal
        self._rank = self.basis.shape[1]
        self.gram = np.diag(w[keep])  # V_r^T H~^T H~ V_r
        htlh = np.asarray(htlh, dtype=np.float64)
        Lr = self.basis.T @ htlh @ self.basis
        self.laplacian = 0.5 * (Lr + Lr.T)  # V_r^T H^T L H V_r

    @property
    def rank_(self):
        """Dimension of the numerical range of H~^T (the full basis's width)."""
        return self._rank

    def restrict(self, htf, sizes, lam, gamma, n_basis):
        """The same problem with beta confined to the ``n_basis`` leading eigenvectors of
        ``H~^T M H~`` for the labelling (htf, sizes) (eqs. 13-14 at that F), as a new
        :class:`ELMJECReduced`; this one when ``n_basis`` is None or at least the basis's
        width (nothing to restrict).

        The subspace holds the solution for that F exactly (its top ``n_components``
        eigenvectors, for ``n_components <= n_basis``); later labellings change M only by
        the clustering term, a rank-``n_clusters`` change, and their solutions are taken as
        the best within it (a Rayleigh-Ritz projection)."""
        r = self.basis.shape[1]
        if n_basis is None or n_basis >= r:
            return self
        _, Q = _top_eigh(self.reduced_matrix(htf, sizes, lam, gamma), n_basis)
        sub = object.__new__(type(self))
        sub.count, sub.mean, sub._rank = self.count, self.mean, self._rank
        sub.basis = self.basis @ Q
        sub.gram = _symmetric(Q.T @ self.gram @ Q)
        sub.laplacian = _symmetric(Q.T @ self.laplacian @ Q)
        return sub

    def centred_htf(self, htf, sizes):
        """H~^T F = H^T F - mu (1^T F)."""
        return np.asarray(htf, dtype=np.float64) - np.outer(self.mean, sizes)

    def in_basis(self, htf, sizes):
        """``T = basis^T H~^T F`` from H^T F (uncentred) and the sizes 1^T F."""
        return self.basis.T @ self.centred_htf(htf, sizes)

    def reduced_matrix(self, htf, sizes, lam, gamma):
        """basis^T H~^T M H~ basis (symmetric): the eigenproblem of eqs. 13-14 in the range
        of H~^T. Arguments as :meth:`solve`."""
        return self._matrix(self.in_basis(htf, sizes), sizes, lam, gamma)

    def _matrix(self, T, sizes, lam, gamma):
        sizes = np.asarray(sizes, dtype=np.float64)
        nz = sizes > 0
        C = T[:, nz] / np.sqrt(sizes[nz])  # basis^T H~^T F (F^T F)^-1/2
        return _symmetric((1.0 - lam) * self.gram - gamma * self.laplacian + lam * (C @ C.T))

    def solve(self, htf, sizes, lam, gamma, n_components):
        """beta, G and the objective for one labelling F (eqs. 10, 13-14).

        Parameters
        ----------
        htf : ndarray (n_hidden, n_clusters)
            H^T F (uncentred; F one-hot).
        sizes : ndarray (n_clusters,)
            Cluster sizes 1^T F. Empty clusters are left out of (F^T F)^-1 (their columns of
            F are zero, so they contribute nothing) and get a zero column in G.
        lam, gamma : float
        n_components : int
            Upper bound on the number of components (see the trap in ELMJEC's Notes).

        Returns
        -------
        beta : ndarray (n_hidden, n_kept), orthonormal columns with fixed signs
        eigenvalues : ndarray (n_kept,), descending: Tr(beta^T H~^T M H~ beta) per column
        G : ndarray (n_kept, n_clusters), the cluster centres in the embedding (eq. 10)
        objective : float, eq. 6 at (beta, F)
        """
        Y, eigenvalues, G, objective = self.solve_in_basis(
            self.in_basis(htf, sizes), sizes, lam, gamma, n_components
        )
        return self.basis @ Y, eigenvalues, G, objective

    def solve_in_basis(self, T, sizes, lam, gamma, n_components):
        """:meth:`solve` from ``T = basis^T H~^T F`` (:meth:`in_basis`): ``(Y, eigenvalues,
        G, objective)`` with beta = basis Y."""
        sizes = np.asarray(sizes, dtype=np.float64)
        nz = sizes > 0
        S = self._matrix(T, sizes, lam, gamma)
        w, Y = _top_eigh(S, n_components)
        k = _count_positive(S, w)
        if k == 0:
            raise ValueError(
                f"H~^T M H~ has no positive eigenvalue for lam={lam!r}, gamma={gamma!r}: every "
                "embedding direction lowers objective (6). Lower gamma (or lam)."
            )
        Y = Y[:, :k]
        beta = self.basis @ Y
        Y = Y * np.sign(np.einsum("ij,ij->j", sign_flip(beta), beta))  # beta's signs fixed
        G = np.zeros((k, len(sizes)))
        G[:, nz] = (Y.T @ T[:, nz]) / sizes[nz]
        return Y, w[:k].copy(), G, float(w[:k].sum())

    def kmeans_objective(self, beta, htf, sizes):
        """Exact k-means objective of F in E = H~ beta: Tr(E^T E) - Tr(E^T P_F E)."""
        sizes = np.asarray(sizes, dtype=np.float64)
        nz = sizes > 0
        B = self.basis.T @ beta
        total = float(np.einsum("ij,ik,kj->", B, self.gram, B))
        EF = beta.T @ self.centred_htf(htf, sizes)[:, nz]
        return total - float(((EF**2).sum(axis=0) / sizes[nz]).sum())


def _symmetric(S):
    return 0.5 * (S + S.T)


def _top_eigh(S, n):
    """The n largest eigenpairs of the symmetric S, in descending order.

    Only these are ever used, so LAPACK's MRRR driver (syevr) computes just them after the
    tridiagonal reduction, at a fraction of the cost of the full decomposition."""
    r = S.shape[0]
    n = min(n, r)
    if n == 0:
        return np.zeros(0), np.zeros((r, 0))
    w, Y = sla.eigh(S, subset_by_index=[r - n, r - 1], driver="evr", check_finite=False)
    return w[::-1], Y[:, ::-1]


def _count_positive(S, w):
    """How many of the descending top eigenvalues w of S exceed POSITIVE_RTOL * max|eig(S)|.

    The threshold needs S's spectral radius, and the smallest eigenvalue was not computed.
    ``min(||S||_F, ||S||_inf)`` bounds the radius from above, so every eigenvalue above
    POSITIVE_RTOL times that bound is positive under the exact threshold too, and none <= 0
    is. Only if one lies in between is the smallest eigenvalue computed, so the count always
    equals the one from the full spectrum."""
    bound = min(np.linalg.norm(S, "fro"), np.abs(S).sum(axis=1).max(initial=0.0))
    tiny = np.finfo(float).tiny
    ambiguous = (w > 0) & (w <= POSITIVE_RTOL * max(bound, tiny))
    if not ambiguous.any():
        return int(np.count_nonzero(w > 0))
    w_min = sla.eigh(S, eigvals_only=True, subset_by_index=[0, 0], check_finite=False)[0]
    scale = max(abs(w[0]), abs(w_min), tiny)
    return int(np.count_nonzero(w > POSITIVE_RTOL * scale))


def elmjec_embedding(hth, colsum, count, htlh, htf, sizes, lam, gamma, n_components):
    """ELM-JEC output weights from the reduced matrices, for one labelling F.

    The function half of :class:`ELMJEC`. Returns ``(beta, eigenvalues, G, objective)`` as
    :meth:`ELMJECReduced.solve`; to solve many settings or labellings over the same Grams,
    build one :class:`ELMJECReduced` and call its ``solve``.
    """
    return ELMJECReduced(hth, colsum, count, htlh).solve(htf, sizes, lam, gamma, n_components)


def _center_rows(block, shift):
    return block - shift


def _record(history, *values):
    """Append one iteration's values to the lists of ``history`` (keys ``HISTORY_KEYS``)."""
    for key, val in zip(HISTORY_KEYS, values, strict=True):
        history[key].append(val)


class _IterationSpace:
    """What Algorithm 1's iterations read, for the basis they solve in.

    With the full basis (``n_basis`` None or at least the rank) the rows are H's own (cached
    or rebuilt, as the estimator's ``cache`` says) and the label sums H^T F; in a subspace
    they are ``P = H~ basis`` (:class:`~elmscale.hidden.ProjectedLayer`), N x ``n_basis``,
    built in one pass and held as ``cache`` says, and the label sums ``T = P^T F``. The
    embedding is ``E = P Y`` (or ``H~ basis Y``) either way."""

    def __init__(self, estimator, reduction, reduced):
        self.reduced = reduced
        self.full = reduced is reduction.stats["reduced"]  # restrict() left it whole
        if self.full:
            self.features = reduction.features
        else:
            layer = ProjectedLayer(estimator.hidden_layer_, reduced.mean, reduced.basis)
            self.features = HiddenFeatures(reduction.X, layer, cache=estimator.cache)

    def start_sums(self, htf, sizes):
        """The label sums of the first labelling from its H^T F (the Gram pass's)."""
        return htf if self.full else self.reduced.in_basis(htf, sizes)

    def solve(self, sums, sizes, lam, gamma, n_components):
        """``(Y, eigenvalues, G, objective)`` (:meth:`ELMJECReduced.solve_in_basis`)."""
        T = self.reduced.in_basis(sums, sizes) if self.full else sums
        return self.reduced.solve_in_basis(T, sizes, lam, gamma, n_components)

    def embed(self, Y):
        """E = H~ basis Y, lazy and chunked like X."""
        if self.full:
            return ELMJEC._embed(self.features, self.reduced.mean, self.reduced.basis @ Y)
        return self.features.project(Y)


class ELMJEC(GraphMixin, EmbeddingClusterMixin, BaseELM):
    """Extreme Learning Machine for joint embedding and clustering (Liu et al. 2017).

    Finds an embedding ``E = H~ beta`` of the centred hidden-layer output
    ``H~ = (I - 11^T/N) H`` and a partition F that together maximise (eq. 6)

        Tr(beta^T H~^T M H~ beta),  M = (1 - lam) I + lam F (F^T F)^-1 F^T - gamma L,

    subject to ``beta^T beta = I``: the embedding keeps the data's variance, makes the
    clusters compact (``Tr(E^T E) - lam * kmeans_objective(E, F)`` is the first two terms) and
    is smooth on the kNN graph. Algorithm 1: k-means on X gives F; beta = the top
    ``n_components`` eigenvectors of ``H~^T M H~`` (eqs. 13-14); ``G = beta^T H~^T F (F^T
    F)^-1`` (eq. 10) are the cluster centres in the embedding. Each iteration runs k-means on
    E started from G (the baseline) and ``n_restarts`` k-means++ restarts, keeps the run with
    the lowest k-means objective, then updates beta and G. It stops when the partition no
    longer changes (up to renaming the clusters; with ``tol``, when at most ``tol *
    n_samples`` points change cluster) or after ``max_iter`` iterations.

    Parameters
    ----------
    n_clusters : int, default=8
    n_components : int or "auto", default="auto"
        Upper bound on the embedding dimension n_o; "auto" uses n_clusters. See Notes.
    n_basis : int, "auto" or None, default="auto"
        beta is confined to the ``n_basis`` leading eigenvectors of ``H~^T M H~`` at the
        initial partition, so the iterations read ``P = H~ V`` (N x n_basis) instead of H
        (N x n_hidden): built in one pass and held (see ``cache``), an iteration is a pass
        over P. Later partitions change M by the clustering term alone (rank n_clusters) and
        take the best beta within that subspace. "auto": the whole range up to 10,000 samples,
        above 4 directions per component, at least 64; None (or at least ``rank_``): the
        whole range of H~^T, the literal algorithm, whose iterations read H.
    n_hidden : int, default=1000
    lam : float in (0, inf), default=0.5
        The paper's lambda: weight of the clustering term.
    gamma : float in (0, inf), default=0.1
        The paper's gamma: weight of the manifold (graph Laplacian) term.
    n_restarts : int, default=20
        k-means++ restarts per iteration besides the one started from G (0: baseline only).
        Also the number of restarts of the initial k-means on X (at least 1).
    max_iter : int, default=20
    tol : float in [0, 1), default=0.0
        The iterations stop after one that moves at most ``tol * n_samples`` points to
        another cluster, with beta and G updated to its partition; 0 (the paper's rule):
        only when none move. On a large set the last iterations each move a few points for
        a pass over H and two k-means runs.
    activation : str or callable, default="sigmoid"
    graph : "auto", str or callable, default="auto"
        kNN backend (``elmscale.available("graph")``). "auto" takes "exact" up to 10,000
        samples (faster and exact there) and "cells", the distributed search, above.
    n_neighbors : int, default=5
    weights : {"binary", "heat", "fuzzy"}, default="binary"
        Edge weights (see :func:`elmscale.graph.knn_graph`).
    sigma : float or None, default=None
    normalized : bool, default=False
    scaling : {"minmax", "standard"} or None, default="minmax"
        "minmax" maps every feature to [-1, 1], the paper's protocol. The initial k-means runs
        on the scaled X.
    cache : "auto" or bool, default="auto"
        Keep what the iterations read (P, or H with ``n_basis=None``) in worker memory
        between iterations (see ``HiddenFeatures``); without it every iteration rebuilds it
        from X for the embedding, and for the label sums the rows of the points whose
        cluster changed.
    random_state : int, RandomState or None

    Attributes
    ----------
    hidden_layer_ : RandomHiddenLayer
    hidden_mean_ : ndarray (n_hidden,)
        mu = H^T 1 / N, the centring of the hidden layer.
    output_weights_ : ndarray (n_hidden, ``n_components_``)
        beta.
    eigenvalues_ : ndarray (``n_components_``,)
        Eigenvalues of H~^T M H~ kept (descending); their sum is the objective.
    n_components_ : int
        Columns actually kept (<= n_components, see Notes).
    embedding_ : ndarray or dask array (n_samples, ``n_components_``)
        E = H~ beta for the final beta.
    labels_ : ndarray or dask array (n_samples,)
        The final partition F.
    cluster_centers_ : ndarray (n_clusters, ``n_components_``)
        G^T: the mean of E over each cluster of F (zero for an empty cluster).
    objective_ : float
        Eq. 6 at the end.
    n_iter_ : int
        Update iterations run (Step 5 of Algorithm 1).
    history_ : dict of ndarray, each of length ``n_iter_`` + 1
        Row 0 is the initialisation, row t iteration t. ``objective`` (eq. 6 after the beta
        update), ``kmeans_objective`` (inertia of the accepted k-means run),
        ``baseline_kmeans_objective`` (of the run started from G), ``accepted``
        ("baseline" or "restart"), ``n_changed`` (labels changed, up to renaming clusters),
        ``n_components`` (kept). k-means fields are NaN in row 0. ``pandas.DataFrame(
        model.history_)`` gives the convergence table (the paper's Fig. 1).
    rank_ : int
        Numerical rank of H~ used (see Notes).
    n_features_in_ : int

    Notes
    -----
    **Fewer positive eigenvalues than n_components.** H~ has rank r < n_hidden, so
    ``H~^T M H~`` has a null space of dimension n_hidden - r with eigenvalue 0. For lam > 1
    the first term ``(1 - lam) H~^T H~`` is negative semi-definite and ``- gamma H^T L H`` is
    too, so at most rank(F) - 1 = n_clusters - 1 eigenvalues can be positive; the literal "top
    n_o eigenvectors" then include null-space directions whose embedding columns ``H~ v`` are
    zero (up to rounding noise). This estimator never returns such columns: it solves the
    eigenproblem inside the numerical range of H~^T (``rank_`` directions; those outside carry
    at most 1e-10 of the largest ``||H~ v||^2``) and keeps only the eigenvectors with positive
    eigenvalue, at most n_components of them. That is the maximiser of eq. 6 over beta with at
    most n_components orthonormal columns, so Algorithm 1 stays an ascent method (the
    objective in ``history_`` never decreases) and, in exact arithmetic, gives the same
    clustering as the literal algorithm whenever its extra columns are null-space ones (zero
    columns do not change k-means distances). When fewer than n_components are kept, fit
    emits ``FewerComponentsWarning`` and ``n_components_`` says how many were kept; if none
    is positive fit raises ``ValueError`` (lower gamma).

    **Cost.** One pass over X for the scaling, one for the graph, one for the fixed Grams H^T
    H, H^T 1 and H^T L H (computed once per fit), one eigendecomposition of H~^T H~ on the
    client (O(n_hidden^3)), one pass building P = H~ V (``n_basis`` columns); then per
    iteration one pass over P for the embedding, the n_basis x n_clusters matrix P^T F from
    the last one's and the rows of P of the points whose cluster changed (a full pass when
    most did), the top n_components eigenpairs of an n_basis x n_basis matrix (only those
    are computed), and
    two k-means runs on the N x ``n_components_`` embedding (the one from G, and the restarts,
    which ``elmscale.cluster.kmeans`` seeds on a sample before Lloyd passes on the cluster
    for dask input). Client memory is O(n_hidden^2).
    ``lam``, ``gamma``, ``n_components`` and ``max_iter`` do not enter the reduction
    (``reduce``: hidden layer, graph, fixed Grams, initial partition): ``elmscale.sweep``
    fits a grid over them with one Gram pass.

    References
    ----------
    T. Liu, C. K. L. Lekamalage, G.-B. Huang and Z. Lin, "Extreme learning machine for joint
    embedding and clustering", Neurocomputing 277, 2018 (online 2017).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from elmscale import ELMJEC
    >>> X, y = load_iris(return_X_y=True)
    >>> model = ELMJEC(n_clusters=3, n_hidden=200, graph="exact", random_state=0).fit(X)
    >>> model.embedding_.shape
    (150, 3)
    >>> sorted(set(model.labels_.tolist()))
    [0, 1, 2]
    """

    _parameter_constraints = {
        **BaseELM._parameter_constraints,
        **GraphMixin._graph_constraints,
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "n_components": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_basis": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "lam": [Interval(Real, 0, None, closed="neither")],
        "gamma": [Interval(Real, 0, None, closed="neither")],
        "n_restarts": [Interval(Integral, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, 1, closed="left")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        n_components="auto",
        n_basis="auto",
        n_hidden=1000,
        lam=0.5,
        gamma=0.1,
        n_restarts=20,
        max_iter=20,
        tol=0.0,
        activation="sigmoid",
        graph="auto",
        n_neighbors=5,
        weights="binary",
        sigma=None,
        normalized=False,
        scaling="minmax",
        cache="auto",
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.n_components = n_components
        self.n_basis = n_basis
        self.n_hidden = n_hidden
        self.lam = lam
        self.gamma = gamma
        self.n_restarts = n_restarts
        self.max_iter = max_iter
        self.tol = tol
        self.activation = activation
        self.graph = graph
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.sigma = sigma
        self.normalized = normalized
        self.scaling = scaling
        self.cache = cache
        self.random_state = random_state

    reduce_params = (
        "n_clusters",
        "n_hidden",
        "n_restarts",
        "activation",
        "graph",
        "n_neighbors",
        "weights",
        "sigma",
        "normalized",
        "scaling",
        "cache",
        "random_state",
    )
    supports_checkpoint = True

    # -- fit -------------------------------------------------------------------------------
    def check_params_vs_input(self, Xd):
        super().check_params_vs_input(Xd)
        self._n_components = resolve_n_components(
            self.n_components, self.n_clusters, Xd.shape[0], self.n_hidden
        )
        if self.n_basis == "auto":
            small = Xd.shape[0] <= BASIS_MIN_ROWS
            self._n_basis = (
                None if small else max(BASIS_MIN, BASIS_PER_COMPONENT * self._n_components)
            )
        elif self.n_basis is not None and self.n_basis < self._n_components:
            raise ValueError(
                f"n_basis={self.n_basis} must be at least the number of components "
                f"({self._n_components}): beta is confined to n_basis directions"
            )
        else:
            self._n_basis = self.n_basis

    def reduce_hidden(self, reduction, y):
        """The graph, the initial partition, then in one pass the fixed Grams and the
        partition's H^T F and sizes: everything that lam, gamma and n_components do not
        change."""
        Xd, features, rng, c = reduction.X, reduction.features, reduction.rng, self.n_clusters
        graph = reduction.graph = reduction.stage("graph", lambda: self.build_graph(Xd, rng))
        self.lap("graph")
        labels = reduction.stage("init", lambda: self._initial_labels(Xd, rng))
        self.lap("init")
        stats = reduction.stage(
            "gram",
            lambda: hidden_stats(
                features,
                ("count", "colsum", "hth", "htlh", "htf", "sizes"),
                graph=graph,
                labels=labels,
                n_labels=c,
                partial_sums=reduction.partial_sums(),
            ),
        )
        reduced = ELMJECReduced(stats["hth"], stats["colsum"], stats["count"], stats["htlh"])
        logger.info(
            "ELM-JEC: numerical rank of the centred hidden layer %d of %d",
            reduced.rank_,
            self.n_hidden,
        )
        self.lap("gram")
        reduction.stats = {
            "reduced": reduced,
            "labels": labels,
            "htf": stats["htf"],
            "sizes": stats["sizes"],
        }

    def _initial_labels(self, Xd, rng):
        """Step 1: k-means on the (scaled) inputs, persisted."""
        _, labels, _, _ = kmeans(
            self.scaled(Xd),
            self.n_clusters,
            n_init=max(self.n_restarts, 1),
            max_iter=KMEANS_MAX_ITER,
            random_state=draw_seed(rng),
        )
        return labels.persist()

    def solve_reduced(self, reduction, rng):
        """Algorithm 1 from the reduction, for this estimator's lam, gamma, n_components.
        With a checkpoint, the state after each iteration (partition, its label sums and
        sizes, history, random state) is kept, and a fit resumes after the last one kept."""
        red, c = reduction.stats["reduced"], self.n_clusters
        lam, gamma, n_o = float(self.lam), float(self.gamma), self._n_components
        start = {k: reduction.stats[k] for k in ("labels", "htf", "sizes")}
        sub = red.restrict(start["htf"], start["sizes"], lam, gamma, self._n_basis)
        space = _IterationSpace(self, reduction, sub)
        iterations = reduction.iterations("iteration", self, rng)
        s = iterations.resume(self.max_iter)[1]
        if s is None:
            s = {"labels": start["labels"], "sizes": start["sizes"]}
            s["sums"] = space.start_sums(start["htf"], start["sizes"])
            s.update(history={key: [] for key in HISTORY_KEYS}, n_iter=0, converged=False)
        Y, eig, G, obj = space.solve(s["sums"], s["sizes"], lam, gamma, n_o)
        if s["n_iter"] == 0:
            _record(s["history"], obj, np.nan, np.nan, "", np.nan, Y.shape[1])
        E = space.embed(Y).persist()
        while not s["converged"] and s["n_iter"] < self.max_iter:
            it = s["n_iter"] = s["n_iter"] + 1
            new, inertia, in_b, accepted = self._assign(E, G, draw_seed(rng))
            table = np.asarray(contingency(s["labels"], new, c).compute()).reshape(c, c)
            match = name_match(table)
            changed = match[1]
            if changed == 0:  # same partition: beta and G are those of the previous step
                _record(s["history"], obj, inertia, in_b, accepted, 0, Y.shape[1])
                logger.info("ELM-JEC iteration %d: partition unchanged, converged", it)
                s["converged"] = True
            else:
                sums, sizes, _ = matched_label_sums(
                    space.features, s["labels"], s["sums"], new, table, match=match
                )
                s.update(labels=new, sums=sums, sizes=sizes)
                Y, eig, G, obj = space.solve(s["sums"], s["sizes"], lam, gamma, n_o)
                _record(s["history"], obj, inertia, in_b, accepted, changed, Y.shape[1])
                E = space.embed(Y).persist()
                logger.info(
                    "ELM-JEC iteration %d: objective %.6g, k-means %.6g (%s), %d labels changed",
                    *(it, obj, inertia, accepted, changed),
                )
                s["converged"] = changed <= self.tol * reduction.n_samples
            iterations.save(it, s)
        self._warn(min(s["history"]["n_components"]), s["converged"])
        beta = space.reduced.basis @ Y
        self.hidden_mean_, self.rank_ = red.mean, red.rank_
        self.output_weights_, self.eigenvalues_, self.n_components_ = beta, eig, beta.shape[1]
        self.cluster_centers_ = G.T.copy()
        self.objective_, self.n_iter_ = obj, s["n_iter"]
        self.history_ = {
            key: (np.array(val, dtype=object) if key == "accepted" else np.array(val, dtype=float))
            for key, val in s["history"].items()
        }
        if reduction.was_dask:
            self.embedding_, self.labels_ = E, s["labels"]
        else:
            self.embedding_, self.labels_ = dask.compute(E, s["labels"])

    def _assign(self, E, G, seed):
        """One k-means step on the embedding: from the centres G (the baseline) and, with
        ``n_restarts``, from fresh starts, keeping the lower inertia: ``(labels, inertia,
        baseline inertia, "baseline" or "restart")``."""
        c = self.n_clusters
        _, lab_b, in_b, _ = kmeans(E, c, init=G.T, max_iter=KMEANS_MAX_ITER)
        new, inertia, accepted = lab_b, in_b, "baseline"
        if self.n_restarts > 0:
            _, lab_r, in_r, _ = kmeans(
                E, c, n_init=self.n_restarts, max_iter=KMEANS_MAX_ITER, random_state=seed
            )
            if in_r < in_b:
                new, inertia, accepted = lab_r, in_r, "restart"
        return new.persist(), inertia, in_b, accepted

    def _warn(self, fewest, converged):
        """The solve's warnings: fewer components kept than asked, no convergence."""
        n_o, c = self._n_components, self.n_clusters
        if fewest < n_o:
            warnings.warn(
                f"H~^T M H~ had only {fewest} positive eigenvalue(s) for lam={float(self.lam)!r}, "
                f"gamma={float(self.gamma)!r}: kept {fewest} < n_components={n_o} components "
                "(null-space directions would give all-zero embedding columns; for lam > 1 at "
                f"most n_clusters - 1 = {c - 1} can be positive). See ELMJEC's Notes.",
                FewerComponentsWarning,
                stacklevel=7,
            )
        if not converged and self.max_iter > 0:
            warnings.warn(
                f"ELM-JEC did not converge: the partition still changed after "
                f"max_iter={self.max_iter} iterations",
                ConvergenceWarning,
                stacklevel=7,
            )

    @staticmethod
    def _embed(features, mean, beta):
        """E = H~ beta = H beta - mu^T beta, lazy and chunked like X."""
        shift = (mean @ beta).astype(features.X.dtype)
        return features.project(beta).map_blocks(_center_rows, shift, dtype=features.X.dtype)

    # -- use -------------------------------------------------------------------------------
    def embed_rows(self, Xd):
        """``E = (h(x) - mu) beta`` for the rows x of Xd (lazy); ``predict`` gives the
        nearest centre (a column of G) and ``score`` the k-means term of eq. 6."""
        features = self.hidden_features(Xd, cache=False)
        return self._embed(features, self.hidden_mean_, self.output_weights_)


def elmjec_sweep(X, param_grid, estimator=None, **params):
    """ELM-JEC for every (lam, gamma, n_components) setting over one Gram pass:
    :func:`elmscale.sweep` on ``estimator`` (or ``ELMJEC(**params)``), with the warnings
    about kept components and convergence silenced (read ``n_components_`` and ``n_iter_``).

    Returns a list of ``(setting, fitted ELMJEC or the ValueError it raised)``; each fitted
    estimator equals ``clone(estimator).set_params(**setting).fit(X)``.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from elmscale import elmjec_sweep
    >>> X, _ = load_iris(return_X_y=True)
    >>> fits = elmjec_sweep(X, {"lam": [0.25, 1.0], "gamma": [0.1]}, n_clusters=3,
    ...                     n_hidden=100, graph="exact", random_state=0)
    >>> [setting["lam"] for setting, model in fits]
    [0.25, 1.0]
    """
    if estimator is None:
        estimator = ELMJEC(**params)
    elif params:
        raise TypeError("pass either an estimator or keyword parameters, not both")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewerComponentsWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        return sweep(estimator, X, param_grid, errors="return")


__all__ = ["ELMJEC", "ELMJECReduced", "FewerComponentsWarning", "elmjec_embedding", "elmjec_sweep"]
