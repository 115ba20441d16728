"""Dense NumPy ELM-JEC (Algorithm 1) with the same random draws as ``elmscale.ELMJEC``.

Everything here is written from the formulas with N x N matrices (M = (1 - lam) I + lam F
(F^T F)^-1 F^T - gamma L), never from the engine's reduced matrices. k-means itself is the
engine's, run on one chunk of the dense embedding (see ``kmeans_dense``).
"""

import functools

import dask.array as da
import numpy as np
from scipy.optimize import linear_sum_assignment

from elmscale.cluster import kmeans
from elmscale.hidden import RandomHiddenLayer
from elmscale.solvers import sign_flip

from ._reference import knn_laplacian


def minmax(X):
    lo, hi = X.min(axis=0), X.max(axis=0)
    offset, scale = (hi + lo) / 2, (hi - lo) / 2
    scale = np.where(scale > 1e-12 * max(1.0, np.abs(offset).max()), scale, 1.0)
    return offset, scale


def kmeans_dense(E, k, *, n_init=10, max_iter=100, init=None, random_state=None):
    """k-means of the dense embedding: ``elmscale.cluster.kmeans`` on ONE chunk holding all of
    E. k-means is the engine's component with its own tests; what this reference checks is
    everything ELM-JEC does around it. Returns (centers, labels, inertia)."""
    Ed = da.from_array(np.asarray(E, dtype=np.float64), chunks=E.shape)
    centers, labels, inertia, _ = kmeans(
        Ed, k, n_init=n_init, max_iter=max_iter, init=init, random_state=random_state
    )
    return centers, np.asarray(labels.compute()), inertia


def changed(old, new, k):
    table = np.zeros((k, k))
    np.add.at(table, (old, new), 1)
    r, c = linear_sum_assignment(table, maximize=True)
    return int(len(old) - table[r, c].sum())


def range_basis(Hc, range_rtol=1e-10):
    """The eigenvectors of H~^T H~ spanning its numerical range."""
    w, V = np.linalg.eigh(Hc.T @ Hc)
    return V[:, w > range_rtol * w[-1]]


def hidden_M(Hc, L, labels, k, lam, gamma):
    """H~^T M H~ with the N x N matrix M of eq. 6, and F, 1 / sizes."""
    N = Hc.shape[0]
    F = np.zeros((N, k))
    F[np.arange(N), labels] = 1.0
    sizes = F.sum(axis=0)
    inv = np.where(sizes > 0, 1.0 / np.where(sizes > 0, sizes, 1.0), 0.0)
    M = (1 - lam) * np.eye(N) + lam * (F * inv) @ F.T - gamma * L
    return Hc.T @ M @ Hc, F, inv


def solve_dense(
    Hc, L, labels, k, lam, gamma, n_components, range_rtol=1e-10, pos_rtol=1e-10, basis=None
):
    """beta, G, objective from the N x N matrix M (restricted to the range of H~^T, or to
    the columns of ``basis``)."""
    S, F, inv = hidden_M(Hc, L, labels, k, lam, gamma)
    V = range_basis(Hc, range_rtol) if basis is None else basis
    mu, Y = np.linalg.eigh(V.T @ S @ V)
    mu, Y = mu[::-1], Y[:, ::-1]
    n_pos = int((mu > pos_rtol * np.abs(mu).max()).sum())
    kept = min(n_components, n_pos)
    beta = sign_flip(V @ Y[:, :kept])
    G = beta.T @ Hc.T @ F * inv
    return beta, G, float(np.trace(beta.T @ S @ beta))


def elmjec_dense(
    X,
    n_clusters,
    *,
    n_hidden,
    lam,
    gamma,
    n_components,
    n_restarts,
    max_iter,
    n_neighbors,
    random_state,
    n_basis=None,
):
    """Algorithm 1, densely. Returns a dict with beta, G, E, labels, history. With
    ``n_basis``, beta is confined to the span of the ``n_basis`` leading eigenvectors of
    H~^T M H~ (within the range of H~^T) at the initial partition."""
    X = np.asarray(X, dtype=np.float64)
    rng = np.random.RandomState(random_state)
    offset, scale = minmax(X)
    layer = RandomHiddenLayer.draw(X.shape[1], n_hidden, "sigmoid", rng, offset=offset, scale=scale)
    rng.randint(0, 2**31 - 1)  # the graph's seed (unused by the exact graph)
    Xs = (X - offset) / scale
    L = knn_laplacian(Xs, n_neighbors)
    H = layer(X)
    Hc = H - H.mean(axis=0)
    _, labels, _ = kmeans_dense(
        Xs, n_clusters, n_init=max(n_restarts, 1), random_state=rng.randint(0, 2**31 - 1)
    )
    basis = None
    if n_basis is not None:
        V = range_basis(Hc)
        S = V.T @ hidden_M(Hc, L, labels, n_clusters, lam, gamma)[0] @ V
        basis = V @ np.linalg.eigh(S)[1][:, ::-1][:, :n_basis]
    solve = functools.partial(solve_dense, basis=basis)
    beta, G, obj = solve(Hc, L, labels, n_clusters, lam, gamma, n_components)
    history = {"objective": [obj], "kmeans_objective": [np.nan], "n_changed": [np.nan]}
    for _ in range(max_iter):
        seed = rng.randint(0, 2**31 - 1)
        E = Hc @ beta
        _, lab_b, in_b = kmeans_dense(E, n_clusters, init=G.T)
        new, inertia = lab_b, in_b
        if n_restarts > 0:
            _, lab_r, in_r = kmeans_dense(E, n_clusters, n_init=n_restarts, random_state=seed)
            if in_r < in_b:
                new, inertia = lab_r, in_r
        n_changed = changed(labels, new, n_clusters)
        history["kmeans_objective"].append(inertia)
        history["n_changed"].append(n_changed)
        if n_changed == 0:
            history["objective"].append(obj)
            break
        labels = new
        beta, G, obj = solve(Hc, L, labels, n_clusters, lam, gamma, n_components)
        history["objective"].append(obj)
    return {
        "beta": beta,
        "G": G,
        "E": Hc @ beta,
        "labels": labels,
        "objective": obj,
        "history": {k: np.array(v, dtype=float) for k, v in history.items()},
    }
