"""Kernels for kernel ELMs and multiple-kernel clustering (TUMK-ELM)."""

import numpy as np


class Kernel:
    """Protocol of a kernel plugin.

    ``__call__(X, Y)`` evaluates the block K(X, Y) (NumPy in, NumPy out). Optionally,
    ``features(X)`` returns a factor Phi with ``K(X, X) ~ Phi Phi^T`` (explicit features,
    Nystrom, random Fourier features) for the scalable mode.
    """

    def __call__(self, X, Y):
        raise NotImplementedError

    def diagonal(self, X):
        """K(x_i, x_i) for each row."""
        return np.array([self(x[None], x[None])[0, 0] for x in X])

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


class LinearKernel(Kernel):
    """K(x, y) = x . y"""

    def __call__(self, X, Y):
        return X @ Y.T

    def diagonal(self, X):
        return np.einsum("ij,ij->i", X, X)

    def features(self, X):
        return X


class PolynomialKernel(Kernel):
    """K(x, y) = (x . y + coef0) ** degree"""

    def __init__(self, degree=2, coef0=1.0):
        self.degree = degree
        self.coef0 = coef0

    def __call__(self, X, Y):
        return (X @ Y.T + self.coef0) ** self.degree

    def diagonal(self, X):
        return (np.einsum("ij,ij->i", X, X) + self.coef0) ** self.degree


class RBFKernel(Kernel):
    """K(x, y) = exp(-||x - y||^2 / (2 width^2))"""

    def __init__(self, width=1.0):
        self.width = width

    def __call__(self, X, Y):
        d2 = (X * X).sum(1)[:, None] + (Y * Y).sum(1)[None, :] - 2 * X @ Y.T
        return np.exp(-np.maximum(d2, 0) / (2.0 * self.width**2))

    def diagonal(self, X):
        return np.ones(X.shape[0])


__all__ = ["Kernel", "LinearKernel", "PolynomialKernel", "RBFKernel"]
