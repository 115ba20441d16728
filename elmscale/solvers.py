"""Small dense solves on the client, in float64: everything here is O(n_hidden^3) or O(N^3)
for the dual forms, independent of how the data was chunked."""

import numpy as np
import scipy.linalg as sla


def sign_flip(V):
    """Make each column's largest-magnitude entry positive (deterministic signs, as
    scikit-learn's ``_deterministic_vector_sign_flip``)."""
    V = np.array(V, dtype=np.float64, copy=True)
    if V.size == 0:
        return V
    rows = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[rows, np.arange(V.shape[1])])
    signs[signs == 0] = 1.0
    return V * signs


def ridge_solve(A, B, alpha):
    """Solve ``(A + alpha I) X = B`` for symmetric PSD A (ELM eq. 7 with alpha = 1/C).

    Cholesky when it succeeds; otherwise (A numerically indefinite from rounding, or alpha
    tiny) an eigen-decomposition with eigenvalues clipped at alpha * 1e-12 of the largest.
    """
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    M = A + alpha * np.eye(A.shape[0])
    try:
        c, low = sla.cho_factor(M, lower=True, check_finite=False)
        return sla.cho_solve((c, low), B, check_finite=False)
    except sla.LinAlgError:
        w, V = sla.eigh(0.5 * (M + M.T), check_finite=False)
        floor = max(w.max(), 1.0) * 1e-12
        return V @ ((V.T @ B) / np.maximum(w, floor)[:, None])


def smallest_generalized(A, B, n_components, *, skip=0):
    """The ``n_components`` smallest eigenpairs of ``A v = gamma B v`` after skipping ``skip``.

    A must be symmetric positive definite; B symmetric positive semi-definite and possibly
    singular (as H^T H always is, numerically, with sigmoid features). The problem is solved
    as the reversed pencil ``B v = mu A v`` (mu = 1 / gamma), whose right-hand side A is
    positive definite, so LAPACK's ``sygvd`` applies and null directions of B give mu = 0
    (gamma = inf) instead of garbage. Returns ``(gamma, V)`` with ``v^T A v = 1``.
    """
    n = A.shape[0]
    k = n_components + skip
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= n_components + skip <= {n}, got {k}")
    A = 0.5 * (A + A.T)
    B = 0.5 * (B + B.T)
    mu, V = sla.eigh(B, A, subset_by_index=[n - k, n - 1], check_finite=False)
    mu, V = mu[::-1], V[:, ::-1]  # largest mu = smallest gamma first
    with np.errstate(divide="ignore"):
        gamma = np.where(mu > 0, 1.0 / np.where(mu > 0, mu, 1.0), np.inf)
    return gamma[skip:], V[:, skip:]


def uselm_primal(hth, htlh, lam, n_components):
    """US-ELM output weights from the reduced matrices (Huang et al. 2014, eqs. 20-22).

    Solves ``(I + lam H^T L H) v = gamma H^T H v`` for the ``n_components + 1`` smallest
    gamma (via the reversed pencil, see :func:`smallest_generalized`), drops the first,
    trivial one, and scales each v so that ``||H v|| = 1`` (eq. 22; ``||H v||^2 = v^T H^T H
    v``). Returns ``(beta, gamma)``.
    """
    n_h = hth.shape[0]
    A = np.eye(n_h) + lam * htlh
    gamma, V = smallest_generalized(A, hth, n_components, skip=1)
    norms = np.sqrt(np.maximum(np.einsum("ij,ij->j", V, hth @ V), 0.0))
    norms[norms == 0] = 1.0
    return sign_flip(V / norms), gamma


def uselm_dual(K, L, lam, n_components):
    """US-ELM in the dual, for n_hidden > N (eqs. 23-24): ``(I + lam L K) u = gamma K u``
    with K = H H^T (N x N). Solved as ``K u = mu (I + lam L K) u`` by a general eigensolver
    (the pencil is not symmetric); its eigenvalues are real and non-negative because L K is
    similar to a product of PSD matrices. Returns ``(U, gamma)``, U scaled so that
    ``||K u|| = ||H beta|| = 1`` with beta = H^T u."""
    N = K.shape[0]
    K = 0.5 * (K + K.T)
    M = np.eye(N) + lam * (L @ K)
    mu, U = sla.eig(K, M, check_finite=False)
    mu = np.real(mu)
    mu[~np.isfinite(mu)] = 0.0
    order = np.argsort(-mu, kind="stable")[1 : n_components + 1]
    U = np.real(U[:, order])
    with np.errstate(divide="ignore"):
        gamma = np.where(mu[order] > 0, 1.0 / np.maximum(mu[order], 1e-300), np.inf)
    norms = np.linalg.norm(K @ U, axis=0)
    norms[norms == 0] = 1.0
    return U / norms, gamma


__all__ = ["ridge_solve", "sign_flip", "smallest_generalized", "uselm_dual", "uselm_primal"]
