"""TUMK-ELM's exact mode: the paper's reductions over dense N x N kernel blocks.

Every function here evaluates the base kernels on row blocks of X (NumPy, on the client)
and reduces them at once, so that at most one (p x rows x N) block of kernel values exists
at a time besides the combined kernel K^ (N x N) of stage 1.
"""

import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import eigsh
from sklearn.utils import check_random_state

from ..kernels import DistanceCache, kernel_block

#: Bytes of one (p x rows x N) block of kernel values.
BLOCK_BYTES = 128 * 2**20

#: Eigenvalues below this fraction of the largest are treated as zero (beyond the rank).
EIG_RTOL = 1e-12

# Up to this many points stage 1 runs the dense subset eigh; above, Lanczos on K^.
_DENSE_EIGH_MAX = 1000


def row_blocks(N, p):
    """Slices of rows such that a (p x rows x N) float64 block takes ``BLOCK_BYTES``."""
    rows = max(1, int(BLOCK_BYTES // (8 * max(p, 1) * N)))
    return [slice(i, min(i + rows, N)) for i in range(0, N, rows)]


class DenseKernels:
    """The base kernels over X (N x d, NumPy), one row block at a time.

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
            distances = DistanceCache()
            self._full = [kernel_block(k, X, X, distances) for k in kernels]
        else:
            self._full = None

    def blocks(self, sl, kernels=None):
        """``(q, K_q(X[sl], X))`` for each kernel index q in ``kernels`` (default: all).
        The Gaussians of different widths share one distance computation per block; a
        cached block is a read-only view of the cache."""
        qs = range(len(self.kernels)) if kernels is None else kernels
        if self.cached:
            for q in qs:
                view = self._full[q][sl]
                view.flags.writeable = False
                yield q, view
            return
        distances, rows = DistanceCache(), self.X[sl]
        for q in qs:
            yield q, kernel_block(self.kernels[q], rows, self.X, distances)


def as_dense(kernels, X):
    """``kernels`` as :class:`DenseKernels` over X (unchanged if it already is)."""
    return kernels if isinstance(kernels, DenseKernels) else DenseKernels(kernels, X)


def _dense_z(dk, sl, feature_form):
    """Kernel-space features of the pairs (sl, all): (p, rows, N)."""
    N = dk.X.shape[0]
    Z = np.empty((len(dk.kernels), sl.stop - sl.start, N))
    for q, K in dk.blocks(sl):
        Z[q] = K
        if feature_form == "distance":
            Z[q] *= -2.0
            Z[q] += dk.diags[q][sl, None]
            Z[q] += dk.diags[q][None, :]
    return Z


def exact_kspace_gram(kernels, X, feature_form="distance"):
    """Z^T Z (eqs. 2-8) over all N^2 ordered pairs, from dense kernel blocks."""
    dk = as_dense(kernels, X)
    p = len(dk.kernels)
    ZtZ = np.zeros((p, p))
    for sl in row_blocks(X.shape[0], p):
        Z = _dense_z(dk, sl, feature_form).reshape(p, -1)
        ZtZ += Z @ Z.T
    return ZtZ


def exact_pass(kernels, X, labels, mu, feature_form="distance", n_clusters=None):
    """Z^T T and the loss (eq. 10) for one assignment, from dense kernel blocks."""
    dk = as_dense(kernels, X)
    p, N = len(dk.kernels), X.shape[0]
    labels = np.asarray(labels)
    n_clusters = int(labels.max()) + 1 if n_clusters is None else n_clusters
    sizes = np.bincount(labels, minlength=n_clusters).astype(np.float64)
    F = np.zeros((N, n_clusters))
    F[np.arange(N), labels] = 1.0
    same = np.zeros((p, n_clusters))  # 1_c^T K_q 1_c
    total = np.zeros(p)  # 1^T K_q 1
    for sl in row_blocks(N, 1):
        for q, K in dk.blocks(sl):
            KF = K @ F
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
    dk = as_dense(kernels, X)
    N = X.shape[0]
    K = np.zeros((N, N))
    used = [q for q in range(len(dk.kernels)) if mu[q] != 0]
    for sl in row_blocks(N, 1):
        for q, Kq in dk.blocks(sl, used):
            K[sl] += mu[q] * Kq
    return 0.5 * (K + K.T)


def exact_leading_eigenvectors(K, n_clusters, random_state=0):
    """The n_clusters leading eigenvectors of a dense symmetric K (stage 1, eq. 5), each
    column's sign making its sum non-negative."""
    N = K.shape[0]
    if N <= _DENSE_EIGH_MAX or n_clusters >= N - 1:
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


def nystrom_extension(Xnew, Xfit, kernels, mu, U, s):
    """``K^(Xnew, Xfit) U / s`` in row blocks: the eigenvectors of K^ extended to new
    points; columns with eigenvalue <= 0 (beyond the rank of K^) are 0."""
    Xnew = np.asarray(Xnew, dtype=np.float64)
    out = np.zeros((Xnew.shape[0], U.shape[1]))
    keep = s > EIG_RTOL * max(abs(s).max(), 1e-300)
    W = np.where(keep, U / np.where(keep, s, 1.0), 0.0)
    rows = max(1, int(BLOCK_BYTES // (8 * Xfit.shape[0])))
    used = [q for q in range(len(kernels)) if mu[q] != 0]
    for start in range(0, Xnew.shape[0], rows):
        sl = slice(start, start + rows)
        distances, block = DistanceCache(), Xnew[sl]
        for q in used:
            out[sl] += mu[q] * (kernel_block(kernels[q], block, Xfit, distances) @ W)
    return out
