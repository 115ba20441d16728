"""Nearest-neighbour selection that does not depend on block shapes.

A squared distance from one matrix product, ``|x|^2 + |y|^2 - 2 x.y``, carries rounding that
depends on the shapes BLAS is handed, so ranking tied or nearly tied neighbours by it makes a
kNN graph depend on how X is chunked (integer-valued data such as scikit-learn's digits has many
exactly tied distances). Here the product only proposes candidates. A bound ``tau`` on its
error gives every row a threshold that provably keeps all rows at least as close as its k-th
nearest; those candidates' distances are recomputed as ``sum((x - y)^2)`` in float64, a value
that depends on the two rows alone, and neighbours are ranked by (that distance, global index).
The result for a query is therefore a function of the set of reference rows it is compared
with, whatever their order, block or worker.
"""

import numpy as np

#: query rows per distance block: bounds a block to QUERY_ROWS x n_reference values
QUERY_ROWS = 1024
#: columns whose k-th smallest value gives each row's first, cheap threshold
SUBSAMPLE_COLUMNS = 256


def exact_sq_distances(A, B):
    """``||a_i - b_i||^2`` for paired rows, in float64, row by row (independent of batching)."""
    diff = np.asarray(A, dtype=np.float64) - np.asarray(B, dtype=np.float64)
    return np.einsum("ij,ij->i", diff, diff)


def _error_bound(a_sq, b_sq_max, d, dtype):
    """An upper bound on |product-based - exact| squared distance for rows of these norms.

    Rounding the centred rows to ``dtype`` and the (d + 2)-term products each contribute at
    most a few ``d * u * (|a|^2 + |b|^2)``; the factor 4 is headroom, and the cost of a loose
    bound is only a few more exact recomputations.
    """
    u = np.finfo(dtype).eps / 2
    return 4.0 * (d + 4) * u * (a_sq + b_sq_max)


def _pairwise(Aq, Br):
    """Squared distances of every row of Aq to every row of Br, by one product in Aq's dtype:
    ``[a, 1, |a|^2] . [-2 b, |b|^2, 1]``."""
    dt = Aq.dtype
    a_sq = np.einsum("ij,ij->i", Aq, Aq)
    b_sq = np.einsum("ij,ij->i", Br, Br)
    Qa = np.empty((Aq.shape[0], Aq.shape[1] + 2), dtype=dt)
    Qa[:, :-2] = Aq
    Qa[:, -2] = 1
    Qa[:, -1] = a_sq
    Rb = np.empty((Br.shape[0], Br.shape[1] + 2), dtype=dt)
    np.multiply(Br, -2, out=Rb[:, :-2])
    Rb[:, -2] = b_sq
    Rb[:, -1] = 1
    return Qa @ Rb.T, a_sq, b_sq


def block_topk(Xq, q_ids, Xr, r_ids, k, *, dtype=np.float32):
    """The k nearest rows of ``Xr`` for each row of ``Xq``, ranked by (exact distance, id).

    Parameters
    ----------
    Xq, Xr : ndarray (nq, d), (nr, d)
        Query and reference rows (any float dtype; distances are decided in float64).
    q_ids, r_ids : int ndarray
        Global ids of the rows. A reference row with the query's own id is never its neighbour.
    k : int
        Neighbours per query; rows with fewer candidates are padded with id -1, distance inf.
    dtype : float32 or float64
        Precision of the candidate-proposing product (float32 is about twice as fast).

    Returns
    -------
    ids : int64 (nq, k), sq_dist : float64 (nq, k)
        Sorted by squared distance, ties by the smaller id.
    """
    nq = Xq.shape[0]
    out_ids = np.full((nq, k), -1, dtype=np.int64)
    out_d = np.full((nq, k), np.inf)
    if nq == 0 or Xr.shape[0] == 0:
        return out_ids, out_d
    Xq64 = np.asarray(Xq, dtype=np.float64)
    Xr64 = np.asarray(Xr, dtype=np.float64)
    q_ids = np.asarray(q_ids, dtype=np.int64)
    r_ids = np.asarray(r_ids, dtype=np.int64)
    # distances are translation invariant: centring on the reference block keeps the norms,
    # and with them the rounding of the product, as small as the block's spread
    center = Xr64.mean(axis=0)
    Br = (Xr64 - center).astype(dtype)
    r_order = np.argsort(r_ids, kind="stable")
    for lo in range(0, nq, QUERY_ROWS):
        hi = min(lo + QUERY_ROWS, nq)
        ids, dist = _topk_rows(Xq64[lo:hi], q_ids[lo:hi], Xr64, r_ids, r_order, Br, center,
                               k, dtype)
        out_ids[lo:hi, : ids.shape[1]] = ids
        out_d[lo:hi, : ids.shape[1]] = dist
    return out_ids, out_d


def _topk_rows(Xq64, q_ids, Xr64, r_ids, r_order, Br, center, k, dtype):
    nq, d = Xq64.shape
    nr = Xr64.shape[0]
    Aq = (Xq64 - center).astype(dtype)
    G, a_sq, b_sq = _pairwise(Aq, Br)
    # self-pairs: the query's own id among the references
    pos = np.searchsorted(r_ids[r_order], q_ids)
    pos = np.minimum(pos, nr - 1)
    own = r_ids[r_order][pos] == q_ids
    G[np.flatnonzero(own), r_order[pos[own]]] = np.inf
    kk = min(k, nr - int(own.max(initial=False)))
    if kk <= 0:
        return np.empty((nq, 0), np.int64), np.empty((nq, 0))
    tau = _error_bound(a_sq.astype(np.float64), float(b_sq.max()), d, dtype)
    # a first threshold from a subsample of columns: its kk-th smallest is >= the row's kk-th
    # smallest overall, so every row keeps at least kk candidates below it
    s = min(nr, max(SUBSAMPLE_COLUMNS, kk + 1))
    sub = G[:, :s] if s < nr else G
    first = np.partition(sub, kk - 1, axis=1)[:, kk - 1]
    rows, cols = _below(G, first + 2 * tau)
    g = G[rows, cols]
    order = np.lexsort((g, rows))
    rows, cols, g = rows[order], cols[order], g[order]
    start = np.searchsorted(rows, np.arange(nq))
    # rows with e <= e_(k) have g <= g_(k) + 2 tau, where g_(k) is the row's true kk-th value
    gk = g[start + kk - 1]
    keep = g <= (gk + 2 * tau)[rows]
    rows, cols = rows[keep], cols[keep]
    e = exact_sq_distances(Xq64[rows], Xr64[cols])
    ids = r_ids[cols]
    order = np.lexsort((ids, e, rows))
    rows, ids, e = rows[order], ids[order], e[order]
    start = np.searchsorted(rows, np.arange(nq))
    take = (start[:, None] + np.arange(kk)[None, :]).ravel()
    return ids[take].reshape(nq, kk), e[take].reshape(nq, kk)


def _below(G, thresholds):
    """(rows, cols) of the entries of G at or below their row's threshold."""
    flat = np.flatnonzero(G <= thresholds[:, None])
    return np.divmod(flat, G.shape[1])


def merge_topk(k, ids, sq_dist):
    """The k best of several candidate lists per row (concatenated along axis 1), ranked by
    (distance, id); padding (id -1, inf) sorts last. Candidates must be distinct per row."""
    order = np.lexsort((ids, sq_dist), axis=1)[:, :k]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(sq_dist, order, axis=1)
