"""Nearest-neighbour selection that does not depend on block shapes.

A squared distance from one matrix product, ``|x|^2 + |y|^2 - 2 x.y``, carries rounding that
depends on the shapes BLAS is handed, so ranking tied or nearly tied neighbours by it makes a
kNN graph depend on how X is chunked (integer-valued data such as scikit-learn's digits has many
exactly tied distances). Here the product only proposes candidates. A bound ``tau`` on its
error gives every row a threshold that provably keeps all rows at least as close as its k-th
nearest; those candidates' distances are recomputed as ``sum((x - y)^2)``, a value that
depends on the two rows alone, and neighbours are ranked by (that distance, global index).
The result for a query is therefore a function of the set of reference rows it is compared
with, whatever their order, block or worker.

The two halves are separate so that candidates from several reference blocks (a query's
probed cells) can be pooled before the exact distances are computed once per query:
:func:`block_candidates` proposes, :func:`decide` ranks.
"""

import numpy as np

#: query rows per distance block: bounds a block to QUERY_ROWS x n_reference values
QUERY_ROWS = 1024
#: columns whose k-th smallest value gives each row's first, cheap threshold
SUBSAMPLE_COLUMNS = 256


#: candidate pairs per block of :func:`exact_sq_distances` (keeps its buffers in cache)
PAIR_BLOCK = 4096


def exact_sq_distances(A, ia, B, ib):
    """``||A[ia[j]] - B[ib[j]]||^2`` for each pair j, row by row (the value depends on the two
    rows alone, not on the batch), in the inputs' common float dtype."""
    dt = np.result_type(A.dtype, B.dtype, np.float32)
    n = len(ia)
    out = np.empty(n, dtype=dt)
    block = min(PAIR_BLOCK, max(n, 1))
    a = np.empty((block, A.shape[1]), dtype=A.dtype)
    b = np.empty((block, B.shape[1]), dtype=B.dtype)
    diff = np.empty((block, A.shape[1]), dtype=dt)
    for lo in range(0, n, block):
        m = min(block, n - lo)
        np.take(A, ia[lo : lo + m], axis=0, out=a[:m])
        np.take(B, ib[lo : lo + m], axis=0, out=b[:m])
        np.subtract(a[:m], b[:m], out=diff[:m])
        out[lo : lo + m] = np.einsum("ij,ij->i", diff[:m], diff[:m])
    return out


def _error_bound(a_sq, b_sq_max, d, dtype):
    """An upper bound on |product-based - recomputed| squared distance for these norms.

    Rounding the centred rows to ``dtype``, the (d + 2)-term products and the recomputation
    each contribute at most about ``d * u * (|a|^2 + |b|^2)``; the factor 4 is headroom, and
    the cost of a loose bound is only a few more recomputed candidates.
    """
    u = np.finfo(dtype).eps / 2
    return 4.0 * (d + 4) * u * (a_sq + b_sq_max)


def _pairwise(Aq, Br):
    """Squared distances of every row of Aq to every row of Br, by one product in their
    dtype: ``[a, 1, |a|^2] . [-2 b, |b|^2, 1]``; also returns |a|^2 and max |b|^2."""
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
    return Qa @ Rb.T, a_sq, float(b_sq.max())


def block_candidates(Xq, q_ids, Xr, r_ids, k, *, dtype=np.float32):
    """Each query's candidate neighbours in one reference block.

    Every reference row whose exact distance to the query is at most the query's k-th
    smallest in this block is among the candidates (the error bound makes sure), plus the
    few whose proposed distance is within the bound of it. A reference row with the query's
    own id is never a candidate.

    Returns flat arrays ``(rows, cols, g, tau)``: query row, reference row, proposed squared
    distance and its error bound, grouped by query row.
    """
    nq, nr = Xq.shape[0], Xr.shape[0]
    q_ids = np.asarray(q_ids, dtype=np.int64)
    r_ids = np.asarray(r_ids, dtype=np.int64)
    empty = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, dtype), np.empty(0))
    if nq == 0 or nr == 0:
        return empty
    work = np.result_type(Xq.dtype, Xr.dtype, np.float32)
    # distances are translation invariant: centring on the reference block keeps the norms,
    # and with them the rounding of the product, as small as the block's spread
    center = Xr.mean(axis=0, dtype=work)
    Br = np.subtract(Xr, center, dtype=work).astype(dtype, copy=False)
    sorted_ids = np.sort(r_ids)
    r_order = np.argsort(r_ids, kind="stable")
    parts = []
    for lo in range(0, nq, QUERY_ROWS):
        hi = min(lo + QUERY_ROWS, nq)
        Aq = np.subtract(Xq[lo:hi], center, dtype=work).astype(dtype, copy=False)
        rows, cols, g, tau = _candidates(Aq, Br, q_ids[lo:hi], sorted_ids, r_order, k)
        parts.append((rows + lo, cols, g, tau))
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate(p) for p in zip(*parts))


def _candidates(Aq, Br, q_ids, sorted_ids, r_order, k):
    nq, d = Aq.shape
    nr = Br.shape[0]
    G, a_sq, b_sq_max = _pairwise(Aq, Br)
    pos = np.minimum(np.searchsorted(sorted_ids, q_ids), nr - 1)
    own = sorted_ids[pos] == q_ids
    G[np.flatnonzero(own), r_order[pos[own]]] = np.inf
    tau = _error_bound(a_sq.astype(np.float64), b_sq_max, d, Aq.dtype)
    kk = min(k, nr - 1 if own.any() else nr)
    if kk < nr - (1 if own.any() else 0):
        # a first threshold from a subsample of columns: its kk-th smallest is >= the row's
        # kk-th smallest overall, so every row keeps at least kk candidates below it
        s = min(nr, max(SUBSAMPLE_COLUMNS, kk + 1))
        first = np.partition(G[:, :s], kk - 1, axis=1)[:, kk - 1].astype(np.float64)
        rows, cols = _below(G, first + 2 * tau)
        g = G[rows, cols].astype(np.float64)
        order = np.lexsort((g, rows))
        rows, cols, g = rows[order], cols[order], g[order]
        # rows with e <= e_(k) have g <= g_(k) + 2 tau, g_(k) the row's kk-th smallest
        start = np.searchsorted(rows, np.arange(nq))
        keep = g <= (g[start + kk - 1] + 2 * tau)[rows]
        rows, cols, g = rows[keep], cols[keep], g[keep]
    else:
        rows, cols = np.nonzero(np.isfinite(G))
        g = G[rows, cols].astype(np.float64)
    return rows, cols, g, tau[rows]


def _below(G, thresholds):
    """(rows, cols) of the entries of G at or below their row's threshold."""
    flat = np.flatnonzero(G <= thresholds.astype(G.dtype)[:, None])
    return np.divmod(flat, G.shape[1])


def decide(k, n_queries, rows, ids, g, tau, exact):
    """The k nearest candidates of each query, ranked by (recomputed distance, id).

    ``rows, ids, g, tau`` are pooled candidates (query row, global id, proposed squared
    distance, bound), several blocks' worth; ``exact(rows, positions)`` recomputes the
    squared distances of the pairs at ``positions`` of those arrays
    (with :func:`exact_sq_distances`). Only candidates within
    ``2 tau`` of the query's k-th proposed distance are recomputed. Returns ``(ids, sq_dist)``
    of shape (n_queries, k), padded with (-1, inf) where a query has fewer candidates.
    """
    out_ids = np.full((n_queries, k), -1, dtype=np.int64)
    out_d = np.full((n_queries, k), np.inf)
    if len(rows) == 0:
        return out_ids, out_d
    order = np.lexsort((g, rows))
    rows, g, tau = rows[order], g[order], tau[order]
    counts = np.bincount(rows, minlength=n_queries)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    kth = np.minimum(counts, k) - 1
    has = counts > 0
    limit = np.full(n_queries, -np.inf)
    tau_max = np.zeros(n_queries)
    np.maximum.at(tau_max, rows, tau)
    limit[has] = g[start[has] + kth[has]] + 2 * tau_max[has]
    keep = g <= limit[rows]
    rows, sel = rows[keep], order[keep]
    e = exact(rows, sel)
    got = ids[sel]
    order = np.lexsort((got, e, rows))
    rows, got, e = rows[order], got[order], e[order]
    counts = np.bincount(rows, minlength=n_queries)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(len(rows)) - start[rows]
    first = rank < k
    out_ids[rows[first], rank[first]] = got[first]
    out_d[rows[first], rank[first]] = e[first]
    return out_ids, out_d


def block_topk(Xq, q_ids, Xr, r_ids, k, *, dtype=np.float32):
    """The k nearest rows of ``Xr`` for each row of ``Xq``, ranked by (exact distance, id).

    Parameters
    ----------
    Xq, Xr : ndarray (nq, d), (nr, d)
        Query and reference rows; distances are decided in their common float dtype.
    q_ids, r_ids : int ndarray
        Global ids of the rows. A reference row with the query's own id is never its neighbour.
    k : int
        Neighbours per query; rows with fewer candidates are padded with id -1, distance inf.
    dtype : float32 or float64
        Precision of the candidate-proposing product (float32 is about twice as fast).

    Returns
    -------
    ids : int64 (nq, k), sq_dist : (nq, k)
        Sorted by squared distance, ties by the smaller id.
    """
    rows, cols, g, tau = block_candidates(Xq, q_ids, Xr, r_ids, k, dtype=dtype)
    r_ids = np.asarray(r_ids, dtype=np.int64)
    return decide(k, Xq.shape[0], rows, r_ids[cols], g, tau,
                  lambda r, s: exact_sq_distances(Xq, r, Xr, cols[s]))


def merge_topk(k, ids, sq_dist):
    """The k best of several candidate lists per row (concatenated along axis 1), ranked by
    (distance, id); padding (id -1, inf) sorts last. Candidates must be distinct per row."""
    order = np.lexsort((ids, sq_dist), axis=1)[:, :k]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(sq_dist, order, axis=1)
