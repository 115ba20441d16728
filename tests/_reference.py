"""Plain dense NumPy reference implementations the tests compare the engine with."""

import numpy as np
from sklearn.neighbors import NearestNeighbors


def hidden(X, layer):
    """H = g(XA + b) for the whole X, densely (the layer's own block function)."""
    return layer(np.asarray(X, dtype=np.float64))


def knn_laplacian(X, n_neighbors, *, weights="binary", sigma=None, normalized=False):
    """Dense L of the symmetrised ("or") exact kNN graph."""
    X = np.asarray(X, dtype=np.float64)
    N = X.shape[0]
    dist, idx = NearestNeighbors(n_neighbors=n_neighbors + 1).fit(X).kneighbors(X)
    dist, idx = dist[:, 1:], idx[:, 1:]
    if weights == "heat":
        sigma = dist.mean() if sigma is None else sigma
        w = np.exp(-(dist**2) / (2 * sigma**2))
    elif weights == "fuzzy":
        w = np.array([fuzzy_row(row) for row in dist])
    else:
        w = np.ones_like(dist)
    A = np.zeros((N, N))
    A[np.repeat(np.arange(N), n_neighbors), idx.ravel()] = w.ravel()
    W = A + A.T - A * A.T if weights == "fuzzy" else np.maximum(A, A.T)
    d = W.sum(1)
    if normalized:
        inv = np.where(d > 0, 1 / np.sqrt(d), 0)
        return np.diag((d > 0).astype(float)) - inv[:, None] * W * inv[None, :]
    return np.diag(d) - W


def fuzzy_row(dist, steps=64, tol=1e-5):
    """One row's UMAP memberships, written out as umap-learn's ``smooth_knn_dist`` loops
    (its k counts the row itself: the target is log2(k + 1)), width at least 1e-3 of the
    row's mean distance."""
    rho = min((d for d in dist if d > 0), default=0.0)
    target = np.log2(len(dist) + 1)
    lo, hi, mid = 0.0, np.inf, 1.0
    for _ in range(steps):
        total = sum(np.exp(-max(d - rho, 0.0) / mid) for d in dist)
        if abs(total - target) < tol:
            break
        if total > target:
            hi = mid
            mid = (lo + hi) / 2
        else:
            lo = mid
            mid = mid * 2 if hi == np.inf else (lo + hi) / 2
    mid = max(mid, 1e-3 * np.mean(dist))
    return np.exp(-np.maximum(np.asarray(dist) - rho, 0.0) / mid)


def elm_ridge(H, Y, C):
    """beta = (H^T H + I/C)^-1 H^T Y (ELM eq. 7)."""
    return np.linalg.solve(H.T @ H + np.eye(H.shape[1]) / C, H.T @ Y)
