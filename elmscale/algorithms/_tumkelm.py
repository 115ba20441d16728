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

Scalable mode. Each kernel is replaced by a :class:`~elmscale.kernels.KernelFactor`,
K_q ~ alpha_q I + Phi_q Phi_q^T with Phi_q (N x m_q) computed row block by row block. With
Phi the stacked factors (N x M, M = sum m_q), one pass over X gives, label independent,

    G = Phi^T Phi (M x M),  u = Phi^T 1,  A^T A, A^T 1 (A = [a_q], N x p),  Phi^T A,

and one pass per iteration gives Phi^T F, n and A^T F. Then, e.g.,
sum_ij K_q(i,j) K_r(i,j) = alpha_q alpha_r N + alpha_q tr G_rr + alpha_r tr G_qq + ||G_qr||_F^2,
the same-cluster sum of K_q is alpha_q N + ||Phi_q^T F||_F^2, and the leading eigenvectors
of K^ = (sum mu_q alpha_q) I + Psi Psi^T, Psi = [sqrt(mu_q) Phi_q], are U = Psi V S^-1/2
from the eigenpairs (V, S) of the small Gram D G D, D = diag(sqrt(mu_q)). Nothing N x N is
formed; the N-row arrays kept between passes are A (N x p) and, when it takes at most
``KEEP_FEATURES_BYTES``, Phi itself (then an iteration's pass is two (rows x M) x (M x n_c)
products per chunk instead of a re-evaluation of every kernel).
"""

import logging
import operator
import os
import time
import warnings
from numbers import Integral, Real

import dask
import dask.array as da
import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import eigsh
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin, _fit_context
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .. import registry
from ..cluster import kmeans
from ..exceptions import UnknownPluginError
from ..hidden import apply_scaling, fit_scaling
from ..kernels import Kernel, KernelFactor, RBFKernel, paper_kernels, shared_distances
from ..solvers import ridge_solve
from ..utils._dask import tree_sum, tree_sum_now
from ..utils._persistence import DaskStateMixin
from ..utils._random import draw_seed
from ..utils._threads import blas_threads, shared_pool, threaded_scheduler
from ..utils._validation import row_chunks, validate_data
from ._embedding import unit_rows
from ._output import EmbeddingFeaturesOutMixin, negative_sse

logger = logging.getLogger(__name__)

#: ``mode="auto"`` runs the exact (dense) algorithm up to this many samples, the scalable
#: one above. The exact mode costs O(p N^2) per iteration: on random subsets of Segment
#: and Frogs of 1,000 and 2,000 points it took 1.1-4.5 s per fit against 0.10-0.54 s for
#: the scalable mode (100 landmarks), whose ACC over 3 seeds was higher in 6 of 8 cases
#: (both assignments; 0.01 lower on Segment with k-means at both sizes); on the full
#: Segment (2,310) 0.5661 +- 0.0171 (argmax) and 0.6935 +- 0.0040 (k-means) over 10 seeds
#: against the exact 0.5468 and 0.6667 +- 0.0319, in 0.2 s instead of 4.6 s. At 500 points the two
#: are mixed (Frogs argmax 0.575 scalable vs 0.610 exact) and the exact fit takes 0.2-0.5 s;
#: below 1,000 points the scalable mode's landmark sample is the whole data set anyway.
#: ``mode="exact"`` still runs any
#: N that fits K^ (N^2 float64: 800 MB at N = 10,000) in memory.
AUTO_EXACT_MAX = 1_000

#: Bytes of one (p x rows x N) block of kernel values in the exact mode.
_EXACT_BLOCK_BYTES = 128 * 2**20

# Below this many samples the exact mode runs BLAS on one thread.
_EXACT_THREADED_MIN = 2000

# Stop computing when the kernel weights repeat exactly (see TUMKELM._iterate); tests turn
# it off to check that the result is the full loop's.
_DETECT_CYCLES = True

# Above this many factor columns the small eigenproblem uses Lanczos: measured 3-8x faster
# than the dense subset eigh from M = 263 (Frogs, 50 landmarks: 1.8 vs 3.4 ms) to 713 (wine:
# 4.2 vs 34.7 ms), eigenvalues equal to 1e-15 relative (benchmarks/RESULTS.md, TUMK-ELM).
_LANCZOS_MIN = 200

# Eigenvalues of the small Gram below this fraction of the largest are treated as zero.
_EIG_RTOL = 1e-12

#: The scalable mode keeps the stacked factor Phi (N x M float64) in memory, persisted next
#: to the diagonals A, when it takes at most this many bytes: each iteration's pass is then
#: two (rows x M) x (M x n_c) products per chunk instead of re-evaluating every kernel's
#: basis on the chunk (Frogs: 0.11 s -> ~0.01 s per iteration). Above it the bases are
#: recomputed from X every pass, so memory stays O(chunk) whatever N.
KEEP_FEATURES_BYTES = 2**30


# =========================================================================================
# Functions over the reduced quantities (the scalable mode's algebra)
# =========================================================================================
def _blocks(offsets):
    return [slice(offsets[q], offsets[q + 1]) for q in range(len(offsets) - 1)]


def kspace_gram(stats, feature_form="distance"):
    """Z^T Z (p x p) of the K-space samples from the label-independent reductions.

    ``stats`` holds ``n`` (N), ``alpha`` (p), ``offsets`` (p + 1 column offsets of the
    stacked factor), ``G`` (Phi^T Phi), ``u`` (Phi^T 1), ``AA`` (A^T A), ``S`` (A^T 1) and
    ``PA`` (Phi^T A), as returned by :func:`factor_stats`.
    """
    N, alpha, G, u = stats["n"], stats["alpha"], stats["G"], stats["u"]
    blk = _blocks(stats["offsets"])
    p = len(alpha)
    tr = np.array([np.trace(G[b, b]) for b in blk])
    VV = np.array([[np.sum(G[bq, br] ** 2) for br in blk] for bq in blk]).reshape(p, p)
    value = np.outer(alpha, alpha) * N + np.outer(alpha, tr) + np.outer(tr, alpha) + VV
    if feature_form == "value":
        return value
    S, AA, PA = stats["S"], stats["AA"], stats["PA"]
    # KA[q, r] = a_q^T K_r 1 = alpha_r S_q + (Phi_r^T a_q) . (Phi_r^T 1)
    KA = np.empty((p, p))
    for r, br in enumerate(blk):
        KA[:, r] = alpha[r] * S + PA[br].T @ u[br]
    return 2 * N * AA + 2 * np.outer(S, S) - 4 * KA - 4 * KA.T + 4 * value


def kspace_target(stats, cstats, feature_form="distance"):
    """Z^T T (p,) for the assignment summarised by ``cstats``: ``E`` (Phi^T F, M x n_c),
    ``sizes`` (n_c) and ``SA`` (A^T F, p x n_c)."""
    N, alpha, u = stats["n"], stats["alpha"], stats["u"]
    E = cstats["E"]
    blk = _blocks(stats["offsets"])
    uu = np.array([u[b] @ u[b] for b in blk])
    EE = np.array([np.sum(E[b] ** 2) for b in blk])
    total = alpha * N + uu  # sum_ij K_q(i, j)
    same = alpha * N + EE   # sum over same-cluster pairs (every point is assigned)
    if feature_form == "value":
        return total - same
    total_d = 2 * N * stats["S"] - 2 * total
    same_d = 2 * cstats["SA"] @ cstats["sizes"] - 2 * same
    return total_d - same_d


def tumkelm_loss(stats, cstats, mu):
    """Eq. 10, Tr(K^) - sum_c (1_c^T K^ 1_c) / n_c, from the reductions."""
    alpha, E, sizes = stats["alpha"], cstats["E"], cstats["sizes"]
    nz = sizes > 0
    per_kernel = np.array([
        stats["S"][q] - alpha[q] * nz.sum()
        - np.sum((E[b][:, nz] ** 2).sum(axis=0) / sizes[nz])
        for q, b in enumerate(_blocks(stats["offsets"]))])
    return float(mu @ per_kernel)


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


def leading_eigenvectors(stats, mu, n_clusters):
    """Leading eigenvectors of K^ = sum mu_q (alpha_q I + Phi_q Phi_q^T) as U = Phi P.

    Returns ``(P, eigenvalues)``: P (M x n_clusters) maps the stacked factor to U;
    eigenvalues are those of K^. Each column's sign makes U's column sum non-negative.
    Columns beyond the rank of the low-rank part are zero.
    """
    G, u = stats["G"], stats["u"]
    blk = _blocks(stats["offsets"])
    M = G.shape[0]
    d = np.empty(M)
    for q, b in enumerate(blk):
        d[b] = np.sqrt(mu[q])
    # G is exactly symmetric (factor_stats), and so is outer(d, d): so is their product
    Gm = G * np.outer(d, d)
    k = min(n_clusters, M)
    P = np.zeros((M, n_clusters))
    lam = np.zeros(n_clusters)
    if k > 0:
        if M > _LANCZOS_MIN and k < M // 4:
            # only the k leading pairs: Lanczos is O(M^2) per step where the dense
            # tridiagonalisation is O(M^3) (1.5 s per iteration at M = 1,500)
            v0 = np.random.RandomState(0).uniform(-1, 1, M)
            s, V = eigsh(Gm, k=k, which="LA", v0=v0, tol=1e-13)
            order = np.argsort(s)
            s, V = s[order], V[:, order]
        else:
            s, V = sla.eigh(Gm, subset_by_index=[M - k, M - 1], check_finite=False)
        s, V = s[::-1], V[:, ::-1]
        keep = s > _EIG_RTOL * max(s[0], 0.0) if s[0] > 0 else np.zeros(k, dtype=bool)
        Pk = d[:, None] * V[:, keep] / np.sqrt(s[keep])
        P[:, : keep.sum()] = Pk
        lam[: keep.sum()] = s[keep]
    signs = np.sign(u @ P)
    signs[signs == 0] = 1.0
    lam = lam + float(mu @ stats["alpha"])
    return P * signs, lam


# =========================================================================================
# Blockwise passes (scalable mode)
# =========================================================================================
def _block_columns(X, factors):
    """``Z = [Phi | A | 1]`` for a block of rows: the stacked factor Phi (rows x M), the
    diagonals A (rows x p, A_iq = K_q(i, i)) and a column of ones, written into one buffer
    so that a single ``Z^T Z`` gives every label-independent sum (:func:`_gram_block`)."""
    n, p = X.shape[0], len(factors)
    offsets = np.cumsum([0] + [f.n_components for f in factors])
    M = int(offsets[-1])
    Z = np.empty((n, M + p + 1))
    with shared_distances():
        for q, f in enumerate(factors):
            P = Z[:, offsets[q]:offsets[q + 1]]
            if type(f).features is KernelFactor.features:
                f.features(X, out=P)
            else:  # a plugin's own features(X), perhaps without ``out``
                P[...] = f.features(X)
            Z[:, M + q] = f.alpha + np.einsum("ij,ij->i", P, P)
    Z[:, M + p] = 1.0
    return Z, M


def _gram_block(X, factors, keep_features=False):
    """Label-independent partial sums of one row chunk (plus its diagonals A, and its rows
    of Phi with ``keep_features``): G = Phi^T Phi, u = Phi^T 1, PA = Phi^T A, AA = A^T A,
    S = A^T 1 and n are blocks of one symmetric product Z^T Z of ``Z = [Phi | A | 1]``
    (one BLAS syrk: 2.5 ms less than separate products and no copy of Phi on Frogs)."""
    Z, M = _block_columns(X, factors)
    W = Z.T @ Z
    e = W.shape[0] - 1
    stats = {"n": W[e, e], "G": W[:M, :M].copy(), "u": W[:M, e].copy(),
             "AA": W[M:e, M:e].copy(), "S": W[M:e, e].copy(), "PA": W[:M, M:e].copy()}
    if not keep_features:  # A alone outlives the block: do not keep the buffer with it
        return {"stats": stats, "A": np.ascontiguousarray(Z[:, M:e]), "Phi": None}
    return {"stats": stats, "A": Z[:, M:e], "Phi": Z[:, :M]}


def _embed(X, factors, folds):
    U = np.zeros((X.shape[0], folds[0].shape[1]))
    with shared_distances():
        for f, W in zip(factors, folds):
            if W.shape[0]:
                U += f.basis(X) @ W
    return U


def _argmax_rows(U):
    return np.argmax(U, axis=1).astype(np.int64)


def _nearest_rows(U, centers):
    d2 = ((U[:, None, :] - centers[None]) ** 2).sum(axis=2)
    return np.argmin(d2, axis=1).astype(np.int64)


def _nystrom_extension(Xnew, Xfit, kernels, mu, U, s):
    """``K^(Xnew, Xfit) U / s`` in row blocks; columns with eigenvalue <= 0 (beyond the
    rank of K^) are 0."""
    Xnew = np.asarray(Xnew, dtype=np.float64)
    out = np.zeros((Xnew.shape[0], U.shape[1]))
    keep = s > _EIG_RTOL * max(abs(s).max(), 1e-300)
    W = np.where(keep, U / np.where(keep, s, 1.0), 0.0)
    with shared_distances():
        rows = max(1, int(_EXACT_BLOCK_BYTES // (8 * Xfit.shape[0])))
        for start in range(0, Xnew.shape[0], rows):
            sl = slice(start, start + rows)
            for q, kernel in enumerate(kernels):
                if mu[q] != 0:
                    out[sl] += mu[q] * (kernel(Xnew[sl], Xfit) @ W)
    return out


def _argmax_block(X, factors, folds):
    return np.argmax(_embed(X, factors, folds), axis=1).astype(np.int64)


def _cluster_block(X, A, labels, factors, folds, n_clusters):
    """Per-iteration partial sums of one chunk: B^T F per factor (B the basis), the
    cluster sizes and A^T F. With ``labels=None`` the chunk's labels are the argmax of its
    rows of the embedding (computed from the same basis)."""
    with shared_distances():
        Bs = [f.basis(X) for f in factors]
    if labels is None:
        U = np.zeros((X.shape[0], n_clusters))
        for B, W in zip(Bs, folds):
            if W.shape[0]:
                U += B @ W
        labels = np.argmax(U, axis=1)
    F = np.zeros((X.shape[0], n_clusters))
    F[np.arange(X.shape[0]), labels] = 1.0
    BF = [B.T @ F for B in Bs]
    return {"E": np.vstack(BF) if BF else np.zeros((0, n_clusters)),
            "sizes": F.sum(axis=0), "SA": A.T @ F}


def _rows_of(parts, key, chunks, width):
    return da.concatenate([
        da.from_delayed(dask.delayed(operator.getitem, pure=True)(q, key), shape=(n, width),
                        dtype=np.float64) for q, n in zip(parts, chunks)])


def _map_blocks(pool, fn, *blocks):
    """``[fn(*args) for args in zip(*blocks)]`` on the threads of ``pool`` (an executor), or
    in this thread when ``pool`` is None (one thread, or one block)."""
    return list((pool.map if pool is not None else map)(fn, *blocks))


def factor_stats(Xs, factors, *, fan_in=8, keep_features=False, pool=None):
    """One pass over the row chunks of ``Xs`` (dask, scaled): the label-independent
    reductions of :func:`kspace_gram` and the persisted diagonals A (dask, N x p).
    With ``keep_features`` the stacked factor Phi (dask, N x M) is persisted in the same
    pass and returned third.

    ``Xs`` may also be a list of NumPy row blocks: the pass then runs in-process, on the
    threads of ``pool`` (a ``concurrent.futures`` executor) when one is given, Phi is kept,
    and A and Phi are lists of NumPy row blocks for the in-process iterations of
    :func:`cluster_stats`: the same block sums in the same order as the dask graph, no
    graph (~25 ms of a Frogs fit)."""
    p = len(factors)
    M = int(sum(f.n_components for f in factors))
    if isinstance(Xs, list):
        n = len(Xs)
        blocks = _map_blocks(pool, _gram_block, Xs, [factors] * n, [True] * n)
        stats = tree_sum_now([b["stats"] for b in blocks], fan_in=fan_in)
        A, Phi = [b["A"] for b in blocks], [b["Phi"] for b in blocks]
        keep_features = True
    else:
        parts = [dask.delayed(_gram_block, pure=True)(b, factors, keep_features)
                 for b in Xs.to_delayed().ravel().tolist()]
        stats = tree_sum([dask.delayed(operator.getitem, pure=True)(q, "stats")
                          for q in parts], fan_in=fan_in)
        A = _rows_of(parts, "A", Xs.chunks[0], p)
        if keep_features:
            Phi = _rows_of(parts, "Phi", Xs.chunks[0], M)
            stats, A, Phi = dask.persist(stats, A, Phi)  # one pass computes all three
        else:
            stats, A = dask.persist(stats, A)
        stats = stats.compute()
    stats = dict(stats)
    stats["G"] = 0.5 * (stats["G"] + stats["G"].T)
    offsets = np.concatenate([[0], np.cumsum([f.n_components for f in factors])])
    stats.update(n=float(stats["n"]), alpha=np.array([f.alpha for f in factors]),
                 offsets=offsets)
    return (stats, A, Phi) if keep_features else (stats, A)


def _cluster_block_features(Phi, A, labels, P, n_clusters):
    """:func:`_cluster_block` from the kept rows of Phi: ``E = Phi^T F`` directly."""
    if labels is None:
        labels = np.argmax(Phi @ P, axis=1)
    F = np.zeros((Phi.shape[0], n_clusters))
    F[np.arange(Phi.shape[0]), labels] = 1.0
    return {"E": Phi.T @ F, "sizes": F.sum(axis=0), "SA": A.T @ F}


def local_threads():
    """Threads of the in-process (NumPy input) scalable path: dask's ``num_workers`` when
    set, else the CPU count (the threaded scheduler's default)."""
    return max(1, int(dask.config.get("num_workers", None) or os.cpu_count() or 1))


def local_chunks(n_samples, n_blocks, threads):
    """Row chunks of the in-process path: at least ``n_blocks``, a multiple of ``threads``,
    equal to one row, so every thread gets the same work (the default chunking sizes blocks
    for memory only, e.g. Frogs with 100 landmarks: 5,592 + 1,603 rows on 2 threads)."""
    n = -(-max(n_blocks, 1) // threads) * threads
    n = max(1, min(n, n_samples))
    return tuple(n_samples // n + (i < n_samples % n) for i in range(n))


def cluster_stats(Xs, A, factors, *, labels=None, folds=None, n_clusters, fan_in=8,
                  features=None, P=None, pool=None):
    """One pass: ``E = Phi^T F`` (M x n_c), ``sizes`` and ``SA = A^T F`` for the labels
    given (dask, chunked like Xs) or, with ``labels=None``, the argmax of ``Phi P``.
    With ``features`` (the persisted Phi of :func:`factor_stats`) and ``P`` the pass reads
    Phi instead of re-evaluating the kernels' bases on X; when ``features`` and ``A`` are
    lists of NumPy row blocks (:func:`factor_stats` of NumPy blocks) the pass runs in-process,
    ``labels`` then being a NumPy array or None: a few milliseconds per iteration instead of
    a dask graph (same blocks, same sums in the same order, same result), on the threads
    of ``pool`` (a ``concurrent.futures`` executor) when one is given."""
    if isinstance(features, list):
        if labels is None:
            Lb = [None] * len(features)
        else:
            Lb = np.split(np.asarray(labels), np.cumsum([f.shape[0] for f in features])[:-1])
        args = (features, A, Lb, [P] * len(features), [n_clusters] * len(features))
        parts = _map_blocks(pool, _cluster_block_features, *args)
        return dict(tree_sum_now(parts, fan_in=fan_in))
    if features is not None:
        Fb = features.to_delayed().ravel().tolist()
        Ab = A.to_delayed().ravel().tolist()
        Lb = labels.to_delayed().ravel().tolist() if labels is not None else [None] * len(Fb)
        Pd = dask.delayed(P, pure=True)
        parts = [dask.delayed(_cluster_block_features, pure=True)(f, a, lab, Pd, n_clusters)
                 for f, a, lab in zip(Fb, Ab, Lb)]
        return dict(dask.compute(tree_sum(parts, fan_in=fan_in))[0])
    weights = [f.weights for f in factors]
    Xb = Xs.to_delayed().ravel().tolist()
    Ab = A.to_delayed().ravel().tolist()
    Lb = labels.to_delayed().ravel().tolist() if labels is not None else [None] * len(Xb)
    fd = dask.delayed(folds, pure=True) if folds is not None else None
    parts = [dask.delayed(_cluster_block, pure=True)(x, a, lab, factors, fd, n_clusters)
             for x, a, lab in zip(Xb, Ab, Lb)]
    total = dask.compute(tree_sum(parts, fan_in=fan_in))[0]
    # back from the bases to the factors: Phi_q^T F = W_q^T (B_q^T F)
    E, start = [], 0
    for f, W in zip(factors, weights):
        BF = total["E"][start:start + f.n_basis]
        start += f.n_basis
        E.append(BF if W is None else W.T @ BF)
    total["E"] = np.vstack(E) if E else np.zeros((0, n_clusters))
    return total


def build_factors(kernels, sample, n_samples, n_components, method, rng, pool=None):
    """Every kernel's factor on the landmark sample, in the order of ``kernels``.

    On one BLAS thread: the products are small, and a threaded BLAS call leaves OpenBLAS's
    workers spinning for a while, taking a core from the pool's first pass (+25 ms per
    Frogs block). The Gaussian kernels share one distance matrix of the sample
    (:func:`~elmscale.kernels.shared_distances`); with a ``pool`` and Nystrom factors they
    are factored on one of its threads while this thread factors the others (Frogs: ~13 of
    the ~20 ms are the Gaussians'). With random features (``method="rff"``) every factor
    is built here in order, so the draws from ``rng`` keep their order.
    """
    def build(kernel):
        return kernel.factor(sample, n_samples=n_samples, n_components=n_components,
                             method=method, random_state=rng)

    def build_all(some):
        with shared_distances():
            return [build(kernel) for kernel in some]

    gaussian = [type(kernel) is RBFKernel for kernel in kernels]
    with blas_threads(1):
        if pool is None or method != "nystrom" or all(gaussian) or not any(gaussian):
            return build_all(kernels)
        there = pool.submit(build_all, [k for k, g in zip(kernels, gaussian) if g])
        here = iter(build_all([k for k, g in zip(kernels, gaussian) if not g]))
        done = iter(there.result())
        return [next(done) if g else next(here) for g in gaussian]


def _folds(factors, P, offsets):
    """Per-factor matrices mapping each basis block to U: W_q P_q."""
    out = []
    for f, b in zip(factors, _blocks(offsets)):
        Pq = P[b]
        out.append(Pq if f.weights is None else f.weights @ Pq)
    return out


# =========================================================================================
# Exact (dense) mode
# =========================================================================================
def _row_blocks(N, p):
    rows = max(1, int(_EXACT_BLOCK_BYTES // (8 * max(p, 1) * N)))
    return [slice(i, min(i + rows, N)) for i in range(0, N, rows)]


class DenseKernels:
    """The base kernels over X (N x d, NumPy) for the exact mode, one row block at a time.

    The full matrices are evaluated once and kept when ``p N^2`` float64 fit in
    ``cache_bytes`` (default 1 GiB: N <= ~2,900 with the paper's 15 kernels); otherwise
    every block is re-evaluated when it is needed (twice per iteration).
    """

    def __init__(self, kernels, X, cache_bytes=2**30):
        self.kernels, self.X = kernels, X
        N, p = X.shape[0], len(kernels)
        self.diags = [np.asarray(k.diagonal(X), dtype=np.float64) for k in kernels]
        self.cached = p * N * N * 8 <= cache_bytes
        if self.cached:
            with shared_distances():
                self._full = [k(X, X) for k in kernels]
        else:
            self._full = None

    def block(self, q, sl):
        """K_q(X[sl], X). Callers loop over q for one ``sl`` inside
        :func:`~elmscale.kernels.shared_distances`, so the Gaussians of different widths
        share one distance computation."""
        if self.cached:
            view = self._full[q][sl]
            view.flags.writeable = False  # a view of the cache: callers must not modify it
            return view
        return self.kernels[q](self.X[sl], self.X)


def _as_dense(kernels, X):
    return kernels if isinstance(kernels, DenseKernels) else DenseKernels(kernels, X)


def _dense_z(dk, sl, feature_form):
    """Kernel-space features of the pairs (sl, all): (p, rows, N)."""
    N = dk.X.shape[0]
    Z = np.empty((len(dk.kernels), sl.stop - sl.start, N))
    for q in range(len(dk.kernels)):
        Z[q] = dk.block(q, sl)
        if feature_form == "distance":
            Z[q] *= -2.0
            Z[q] += dk.diags[q][sl, None]
            Z[q] += dk.diags[q][None, :]
    return Z


def exact_kspace_gram(kernels, X, feature_form="distance"):
    """Z^T Z over all N^2 ordered pairs, from dense kernel blocks (exact mode)."""
    dk = _as_dense(kernels, X)
    p = len(dk.kernels)
    ZtZ = np.zeros((p, p))
    with shared_distances():
        for sl in _row_blocks(X.shape[0], p):
            Z = _dense_z(dk, sl, feature_form).reshape(p, -1)
            ZtZ += Z @ Z.T
    return ZtZ


def exact_pass(kernels, X, labels, mu, feature_form="distance", n_clusters=None):
    """Z^T T and the loss (eq. 10) for one assignment, from dense kernel blocks."""
    dk = _as_dense(kernels, X)
    p, N = len(dk.kernels), X.shape[0]
    labels = np.asarray(labels)
    n_clusters = int(labels.max()) + 1 if n_clusters is None else n_clusters
    sizes = np.bincount(labels, minlength=n_clusters).astype(np.float64)
    F = np.zeros((N, n_clusters))
    F[np.arange(N), labels] = 1.0
    same = np.zeros((p, n_clusters))  # 1_c^T K_q 1_c
    total = np.zeros(p)  # 1^T K_q 1
    with shared_distances():
        for sl in _row_blocks(N, 1):
            for q in range(p):
                KF = dk.block(q, sl) @ F
                same[q] += np.einsum("ic,ic->c", F[sl], KF)
                total[q] += KF.sum()
    # sum_ij K_q(i, j) T_ij = 1^T K_q 1 - sum_c 1_c^T K_q 1_c, and for the distance form
    # sum_ij (a_i + a_j) T_ij = 2 sum_i a_i (N - n_c(i)): the same closed forms as
    # kspace_target, with only K_q F formed (no N x N target matrix)
    ZtT = total - same.sum(axis=1)
    if feature_form == "distance":
        others = N - sizes[labels]
        ZtT = 2 * np.array([d @ others for d in dk.diags]) - 2 * ZtT
    nz = sizes > 0
    traces = np.array([d.sum() for d in dk.diags])
    loss = float(mu @ (traces - (same[:, nz] / sizes[nz]).sum(axis=1)))
    return ZtT, loss


def exact_combined(kernels, X, mu):
    """K^ = sum mu_q K_q, dense (N x N)."""
    dk = _as_dense(kernels, X)
    N = X.shape[0]
    K = np.zeros((N, N))
    with shared_distances():
        for sl in _row_blocks(N, 1):
            for q in range(len(dk.kernels)):
                if mu[q] != 0:
                    K[sl] += mu[q] * dk.block(q, sl)
    return 0.5 * (K + K.T)


def exact_leading_eigenvectors(K, n_clusters, random_state=0):
    """The n_clusters leading eigenvectors of a dense symmetric K, signs as in
    :func:`leading_eigenvectors` (non-negative column sums)."""
    N = K.shape[0]
    if N <= 1000 or n_clusters >= N - 1:
        s, U = sla.eigh(K, subset_by_index=[N - n_clusters, N - 1], check_finite=False)
    else:  # Lanczos: only matrix-vector products with the dense K
        v0 = check_random_state(random_state).uniform(-1, 1, N)
        s, U = eigsh(K, k=n_clusters, which="LA", v0=v0, tol=1e-12)
        order = np.argsort(s)
        s, U = s[order], U[:, order]
    s, U = s[::-1], U[:, ::-1]
    signs = np.sign(U.sum(axis=0))
    signs[signs == 0] = 1.0
    return U * signs, s


# =========================================================================================
# The estimator
# =========================================================================================
def resolve_kernels(kernels):
    """Kernel instances from ``"paper"`` or a list of names, ``(name, params)`` pairs or
    kernel objects. Raises on an empty list and on unknown names."""
    if isinstance(kernels, str):
        if kernels == "paper":
            return paper_kernels()
        kernels = [kernels]
    kernels = list(kernels)
    if not kernels:
        raise ValueError("kernels is empty: TUMK-ELM needs at least one base kernel "
                         "(e.g. kernels='paper', or ['linear', ('rbf', {'width': 1.0})])")
    out = []
    for item in kernels:
        params = {}
        if isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[0], str) or not isinstance(item[1], dict):
                raise ValueError(f"a kernel given as a tuple must be (name, params_dict), "
                                 f"got {item!r}")
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
            raise TypeError(f"kernels must hold kernel names, (name, params) pairs or kernel "
                            f"objects, got {type(item).__name__}: {item!r}")
    return out


class TUMKELM(ClusterMixin, EmbeddingFeaturesOutMixin, TransformerMixin, DaskStateMixin,
              BaseEstimator):
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
        the scalable mode grows as M^2 with M the total factor columns (Frogs: M = 469 at
        100, 1,252 at 300). 100 rather than 300: 3-4x faster
        (Frogs 0.24 s vs 0.91 s, Shuttle 0.32 s vs 0.91 s wall in one run), for a mean ACC
        over 10 seeds of the five benchmark sets in scalable mode of 0.666 vs 0.673
        (argmax) and 0.703 vs 0.709 (k-means): within one standard deviation on Frogs
        (0.635 vs 0.638) and Segment (0.566 vs 0.539), 1 std below on Shuttle (0.625 vs
        0.651, the paper 0.341); iris, wine and segment run the exact mode by default.
        The cost: on the 100,000-point synthetic mixture (10 balanced clusters) argmax
        drops from 0.774 to 0.69 (3 seeds; k-means 0.998 either way). Raise it when the
        fit time allows (benchmarks/RESULTS.md, TUMK-ELM).
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
        default because it had the best mean accuracy over the shared benchmark sets and
        stays the choice when any one set is left out of it; argmax lost to it on 8 of the 9
        sets where both ran (benchmarks/RESULTS.md, "Quality without labels"). It costs a
        k-means on the N x n_clusters eigenvectors per iteration.
    scaling : {"minmax", "standard"} or None, default="minmax"
        Per-feature scaling of X before the kernels: "minmax" maps each feature to [-1, 1]
        (better than "standard" on iris, wine and segment in the benchmark).
    n_init : int, default=10
        k-means restarts (``assignment="kmeans"`` or ``"kmeans-unit"``).
    select : {"last", "lowest_loss"}, default="last"
        The iteration whose assignment and weights are returned: the last one (Algorithm 1)
        or the first with the lowest loss (eq. 10) in ``history_``, a label-free choice by
        the paper's own objective. The loss is not monotone: on every benchmark set it is
        lowest at the first or second weight update. Over 10 seeds "lowest_loss" with
        k-means reaches the paper on Wine (0.9719 vs 0.9663 with "last") and raises Iris
        (0.8733 vs 0.8600), but with argmax it lowers Wine (0.7416 vs 0.7865): not the
        default (benchmarks/RESULTS.md, TUMK-ELM).
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
    history_ : ndarray (n_iter_,)
        Loss (eq. 10) of each iteration's assignment under that iteration's K^ (Fig. 4).
    weights_history_ : ndarray (n_iter_, p)
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
    embedding_ : ndarray or dask array (n_samples, n_clusters)
        Leading eigenvectors of the final K^.
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
    When the stacked factor Phi (N x M float64) takes at most ``KEEP_FEATURES_BYTES``
    (1 GiB: e.g. 100,000 points with the paper's 15 kernels and 300 landmarks), it is
    persisted by the first pass and the per-iteration passes read it instead of
    re-evaluating the kernels. NumPy input in that case runs its passes in-process (no
    dask scheduler nor distributed client; only ``assignment="kmeans"`` clusters the
    embedding on dask), on equal row blocks on a pool of ``local_threads()`` threads,
    with the same block sums as dask input in those chunks.
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
    >>> from elmscale.algorithms._tumkelm import TUMKELM
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
        "random_state": ["random_state"],
    }

    def __init__(self, n_clusters=8, *, kernels="paper", C=1.0, delta=1e-4, max_iter=20,
                 mode="auto", n_landmarks=100, approximation="nystrom",
                 feature_form="distance", assignment="kmeans-unit", scaling="minmax", n_init=10,
                 select="last", random_state=None):
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
        self.random_state = random_state

    # -- fit -------------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Cluster X: alternate stage 1 (eigenvectors of K^, assignment) and stage 2
        (kernel weights) until the loss (eq. 10) changes by at most ``delta``."""
        kernels = resolve_kernels(self.kernels)
        n_hidden = max(1, len(kernels) * self.n_landmarks)
        # NumPy input stays NumPy: scaled in-process, without dask graphs (~25 ms of the
        # 0.2 s of a Frogs fit; a float32 -> float64 conversion in dask was another ~15 ms)
        Xd, was_dask = validate_data(self, X, reset=True, n_hidden=n_hidden, numpy_ok=True)
        N = Xd.shape[0]
        if self.n_clusters > N:
            raise ValueError(f"n_clusters={self.n_clusters} must be <= n_samples={N}")
        self.mode_ = self.mode if self.mode != "auto" else (
            "exact" if N <= AUTO_EXACT_MAX else "scalable")
        self.kernels_ = kernels
        rng = check_random_state(self.random_state)
        offset, scale = fit_scaling(Xd, self.scaling)
        self.scaling_ = (offset, scale)
        Xs = apply_scaling(Xd, offset, scale)
        t0 = time.perf_counter()
        if self.mode_ == "exact":
            Xn = np.asarray(Xs.compute() if was_dask else Xs, dtype=np.float64)
            # small dense problems gain nothing from BLAS threads, and lose a lot to them
            # when the cores are shared (measured: 13 s instead of 0.4 s at N = 240)
            limit = 1 if N <= _EXACT_THREADED_MIN else None
            with blas_threads(limit):
                self._fit_exact(Xn, rng)
            if was_dask:
                chunks = Xd.chunks[0]
                self.labels_ = da.from_array(self.labels_, chunks=(chunks,))
                self.embedding_ = da.from_array(self.embedding_, chunks=(chunks, -1))
        else:
            chunks = Xd.chunks[0] if was_dask else row_chunks(N, n_hidden)
            self._fit_scalable(Xs, rng, was_dask, chunks)
        logger.info("TUMK-ELM (%s) fitted %d samples in %.2f s, %d iterations", self.mode_, N,
                    time.perf_counter() - t0, self.n_iter_)
        return self

    def _iterate(self, stage1, stage2, p):
        """Algorithm 1's loop; ``stage1(mu) -> (labels, loss, state)``,
        ``stage2(state) -> raw mu``.

        Both stages are deterministic functions of mu (fixed seeds), so when an update
        gives exactly (bit for bit) the weights of an earlier iteration j, iterations j, j+1,
        ..., it repeat for ever. The loop then stops computing and plays the stopping rule
        along that cycle up to ``max_iter``: the fitted state, ``history_``,
        ``weights_history_`` and ``n_iter_`` are those the full loop would give (Frogs:
        a 2-cycle from iteration 7 that the relative rule never stops, 9 iterations computed
        instead of 20). ``n_computed_`` counts the iterations actually computed.
        """
        mu = np.full(p, 1.0 / p)
        losses, weights, raws, states = [], [], [], []
        raw = mu.copy()
        self.cycle_ = None
        final = None
        for it in range(self.max_iter):
            state = stage1(mu)
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
                warnings.warn("TUMK-ELM: the kernel-space ELM gave no positive kernel weight; "
                              "keeping the previous weights", ConvergenceWarning, stacklevel=3)
                break
            start = next((j for j, w in enumerate(weights) if np.array_equal(w, new)), None) \
                if _DETECT_CYCLES else None
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
        return len(last_two) == 2 and \
            abs(last_two[1] - last_two[0]) <= self.delta * abs(last_two[0])

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

    def _fit_exact(self, X, rng):
        kernels, form, k = self.kernels_, self.feature_form, self.n_clusters
        dk = DenseKernels(kernels, X)
        ZtZ = exact_kspace_gram(dk, X, form)
        eig_seed = draw_seed(rng)
        km_seed = draw_seed(rng)

        def stage1(mu):
            K = exact_combined(dk, X, mu)
            U, s = exact_leading_eigenvectors(K, k, eig_seed)
            del K
            if self.assignment == "argmax":
                labels = np.argmax(U, axis=1).astype(np.int64)
            else:
                V = unit_rows(U) if self.assignment == "kmeans-unit" else U
                km = KMeans(k, n_init=self.n_init, random_state=km_seed).fit(V)
                labels, centers = km.labels_.astype(np.int64), km.cluster_centers_
            ZtT, loss = exact_pass(dk, X, labels, mu, form, k)
            return {"labels": labels, "U": U, "s": s, "ZtT": ZtT, "loss": loss,
                    "centers": None if self.assignment == "argmax" else centers}

        state = self._iterate(stage1, lambda st: solve_weights(ZtZ, st["ZtT"], self.C),
                              len(kernels))
        self.labels_, self.embedding_, self.eigenvalues_ = state["labels"], state["U"], state["s"]
        self.factors_ = None
        self.kspace_gram_ = ZtZ
        # out of sample (Nystrom extension of the eigenvectors): u(x) = K^(x, X) U / s
        self._fit_X, self._fit_U = X, state["U"]
        self._kmeans_centers = state["centers"]

    def _fit_scalable(self, Xs, rng, was_dask, chunks):
        """``Xs``: the scaled input, dask (``was_dask``) or NumPy, then split in ``chunks``
        (or :func:`local_chunks`) for the pass over X."""
        kernels, form, k = self.kernels_, self.feature_form, self.n_clusters
        N = Xs.shape[0]
        m = self.n_landmarks
        n_sample = min(N, max(m, 1000))
        idx = np.sort(rng.choice(N, size=n_sample, replace=False))
        sample = Xs[idx].compute() if was_dask else Xs[idx]
        sample = np.asarray(sample, dtype=np.float64)[rng.permutation(n_sample)]
        factor_pool = shared_pool(local_threads()) if not was_dask and local_threads() > 1 \
            else None
        factors = build_factors(kernels, sample, N, m, self.approximation, rng, factor_pool)
        self.factors_ = factors
        logger.info("TUMK-ELM factors: %s", ", ".join(
            f"{f.kind}({f.n_components})" for f in factors))
        M = int(sum(f.n_components for f in factors))
        keep = N * M * 8 <= KEEP_FEATURES_BYTES
        # NumPy input whose Phi is kept runs in-process: the pass over X and every
        # iteration on the same equal row blocks, on a pool of threads with BLAS on one
        # thread each (two BLAS threads per task on 2 cores: 1.7x slower, PERF_NOTES); no
        # dask graph, the same block sums in the same order as dask input in those chunks.
        local = keep and not was_dask
        threads = local_threads() if local else 1
        if local:
            chunks = local_chunks(N, len(chunks), threads)
            blocks = np.split(Xs, np.cumsum(chunks)[:-1])
        if not was_dask:
            Xs = da.from_array(Xs, chunks=(chunks, Xs.shape[1]))
        # a long-lived pool: fresh threads cost ~10 ms per block in their first BLAS calls
        pool = shared_pool(min(threads, len(chunks))) if local and threads > 1 \
            and len(chunks) > 1 else None
        # one BLAS thread per thread of ours or of dask's threaded scheduler: BLAS at its
        # default threads inside each task oversubscribes the cores (PERF_NOTES: 1.7x
        # slower); distributed workers pin their own BLAS, the sync scheduler is one thread
        threaded = pool is not None or (not local and threaded_scheduler(Xs))
        with blas_threads(1 if threaded else None):
            if local:
                stats, A, Phi = factor_stats(blocks, factors, pool=pool)
            elif keep:
                stats, A, Phi = factor_stats(Xs, factors, keep_features=True)
            else:
                (stats, A), Phi = factor_stats(Xs, factors), None
            self.kspace_gram_ = kspace_gram(stats, form)
            km_seed = draw_seed(rng)
            self._iterate_scalable(Xs, stats, A, Phi, factors, local, pool, km_seed,
                                   was_dask)

    def _iterate_scalable(self, Xs, stats, A, Phi, factors, local, pool, km_seed, was_dask):
        """Algorithm 1's loop on the scalable mode's reductions; sets the fitted state."""
        kernels, form, k = self.kernels_, self.feature_form, self.n_clusters

        def embedding(P, folds):
            if local:
                return np.concatenate(_map_blocks(pool, np.dot, Phi, [P] * len(Phi)))
            if Phi is not None:
                return Phi.map_blocks(np.dot, P, chunks=(Phi.chunks[0], (k,)),
                                      dtype=np.float64)
            return Xs.map_blocks(_embed, factors, folds, chunks=(Xs.chunks[0], (k,)),
                                 dtype=np.float64)

        def stage1(mu):
            P, s = leading_eigenvectors(stats, mu, k)
            folds = None if Phi is not None else _folds(factors, P, stats["offsets"])
            if self.assignment == "argmax":
                labels = centers = None
            else:
                U = embedding(P, folds)
                U = da.from_array(U, chunks=(Xs.chunks[0], k)) if local else U.persist()
                if self.assignment == "kmeans-unit":
                    U = unit_rows(U)
                centers, labels = kmeans(U, k, n_init=self.n_init, random_state=km_seed)[:2]
                labels = labels.compute() if local else labels.persist()
            cs = cluster_stats(Xs, A, factors, labels=labels, folds=folds, n_clusters=k,
                               features=Phi, P=P, pool=pool)
            loss = tumkelm_loss(stats, cs, mu)
            return {"P": P, "folds": folds, "s": s, "labels": labels, "cs": cs, "loss": loss,
                    "centers": centers}

        state = self._iterate(
            stage1, lambda st: solve_weights(self.kspace_gram_,
                                             kspace_target(stats, st["cs"], form), self.C),
            len(kernels))
        folds = state["folds"]
        U = embedding(state["P"], folds)
        labels = state["labels"]
        # out of sample: the same map as the training embedding, u(x) = sum_q B_q(x) W_q P_q
        self._folds = _folds(factors, state["P"], stats["offsets"])
        self._fit_X, self._kmeans_centers = None, state["centers"]
        if local:
            if labels is None:
                labels = _argmax_rows(U)
            self.eigenvalues_, self.reductions_ = state["s"], stats
            self.labels_, self.embedding_ = labels, U
            return
        if labels is None:
            if Phi is not None:
                labels = U.map_blocks(_argmax_rows, drop_axis=1, dtype=np.int64,
                                      meta=np.empty((0,), dtype=np.int64))
            else:
                labels = Xs.map_blocks(_argmax_block, factors, folds, drop_axis=1,
                                       dtype=np.int64, meta=np.empty((0,), dtype=np.int64))
        self.eigenvalues_ = state["s"]
        self.reductions_ = stats
        if was_dask:
            self.labels_, self.embedding_ = labels.persist(), U
        else:
            self.labels_, self.embedding_ = dask.compute(labels, U)

    def fit_predict(self, X, y=None):
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    # -- use -------------------------------------------------------------------------------
    def _validate_new(self, X):
        check_is_fitted(self, "labels_")
        Xd, was_dask = validate_data(self, X, reset=False,
                                     n_hidden=len(self.kernels_) * self.n_landmarks,
                                     numpy_ok=True)
        return apply_scaling(Xd, *self.scaling_), was_dask

    def transform(self, X):
        """Embed X (seen or unseen points) in the space of the leading eigenvectors of K^.

        Exact mode: the Nystrom extension ``u(x) = K^(x, X_fit) U / s`` (s the eigenvalues),
        which gives back ``embedding_`` on the training points. Scalable mode: the map of
        the training embedding, ``u(x) = sum_q phi_q(x) P_q`` on the kernel factors (the
        ``alpha_q I`` part of a kernel is zero between distinct points).
        """
        Xs, was_dask = self._validate_new(X)
        if self._fit_X is not None:
            fitted = (self._fit_X, self.kernels_, self.kernel_weights_, self._fit_U,
                      self.eigenvalues_)
            if not was_dask:
                return _nystrom_extension(np.asarray(Xs, np.float64), *fitted)
            return Xs.map_blocks(_nystrom_extension, *fitted, dtype=np.float64,
                                 chunks=(Xs.chunks[0], (self._fit_U.shape[1],)))
        if not was_dask:
            with shared_distances():
                return _embed(np.asarray(Xs, np.float64), self.factors_, self._folds)
        return Xs.map_blocks(_embed, self.factors_, self._folds,
                             chunks=(Xs.chunks[0], (self.n_clusters,)), dtype=np.float64)

    def predict(self, X):
        """Cluster of X's points by the fitted assignment rule on ``transform(X)``: the
        argmax of each row (``assignment="argmax"``) or the nearest k-means centre."""
        U = self.transform(X)
        centers = self._kmeans_centers
        if centers is not None and self.assignment == "kmeans-unit":
            U = unit_rows(U)  # the centres live on the unit sphere
        if isinstance(U, da.Array):
            if centers is None:
                return U.map_blocks(_argmax_rows, drop_axis=1, dtype=np.int64,
                                    meta=np.empty((0,), dtype=np.int64))
            return U.map_blocks(_nearest_rows, centers, drop_axis=1, dtype=np.int64,
                                meta=np.empty((0,), dtype=np.int64))
        return _argmax_rows(U) if centers is None else _nearest_rows(U, centers)

    def fit_transform(self, X, y=None):
        """Fit and return the training embedding (``embedding_``)."""
        return self.fit(X).embedding_

    def score(self, X, y=None):
        """Opposite of the k-means objective of X in the embedding: ``-sum ||u(x) - c||^2``
        over the points, c the mean training embedding of the cluster ``predict`` gives x
        (higher is better, as ``KMeans.score``). ``y`` is ignored."""
        check_is_fitted(self, "labels_")
        E, labels = self.embedding_, self.labels_
        if isinstance(E, da.Array):
            E, labels = dask.compute(E, labels)
        sizes = np.bincount(labels, minlength=self.n_clusters)
        centers = np.zeros((self.n_clusters, E.shape[1]))
        np.add.at(centers, labels, E)
        centers /= np.maximum(sizes, 1)[:, None]
        return negative_sse(self.transform(X), centers, self.predict(X))

    @property
    def _n_features_out(self):
        return self.embedding_.shape[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags
