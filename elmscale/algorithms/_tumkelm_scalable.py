"""TUMK-ELM's scalable mode: low-rank kernel factors reduced blockwise over X's row chunks.

Each kernel is a :class:`~elmscale.kernels.KernelFactor`, K_q ~ alpha_q I + Phi_q Phi_q^T
with Phi_q (N x m_q) computed row block by row block: the factors are a hidden layer whose
columns are the stacked Phi = [Phi_1 .. Phi_p] (N x M). One pass over X gives, label
independent,

    G = Phi^T Phi (M x M),  u = Phi^T 1,  A^T A, A^T 1 (A = [a_q], N x p),  Phi^T A,

and each iteration needs ``H^T F = [Phi^T F; A^T F; n^T]`` (H = [Phi | A | 1], the factor
layer), the sums of H's rows per cluster (:class:`LabelSums`: a pass over the rows whose
cluster differs from a reference partition's, not over H). Then, e.g.,
sum_ij K_q(i,j) K_r(i,j) = alpha_q alpha_r N + alpha_q tr G_rr + alpha_r tr G_qq + ||G_qr||_F^2,
the same-cluster sum of K_q is alpha_q N + ||Phi_q^T F||_F^2, and the leading eigenvectors
of K^ = (sum mu_q alpha_q) I + Psi Psi^T, Psi = [sqrt(mu_q) Phi_q], are U = Psi V S^-1/2
from the eigenpairs (V, S) of the small Gram D G D, D = diag(sqrt(mu_q)). Nothing N x N is
formed; the N-row arrays kept between passes are each iteration's embedding U (N x n_c) and
labels and, when it fits the cluster's memory (:func:`~elmscale.hidden.fits_in_memory`), H
itself (an iteration's pass then reads Phi instead of re-evaluating every kernel on X).
"""

import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import eigsh

from ..gram import contingency, hidden_stats, matched_label_sums
from ..kernels import DistanceCache, factor_basis, kernel_factor
from ..utils._threads import blas_threads

# Above this many factor columns the small eigenproblem uses Lanczos (O(M^2) per step for
# the k leading pairs, against O(M^3) for the dense tridiagonalisation).
_LANCZOS_MIN = 200

# Eigenvalues of the small Gram below this fraction of the largest are treated as zero.
_EIG_RTOL = 1e-12


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
    same = alpha * N + EE  # sum over same-cluster pairs (every point is assigned)
    if feature_form == "value":
        return total - same
    total_d = 2 * N * stats["S"] - 2 * total
    same_d = 2 * cstats["SA"] @ cstats["sizes"] - 2 * same
    return total_d - same_d


def tumkelm_loss(stats, cstats, mu):
    """Eq. 10, Tr(K^) - sum_c (1_c^T K^ 1_c) / n_c, from the reductions."""
    alpha, E, sizes = stats["alpha"], cstats["E"], cstats["sizes"]
    nz = sizes > 0
    per_kernel = np.array(
        [
            stats["S"][q] - alpha[q] * nz.sum() - np.sum((E[b][:, nz] ** 2).sum(axis=0) / sizes[nz])
            for q, b in enumerate(_blocks(stats["offsets"]))
        ]
    )
    return float(mu @ per_kernel)


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
            # tridiagonalisation is O(M^3)
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
def _embed(X, factors, folds):
    """``u(x) = sum_q B_q(x) W_q P_q`` for a block of rows; the Gaussians' bases share the
    block's distances, remembered by the identity of one float64 copy of the block."""
    X = np.asarray(X, dtype=np.float64)
    U = np.zeros((X.shape[0], folds[0].shape[1]))
    distances = DistanceCache()
    for f, W in zip(factors, folds, strict=True):
        if W.shape[0]:
            U += factor_basis(f, X, distances) @ W
    return U


def _argmax_rows(U):
    return np.argmax(U, axis=1).astype(np.int64)


def factor_stats(features, *, fan_in=8):
    """One pass over the row chunks of X: the label-independent reductions of
    :func:`kspace_gram` and, when H is cached, the stacked factor Phi (dask, N x M; else
    None).

    ``features`` is :class:`~elmscale.hidden.HiddenFeatures` of the scaled X through a
    :class:`~elmscale.kernels.FactorLayer` (``H = [Phi | A | 1]``): the pass is the shared
    reduction ``H^T H`` of :func:`elmscale.gram.hidden_stats`, and with the cache Phi is a
    column slice of the cached H. Without it every embedding evaluates the factors' bases
    again."""
    layer = features.layer
    stats = layer.split_gram(hidden_stats(features, ["hth"], fan_in=fan_in)["hth"])
    if features.cached:
        return stats, features.H[:, : layer.n_features_out]  # persisted by the pass
    return stats, None


class LabelSums:
    """``H^T F`` of the factor layer for each partition an iteration gives, split as
    :func:`kspace_target` and :func:`tumkelm_loss` read it: ``E = Phi^T F`` (M x n_c),
    ``SA = A^T F`` (p x n_c) and the cluster sizes ``n = F^T 1``.

    The first partition (the reference) takes a pass over H
    (:func:`elmscale.gram.hidden_stats`); every later one is taken from the reference's
    sums and the rows whose cluster differs from it, up to the names of the clusters
    (:func:`elmscale.gram.matched_label_sums`): between the iterations of Algorithm 1 a few
    per cent of the points change cluster, so an iteration builds the hidden rows of those
    alone. Every partition is taken from the same reference, so its sums are one function of
    its labels, bit for bit, whatever the iterations before it: a partition that recurs gives
    the same kernel weights again, which :meth:`TUMKELM._iterate` detects as a cycle.
    """

    def __init__(self, features, n_clusters):
        self.features, self.n_clusters = features, n_clusters
        self.reference = None
        #: the points whose hidden rows each call built (all of them for the reference)
        self.n_changed_ = []

    def __call__(self, labels):
        """The sums of ``labels`` (dask array of int, chunked like X's rows)."""
        k = self.n_clusters
        if self.reference is None:
            htf = hidden_stats(self.features, ["htf"], labels=labels, n_labels=k)["htf"]
            self.reference = (labels, htf)
            changed = labels.shape[0]
        else:
            before, ref = self.reference
            table = np.asarray(contingency(before, labels, k).compute()).reshape(k, k)
            htf, _, changed = matched_label_sums(self.features, before, ref, labels, table)
        self.n_changed_.append(int(changed))
        M, p = self.features.layer.n_features_out, self.features.layer.n_kernels
        return {"E": htf[:M], "SA": htf[M : M + p], "sizes": htf[M + p]}


def even_chunks(n_samples, n_blocks, threads):
    """Row chunks for NumPy input: at least ``n_blocks``, a multiple of ``threads``, equal
    to one row, so that every thread gets the same work (a chunking sized for memory only
    can leave one thread a small remainder block)."""
    n = -(-max(n_blocks, 1) // threads) * threads
    n = max(1, min(n, n_samples))
    return tuple(n_samples // n + (i < n_samples % n) for i in range(n))


def build_factors(kernels, sample, n_samples, n_components, method, rng):
    """Every kernel's factor on the landmark sample, in the order of ``kernels``.

    On one BLAS thread: the products are small, and a threaded BLAS call leaves OpenBLAS's
    workers spinning for a while, taking a core from the pass that follows. The kernels that
    share distances (the Gaussians) share one distance matrix of the sample.
    """
    distances = DistanceCache()
    with blas_threads(1):
        return [
            kernel_factor(
                kernel,
                sample,
                n_samples=n_samples,
                n_components=n_components,
                method=method,
                random_state=rng,
                distances=distances,
            )
            for kernel in kernels
        ]


def _folds(factors, P, offsets):
    """Per-factor matrices mapping each basis block to U: W_q P_q."""
    out = []
    for f, b in zip(factors, _blocks(offsets), strict=True):
        Pq = P[b]
        out.append(Pq if f.weights is None else f.weights @ Pq)
    return out
