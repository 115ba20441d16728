"""Squared distances and products shared by the kernels evaluated on the same arrays."""

import numpy as np
from scipy.spatial.distance import cdist, pdist

#: exp(-x) is exactly 0.0 in float64 for x above this (the smallest subnormal is exp(-744.4)).
EXP_UNDERFLOW = 746.0

# Entries of the sample's pair distances whose exp is summed before the bound is checked
# again (64 rows of a 1,000-point square matrix).
_MASS_CHUNK = 64_000


class DistanceCache:
    """Squared Euclidean distances remembered for a group of kernel evaluations.

    TUMK-ELM evaluates Gaussians of many widths on the same arrays (a row block and the
    shared landmarks, or the landmark sample while factoring): each width needs the same
    squared distances. A caller creates one cache for such a group and passes it as
    ``distances=`` to the kernels that declare ``shares_distances``; the cache remembers the
    distances of the last ``size`` array pairs, keyed by the identity of the arrays, which it
    holds so that their memory is not reused while the cache lives. The caller must not
    modify those arrays while the cache is in use. A cache is not thread-safe: use one per
    thread.

    The polynomial kernels of several degrees share the products ``X Y^T + c`` and their
    squares the same way (:meth:`products`, :meth:`square`).

    :meth:`view` returns one view object per (array, rows) range, so that factors built
    on the same sample share their landmark array, and with it the distances to it.
    """

    def __init__(self, size=4):
        self.size = int(size)
        self._entries = []  # (X, Y, d2), most recent first
        self._products = []  # (X, Y, shift, G), most recent first
        self._squares = []  # (G, G * G)
        self._extremes = None
        self._views = []

    def sqdist(self, X, Y=None):
        """``cdist(X, Y, "sqeuclidean")``, or with ``Y=None`` ``pdist(X, "sqeuclidean")``
        (condensed: each pair of rows once)."""
        for i, (a, b, d2) in enumerate(self._entries):
            if a is X and b is Y:
                if i:
                    self._entries.insert(0, self._entries.pop(i))
                return d2
        d2 = sqdist(X, Y)
        self._entries.insert(0, (X, Y, d2))
        del self._entries[self.size :]
        return d2

    def products(self, X, Y, shift=0.0):
        """``X @ Y.T + shift``, remembered like :meth:`sqdist`. Callers must not modify it."""
        for i, (a, b, c, G) in enumerate(self._products):
            if a is X and b is Y and c == shift:
                if i:
                    self._products.insert(0, self._products.pop(i))
                return G
        G = X @ Y.T
        G += shift
        self._products.insert(0, (X, Y, shift, G))
        del self._products[self.size :]
        self._squares = [
            entry for entry in self._squares if any(entry[0] is p[3] for p in self._products)
        ]
        return G

    def square(self, G):
        """``G * G`` of an array :meth:`products` returned, remembered while G is. Callers
        must not modify it."""
        for a, G2 in self._squares:
            if a is G:
                return G2
        G2 = G * G
        self._squares.append((G, G2))
        return G2

    def extremes(self, d2):
        """:func:`extremes` of ``d2``, remembered for the last array asked about."""
        if self._extremes is not None and self._extremes[0] is d2:
            return self._extremes[1]
        out = extremes(d2)
        self._extremes = (d2, out)
        return out

    def view(self, X, start, stop):
        """``X[start:stop]``, the same view object for the same array and range."""
        for a, lo, hi, v in self._views:
            if a is X and lo == start and hi == stop:
                return v
        v = X[start:stop]
        self._views.append((X, start, stop, v))
        return v


def as_float64(a):
    """``a`` as a float64 ndarray: ``a`` itself when it is one. The caches key arrays by
    identity, and ``np.asarray(a, dtype=np.float64)`` returns a new view of a float64 array
    unpickled from a buffer (the landmarks of a factor sent to a worker), so every kernel
    would miss the distances the others computed."""
    a = np.asarray(a)
    return a if a.dtype == np.float64 else a.astype(np.float64)


def sqdist(X, Y=None):
    """Squared Euclidean distances of the rows of X and Y by differences (so a point's
    distance to itself is exactly 0), or with ``Y=None`` those of X's pairs, condensed."""
    return pdist(X, "sqeuclidean") if Y is None else cdist(X, Y, "sqeuclidean")


def extremes(d2):
    """``(distinct, count, nearest, farthest)`` of condensed squared distances (each pair
    once): the mask of the pairs at a positive distance (exact duplicates excluded), their
    number, and the smallest positive and the largest entries."""
    distinct = d2 > 0
    return (
        distinct,
        int(np.count_nonzero(distinct)),
        float(np.min(d2, where=distinct, initial=np.inf)),
        float(d2.max()),
    )


def exp_or_zero(Z):
    """``np.exp(Z)``, bit for bit, in place (Z is overwritten), with the entries below
    ``-EXP_UNDERFLOW`` (whose exp is exactly 0.0) set to 0 without calling exp: exp of an
    underflowing entry is several times slower than of a normal one, and a narrow Gaussian
    on spread-out data underflows almost everywhere."""
    keep = Z >= -EXP_UNDERFLOW
    if keep.all():
        # the masked loop of ``where=`` is slower than the plain one: only when needed
        return np.exp(Z, out=Z)
    np.exp(Z, out=Z, where=keep)
    Z[~keep] = 0.0
    return Z


def off_diagonal_mass(d2, distinct, scale, enough):
    """Sum of ``exp(-d2 / scale)`` over the distinct pairs (``d2`` condensed, each pair
    once), or a partial sum once it exceeds ``enough`` (every term is positive, so a partial
    sum is a lower bound). Entries that underflow to exactly 0 are skipped."""
    keep = distinct & (d2 < EXP_UNDERFLOW * scale)
    total = 0.0
    for start in range(0, d2.shape[0], _MASS_CHUNK):
        rows = slice(start, start + _MASS_CHUNK)
        total += np.exp(-d2[rows][keep[rows]] / scale).sum()
        if total >= enough:
            break
    return total
