"""TUMK-ELM: unsupervised multiple-kernel ELM clustering (Xiang, Zhao, Li, Hao and Li 2018,
Algorithm 1), exact (dense N x N kernels) and scalable (blockwise reductions of low-rank
kernel factors on dask).

Notation. p base kernels K_1..K_p, weights mu, combined kernel K^ = sum_q mu_q K_q; n_c
clusters; F the N x n_c one-hot assignment, n = F^T 1 the cluster sizes; a_q = diag(K_q).

- Stage 1 (relaxed kernel k-means, eq. 5): the n_c leading eigenvectors U of K^; the cluster
  of point i is argmax_c U[i, c] (``assignment="argmax"``, the paper) or k-means on the rows
  of U (``assignment="kmeans"``).
- Stage 2 (the K-space ELM, eqs. 2-8): each ordered pair (i, j), i = j included, is a sample
  with features z_ij in R^p and target t_ij = 0 if i and j share a cluster, 1 otherwise;
  mu = (I/C + Z^T Z)^-1 Z^T T. Only the p x p matrix Z^T Z (independent of the clusters,
  computed once) and the p-vector Z^T T are needed.
- Loss (eq. 10): Tr(K^) - Tr(L^1/2 F^T K^ F L^1/2), L = diag(1/n_c): the kernel k-means
  objective of the assignment under K^.

Feature form (``feature_form``). Eq. 2 of the paper writes z_ij from kernel VALUES
K_q(x_i, x_j); the distance-based MK-ELM it builds on uses kernel-induced DISTANCES
d_q(i, j) = K_q(i, i) + K_q(j, j) - 2 K_q(i, j), the reading consistent with t_ij = 1 for
pairs in different clusters (a large distance predicts "different"). Both are implemented;
the default is chosen by the benchmark (benchmarks/RESULTS.md, section TUMK-ELM).

Negative weights. The ridge solution mu is unconstrained and may have negative entries,
which would make K^ indefinite (its leading eigenvectors then no longer solve the relaxed
kernel k-means). Each update is therefore projected: negative entries are set to 0 and the
rest rescaled to sum to 1 (the initial weights 1/p also sum to 1, so the loss of successive
iterations is on one scale). The raw solution is kept in ``kernel_weights_raw_``. If no
entry is positive the previous weights are kept and the iteration stops.

Modes. The exact mode (:mod:`._tumkelm_exact`) evaluates dense N x N kernel blocks on the
client, as the paper does. The scalable mode (:mod:`._tumkelm_scalable`) replaces each kernel
by a low-rank factor, K_q ~ alpha_q I + Phi_q Phi_q^T, and computes every quantity above from
blockwise reductions over X's row chunks; nothing N x N is formed.
"""

import logging
import os
import warnings
from functools import partial
from numbers import Integral, Real

import dask
import dask.array as da
import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from .. import registry
from ..base import BaseELM
from ..cluster import assign_nearest, cluster_means, kmeans
from ..exceptions import UnknownPluginError
from ..hidden import HiddenFeatures, apply_scaling, fit_scaling, fits_in_memory
from ..kernels import FactorLayer, Kernel, paper_kernels
from ..mixins import EmbeddingClusterMixin
from ..solvers import ridge_solve
from ..utils._dask import local_threads
from ..utils._random import draw_seed, drawn_rows
from ..utils._threads import blas_threads
from ..utils._validation import row_chunks, validate_data
from ..validation import Interval, StrOptions
from ._embedding import unit_rows
from ._tumkelm_exact import (
    DenseKernels,
    exact_combined,
    exact_kspace_gram,
    exact_leading_eigenvectors,
    exact_pass,
    nystrom_extension,
)
from ._tumkelm_scalable import (
    LabelSums,
    _argmax_rows,
    _embed,
    _folds,
    build_factors,
    even_chunks,
    factor_stats,
    kspace_gram,
    kspace_target,
    leading_eigenvectors,
    tumkelm_loss,
)

logger = logging.getLogger(__name__)

#: ``mode="auto"`` runs the exact (dense) algorithm up to this many samples, the scalable
#: one above: the exact mode costs O(p N^2) per iteration and O(N^2) memory, while below
#: this size the scalable mode's landmark sample is the whole data set anyway
#: (benchmarks/RESULTS.md, TUMK-ELM, compares the two modes).
AUTO_EXACT_MAX = 1_000

# Up to this many samples the exact mode runs BLAS on one thread: small dense products
# gain nothing from BLAS threads and lose to them when the cores are busy.
_EXACT_THREADED_MIN = 2000


def solve_weights(ZtZ, ZtT, C):
    """The K-space ELM output weights mu = (I/C + Z^T Z)^-1 Z^T T (eq. 8), unconstrained."""
    return ridge_solve(ZtZ, np.asarray(ZtT, dtype=np.float64)[:, None], 1.0 / C).ravel()


def project_weights(mu_raw):
    """Usable kernel weights: negative entries set to 0, the rest scaled to sum to 1.
    Returns None when no entry is positive."""
    mu = np.maximum(np.asarray(mu_raw, dtype=np.float64), 0.0)
    total = mu.sum()
    if not np.isfinite(total) or total <= 0:
        return None
    return mu / total


def resolve_kernels(kernels):
    """Kernel instances from ``"paper"`` or a list of names, ``(name, params)`` pairs or
    kernel objects. Raises on an empty list and on unknown names."""
    if isinstance(kernels, str):
        if kernels == "paper":
            return paper_kernels()
        kernels = [kernels]
    kernels = list(kernels)
    if not kernels:
        raise ValueError(
            "kernels is empty: TUMK-ELM needs at least one base kernel "
            "(e.g. kernels='paper', or ['linear', ('rbf', {'width': 1.0})])"
        )
    out = []
    for item in kernels:
        params = {}
        if isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[0], str) or not isinstance(item[1], dict):
                raise ValueError(
                    f"a kernel given as a tuple must be (name, params_dict), got {item!r}"
                )
            item, params = item
        if isinstance(item, str):
            try:
                cls = registry.get("kernel", item)
            except UnknownPluginError as exc:
                raise UnknownPluginError(f"kernels: {exc}") from None
            out.append(cls(**params))
        elif isinstance(item, type) and issubclass(item, Kernel):
            out.append(item(**params))
        elif callable(item):
            out.append(item)
        else:
            raise TypeError(
                f"kernels must hold kernel names, (name, params) pairs or kernel "
                f"objects, got {type(item).__name__}: {item!r}"
            )
    return out


def _landmark_sample(Xs, size, rng):
    """``size`` rows of Xs drawn without replacement from ``rng``, in row order; for dask
    input drawn on a worker (:func:`~elmscale.utils._random.row_samples`: the same rows, and
    ``rng`` left where its own draw would leave it), not from a shuffled ``arange(N)`` here."""
    return drawn_rows(Xs, size, rng, prefix="elmscale-hidden-landmarks")


class TUMKELM(EmbeddingClusterMixin, BaseELM):
    """TUMK-ELM: unsupervised multiple-kernel ELM clustering (Xiang et al. 2018,
    Algorithm 1), exact for small data and scalable on dask for large data.

    Alternates relaxed kernel k-means on the combined kernel K^ = sum_q mu_q K_q (the
    n_clusters leading eigenvectors of K^, then the argmax of each row) with an ELM in the
    kernel space that learns the weights mu from the pairwise "same cluster / different
    cluster" targets, until the kernel k-means loss (eq. 10) stops changing.

    Parameters
    ----------
    n_clusters : int, default=8
    kernels : "paper" or list, default="paper"
        Base kernels. "paper" is the paper's 15: linear, polynomial of degree 2, 3, 4
        (coef0 = 1) and Gaussian of width 1e-10, 1e-8, ..., 1e10. A list may hold
        registered kernel names (``elmscale.available("kernel")``), ``(name, params)``
        pairs such as ``("rbf", {"width": 2.0})``, or kernel objects
        (:class:`elmscale.kernels.Kernel`).
    C : float, default=1.0
        ELM trade-off of the kernel-space regression (ridge penalty 1/C); > 0.
    delta : float, default=1e-4
        Stop when the loss changes by at most ``delta`` times its previous value (relative,
        so it does not depend on the scale of the kernels); >= 0.
    max_iter : int, default=20
    mode : {"auto", "exact", "scalable"}, default="auto"
        "exact": dense N x N kernels on the client (as the paper). "scalable": low-rank
        kernel factors and blockwise reductions over X's row chunks, nothing N x N.
        "auto": exact up to ``AUTO_EXACT_MAX`` = 1,000 samples, scalable above.
    n_landmarks : int, default=100
        Columns m of each approximated kernel factor (Nystrom landmarks, or random Fourier
        features); also the cap on explicit polynomial features (scalable mode). The cost of
        the scalable mode grows as M^2 with M the total factor columns; more landmarks
        approximate the kernels better (benchmarks/RESULTS.md, TUMK-ELM, compares settings).
    approximation : {"nystrom", "rff"}, default="nystrom"
        Factor of the Gaussian kernels that are neither ~I nor ~11^T (scalable mode).
    feature_form : {"distance", "value"}, default="distance"
        Kernel-space features: kernel-induced distances d_q(i, j) (MK-ELM) or kernel values
        K_q(i, j) (eq. 2 read literally). See the module notes.
    assignment : {"argmax", "kmeans", "kmeans-unit"}, default="kmeans-unit"
        Stage-1 cluster of each point: argmax of its row of the eigenvectors (the paper),
        k-means on those rows, or k-means on those rows scaled to unit length (as Ng, Jordan
        and Weiss's spectral clustering does, so that a point's distance from the origin,
        which follows its kernel degree, does not split a cluster). "kmeans-unit" is the
        default: it had the best mean accuracy over the benchmark sets
        (benchmarks/RESULTS.md, "Quality without labels"). It costs a k-means on the
        N x n_clusters eigenvectors per iteration.
    scaling : {"minmax", "standard"} or None, default="minmax"
        Per-feature scaling of X before the kernels: "minmax" maps each feature to [-1, 1],
        "standard" to zero mean and unit variance.
    n_init : int, default=10
        k-means restarts (``assignment="kmeans"`` or ``"kmeans-unit"``).
    select : {"last", "lowest_loss"}, default="last"
        The iteration whose assignment and weights are returned: the last one (Algorithm 1)
        or the first with the lowest loss (eq. 10) in ``history_``, a label-free choice by
        the paper's own objective (the loss is not monotone over the iterations).
    init : {"spectral", "kmeans"}, default="spectral"
        The first iteration's assignment: stage 1 on the equally weighted kernels (the
        paper), or the k-means partition (``n_init`` restarts) of the standardised rows, from
        which the first weights are learnt. With "kmeans" the iterations' result is kept only
        if its loss (eq. 10) under the returned weights is below that partition's; otherwise
        the partition is returned (``start_kept_``), a label-free fallback by the paper's
        own objective. It costs a k-means on X and one more pass.
    random_state : int, RandomState or None
        Seeds the landmark sample, random features, the Lanczos start and k-means.

    Attributes
    ----------
    labels_ : ndarray or dask array (n_samples,)
    kernels_ : list of Kernel
    kernel_weights_ : ndarray (p,)
        mu used for the final assignment (non-negative, sums to 1).
    kernel_weights_raw_ : ndarray (p,)
        The unconstrained ridge solution (eq. 8) projected to ``kernel_weights_`` (with
        ``select="lowest_loss"`` returning the first iteration: the initial weights).
    history_ : ndarray (``n_iter_``,)
        Loss (eq. 10) of each iteration's assignment under that iteration's K^ (Fig. 4).
    weights_history_ : ndarray (``n_iter_``, p)
        mu used in each iteration.
    loss_ : float
        The loss of the returned iteration (the last with ``select="last"``).
    selected_iter_ : int
        Index in ``history_`` of the returned iteration.
    n_iter_ : int
        Iterations of Algorithm 1, including those known without computing them (see
        ``cycle_``).
    n_computed_ : int
        Iterations actually computed.
    cycle_ : tuple or None
        ``(start, period)`` when an update reproduced the weights of iteration ``start``
        exactly: the iterations from there on repeat with that period, so they are not
        recomputed; the stopping rule (and ``max_iter``) is applied along the cycle, and the
        fitted state is the one the full loop reaches.
    mode_ : str
        "exact" or "scalable".
    start_kept_ : bool
        Whether the k-means start was returned in place of the iterations' labels
        (``init="kmeans"``); ``predict`` then gives the nearest of its centres.
    embedding_ : ndarray or dask array (n_samples, n_clusters)
        Leading eigenvectors of the final K^.
    cluster_centers_ : ndarray (n_clusters, n_clusters)
        The mean of ``embedding_`` over each cluster of ``labels_``: the centres ``score``
        measures distances to (``predict`` follows the fitted assignment rule, whose
        k-means centres live on the unit sphere with ``assignment="kmeans-unit"``).
    eigenvalues_ : ndarray (n_clusters,)
    factors_ : list of KernelFactor or None
        The kernel factors (scalable mode).
    kspace_gram_ : ndarray (p, p)
        Z^T Z of the kernel-space samples (independent of the clusters).
    reductions_ : dict
        Scalable mode: the label-independent reductions (``G = Phi^T Phi``, ``u``, ``AA``,
        ``S``, ``PA``, ``alpha``, ``offsets``, ``n``); see :func:`kspace_gram`.
    scaling_ : tuple
        (offset, scale) of the input scaling.
    n_features_in_ : int

    Notes
    -----
    Exact mode: O(p N^2 d) kernel evaluations per iteration and O(N^2) memory for K^.
    Scalable mode: with M = sum of the factor columns, one pass over X for the label
    independent reductions (O(N M^2)), then per iteration one pass computing only the
    factors' bases and N x n_clusters products (plus k-means passes with
    ``assignment="kmeans"``); client memory O(M^2); the N x p diagonals are persisted.
    When the stacked factor Phi (N x M float64) with the diagonals and X fits half of the
    cluster's memory (:func:`~elmscale.hidden.fits_in_memory`), it is persisted by the
    first pass and the per-iteration passes read it instead of re-evaluating the kernels.
    NumPy input runs on dask too (the active scheduler), in equal row chunks (a multiple of
    the local threads), and gives the result of dask input in those chunks.
    The scalable reductions equal the exact ones when the factors are exact (m = N).

    The paper's Gaussian widths span 1e-10 to 1e10: on standardised data the narrow ones
    are the identity and the wide ones the all-ones matrix to machine precision; the
    scalable mode uses those closed forms (see :class:`elmscale.kernels.RBFKernel`).

    References
    ----------
    L. Xiang, G. Zhao, Q. Li, W. Hao and F. Li, "TUMK-ELM: a fast unsupervised heterogeneous
    data learning approach", IEEE Access 6, 2018.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from elmscale import TUMKELM
    >>> X, y = load_iris(return_X_y=True)
    >>> model = TUMKELM(n_clusters=3, random_state=0).fit(X)
    >>> model.mode_, len(model.kernel_weights_)
    ('exact', 15)
    >>> model.history_.ndim
    1
    """

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "kernels": [StrOptions({"paper"}), list, tuple],
        "C": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "mode": [StrOptions({"auto", "exact", "scalable"})],
        "n_landmarks": [Interval(Integral, 1, None, closed="left")],
        "approximation": [StrOptions({"nystrom", "rff"})],
        "feature_form": [StrOptions({"distance", "value"})],
        "assignment": [StrOptions({"argmax", "kmeans", "kmeans-unit"})],
        "scaling": [StrOptions({"standard", "minmax"}), None],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "select": [StrOptions({"last", "lowest_loss"})],
        "init": [StrOptions({"spectral", "kmeans"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        kernels="paper",
        C=1.0,
        delta=1e-4,
        max_iter=20,
        mode="auto",
        n_landmarks=100,
        approximation="nystrom",
        feature_form="distance",
        assignment="kmeans-unit",
        scaling="minmax",
        n_init=10,
        select="last",
        init="spectral",
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.kernels = kernels
        self.C = C
        self.delta = delta
        self.max_iter = max_iter
        self.mode = mode
        self.n_landmarks = n_landmarks
        self.approximation = approximation
        self.feature_form = feature_form
        self.assignment = assignment
        self.scaling = scaling
        self.n_init = n_init
        self.select = select
        self.init = init
        self.random_state = random_state

    #: The reduction (scaling, kernel factors, the label-independent pass and Z^T Z) depends
    #: on these; the loop of Algorithm 1 reads the others, which may change between solves
    #: of one reduction (:func:`elmscale.sweep`).
    reduce_params = (
        "kernels",
        "mode",
        "n_landmarks",
        "approximation",
        "feature_form",
        "scaling",
        "random_state",
    )

    # -- fit: the template's steps and hooks ----------------------------------------------
    def validate_X(self, X, *, reset):
        """X through :func:`~elmscale.utils.validate_data`, NumPy input kept NumPy (the
        exact mode works on it in-process), rows chunked for factors of ``len(kernels) *
        n_landmarks`` columns. The kernels are resolved first, so that a bad name is
        reported before the data is read."""
        kernels = resolve_kernels(self.kernels) if reset else self.kernels_
        return validate_data(
            self, X, reset=reset, numpy_ok=True, n_hidden=max(1, len(kernels) * self.n_landmarks)
        )

    def draw_hidden_layer(self, Xd, rng):
        """Resolve the mode and the kernels, fit the input scaling, and in the scalable mode
        factor every kernel on a landmark sample drawn from ``rng``: the factors are the
        hidden layer (:class:`~elmscale.kernels.FactorLayer`). The exact mode has none."""
        N = Xd.shape[0]
        self.mode_ = (
            self.mode if self.mode != "auto" else ("exact" if N <= AUTO_EXACT_MAX else "scalable")
        )
        self.kernels_ = resolve_kernels(self.kernels)
        self.scaling_ = fit_scaling(Xd, self.scaling)
        self.factors_ = self.hidden_layer_ = None
        if self.mode_ == "scalable":
            Xs = apply_scaling(Xd, *self.scaling_)
            n_sample = min(N, max(self.n_landmarks, 1000))
            sample = _landmark_sample(Xs, n_sample, rng)
            sample = np.asarray(sample, dtype=np.float64)[rng.permutation(n_sample)]
            self.factors_ = build_factors(
                self.kernels_, sample, N, self.n_landmarks, self.approximation, rng
            )
            self.hidden_layer_ = FactorLayer(self.factors_)
            logger.info(
                "TUMK-ELM factors: %s",
                ", ".join(f"{f.kind}({f.n_components})" for f in self.factors_),
            )
        return self.hidden_layer_

    def hidden_features(self, Xd):
        """Scalable mode: ``H = [Phi | A | 1]`` of the scaled rows of Xd, cached on the
        workers when it fits their memory with X (:func:`~elmscale.hidden.fits_in_memory`,
        half of the cluster's memory): each iteration's pass is then two (rows x M) x
        (M x n_c) products per chunk instead of an evaluation of every kernel's basis on the
        chunk; above it the bases are recomputed from X every pass, so memory stays O(chunk)
        whatever N. NumPy input is cut into equal row chunks, as many as the memory sizing
        asks for rounded up to a multiple of the local threads, so that every thread gets the
        same work. Exact mode: None."""
        if self.hidden_layer_ is None:
            return None
        Xs = apply_scaling(Xd, *self.scaling_)
        N, layer = Xs.shape[0], self.hidden_layer_
        if not isinstance(Xs, da.Array):
            n_hidden = max(1, len(self.kernels_) * self.n_landmarks)
            chunks = even_chunks(N, len(row_chunks(N, n_hidden)), local_threads())
            Xs = da.from_array(Xs, chunks=(chunks, Xs.shape[1]))
        keep = fits_in_memory(N * layer.n_hidden * 8 + Xs.nbytes)
        return HiddenFeatures(Xs, layer, cache=keep)

    def reduce_hidden(self, reduction, y):
        """The label-independent reductions: the dense kernels and Z^T Z (exact mode), or
        one pass of ``H^T H`` over the factor layer and Z^T Z from it (scalable mode)."""
        form = self.feature_form
        if self.mode_ == "exact":
            X = reduction.X
            Xn = np.asarray(
                apply_scaling(X.compute() if reduction.was_dask else X, *self.scaling_),
                dtype=np.float64,
            )
            with blas_threads(self._exact_blas(Xn.shape[0])):
                dense = DenseKernels(self.kernels_, Xn)
                ZtZ = exact_kspace_gram(dense, Xn, form)
            reduction.stats.update(X=Xn, dense=dense)
        else:
            stats, Phi = factor_stats(reduction.features)
            ZtZ = kspace_gram(stats, form)
            reduction.stats.update(reductions=stats, Phi=Phi)
        self.kspace_gram_ = ZtZ
        for name in ("mode_", "kernels_", "scaling_", "factors_", "kspace_gram_"):
            reduction.fitted[name] = getattr(self, name)
        self.lap("kernels")

    def solve_reduced(self, reduction, rng):
        """Algorithm 1's loop on the reduction: stage 1 (eigenvectors of K^, assignment)
        and stage 2 (kernel weights) until the loss (eq. 10) changes by at most ``delta``."""
        if self.mode_ == "exact":
            Xn = reduction.stats["X"]
            with blas_threads(self._exact_blas(Xn.shape[0])):
                self._fit_exact(reduction.stats["dense"], Xn, rng)
            if reduction.was_dask:
                chunks = reduction.X.chunks[0]
                self.labels_ = da.from_array(self.labels_, chunks=(chunks,))
                self.embedding_ = da.from_array(self.embedding_, chunks=(chunks, -1))
        else:
            stats = reduction.stats
            self._iterate_scalable(
                reduction.features,
                stats["reductions"],
                stats["Phi"],
                self.factors_,
                draw_seed(rng),
                reduction.was_dask,
                rng,
            )
        # the centres ``score`` measures against: one pass of per-block sums for dask
        self.cluster_centers_, _ = cluster_means(self.embedding_, self.labels_, self.n_clusters)
        self.lap("iterations")
        logger.info(
            "TUMK-ELM (%s): %d iterations (%d computed)", self.mode_, self.n_iter_, self.n_computed_
        )

    @staticmethod
    def _exact_blas(n_samples):
        """BLAS threads of the exact mode: one for small problems, which gain nothing from
        more and lose to them when the cores are busy; all cores above."""
        return 1 if n_samples <= _EXACT_THREADED_MIN else os.cpu_count() or 1

    def _iterate(self, stage1, stage2, p, first=None):
        """Algorithm 1's loop; ``stage1(mu) -> (labels, loss, state)``,
        ``stage2(state) -> raw mu``; ``first(mu)``, when given, replaces stage 1 in the first
        iteration (``init="kmeans"``).

        Both stages are deterministic functions of mu (fixed seeds), so when an update
        gives exactly (bit for bit) the weights of an earlier iteration j, iterations j, j+1,
        ..., it repeat for ever. The loop then stops computing and plays the stopping rule
        along that cycle up to ``max_iter``: the fitted state, ``history_``,
        ``weights_history_`` and ``n_iter_`` are those the full loop would give (a cycle
        the relative stopping rule never ends would otherwise run to ``max_iter``).
        ``n_computed_`` counts the iterations actually computed.
        """
        mu = np.full(p, 1.0 / p)
        losses, weights, raws, states = [], [], [], []
        raw = mu.copy()
        self.cycle_ = None
        final = None
        for it in range(self.max_iter):
            state = first(mu) if it == 0 and first is not None else stage1(mu)
            losses.append(state["loss"])
            weights.append(mu)
            states.append(state)
            logger.debug("TUMK-ELM iteration %d: loss %.10g", it + 1, state["loss"])
            if self._converged(losses[-2:]) or it == self.max_iter - 1:
                break
            raw = stage2(state)
            raws.append(raw)
            new = project_weights(raw)
            if new is None:
                warnings.warn(
                    "TUMK-ELM: the kernel-space ELM gave no positive kernel weight; "
                    "keeping the previous weights",
                    ConvergenceWarning,
                    stacklevel=3,
                )
                break
            # a repeat of the first iteration's weights repeats stage 1's iterations only
            j0 = int(first is not None)
            start = next(
                (j for j, w in enumerate(weights) if j >= j0 and np.array_equal(w, new)), None
            )
            if start is not None:
                final = self._play_cycle(start, len(weights) - start, losses)
                break
            mu = new
        self.n_computed_ = len(losses)
        if final is None:  # no cycle: the last computed iteration is the result
            index = list(range(len(losses)))
        else:
            start, period, length = final
            self.cycle_ = (start, period)
            index = list(range(len(losses)))
            while len(index) < length:
                index.append(start + (len(index) - start) % period)
            if len(index) > 1:
                raw = raws[index[-2]]
        self.history_ = np.array([losses[i] for i in index])
        self.weights_history_ = np.array([weights[i] for i in index])
        self.n_iter_ = len(index)
        # the iteration whose state is returned: the last, or the first with the lowest loss
        t = len(index) - 1 if self.select == "last" else int(np.argmin(self.history_))
        if t < len(index) - 1:
            raw = raws[index[t - 1]] if t > 0 else weights[0].copy()
        self.selected_iter_ = t
        self.loss_ = float(self.history_[t])
        self.kernel_weights_ = weights[index[t]]
        self.kernel_weights_raw_ = raw
        return states[index[t]]

    def _converged(self, last_two):
        """The stopping rule on the last two losses (relative change at most ``delta``)."""
        return len(last_two) == 2 and abs(last_two[1] - last_two[0]) <= self.delta * abs(
            last_two[0]
        )

    def _play_cycle(self, start, period, losses):
        """Iterations ``start .. start + period - 1`` repeat for ever: find the iteration
        where the full loop would stop (the stopping rule, or ``max_iter``). Returns
        ``(start, period, iterations of the full loop)``."""
        t = len(losses)  # the first iteration that is not computed
        prev = losses[-1]
        while t < self.max_iter:
            cur = losses[start + (t - start) % period]
            t += 1
            if self._converged([prev, cur]):
                break
            prev = cur
        return start, period, t

    def _start_partition(self, Xs, rng):
        """``init="kmeans"``: k-means (``n_init`` restarts) of the scaled rows standardised
        (as scikit-learn's KMeans is usually run), ``(labels, centres, (offset, scale))``,
        the labels NumPy for NumPy ``Xs`` and chunked like ``Xs`` for dask; else None."""
        if self.init != "kmeans":
            return None
        scaling = fit_scaling(Xs, "standard")
        Z = apply_scaling(Xs, *scaling)
        Zd = Z if isinstance(Z, da.Array) else da.from_array(Z, chunks=Z.shape)
        centers, labels = kmeans(Zd, self.n_clusters, n_init=self.n_init, random_state=rng)[:2]
        labels = labels.compute() if Zd is not Z else labels.persist()
        return labels, centers, scaling

    def _keep_better(self, state, start, start_loss):
        """The start partition in place of ``state``'s labels when its loss (eq. 10) under
        the returned weights is lower: the iterations' result is kept only if the kernel
        k-means objective of the kernel they learnt says it is better. Sets
        ``start_kept_``."""
        self.start_kept_ = False
        self._start_centers = None
        if start is None:
            return state
        loss = float(start_loss(self.kernel_weights_))
        logger.info("TUMK-ELM: loss %.10g, the k-means start's %.10g", state["loss"], loss)
        if not loss < state["loss"]:
            return state
        self.start_kept_ = True
        self.loss_ = loss
        self._start_centers = start[1:]
        return dict(state, labels=start[0], loss=loss, centers=None)

    def _fit_exact(self, dk, X, rng):
        """Algorithm 1 on dense kernel blocks (``dk``, :class:`DenseKernels` over X)."""
        kernels, form, k = self.kernels_, self.feature_form, self.n_clusters
        ZtZ = self.kspace_gram_
        eig_seed = draw_seed(rng)
        km_seed = draw_seed(rng)
        start = self._start_partition(X, rng)

        def stage1(mu, labels=None):
            K = exact_combined(dk, X, mu)
            U, s = exact_leading_eigenvectors(K, k, eig_seed)
            del K
            centers = None
            if labels is None and self.assignment == "argmax":
                labels = np.argmax(U, axis=1).astype(np.int64)
            elif labels is None:
                V = unit_rows(U) if self.assignment == "kmeans-unit" else U
                km = KMeans(k, n_init=self.n_init, random_state=km_seed).fit(V)
                labels, centers = km.labels_.astype(np.int64), km.cluster_centers_
            ZtT, loss = exact_pass(dk, X, labels, mu, form, k)
            return {
                "labels": labels,
                "U": U,
                "s": s,
                "ZtT": ZtT,
                "loss": loss,
                "centers": centers,
            }

        state = self._iterate(
            stage1,
            lambda st: solve_weights(ZtZ, st["ZtT"], self.C),
            len(kernels),
            None if start is None else partial(stage1, labels=start[0]),
        )
        state = self._keep_better(
            state, start, lambda mu: exact_pass(dk, X, start[0], mu, form, k)[1]
        )
        self.labels_, self.embedding_, self.eigenvalues_ = state["labels"], state["U"], state["s"]
        # out of sample (Nystrom extension of the eigenvectors): u(x) = K^(x, X) U / s
        self._fit_X, self._fit_U = X, state["U"]
        self._kmeans_centers = state["centers"]

    def _iterate_scalable(self, features, stats, Phi, factors, km_seed, was_dask, rng):
        """Algorithm 1's loop on the scalable mode's reductions; sets the fitted state.

        An iteration embeds the rows (one pass over Phi, or over X where Phi is not kept),
        assigns them, and sums H's rows per cluster from the points that changed cluster
        (:class:`~._tumkelm_scalable.LabelSums`). The embedding is kept on the workers for
        the last iteration and the one of the lowest loss so far, the iterations the loop
        may return (N x n_clusters each)."""
        Xs, kernels, form, k = features.X, self.kernels_, self.feature_form, self.n_clusters
        start = self._start_partition(Xs, rng)
        label_sums = LabelSums(features, k)
        int_meta = np.empty((0,), dtype=np.int64)

        def embedding(P, folds):
            if Phi is not None:
                return Phi.map_blocks(np.dot, P, chunks=(Phi.chunks[0], (k,)), dtype=np.float64)
            return Xs.map_blocks(
                _embed, factors, folds, chunks=(Xs.chunks[0], (k,)), dtype=np.float64
            )

        computed = []

        def stage1(mu, labels=None):
            P, s = leading_eigenvectors(stats, mu, k)
            folds = None if Phi is not None else _folds(factors, P, stats["offsets"])
            U = centers = None
            if labels is None:
                U = embedding(P, folds).persist()
                if self.assignment == "argmax":
                    labels = U.map_blocks(_argmax_rows, drop_axis=1, dtype=np.int64, meta=int_meta)
                else:
                    V = unit_rows(U) if self.assignment == "kmeans-unit" else U
                    centers, labels = kmeans(V, k, n_init=self.n_init, random_state=km_seed)[:2]
                labels = labels.persist()
            cs = label_sums(labels)
            state = {
                "P": P,
                "folds": folds,
                "s": s,
                "U": U,
                "labels": labels,
                "cs": cs,
                "loss": tumkelm_loss(stats, cs, mu),
                "centers": centers,
            }
            computed.append(state)
            lowest = min(computed, key=lambda st: st["loss"])
            for st in computed[:-1]:
                if st is not lowest:
                    st["U"] = None  # released on the workers
            return state

        first = None if start is None else partial(stage1, labels=start[0])
        state = self._iterate(
            stage1,
            lambda st: solve_weights(
                self.kspace_gram_, kspace_target(stats, st["cs"], form), self.C
            ),
            len(kernels),
            first,
        )
        start_loss = None
        if start is not None:  # the first iteration summed H's rows over the start partition
            start_loss = partial(tumkelm_loss, stats, computed[0]["cs"])
        state = self._keep_better(state, start, start_loss)
        folds = state["folds"]
        U = state["U"] if state["U"] is not None else embedding(state["P"], folds).persist()
        labels = state["labels"]
        computed.clear()
        # out of sample: the same map as the training embedding, u(x) = sum_q B_q(x) W_q P_q
        self._folds = _folds(factors, state["P"], stats["offsets"])
        self._fit_X, self._kmeans_centers = None, state["centers"]
        self.eigenvalues_ = state["s"]
        self.reductions_ = stats
        logger.info("TUMK-ELM: hidden rows built per iteration %s", label_sums.n_changed_)
        if was_dask:
            self.labels_, self.embedding_ = labels, U
        else:
            self.labels_, self.embedding_ = dask.compute(labels, U)

    # -- use: the shared steps of EmbeddingClusterMixin ----------------------------------
    def embed_rows(self, Xd):
        """The rows of Xd in the space of the leading eigenvectors of K^ (NumPy for NumPy
        Xd, lazy dask for dask).

        Exact mode: the Nystrom extension ``u(x) = K^(x, X_fit) U / s`` (s the eigenvalues),
        which gives back ``embedding_`` on the training points. Scalable mode: the map of
        the training embedding, ``u(x) = sum_q phi_q(x) P_q`` on the kernel factors (the
        ``alpha_q I`` part of a kernel is zero between distinct points).
        """
        Xs = apply_scaling(Xd, *self.scaling_)
        was_dask = isinstance(Xs, da.Array)
        if self._fit_X is not None:
            fitted = (
                self._fit_X,
                self.kernels_,
                self.kernel_weights_,
                self._fit_U,
                self.eigenvalues_,
            )
            if not was_dask:
                return nystrom_extension(np.asarray(Xs, np.float64), *fitted)
            return Xs.map_blocks(
                nystrom_extension,
                *fitted,
                dtype=np.float64,
                chunks=(Xs.chunks[0], (self._fit_U.shape[1],)),
            )
        if not was_dask:
            return _embed(np.asarray(Xs, np.float64), self.factors_, self._folds)
        return Xs.map_blocks(
            _embed,
            self.factors_,
            self._folds,
            chunks=(Xs.chunks[0], (self.n_clusters,)),
            dtype=np.float64,
        )

    def label_embedding(self, Xd, E):
        """The fitted assignment rule, which ``predict`` gives and ``score`` measures: the
        argmax of each row of the embedding E (``assignment="argmax"``) or its nearest
        k-means centre (of E's rows scaled to unit length with ``"kmeans-unit"``, where
        those centres live); when the k-means start was kept (``start_kept_``), the nearest
        of its centres to the rows of Xd in its standardised input space."""
        if self._start_centers is not None:
            centers, scaling = self._start_centers
            Z = apply_scaling(apply_scaling(Xd, *self.scaling_), *scaling)
            return assign_nearest(Z, centers)
        centers = self._kmeans_centers
        if centers is None:
            if not isinstance(E, da.Array):
                return _argmax_rows(E)
            return E.map_blocks(
                _argmax_rows, drop_axis=1, dtype=np.int64, meta=np.empty((0,), dtype=np.int64)
            )
        return assign_nearest(unit_rows(E) if self.assignment == "kmeans-unit" else E, centers)

    @property
    def _n_features_out(self):
        return self.embedding_.shape[1]
