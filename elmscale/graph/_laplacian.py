"""The kNN graph's Laplacian in row blocks aligned with X: :class:`GraphBlock` and the
functions each block task runs.

Block b holds the rows of W (or of D^-1/2 W D^-1/2) that belong to X's row chunk b, as a
CSR matrix whose columns are *local*: first the chunk's own rows, then its "halo", the
sorted global indices of the neighbours that live in other chunks. A Gram task for chunk b
therefore needs X_b plus the halo rows of X (d numbers each) to rebuild every hidden row it
multiplies, and no row of H ever crosses the network. (Checkpoints pickle ``GraphBlock``
under this module's name.)
"""

import dataclasses

import dask
import numpy as np
import scipy.sparse as sp
from dask.sizeof import sizeof

from ..utils._dask import named, read_rows
from ._tasks import PREFIX, task


@dataclasses.dataclass
class GraphBlock:
    """Rows [start, stop) of the graph: ``W`` (CSR, local columns), ``halo`` (global indices
    of the non-local columns, sorted), ``degree`` (row sums of the unnormalised W) and
    ``diagonal`` (the diagonal of L: the degree, or 1 for a normalised Laplacian)."""

    start: int
    stop: int
    W: sp.csr_matrix
    halo: np.ndarray
    degree: np.ndarray
    diagonal: np.ndarray

    def split(self, dtype):
        """``(W_local, W_halo)``: the columns of the chunk's own rows and of its halo, in
        ``dtype``; computed once per worker process and kept on the block."""
        cache = self.__dict__.setdefault("_split", {})
        if dtype not in cache:
            n = self.stop - self.start
            W = self.W.astype(dtype)
            cache[dtype] = (W[:, :n].tocsr(), W[:, n:].tocsr())
        return cache[dtype]

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_split", None)
        return state

    def nbytes(self):
        """Bytes the block holds: its CSR arrays, halo and degrees, and the split copies it
        keeps (:meth:`split`). Registered with :func:`dask.sizeof.sizeof`, so that a worker's
        managed memory, and with it when dask spills or pauses, counts the graph."""
        matrices = [self.W, *(m for pair in self.__dict__.get("_split", {}).values() for m in pair)]
        arrays = [self.halo, self.degree, self.diagonal]
        arrays += [a for m in matrices for a in (m.data, m.indices, m.indptr)]
        return int(sum(a.nbytes for a in arrays))

    def global_csr(self, n_samples):
        """This block's rows of W with global column indices (for tests and small data)."""
        cols = np.concatenate([np.arange(self.start, self.stop), self.halo])
        W = self.W.tocoo()
        return sp.csr_matrix(
            (W.data, (W.row, cols[W.col])), shape=(self.stop - self.start, n_samples)
        )


@sizeof.register(GraphBlock)
def _sizeof_graph_block(block):
    return block.nbytes()


def _edge_weights(dist, weights, sigma):
    """The weight of each edge of length ``dist``: 1 ("binary"), the heat kernel of width
    ``sigma`` ("heat"), or, for "fuzzy", ``dist`` itself (the lists' distances were replaced
    by their memberships, :func:`fuzzy_memberships`, before the union)."""
    if weights == "binary":
        return np.ones_like(dist, dtype=np.float64)
    if weights == "fuzzy":
        return dist.astype(np.float64)
    return np.exp(-(dist.astype(np.float64) ** 2) / (2.0 * sigma**2))


#: bisection steps and relative tolerance of each row's fuzzy width (as umap-learn's
#: ``smooth_knn_dist``), and the least width as a share of the row's mean distance
FUZZY_STEPS, FUZZY_TOLERANCE, FUZZY_MIN_WIDTH = 64, 1e-5, 1e-3


def fuzzy_memberships(dist):
    """Each row's membership strengths of its directed kNN edges, UMAP's local fuzzy
    simplicial set (McInnes, Healy and Melville 2018, sec. 3.1, def. 7): ``exp(-max(0,
    d_ij - rho_i) / sigma_i)``, where rho_i is the row's distance to its nearest neighbour
    at a positive distance and sigma_i solves ``sum_j exp(-max(0, d_ij - rho_i) / sigma_i)
    = log2(k + 1)`` (by bisection, at least :data:`FUZZY_MIN_WIDTH` times the row's mean
    distance). Every row's nearest neighbour has membership 1 and its width follows the
    local density, so a dense core and a sparse fringe both keep about log2(k + 1) of weight
    per row. A function of each row's own distances (non-finite ones weigh 0), so the
    graph is the same for any chunking. ``dist``: (n, k) distances, not squared."""
    d = np.asarray(dist, dtype=np.float64)
    finite = np.isfinite(d)
    target = np.log2(d.shape[1] + 1)  # umap-learn's, whose k counts the row itself
    positive = np.where(finite & (d > 0), d, np.inf)
    rho = positive.min(axis=1, keepdims=True)
    rho[~np.isfinite(rho)] = 0.0
    excess = np.where(finite, np.maximum(d - rho, 0.0), np.inf)
    lo = np.zeros((len(d), 1))
    hi = np.full((len(d), 1), np.inf)
    sigma = np.ones((len(d), 1))
    for _ in range(FUZZY_STEPS):
        total = np.exp(-excess / sigma).sum(axis=1, keepdims=True)
        done = np.abs(total - target) < FUZZY_TOLERANCE
        if done.all():
            break
        hi = np.where(total > target, sigma, hi)  # rows done keep their sigma below
        lo = np.where(total < target, sigma, lo)
        sigma = np.where(done, sigma, np.where(np.isfinite(hi), (lo + hi) / 2, sigma * 2))
    n_finite = np.maximum(finite.sum(axis=1, keepdims=True), 1)
    mean = np.where(finite, d, 0.0).sum(axis=1, keepdims=True) / n_finite
    sigma = np.maximum(sigma, FUZZY_MIN_WIDTH * mean)
    return np.exp(-excess / sigma)


def _union(w, starts, weights):
    """The weight of each edge from its weights in the two directions (runs of ``w`` from
    ``starts``): the larger, or for fuzzy memberships their fuzzy union (sec. 3.1)
    ``w_ij + w_ji - w_ij w_ji``."""
    if weights == "fuzzy":
        return 1.0 - np.multiply.reduceat(1.0 - w, starts)
    return np.maximum.reduceat(w, starts)


def list_weights(dist, weights, sigma):
    """The weights of kNN lists ``dist`` (n x k distances, non-finite ones missing and
    weighing 0), row by row as the graph weighs a row's edges before their union."""
    if weights == "fuzzy":
        return fuzzy_memberships(dist)
    finite = np.isfinite(dist)
    return np.where(finite, _edge_weights(np.where(finite, dist, 0.0), weights, sigma), 0.0)


def _distinct(values):
    """Sorted distinct values and each value's position among them (a sort, not a hash:
    the inverse comes with it)."""
    order = np.argsort(values)
    v = values[order]
    new = np.ones(len(v), dtype=bool)
    new[1:] = v[1:] != v[:-1]
    at = np.empty(len(v), dtype=np.int64)
    at[order] = np.cumsum(new) - 1
    return v[new], at


def _assemble_block(idx, dist, start, stop, weights, sigma, source_starts, reverse):
    """Build chunk b's rows of the symmetrised W and their local column map.

    ``reverse`` holds ``(rows, cols, dist)`` for every chunk with edges into b, whose first
    rows are ``source_starts``.
    """
    n, k = idx.shape
    rows = [np.repeat(np.arange(start, stop), k)]
    cols = [idx.ravel()]
    dists = [dist.ravel()]
    for s_start, (r, c, d) in zip(source_starts, reverse, strict=True):
        rows.append(r)
        cols.append(c + s_start)
        dists.append(d)
    rows = np.concatenate(rows) - start
    cols = np.concatenate(cols).astype(np.int64)
    w = _edge_weights(np.concatenate(dists), weights, sigma)
    # "or" symmetrisation: an edge present in both directions keeps one weight, the larger
    # or, for fuzzy memberships, their union; one sort by (row, column) as a single key
    key = rows * (int(cols.max(initial=0)) + 1) + cols
    order = np.argsort(key)
    key, w = key[order], w[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    if len(w):
        w = _union(w, np.flatnonzero(first), weights)
    rows, cols = rows[order[first]], cols[order[first]]
    outside = (cols < start) | (cols >= stop)
    halo, at = _distinct(cols[outside])
    local = cols - start
    local[outside] = n + at
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    W = sp.csr_matrix((w, local, indptr), shape=(n, n + len(halo)))
    degree = np.asarray(W.sum(axis=1)).ravel()
    return GraphBlock(start, stop, W, halo, degree, degree.copy())


def _split_block(block, lo, hi):
    """Rows [lo, hi) of a graph block, as a block of their own: columns outside them
    (rows of the block's other chunks and its halo) become the new block's halo."""
    cols = np.concatenate([np.arange(block.start, block.stop), block.halo])
    W = block.W[lo - block.start : hi - block.start]
    g = cols[W.indices]
    n = hi - lo
    outside = (g < lo) | (g >= hi)
    halo, at = _distinct(g[outside])
    local = g - lo
    local[outside] = n + at
    rows = slice(lo - block.start, hi - block.start)
    return GraphBlock(
        lo,
        hi,
        sp.csr_matrix((W.data, local, W.indptr), shape=(n, n + len(halo))),
        halo,
        block.degree[rows],
        block.diagonal[rows],
    )


def _halo_counts(block, starts):
    owner = np.searchsorted(starts, block.halo, side="right") - 1
    return np.bincount(owner, minlength=len(starts) - 1)


def _halo_sources(blocks, starts):
    """The (blocks x chunks) table of halo rows each block takes from each chunk, and for
    each block the chunks it takes any from."""
    halo_counts = named(_halo_counts, f"{PREFIX}-halo-counts")
    counts = np.array(dask.compute(*[halo_counts(blk, starts) for blk in blocks]))
    return counts, [np.flatnonzero(row).tolist() for row in counts]


def _take_rows(array_block, rows, s_start, s_stop, read=None):
    """The rows of source chunk [s_start, s_stop) among the sorted global indices ``rows``
    (through ``read`` when given: :func:`~elmscale.utils._dask.held_blocks`)."""
    lo, hi = np.searchsorted(rows, [s_start, s_stop])
    taken = array_block[rows[lo:hi] - s_start]
    return read_rows(taken, read)


def _degree_of(block):
    return block.degree


def _normalise_block(block, halo_degrees):
    d_halo = np.concatenate(halo_degrees) if halo_degrees else np.zeros(0)
    d = np.concatenate([block.degree, d_halo])
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, 1.0 / np.sqrt(d), 0.0)
    W = block.W.tocoo()
    data = W.data * inv[W.row] * inv[W.col]
    Wn = sp.csr_matrix((data, (W.row, W.col)), shape=W.shape)
    diagonal = (block.degree > 0).astype(np.float64)
    return GraphBlock(block.start, block.stop, Wn, block.halo, block.degree, diagonal)


def _halo_of(block):
    return block.halo


def _halo_indices(blocks):
    """Per (delayed) block, its halo indices, persisted."""
    return list(dask.persist(*[task("halo-index", _halo_of, blk) for blk in blocks]))
