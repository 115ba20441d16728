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
    else:
        w = np.ones_like(dist)
    A = np.zeros((N, N))
    A[np.repeat(np.arange(N), n_neighbors), idx.ravel()] = w.ravel()
    W = np.maximum(A, A.T)
    d = W.sum(1)
    if normalized:
        inv = np.where(d > 0, 1 / np.sqrt(d), 0)
        return np.diag((d > 0).astype(float)) - inv[:, None] * W * inv[None, :]
    return np.diag(d) - W


def elm_ridge(H, Y, C):
    """beta = (H^T H + I/C)^-1 H^T Y (ELM eq. 7)."""
    return np.linalg.solve(H.T @ H + np.eye(H.shape[1]) / C, H.T @ Y)
