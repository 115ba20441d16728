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

import functools
import threading

import numpy as np

from ..utils._compiled import compiled_available
from . import _select_compiled

#: values per block of the product: bounds a block's temporaries (the product, its mask) and,
#: against few reference rows, spreads the per-block bookkeeping over many query rows
BLOCK_VALUES = 1 << 20


def _query_rows(n_reference):
    """Query rows per block of the product against ``n_reference`` rows."""
    return max(1, BLOCK_VALUES // max(n_reference, 1))


#: columns whose k-th smallest value gives each row's first, cheap threshold
SUBSAMPLE_COLUMNS = 256


#: candidate pairs per block of :func:`exact_sq_distances` (keeps its buffers in cache) ...
PAIR_BLOCK = 4096
#: ... and at most this many values per buffer, so that they do not grow with d beyond 1,024
#: columns (with fewer pairs per block numpy's per-call overhead dominates the exact
#: distances of wide rows)
PAIR_VALUES = PAIR_BLOCK * 1024


def pair_rows(d):
    """Pairs per block of :func:`exact_sq_distances` for rows of d values."""
    return max(1, min(PAIR_BLOCK, PAIR_VALUES // max(d, 1)))


def exact_sq_distances(A, ia, B, ib, block=None):
    """``||A[ia[j]] - B[ib[j]]||^2`` for each pair j, row by row (the value depends on the two
    rows alone, not on the batch), in the inputs' common float dtype; ``block`` pairs at a
    time (default :func:`pair_rows`)."""
    dt = np.result_type(A.dtype, B.dtype, np.float32)
    n = len(ia)
    out = np.empty(n, dtype=dt)
    block = min(block or pair_rows(A.shape[1]), max(n, 1))
    a = np.empty((block, A.shape[1]), dtype=A.dtype)
    b = np.empty((block, B.shape[1]), dtype=B.dtype)
    diff = np.empty((block, A.shape[1]), dtype=dt)
    for lo in range(0, n, block):
        m = min(block, n - lo)
        np.take(A, ia[lo : lo + m], axis=0, out=a[:m], mode="clip")  # "raise" would buffer
        np.take(B, ib[lo : lo + m], axis=0, out=b[:m], mode="clip")
        np.subtract(a[:m], b[:m], out=diff[:m])
        out[lo : lo + m] = np.einsum("ij,ij->i", diff[:m], diff[:m])
    return out


#: rows at least this wide have each unordered pair's distance computed once by
#: :func:`pair_sq_distances`; finding the mirrored pairs (a sort) costs more than it saves
#: in fewer dimensions
MIRRORED_MIN_FEATURES = 256


def pair_sq_distances(X, p, q, block=None):
    """:func:`exact_sq_distances` of the pairs ``(X[p[j]], X[q[j]])``, for rows of at least
    :data:`MIRRORED_MIN_FEATURES` values each unordered pair computed once: where ``(p, q)``
    and ``(q, p)`` are both asked for (the local join proposes many pairs from both ends),
    the two values are the same bit for bit (the same squared differences, summed in the
    same order), so one is copied."""
    if X.shape[1] < MIRRORED_MIN_FEATURES:
        return exact_sq_distances(X, p, X, q, block)
    n = X.shape[0]
    lo, hi = np.minimum(p, q), np.maximum(p, q)
    pairs, at = np.unique(lo * n + hi, return_inverse=True)
    a, b = np.divmod(pairs, n)
    return exact_sq_distances(X, a, X, b, block)[at]


def _error_bound(a_sq, b_sq_max, d, dtype):
    """An upper bound on |product-based - recomputed| squared distance for these norms.

    Rounding the centred rows to ``dtype``, the (d + 2)-term products and the recomputation
    each contribute at most about ``d * u * (|a|^2 + |b|^2)``; the factor 4 is headroom, and
    the cost of a loose bound is only a few more recomputed candidates.
    """
    u = np.finfo(dtype).eps / 2
    return 4.0 * (d + 4) * u * (a_sq + b_sq_max)


class Operands:
    """Rows prepared once for many products: centred on ``center`` (distances are translation
    invariant, and small norms keep the product's rounding small), cast to ``dtype`` and
    augmented so that one product gives squared distances:
    ``[a, 1, |a|^2] @ [-2 b, |b|^2, 1] = |a - b|^2``. ``rows`` keeps the centred rows
    themselves, for a kernel that computes the distances its own way. The augmented forms
    are built on first use: queries need only ``query``, references only ``reference``."""

    def __init__(self, X, center, dtype):
        work = np.result_type(X.dtype, np.float32)
        A = np.subtract(X, center, dtype=work).astype(dtype, copy=False)
        self.rows = A
        self.sq = np.einsum("ij,ij->i", A, A)
        self.d = A.shape[1]
        self.dtype = dtype

    @functools.cached_property
    def query(self):
        """``[a, 1, |a|^2]`` per row."""
        out = np.empty((self.rows.shape[0], self.d + 2), dtype=self.dtype)
        out[:, :-2] = self.rows
        out[:, -2] = 1
        out[:, -1] = self.sq
        return out

    @functools.cached_property
    def reference(self):
        """``[-2 b, |b|^2, 1]`` per row."""
        out = np.empty((self.rows.shape[0], self.d + 2), dtype=self.dtype)
        np.multiply(self.rows, -2, out=out[:, :-2])
        out[:, -2] = self.sq
        out[:, -1] = 1
        return out

    def take(self, rows):
        """These rows (an index array or a slice): an object with the same attributes, each
        sliced when first read (a kernel reads only the forms it uses)."""
        return _Taken(self, rows)

    def error_bound(self, rows=None, ref_sq_max=None):
        """Per query row: the bound ``tau`` against references of norm up to ``ref_sq_max``
        (default: the largest of these rows, for queries and references alike)."""
        sq = self.sq if rows is None else self.sq[rows]
        top = float(self.sq.max()) if ref_sq_max is None else ref_sq_max
        return _error_bound(sq.astype(np.float64), top, self.d, self.dtype)


def proposals(Q, R, q_ids, r_ids, m, bound=None, compiled=False):
    """The m smallest proposed squared distances per query row to the reference rows.

    ``Q`` and ``R`` are augmented rows (:class:`Operands`). Without ``bound`` each row gets
    its m smallest; with a per-row ``bound`` only entries at or below it are proposed (fewer
    than m when fewer are), which skips the threshold search. A reference with the query's
    own id is never proposed. Returns ``(cols, g)`` (nq, m), padded with (-1, inf); the
    largest of a row's m proposals is in its last column (the others in no particular
    order), which is where :func:`decide` looks for a cut tie. ``compiled``: float32 rows
    select by :func:`~elmscale.graph._select_compiled.select_smallest` (the same proposals,
    in increasing order).
    """
    nq, nr = Q.shape[0], R.shape[0]
    cols = np.full((nq, m), -1, dtype=np.int64)
    g = np.full((nq, m), np.inf)
    if nq == 0 or nr == 0:
        return cols, g
    sorted_ids = np.sort(r_ids)
    r_order = np.argsort(r_ids, kind="stable")
    step = _query_rows(nr)
    for lo in range(0, nq, step):
        hi = min(lo + step, nq)
        c, gg = _proposals(
            Q[lo:hi],
            R,
            q_ids[lo:hi],
            sorted_ids,
            r_order,
            m,
            None if bound is None else bound[lo:hi],
            compiled,
        )
        cols[lo:hi, : c.shape[1]] = c
        g[lo:hi, : c.shape[1]] = gg
    return cols, g


class _Taken:
    """Some rows of an :class:`Operands` (see :meth:`Operands.take`)."""

    def __init__(self, operands, rows):
        self._of, self._sel = operands, rows
        self.d, self.dtype = operands.d, operands.dtype

    def __getattr__(self, name):  # rows, sq, query, reference: sliced once, on first use
        if name not in ("rows", "sq", "query", "reference"):
            raise AttributeError(name)
        value = getattr(self._of, name)[self._sel]
        setattr(self, name, value)
        return value


def propose(Q, R, q_ids, r_ids, m, bound=None):
    """The built-in in-cell kernel: :func:`proposals` from the augmented rows of the
    :class:`Operands` ``Q`` and ``R`` (the protocol is :class:`~elmscale.graph.CellSearch`'s
    ``kernel``)."""
    return proposals(Q.query, R.reference, q_ids, r_ids, m, bound)


def propose_compiled(Q, R, q_ids, r_ids, m, bound=None):
    """:func:`propose` with its selection compiled
    (:mod:`elmscale.graph._select_compiled`): the same proposals."""
    return proposals(Q.query, R.reference, q_ids, r_ids, m, bound, compiled=True)


_workspace = threading.local()


def _buffer(name, shape, dtype):
    """A reusable per-thread array for the block loop's large temporaries. Fresh allocations
    of this size are slow on dask workers: the nanny sets ``MALLOC_TRIM_THRESHOLD_``, which
    switches off glibc's adaptive mmap threshold, so every large array is mapped and faulted
    in anew."""
    size = int(np.prod(shape))
    key = (name, np.dtype(dtype).str)
    buf = getattr(_workspace, "buffers", {}).get(key)
    if buf is None or buf.size < size:
        buf = np.empty(size, dtype=dtype)
        _workspace.__dict__.setdefault("buffers", {})[key] = buf
    return buf[:size].reshape(shape)


def _proposals(Q, R, q_ids, sorted_ids, r_order, m, bound, compiled=False):
    nq, nr = Q.shape[0], R.shape[0]
    G = np.matmul(Q, R.T, out=_buffer("G", (nq, nr), Q.dtype))
    pos = np.minimum(np.searchsorted(sorted_ids, q_ids), nr - 1)
    own = sorted_ids[pos] == q_ids
    if compiled_available(compiled) and G.dtype == np.float32 and (bound is not None or nr > m):
        own_col = np.where(own, r_order[pos], -1)
        limit = np.full(nq, np.inf, dtype=np.float32) if bound is None else bound
        return _select_compiled.select_smallest(G, own_col, limit, m)
    G[np.flatnonzero(own), r_order[pos[own]]] = np.inf
    if bound is None and nr <= m:
        cols = np.argsort(G, axis=1, kind="stable")
        return cols, np.take_along_axis(G, cols, axis=1).astype(np.float64)
    if bound is None:
        # a first threshold from a subsample of columns: its m-th smallest is >= the row's
        # m-th smallest overall, so every row keeps at least m entries below it (the
        # subsample holds at most one inf, the row itself)
        s = min(nr, max(SUBSAMPLE_COLUMNS, m + 1))
        bound = np.partition(G[:, :s], m - 1, axis=1)[:, m - 1]
    below = np.less_equal(G, bound.astype(G.dtype)[:, None], out=_buffer("mask", G.shape, bool))
    flat = np.flatnonzero(below)
    rows = flat // nr  # row-major: grouped by row
    cols, values = flat - rows * nr, G.ravel()[flat]
    counts = np.bincount(rows, minlength=nq)
    width = max(int(counts.max(initial=0)), m)
    slot = (rows, np.arange(len(rows)) - (np.cumsum(counts) - counts)[rows])
    if G.dtype == np.float32:  # one partition of packed (value, column) keys
        keys = np.full((nq, width), _PAD, dtype=np.uint64)
        keys[slot] = _order_keys(values, cols)
        keys.partition(m - 1, axis=1)  # also at width m: the m-th smallest goes last
        return _unpack_keys(keys[:, :m])
    padded_g = np.full((nq, width), np.inf, dtype=G.dtype)
    padded_c = np.full((nq, width), -1, dtype=np.int64)
    padded_g[slot], padded_c[slot] = values, cols
    if width >= m:
        top = np.argpartition(padded_g, m - 1, axis=1)[:, :m]
        padded_c = np.take_along_axis(padded_c, top, axis=1)
        padded_g = np.take_along_axis(padded_g, top, axis=1)
    return padded_c[:, :m], padded_g[:, :m].astype(np.float64)


#: the key of an empty slot: after every real key
_PAD = np.iinfo(np.uint64).max
_LOW = np.uint64(0xFFFFFFFF)
_SIGN = np.uint32(0x80000000)


def _order_keys(values, cols):
    """uint64 keys ordered as (float32 value, column < 2^32): the value's bits, made to sort as
    unsigned integers (flip every bit of a negative, the sign bit of a positive), above the
    column, so that one integer partition selects values and their columns at once."""
    u = values.view(np.uint32)
    u = u ^ ((np.uint32(0) - (u >> np.uint32(31))) | _SIGN)
    return (u.astype(np.uint64) << np.uint64(32)) | cols.astype(np.uint64)


def _unpack_keys(keys):
    """``(cols, values)`` of :func:`_order_keys`' keys, (-1, inf) for padding."""
    pad = keys == _PAD
    cols = (keys & _LOW).astype(np.int64)
    u = (keys >> np.uint64(32)).astype(np.uint32)
    u = np.where(u & _SIGN, u ^ _SIGN, ~u)
    values = u.view(np.float32).astype(np.float64)
    cols[pad] = -1
    values[pad] = np.inf
    return cols, values


def _sort_bits(key):
    """``(uint64 values, bits)`` ordered as ``key``: a bool's one bit, a non-negative int's
    significant bits, a non-negative float's bit pattern (without the sign), which orders
    as the values do (``key + 0`` makes -0 the same as +0)."""
    if key.dtype == bool:
        return key.astype(np.uint64), 1
    if key.dtype.kind == "f":
        unsigned = {4: np.uint32, 8: np.uint64}[key.dtype.itemsize]
        return (key + key.dtype.type(0)).view(unsigned).astype(np.uint64), 8 * key.itemsize - 1
    values = key.astype(np.uint64)
    return values, int(values.max(initial=0)).bit_length()


def lexorder(*keys):
    """The indices that sort entries by ``keys[0]``, then ``keys[1]``, ...: the order of
    ``np.lexsort(keys[::-1])`` up to entries equal in every key. Keys are bools,
    non-negative ints or non-negative floats of one length.

    ``np.lexsort`` sorts once per key, each a comparison sort; here the leading keys' bits
    are packed into one uint64 (a key that no longer fits gives its top bits) and sorted
    once as integers. Only entries whose packed keys tie while later bits remain are
    ordered again, by ``np.lexsort`` on those entries alone.
    """
    n = len(keys[0])
    packed, free, exact = np.zeros(n, dtype=np.uint64), 64, True
    for key in keys:
        values, bits = _sort_bits(np.asarray(key))
        take = min(bits, free)
        if take:
            packed <<= np.uint64(take)
            packed |= values >> np.uint64(bits - take)
            free -= take
        if take < bits:
            exact = False
            break
    order = np.argsort(packed)
    if exact or n < 2:
        return order
    # runs of equal packed keys are contiguous: sort each again by the full keys
    s = packed[order]
    same = s[1:] == s[:-1]
    tie = np.zeros(n, dtype=bool)
    tie[1:] = same
    tie[:-1] |= same
    at = np.flatnonzero(tie)
    if len(at):
        sub = order[at]
        order[at] = sub[np.lexsort([np.asarray(k)[sub] for k in keys[::-1]] + [s[at]])]
    return order


def within_limits(Q, R, q_ids, r_ids, limits):
    """Pairs (query row, reference row) whose proposed squared distance is at most the
    query's limit, one product per block of queries; a reference with the query's own id
    is left out. What :func:`decide`'s ``fallback`` needs: every row that can tie across a
    block's cut, and no more."""
    found = []
    step = _query_rows(R.shape[0])
    for lo in range(0, Q.shape[0], step):
        hi = min(lo + step, Q.shape[0])
        G = np.matmul(Q[lo:hi], R.T, out=_buffer("G", (hi - lo, R.shape[0]), Q.dtype))
        keep = np.less_equal(G, limits[lo:hi].astype(G.dtype)[:, None])
        keep &= r_ids[None, :] != q_ids[lo:hi, None]
        qi, ci = np.nonzero(keep)
        found.append((qi + lo, ci))
    return tuple(np.concatenate(f) for f in zip(*found, strict=True))


def proposal_bound(within, tau):
    """The product below which a row may lie within squared distance ``within`` of a query
    whose product has error bound ``tau``: a product is within tau of the recomputed
    distance, so ``within + tau``; 2 tau leaves headroom for the bound's rounding to
    float32."""
    return within + 2 * tau


def decide(k, g, ids, tau, exact, fallback, compiled=False):
    """The k nearest of each query's proposals, ranked by (recomputed distance, id).

    ``g`` and ``ids`` (n, M, k + 1) hold each query's proposals from M reference blocks
    (:func:`proposals`; ids global, -1 for padding), ``tau`` (n, M) their bounds.
    Rows whose recomputed distance can reach the query's k-th nearest all have a proposed
    distance within ``2 tau`` of the k-th smallest proposal; those among each block's first
    k proposals are recomputed with ``exact(rows, flat_positions)`` (positions into the
    (n, M * (k + 1)) arrays). Where a block's (k + 1)-th proposal is within that margin too,
    that block may hold more such rows than it proposed (a tie across the cut):
    ``fallback(rows, blocks, limits)`` then returns, for each such (query, block) pair, the
    block's rows whose proposed distance is at most the query's limit, as flat
    ``(query, id, squared distance)`` triples; the query's other blocks keep their proposals.
    A proposal of ``inf`` is padding (a block that proposed all it had within a bound, or
    a query's own row): never recomputed, never a cut, also where fewer than k proposals
    make the limit infinite.
    Returns ``(ids, sq_dist)`` (n, k), padded with (-1, inf). ``compiled``: the
    bookkeeping around ``exact`` and ``fallback`` (limits, masks, the final ranking) by the
    kernels of :mod:`elmscale.graph._select_compiled` (the same result).
    """
    n, M, _ = g.shape
    if compiled_available(compiled):
        limit, cut, rows, flat_pos = _select_compiled.close_candidates(k, g, tau.max(axis=1))
    else:
        first = g[:, :, :k].reshape(n, M * k)
        kth = np.partition(first, k - 1, axis=1)[:, k - 1] if M * k > k else first.max(axis=1)
        limit = kth + 2 * tau.max(axis=1)
        cut = (g[:, :, k] <= limit[:, None]) & (g[:, :, k] < np.inf)
        close = (g[:, :, :k] <= limit[:, None, None]) & (g[:, :, :k] < np.inf) & ~cut[:, :, None]
        rows, slot = np.nonzero(close.reshape(n, M * k))
        flat_pos = (slot // k) * (k + 1) + slot % k
    flat_ids = ids.reshape(n, M * (k + 1))
    triples = [(rows, flat_ids[rows, flat_pos], exact(rows, flat_pos))]
    cut_rows, cut_blocks = np.nonzero(cut)
    if len(cut_rows):
        triples.append(fallback(cut_rows, cut_blocks, limit[cut_rows]))
    rows, found_ids, sq_dist = (np.concatenate(t) for t in zip(*triples, strict=True))
    if compiled_available(compiled):
        return _select_compiled.topk_of_pairs(k, n, rows, found_ids, sq_dist)
    return topk_of_pairs(k, n, rows, found_ids, sq_dist)


def topk_of_pairs(k, n_rows, rows, ids, sq_dist):
    """Per row, the k best of flat (row, id, squared distance) triples, by (distance, id)."""
    counts = np.bincount(rows, minlength=n_rows)
    grouped = len(rows) < 2 or bool(np.all(rows[1:] >= rows[:-1]))
    order = np.arange(len(rows)) if grouped else np.argsort(rows, kind="stable")
    rank = np.arange(len(rows)) - (np.cumsum(counts) - counts)[rows[order]]
    width = max(int(counts.max(initial=0)), k)
    I = np.full((n_rows, width), -1, dtype=np.int64)
    E = np.full((n_rows, width), np.inf)
    I[rows[order], rank] = ids[order]
    E[rows[order], rank] = sq_dist[order]
    return topk_exact(k, I, E)


def topk_exact(k, ids, sq_dist):
    """The k best per row of candidate lists ranked by (distance, id); -1/inf pad."""
    key = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    order = np.lexsort((key, sq_dist), axis=1)[:, :k]
    out_ids = np.take_along_axis(ids, order, axis=1)
    out_d = np.take_along_axis(sq_dist, order, axis=1)
    if out_ids.shape[1] < k:
        pad = k - out_ids.shape[1]
        out_ids = np.pad(out_ids, ((0, 0), (0, pad)), constant_values=-1)
        out_d = np.pad(out_d, ((0, 0), (0, pad)), constant_values=np.inf)
    return out_ids, out_d


def block_topk(Xq, q_ids, Xr, r_ids, k, *, dtype=np.float32, compiled=False, within=None):
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
    compiled : bool
        Select the float32 proposals by the compiled kernel (:func:`proposals`; the same
        result).
    within : ndarray (nq,), optional
        Per query, the squared distance beyond which a reference row is not wanted (the
        k-th nearest found elsewhere): only rows whose product says they may lie within it
        are proposed, so a query may get fewer than k (padded). Rows within it are all
        ranked as without it.

    Returns
    -------
    ids : int64 (nq, k), sq_dist : (nq, k)
        Sorted by squared distance, ties by the smaller id.
    """
    q_ids = np.asarray(q_ids, dtype=np.int64)
    r_ids = np.asarray(r_ids, dtype=np.int64)
    center = Xr.mean(axis=0, dtype=np.result_type(Xr.dtype, np.float32))
    Q, R = Operands(Xq, center, dtype), Operands(Xr, center, dtype)
    tau = Q.error_bound(ref_sq_max=float(R.sq.max(initial=0)))
    bound = None if within is None else proposal_bound(within, tau)
    cols, g = proposals(Q.query, R.reference, q_ids, r_ids, k + 1, bound, compiled)
    ids = np.where(cols >= 0, r_ids[cols], -1)
    flat_cols = cols.ravel()

    def exact(rows, pos):
        return exact_sq_distances(Xq, rows, Xr, flat_cols[rows * (k + 1) + pos])

    def fallback(rows, blocks, limits):
        qi, ci = within_limits(Q.query[rows], R.reference, q_ids[rows], r_ids, limits)
        return rows[qi], r_ids[ci], exact_sq_distances(Xq, rows[qi], Xr, ci)

    return decide(k, g[:, None, :], ids[:, None, :], tau[:, None], exact, fallback, compiled)


def merge_topk(k, ids, sq_dist):
    """The k best of several candidate lists per row (concatenated along axis 1), ranked by
    (distance, id); padding (id -1, inf) sorts last. Candidates must be distinct per row."""
    return topk_exact(k, ids, sq_dist)
