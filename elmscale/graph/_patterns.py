"""The patterns of W a Gram task multiplies by: a group of consecutive graph blocks as one
sparse matrix over the group's rows, split into the columns inside the group and its halo."""

import numpy as np
import scipy.sparse as sp


def _global_edges(blocks):
    """Every stored entry of W in consecutive blocks' rows: ``(rows, cols, weights)`` with
    rows counted from the first block's first row and global column indices."""
    start = blocks[0].start
    rows, cols, data = [], [], []
    for blk in blocks:
        n = blk.stop - blk.start
        W = blk.W.tocoo()
        c = W.col.astype(np.int64)
        inside = c < n
        gj = np.empty_like(c)
        gj[inside] = c[inside] + blk.start
        gj[~inside] = blk.halo[c[~inside] - n]
        rows.append(W.row.astype(np.int64) + (blk.start - start))
        cols.append(gj)
        data.append(W.data.astype(np.float64))
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(data)


def group_edges(*blocks):
    """The edges of W from consecutive graph blocks' rows (one task's rows), float64:
    ``((rows, cols, weights), need)``. ``rows`` count from the first block's first row;
    ``cols`` index the group's rows followed by its halo rows, ``need``: the sorted global
    indices of those halo rows (the columns outside the group)."""
    start, stop = blocks[0].start, blocks[-1].stop
    r, gj, w = _global_edges(blocks)
    outside = (gj < start) | (gj >= stop)
    need, col = np.unique(gj[outside], return_inverse=True)
    gj -= start
    gj[outside] = col.ravel() + (stop - start)
    return (r, gj, w), need


def group_pattern(*blocks, half=True):
    """The half graph of consecutive graph blocks (one task's rows), float64:
    ``((V_local, V_halo, diagonal), need)``.

    V holds each off-diagonal edge {i, j} of W once, in row i when ``(i < j) xor (i + j odd)``
    (else in row j), with twice its weight, and the diagonal as it is: ``V + V^T = 2 W`` off
    the diagonal, so ``H^T W H = sym(H^T V H)``. Columns inside the blocks' rows go to
    ``V_local``; the others to ``V_halo``, whose columns are ``need``, the sorted global
    indices of the halo rows V uses (about half of the blocks' halo). ``half=False``: V is
    the blocks' rows of W itself (every edge, its own weight), for products that need whole
    rows of ``W H`` (``L H`` with p = 2)."""
    start, stop = blocks[0].start, blocks[-1].stop
    r, gj, w = _global_edges(blocks)
    gi = r + start
    if half:
        off = gi != gj
        keep = ~off | ((gi < gj) ^ ((gi + gj) % 2 == 1))
        w = np.where(off, 2.0, 1.0)[keep] * w[keep]
        r, gj = r[keep], gj[keep]
    n = stop - start
    local = (gj >= start) & (gj < stop)
    V_local = sp.csr_matrix((w[local], (r[local], gj[local] - start)), shape=(n, n))
    need, col = np.unique(gj[~local], return_inverse=True)
    V_halo = sp.csr_matrix((w[~local], (r[~local], col.ravel())), shape=(n, len(need)))
    diagonal = np.concatenate([blk.diagonal for blk in blocks])
    return (V_local, V_halo, diagonal), need
