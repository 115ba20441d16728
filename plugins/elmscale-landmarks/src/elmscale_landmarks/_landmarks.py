"""Landmark Gaussian nodes: centres at the k-means centres of a random sample of rows."""

from elmscale.hidden import GaussianRows
from elmscale.utils import draw_seed
from sklearn.cluster import KMeans


class LandmarkGaussians(GaussianRows):
    """Gaussian nodes ``exp(-||x' - c||^2 / (width * m)^2)`` whose centres c are landmarks:
    the k-means centres of a random sample of ``oversample`` rows per node, as the
    landmark-based spectral clustering methods (LSC, U-SPEC) choose them. A centre then
    stands for a region of the data rather than for one row, so fewer nodes cover it; m is
    the median distance between the centres, as for elmscale's ``"gaussian-rows"``, whose
    width rule and blockwise transform this family inherits.

    Parameters
    ----------
    oversample : int, default=10
        Sample rows per node that k-means sees (at most all rows).
    max_iter : int, default=100
        Iterations of k-means on the sample.
    """

    def __init__(self, oversample=10, max_iter=100):
        self.oversample = oversample
        self.max_iter = max_iter

    def sample_size(self, n_nodes, n_samples):
        """``oversample`` rows per node, at most all rows, at least one per node."""
        return max(n_nodes, min(n_samples, self.oversample * n_nodes))

    def fit(self, sample, n_nodes, rng, *, width):
        """The landmarks of ``sample`` (:func:`landmarks`), then the width rule."""
        centres = landmarks(sample, n_nodes, rng, max_iter=self.max_iter)
        return super().fit(centres, n_nodes, rng, width=width)

    def __repr__(self):
        return f"LandmarkGaussians(oversample={self.oversample}, max_iter={self.max_iter})"


def landmarks(sample, n_nodes, rng, *, max_iter=100):
    """The ``n_nodes`` k-means centres of the rows of ``sample`` (one k-means++ start, its
    seed drawn from ``rng``), or the sample itself when it has no more rows than nodes."""
    if len(sample) <= n_nodes:
        return sample.copy()
    km = KMeans(n_nodes, n_init=1, max_iter=max_iter, random_state=draw_seed(rng))
    return km.fit(sample).cluster_centers_
