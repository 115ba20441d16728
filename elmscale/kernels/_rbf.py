"""The Gaussian (RBF) kernel, with closed forms for extreme widths."""

import numpy as np

from ._base import Kernel
from ._distances import as_float64, exp_or_zero, extremes, off_diagonal_mass, sqdist
from ._factors import ConstantFactor, IdentityFactor, NystromFactor, RandomFourierFactor


class RBFKernel(Kernel):
    """K(x, y) = exp(-||x - y||^2 / (2 width^2)).

    Factor (scalable mode), chosen on the landmark sample S of size s drawn from N rows:

    - **identity** (K ~ I, closed form) when the estimated off-diagonal mass of a row,
      ``(N - 1) * mean_{i != j in S} K(i, j)``, is below ``identity_tol`` (default 1e-3):
      the kernel is then numerically the identity (a width far below the distances between
      points, e.g. 1e-10 ... 1e-4 on standardised data). Pairs of exact duplicate rows, for
      which K is 1 whatever the width, are left out of that estimate and treated as distinct
      (K = 0) by the closed form: the one place where the scalable mode differs from the
      exact kernel by more than the approximation of the other factors.
    - **constant** (K ~ 1 1^T, closed form) when ``1 - min_{S} K < constant_tol`` (1e-12):
      a width far above the diameter of the data (1e6 ... 1e10).
    - **identity** also when Nystrom on the first m sample rows would lose, on the other
      sample rows, more of the diagonal (relative) than the identity's off-diagonal error.
    - otherwise **Nystrom** on the sample (``method="nystrom"``, the default) or random
      Fourier features (``method="rff"``). A near-identity kernel is not low-rank and
      Nystrom would lose its diagonal, hence the identity closed form above.

    Every method takes ``distances`` (a :class:`~elmscale.kernels.DistanceCache`): Gaussians
    of several widths on the same arrays then compute the squared distances once.
    """

    identity_tol = 1e-3
    constant_tol = 1e-12
    shares_distances = True

    def __init__(self, width=1.0):
        self.width = width

    def __call__(self, X, Y, *, distances=None):
        # differences, not |x|^2 + |y|^2 - 2 x.y: K(x, x) is exactly 1 even for width 1e-10
        X, Y = as_float64(X), as_float64(Y)
        d2 = sqdist(X, Y) if distances is None else distances.sqdist(X, Y)
        return exp_or_zero(d2 * (-0.5 / float(self.width) ** 2))

    def diagonal(self, X):
        return np.ones(X.shape[0])

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
        sample = as_float64(sample)
        s = sample.shape[0]
        # The identity closed form can win only while the off-diagonal mass per row,
        # (n_samples - 1) * off, is below max(identity_tol, 1): the test on the sample needs
        # identity_tol, the held-out test below compares with a lost diagonal that is at
        # most 1. Above that bound the exact value of ``off`` changes no decision.
        settled = max(self.identity_tol, 1.0) / max(n_samples - 1, 1)
        off = np.inf
        if s > 1:
            pairs = s * (s - 1) / 2
            # each pair once (pdist: half the work of the square matrix)
            if distances is None:
                d2 = sqdist(sample)
                distinct, n_distinct, nearest, farthest = extremes(d2)
            else:
                d2 = distances.sqdist(sample)
                distinct, n_distinct, nearest, farthest = distances.extremes(d2)
            # Both tests first from the extreme distances alone (exp is monotone): the
            # largest distinct value of K bounds the mean off-diagonal mass from above, the
            # smallest one (exp of the largest distance) from below. The decisions are the
            # ones the full matrix gives; the exp of the whole sample matrix is computed
            # only for the widths whose bounds do not settle it.
            scale = 2.0 * float(self.width) ** 2
            if (n_samples - 1) * np.exp(-nearest / scale) < self.identity_tol:
                return IdentityFactor(1.0)
            if 1.0 - np.exp(-farthest / scale) < self.constant_tol:
                # K ~ 1 everywhere: the off-diagonal mass is ~1 per pair, never ~I
                return ConstantFactor(1.0)
            off = n_distinct * np.exp(-farthest / scale) / pairs
            if off < settled:
                off = off_diagonal_mass(d2, distinct, scale, settled * pairs) / pairs
            if (n_samples - 1) * off < self.identity_tol:
                return IdentityFactor(1.0)
        if method == "rff":
            rng = random_state if random_state is not None else np.random.RandomState(0)
            return RandomFourierFactor(float(self.width), sample.shape[1], n_components, rng)
        if distances is None:
            landmarks, held = sample[:n_components], sample[n_components:]
        else:  # one landmark array for every width: the distances to it are shared
            landmarks = distances.view(sample, 0, n_components)
            held = distances.view(sample, n_components, s)
        factor = NystromFactor(self, landmarks, distances=distances)
        if s > n_components + 1 and off < settled:
            # a near-identity kernel is not low-rank: on the held-out sample rows Nystrom
            # loses part of the diagonal. Keep whichever error per row is smaller, the lost
            # diagonal (Nystrom) or the off-diagonal mass (identity closed form).
            lost = 1.0 - np.mean(factor.diagonal(held, distances=distances))
            if lost > (n_samples - 1) * off:
                return IdentityFactor(1.0)
        return factor
