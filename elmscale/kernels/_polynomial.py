"""The polynomial kernel and its explicit monomial features."""

import itertools
import math

import numpy as np

from ._base import Kernel
from ._distances import as_float64
from ._factors import ExplicitFactor, NystromFactor


def _counts(combo):
    return [len(list(g)) for _, g in itertools.groupby(combo)]


class _PolynomialFeatures:
    """Explicit features of (x . y + c)^d: one column per multiset of size d of the
    augmented coordinates (x_1..x_D, sqrt(c)), scaled by the square root of its multinomial
    coefficient; C(D + d, d) columns."""

    def __init__(self, n_features, degree, coef0):
        self.coef0 = float(coef0)
        combos = list(itertools.combinations_with_replacement(range(n_features + 1), degree))
        self.combos = combos
        self.coefs = np.sqrt(
            np.array(
                [
                    math.factorial(degree) / math.prod(math.factorial(k) for k in _counts(c))
                    for c in combos
                ]
            )
        )

    def __call__(self, X):
        X = np.asarray(X, dtype=np.float64)
        Xa = np.hstack([X, np.full((X.shape[0], 1), np.sqrt(self.coef0))])
        out = np.empty((X.shape[0], len(self.combos)))
        for j, c in enumerate(self.combos):
            col = Xa[:, c[0]].copy()
            for k in c[1:]:
                col *= Xa[:, k]
            out[:, j] = col
        return out * self.coefs


def _power(G, degree, square=None):
    """G ** degree, by repeated squaring for integer degrees (faster than np.power), as a
    new array; ``square(G)``, when given, returns the first square ``G * G`` (remembered
    for the degrees that share G: the same numbers)."""
    if int(degree) != degree or degree < 1:
        return G**degree
    degree = int(degree)
    out, base = None, G
    while True:
        if degree & 1:
            out = base.copy() if out is None else out * base
        degree >>= 1
        if not degree:
            return out
        base = square(base) if base is G and square is not None else base * base


class PolynomialKernel(Kernel):
    """K(x, y) = (x . y + coef0) ** degree.

    Factor: the explicit monomial features (exact) when there are at most ``n_components``
    of them (C(n_features + degree, degree); ``coef0 >= 0`` and integer degree), Nystrom
    otherwise.
    """

    #: with ``distances=`` (a :class:`~elmscale.kernels.DistanceCache`) the kernels of
    #: several degrees on the same arrays share ``X Y^T + coef0`` and its square
    shares_distances = True

    def __init__(self, degree=2, coef0=1.0):
        self.degree = degree
        self.coef0 = coef0

    def __call__(self, X, Y, *, distances=None):
        X, Y = as_float64(X), as_float64(Y)
        if distances is None:
            G = X @ Y.T
            G += self.coef0
            return _power(G, self.degree)
        G = distances.products(X, Y, float(self.coef0))
        return _power(G, self.degree, square=distances.square)

    def diagonal(self, X):
        return _power(np.einsum("ij,ij->i", X, X) + self.coef0, self.degree)

    def n_explicit_features(self, n_features):
        if self.coef0 < 0 or int(self.degree) != self.degree or self.degree < 1:
            return None
        return math.comb(n_features + int(self.degree), int(self.degree))

    def factor(
        self,
        sample,
        *,
        n_samples,
        n_components,
        method="nystrom",
        random_state=None,
        distances=None,
    ):
        sample = np.asarray(sample)
        n = self.n_explicit_features(sample.shape[1])
        if n is not None and n <= n_components:
            fmap = _PolynomialFeatures(sample.shape[1], int(self.degree), self.coef0)
            if self.coef0 == 0:  # columns touching the constant coordinate are zero
                keep = [j for j, c in enumerate(fmap.combos) if sample.shape[1] not in c]
                fmap.combos = [fmap.combos[j] for j in keep]
                fmap.coefs = fmap.coefs[keep]
            return ExplicitFactor(fmap, len(fmap.combos))
        if distances is None:
            return NystromFactor(self, sample[:n_components])
        # the landmarks as one view object: the factors of every degree share its products
        landmarks = distances.view(as_float64(sample), 0, n_components)
        return NystromFactor(self, landmarks, distances=distances)
