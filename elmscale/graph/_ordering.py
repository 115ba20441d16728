"""Locality ordering: permute rows so that kNN neighbours share row chunks.

With rows in arbitrary order almost every neighbour of a chunk's rows lives in another chunk,
and each Gram task would rebuild ~k times its own number of hidden rows for its "halo".
Sorting rows by a coarse k-means cell (cells fitted on a sample) puts most neighbours in the
same chunk, so the halo shrinks to the cells' borders (DESIGN.md, section 3).

The permutation is applied on the cluster: per chunk, each row's destination is computed from
the (n_chunks x n_cells) table of cell counts, the only thing that reaches the client; rows of
X (d numbers each) are then moved between chunks. Sums over rows (every Gram matrix) do not
depend on the order, so the ordering stays internal to a fit.
"""

import dask
import dask.array as da
import numpy as np
from scipy.cluster.hierarchy import leaves_list, linkage
from sklearn.cluster import KMeans

SAMPLE_ROWS = 20_000


def _cells(block, centers):
    block = block.astype(np.float64, copy=False)
    d2 = (centers * centers).sum(1)[None, :] - 2.0 * block @ centers.T
    return np.argmin(d2, axis=1).astype(np.int32)


def _counts(cells, n_cells):
    return np.bincount(cells, minlength=n_cells)


def _destinations(cells, base):
    """Global destination of each row: its cell's base for this chunk + rank within it."""
    order = np.argsort(cells, kind="stable")
    ranks = np.empty(len(cells), dtype=np.int64)
    sorted_cells = cells[order]
    first = np.searchsorted(sorted_cells, sorted_cells, side="left")
    ranks[order] = np.arange(len(cells)) - first
    return base[cells] + ranks


def _piece(rows, dest, lo, hi):
    m = (dest >= lo) & (dest < hi)
    return rows[m], dest[m] - lo


def _place(n, width, dtype, *pieces):
    out = np.empty((n, width) if width else (n,), dtype=dtype)
    for rows, pos in pieces:
        out[pos] = rows
    return out


class RowOrder:
    """A permutation of X's rows held on the cluster; ``apply`` moves any row-aligned dask
    array (X, targets, weights, labels) into the new order, keeping the row chunks."""

    def __init__(self, dest_blocks, chunks, pairs):
        self.dest_blocks = dest_blocks  # per source chunk: destination of each row (delayed)
        self.chunks = tuple(chunks)
        self.pairs = pairs  # pairs[b] = source chunks sending rows to chunk b

    def apply(self, A):
        if A is None:
            return None
        if tuple(A.chunks[0]) != self.chunks:
            raise ValueError("array must be chunked like X's rows")
        starts = np.concatenate([[0], np.cumsum(self.chunks)])
        blocks = A.to_delayed().ravel()
        width = A.shape[1] if A.ndim == 2 else 0
        out = []
        for b, n in enumerate(self.chunks):
            pieces = [dask.delayed(_piece, pure=True)(blocks[s], self.dest_blocks[s],
                                                      int(starts[b]), int(starts[b + 1]))
                      for s in self.pairs[b]]
            placed = dask.delayed(_place, pure=True)(n, width, A.dtype, *pieces)
            out.append(da.from_delayed(placed, (n, width) if width else (n,), dtype=A.dtype))
        return da.concatenate(out)


def locality_order(X, *, n_cells=None, random_state=0):
    """A :class:`RowOrder` sorting X's rows by coarse k-means cell.

    ``n_cells`` defaults to 16 per row chunk (at least 64, at most 1,000): each chunk then
    holds a run of whole cells, numbered so that neighbouring cells are consecutive. The cells are fitted on at most 20,000 sampled rows on the client.
    """
    N = X.shape[0]
    nb = len(X.chunks[0])
    n_cells = n_cells or int(min(max(16 * nb, 64), 1000, N))
    rng = np.random.RandomState(random_state)
    idx = np.sort(rng.choice(N, size=min(N, SAMPLE_ROWS), replace=False))
    sample = np.asarray(X[idx].compute(), dtype=np.float64)
    n_cells = min(n_cells, len(sample))
    centers = KMeans(n_cells, n_init=1, max_iter=20, random_state=random_state).fit(
        sample).cluster_centers_
    if n_cells > 2:
        # number cells along the leaves of a Ward dendrogram of their centres, so that
        # consecutive cells (and hence chunks) hold nearby points
        leaves = leaves_list(linkage(centers, method="ward"))
        centers = centers[leaves]
    cells = [dask.delayed(_cells, pure=True)(blk, centers) for blk in X.to_delayed().ravel()]
    cells = list(dask.persist(*cells))
    counts = np.array(dask.compute(*[dask.delayed(_counts)(c, n_cells) for c in cells]))
    # cell c occupies [cell_start[c], cell_start[c+1]); within it, chunk by chunk
    cell_start = np.concatenate([[0], np.cumsum(counts.sum(axis=0))])[:-1]
    before = np.cumsum(counts, axis=0) - counts  # rows of cell c in earlier chunks
    base = cell_start[None, :] + before  # (nb, n_cells)
    dest = list(dask.persist(*[dask.delayed(_destinations, pure=True)(cells[s], base[s])
                               for s in range(nb)]))
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])])
    pairs = []
    for b in range(nb):
        lo, hi = starts[b], starts[b + 1]
        # rows of (s, c) occupy [base[s, c], base[s, c] + counts[s, c])
        overlap = (np.minimum(base + counts, hi) - np.maximum(base, lo)).clip(0).sum(axis=1)
        pairs.append(np.flatnonzero(overlap).tolist())
    return RowOrder(dest, X.chunks[0], pairs)
