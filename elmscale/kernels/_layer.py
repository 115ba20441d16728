"""Kernel factors as a hidden layer: the rows of ``[Phi | A | 1]`` from the rows of X."""

import numpy as np

from ..hidden import BlockLayer
from ._distances import DistanceCache, as_float64
from ._factors import KernelFactor


class FactorLayer(BlockLayer):
    """The hidden layer of the scalable multiple-kernel methods: ``H = [Phi | A | 1]``.

    ``Phi = [Phi_1 .. Phi_p]`` stacks the factors' features (N x M), ``A`` holds the
    diagonals ``A_iq = alpha_q + ||Phi_q(x_i)||^2`` of the represented kernels (N x p) and
    the last column is ones, so that ``H^T H``, one product of the shared reductions
    (:func:`elmscale.gram.hidden_stats`), holds every label-independent sum TUMK-ELM needs:
    ``Phi^T Phi``, ``Phi^T 1``, ``Phi^T A``, ``A^T A``, ``A^T 1`` and N. Like
    :class:`~elmscale.hidden.RandomHiddenLayer` it is small and picklable (the factors) and
    builds any row block of H from the matching block of X, on the worker that holds it.
    """

    def __init__(self, factors):
        self.factors = list(factors)
        self.offsets = np.concatenate([[0], np.cumsum([f.n_components for f in factors])])
        self.offsets = self.offsets.astype(np.int64)

    @property
    def n_features_out(self):
        """M, the columns of Phi."""
        return int(self.offsets[-1])

    @property
    def n_kernels(self):
        return len(self.factors)

    @property
    def n_hidden(self):
        return self.n_features_out + self.n_kernels + 1

    def __call__(self, X):
        """``[Phi | A | 1]`` for a NumPy block of rows, float64, written into one buffer
        (the factors' features go straight into their column slices)."""
        n, M, p = X.shape[0], self.n_features_out, self.n_kernels
        H = np.empty((n, M + p + 1))
        # the Gaussians share this block's distances, remembered by the identity of the
        # block: one float64 copy for all, not one per factor
        X = as_float64(X)
        distances = DistanceCache()
        for q, f in enumerate(self.factors):
            P = H[:, self.offsets[q] : self.offsets[q + 1]]
            if type(f).features is KernelFactor.features:
                f.features(X, out=P, distances=distances)
            else:  # a plugin's own features(X), perhaps without ``out``
                P[...] = f.features(X)
            H[:, M + q] = f.alpha + np.einsum("ij,ij->i", P, P)
        H[:, M + p] = 1.0
        return H

    def diagonals(self, X):
        """``A`` alone (rows x p) for a NumPy block of rows."""
        M, p = self.n_features_out, self.n_kernels
        return np.ascontiguousarray(self(X)[:, M : M + p])

    def split_gram(self, HtH):
        """The blocks of ``H^T H``: ``n``, ``G`` (Phi^T Phi, symmetrised), ``u`` (Phi^T 1),
        ``AA`` (A^T A), ``S`` (A^T 1), ``PA`` (Phi^T A), with ``alpha`` and ``offsets``."""
        M, e = self.n_features_out, self.n_hidden - 1
        G = HtH[:M, :M]
        return {
            "n": float(HtH[e, e]),
            "G": 0.5 * (G + G.T),
            "u": HtH[:M, e].copy(),
            "AA": HtH[M:e, M:e].copy(),
            "S": HtH[M:e, e].copy(),
            "PA": HtH[:M, M:e].copy(),
            "alpha": np.array([f.alpha for f in self.factors]),
            "offsets": self.offsets.copy(),
        }

    def output_dtype(self, dtype):
        """H is float64 whatever X's dtype."""
        return np.dtype(np.float64)

    def __repr__(self):
        kinds = ", ".join(f"{f.kind}({f.n_components})" for f in self.factors)
        return f"FactorLayer({kinds})"
