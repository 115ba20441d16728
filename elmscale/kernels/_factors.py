"""Kernel factors: ``K ~ alpha I + Phi Phi^T`` with rows of Phi computed block by block."""

import numpy as np

from ._distances import as_float64

# Nystrom keeps the eigenvalues of K(L, L) above this fraction of the largest: smaller ones
# are rounding noise, and dividing by their square roots would amplify it.
NYSTROM_RTOL = 1e-10


def kernel_block(kernel, X, Y, distances=None):
    """``kernel(X, Y)``, sharing the squared distances in ``distances`` (a
    :class:`~elmscale.kernels.DistanceCache`) when the kernel declares
    ``shares_distances``."""
    if distances is not None and getattr(kernel, "shares_distances", False):
        return kernel(X, Y, distances=distances)
    return kernel(X, Y)


class KernelFactor:
    """``K ~ alpha I + Phi Phi^T`` with ``Phi = basis(X) @ weights``.

    Attributes
    ----------
    alpha : float
        Multiple of the identity (closed-form part).
    n_components : int
        Columns of Phi (may be 0).
    kind : str
        Short name for logs and reports ("explicit", "nystrom", "rff", "identity", "constant").
    shares_distances : bool
        Whether :meth:`basis` accepts ``distances=`` (a
        :class:`~elmscale.kernels.DistanceCache`).

    ``basis(X)`` maps a NumPy block of rows to a (rows x r) block; ``weights`` is an (r x m)
    matrix or None (meaning Phi = basis). Splitting Phi this way lets the caller fold small
    matrices into ``weights`` on the client and touch only ``basis`` on the workers.
    """

    alpha = 0.0
    weights = None
    kind = "factor"
    shares_distances = False

    @property
    def n_basis(self):
        raise NotImplementedError

    @property
    def n_components(self):
        return self.n_basis if self.weights is None else self.weights.shape[1]

    def basis(self, X):
        raise NotImplementedError

    def features(self, X, out=None, distances=None):
        """Phi for a block of rows (rows x n_components), written into ``out`` when given
        (e.g. a column slice of a wider buffer: no copy for the Nystrom factors).
        ``distances`` goes to :meth:`basis` when the factor shares distances."""
        B = factor_basis(self, X, distances)
        if self.weights is not None:
            return np.matmul(B, self.weights, out=out)
        if out is None:
            return B
        out[...] = B
        return out

    def diagonal(self, X, distances=None):
        """Diagonal of ``alpha I + Phi Phi^T`` for a block of rows."""
        P = self.features(X, distances=distances)
        return self.alpha + np.einsum("ij,ij->i", P, P)

    def dense(self, X):
        """The represented N x N matrix (for tests on small data only)."""
        P = self.features(X)
        return self.alpha * np.eye(X.shape[0]) + P @ P.T

    def __repr__(self):
        return (
            f"{type(self).__name__}(kind={self.kind!r}, alpha={self.alpha}, "
            f"n_components={self.n_components})"
        )


def factor_basis(factor, X, distances=None):
    """``factor.basis(X)``, passing ``distances`` to a factor that shares them."""
    if distances is not None and factor.shares_distances:
        return factor.basis(X, distances=distances)
    return factor.basis(X)


class ExplicitFactor(KernelFactor):
    """Phi given by an explicit feature map ``fn(X) -> (rows x n)`` (exact)."""

    kind = "explicit"

    def __init__(self, fn, n_features):
        self.fn = fn
        self._n = int(n_features)

    @property
    def n_basis(self):
        return self._n

    def basis(self, X):
        return self.fn(X)


class NystromFactor(KernelFactor):
    """Nystrom factor ``Phi = K(X, L) U S^-1/2`` from the eigenpairs of ``K(L, L)``.

    Exact (up to the dropped eigenvalues below ``NYSTROM_RTOL``) when L holds every row.
    ``distances`` (a :class:`~elmscale.kernels.DistanceCache`) shares ``K(L, L)``'s
    distances with other kernels factored on the same landmarks.
    """

    kind = "nystrom"

    def __init__(self, kernel, landmarks, rtol=NYSTROM_RTOL, *, distances=None):
        self.kernel = kernel
        self.landmarks = as_float64(landmarks)
        K = kernel_block(kernel, self.landmarks, self.landmarks, distances)
        K = 0.5 * (K + K.T)
        s, U = np.linalg.eigh(K)
        keep = s > rtol * max(s[-1], 0.0) if s[-1] > 0 else np.zeros_like(s, dtype=bool)
        self.weights = U[:, keep] / np.sqrt(s[keep])

    @property
    def shares_distances(self):
        return getattr(self.kernel, "shares_distances", False)

    @property
    def n_basis(self):
        return self.landmarks.shape[0]

    def basis(self, X, distances=None):
        return kernel_block(self.kernel, as_float64(X), self.landmarks, distances)


class RandomFourierFactor(KernelFactor):
    """Random Fourier features of a Gaussian kernel (Rahimi and Recht 2007):
    ``Phi = sqrt(2/m) cos(X Omega + b)``, Omega ~ N(0, 1/width^2), b ~ U[0, 2 pi)."""

    kind = "rff"

    def __init__(self, width, n_features, n_components, rng):
        self.omega = rng.standard_normal((n_features, n_components)) / width
        self.phase = rng.uniform(0, 2 * np.pi, n_components)

    @property
    def n_basis(self):
        return self.omega.shape[1]

    def basis(self, X):
        Z = np.asarray(X, dtype=np.float64) @ self.omega + self.phase
        return np.sqrt(2.0 / self.omega.shape[1]) * np.cos(Z)


class IdentityFactor(KernelFactor):
    """``K = alpha I``: the closed form of a Gaussian narrower than any distance between
    two points. No columns; every reduction involving it is a closed form in alpha."""

    kind = "identity"

    def __init__(self, alpha=1.0):
        self.alpha = float(alpha)

    @property
    def n_basis(self):
        return 0

    def basis(self, X):
        return np.zeros((X.shape[0], 0))


class ConstantFactor(KernelFactor):
    """``K = c 1 1^T``: the closed form of a Gaussian wider than the data (one column)."""

    kind = "constant"

    def __init__(self, c=1.0):
        self.c = float(c)

    @property
    def n_basis(self):
        return 1

    def basis(self, X):
        return np.full((X.shape[0], 1), np.sqrt(self.c))
