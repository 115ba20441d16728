"""The kernel plugin protocol."""

import numpy as np

from ._factors import NystromFactor


class Kernel:
    """Protocol of a kernel plugin.

    ``__call__(X, Y)`` evaluates the block K(X, Y) (NumPy in, NumPy out, float64).
    ``diagonal(X)`` gives K(x_i, x_i). ``factor(sample, ...)`` gives a
    :class:`~elmscale.kernels.KernelFactor` for the scalable mode; the default is Nystrom on
    the sample, so a plugin that only implements ``__call__`` works in both modes.

    A kernel computed from squared Euclidean distances (or from the products ``X Y^T``) may
    set ``shares_distances = True`` and accept a keyword ``distances`` (a
    :class:`~elmscale.kernels.DistanceCache`) in ``__call__`` and ``factor``: callers
    evaluating several such kernels on the same arrays then pass one cache, and the
    distances (products) are computed once.
    """

    shares_distances = False

    def __call__(self, X, Y):
        raise NotImplementedError

    def diagonal(self, X):
        """K(x_i, x_i) for each row."""
        return np.array([self(x[None], x[None])[0, 0] for x in X])

    def factor(self, sample, *, n_samples, n_components, method="nystrom", random_state=None):
        """A :class:`~elmscale.kernels.KernelFactor` with ``K ~ alpha I + Phi Phi^T`` over
        the full data.

        Parameters
        ----------
        sample : ndarray (n_sample, n_features)
            Rows of X drawn uniformly at random (all of X when it is small).
        n_samples : int
            Rows in the full data.
        n_components : int
            Target number of columns m (the landmark count); ``sample`` has at least m rows
            unless X is smaller.
        method : {"nystrom", "rff"}
            Preferred approximation; kernels without random features use Nystrom.
        random_state : numpy.random.RandomState
        """
        return NystromFactor(self, np.asarray(sample)[:n_components])

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


def kernel_factor(
    kernel, sample, *, n_samples, n_components, method="nystrom", random_state=None, distances=None
):
    """``kernel.factor(...)``, passing ``distances`` to a kernel that shares them."""
    kwargs = dict(
        n_samples=n_samples, n_components=n_components, method=method, random_state=random_state
    )
    if distances is not None and getattr(kernel, "shares_distances", False):
        kwargs["distances"] = distances
    return kernel.factor(sample, **kwargs)
