"""The proposals' selection compiled: each query's m smallest entries of its row of a block's
product, in one pass over the row, where the NumPy path (:func:`~elmscale.graph._select.
_proposals`) masks the whole product against a threshold, gathers what passes, packs keys
and partitions them (a dozen passes over the block's memory).

:func:`select_smallest` keeps, per row, its m smallest entries so far sorted by the key of
:func:`~elmscale.graph._select._order_keys` (a float32 value's bits above its column, so
equal values order by column and -0.0 before 0.0), and skips every entry above the m-th
value kept: after the first few dozen entries of a row almost every entry costs one
comparison. It selects exactly the entries the NumPy path selects; a row's own reference
(the query itself) counts as ``inf``, and only entries at most the row's limit enter.

The kernel is compiled as :func:`elmscale.utils._compiled.jit` says, with the NumPy path
beside it (``config_context(compiled=False)``).
"""

import numpy as np

from ..utils._compiled import jit


def _select_smallest(G, own_col, limit, m, cols, values):
    """Per row i of G (float32): into ``cols[i]`` and ``values[i]`` its m smallest entries
    at most ``limit[i]`` in increasing (value, column) order, the entry at ``own_col[i]``
    (-1: none) taken as ``inf``; padded with (-1, inf)."""
    nq, nr = G.shape
    bits = G.view(np.uint32)
    sign = np.uint32(0x80000000)
    inf_key = np.uint64(0xFF800000) << np.uint64(32)  # +inf's order bits, above column 0
    keys = np.empty(m, dtype=np.uint64)
    kept = np.empty(m, dtype=np.float32)
    for i in range(nq):
        n = 0
        threshold = limit[i]
        own = own_col[i]
        for j in range(nr):
            v = G[i, j]
            if not (v <= threshold):
                continue
            if j == own:
                v = np.float32(np.inf)
                if not (v <= threshold):
                    continue
                key = inf_key | np.uint64(j)
            else:
                u = bits[i, j]
                u = u ^ sign if u < sign else ~u  # non-negative: set the sign; else flip all
                key = (np.uint64(u) << np.uint64(32)) | np.uint64(j)
            if n < m:  # insertion into the sorted m (inline: a call costs a third more)
                p = n
                n += 1
            elif key < keys[m - 1]:
                p = m - 1
            else:
                continue
            while p > 0 and keys[p - 1] > key:
                keys[p] = keys[p - 1]
                kept[p] = kept[p - 1]
                p -= 1
            keys[p] = key
            kept[p] = v
            if n == m and kept[m - 1] < threshold:
                # an entry above the m-th value kept can no longer enter (an equal one can:
                # -0.0 orders before 0.0)
                threshold = kept[m - 1]
        for p in range(m):
            if p < n:
                cols[i, p] = np.int64(keys[p] & np.uint64(0xFFFFFFFF))
                values[i, p] = kept[p]
            else:
                cols[i, p] = -1
                values[i, p] = np.inf


_select_smallest = jit(_select_smallest)


def select_smallest(G, own_col, limit, m):
    """:func:`_select_smallest` of a float32 block G (C-contiguous rows), its rows' own
    columns (-1: none) and limits (``inf``: none): ``(cols, values)`` (nq, m), int64 and
    float64."""
    G = np.ascontiguousarray(G, dtype=np.float32)
    nq = G.shape[0]
    cols = np.empty((nq, m), dtype=np.int64)
    values = np.empty((nq, m), dtype=np.float64)
    _select_smallest(
        G,
        np.ascontiguousarray(own_col, dtype=np.int64),
        np.ascontiguousarray(limit, dtype=np.float32),
        int(m),
        cols,
        values,
    )
    return cols, values


def _insert(keys, held, key):
    """Put ``key`` into ``keys[:held]``, kept sorted and at most ``len(keys)`` long (the
    largest drops out; a key not below it is not taken). Returns the new length."""
    m = len(keys)
    if held < m:
        p = held
        held += 1
    elif key < keys[m - 1]:
        p = m - 1
    else:
        return held
    while p > 0 and keys[p - 1] > key:
        keys[p] = keys[p - 1]
        p -= 1
    keys[p] = key
    return held


def _close_candidates(g, tau_max, k, limit, cut, rows, pos):
    """:func:`~elmscale.graph._select.decide`'s first step, per query i of g (n, M, k + 1):
    ``limit[i]``, the k-th smallest of its blocks' first k proposals plus ``2 tau_max[i]``;
    ``cut[i, b]``, whether block b's (k + 1)-th proposal is within it; and, in row-major
    order, the (query, flat position into M * (k + 1)) of every proposal among a block's
    first k within the limit whose block is not cut. ``inf`` proposals (padding) are
    neither. Returns how many it wrote."""
    n, M, _ = g.shape
    smallest = np.empty(k, dtype=np.float64)
    found = 0
    for i in range(n):
        held = 0
        for b in range(M):
            for s in range(k):
                held = _insert(smallest, held, g[i, b, s])
        lim = smallest[k - 1] + 2 * tau_max[i]
        limit[i] = lim
        for b in range(M):
            cut[i, b] = g[i, b, k] <= lim and g[i, b, k] < np.inf
            if cut[i, b]:
                continue
            for s in range(k):
                if g[i, b, s] <= lim and g[i, b, s] < np.inf:
                    rows[found] = i
                    pos[found] = b * (k + 1) + s
                    found += 1
    return found


def _before(d1, id1, d2, id2):
    """Whether (distance d1, id id1) ranks before (d2, id2); id -1 (padding) ranks last."""
    if d1 != d2:
        return d1 < d2
    big = np.iinfo(np.int64).max
    return (id1 if id1 >= 0 else big) < (id2 if id2 >= 0 else big)


def _sift_in(out_d, out_ids, out_pay, r, p, d, j, x):
    """Into row r's entries sorted by (distance, id), the entry (d, j) carrying ``x`` beside
    it in ``out_pay``, at slot p or before: the entries it ranks before move one slot on."""
    while p > 0 and _before(d, j, out_d[r, p - 1], out_ids[r, p - 1]):
        out_d[r, p] = out_d[r, p - 1]
        out_ids[r, p] = out_ids[r, p - 1]
        out_pay[r, p] = out_pay[r, p - 1]
        p -= 1
    out_d[r, p] = d
    out_ids[r, p] = j
    out_pay[r, p] = x


def _topk_of_pairs(rows, ids, sq_dist, out_ids, out_d):
    """Per row r, into ``out_ids[r]`` and ``out_d[r]`` (k columns, filled with (-1, inf)),
    the k best triples (r, id, squared distance) by (distance, id), in that order."""
    k = out_ids.shape[1]
    held = np.zeros(out_ids.shape[0], dtype=np.int64)
    for t in range(len(rows)):
        r, d, j = rows[t], sq_dist[t], ids[t]
        if held[r] < k:
            p = held[r]
            held[r] += 1
        elif _before(d, j, out_d[r, k - 1], out_ids[r, k - 1]):
            p = k - 1
        else:
            continue
        _sift_in(out_d, out_ids, out_ids, r, p, d, j, j)  # nothing carried but the id


def _fold_into(out_pos, out_ids, out_d, q, pos, ids, sq_dist):
    """Into each row ``q[i]``'s k best (``out_*``, sorted by (distance, id), padded with
    (-1, -1, inf)) the entries of its list ``(pos[i], ids[i], sq_dist[i])`` (any order; id
    -1 padding skipped) that rank before its k-th, kept sorted. A list's candidates must not
    already be among the row's best."""
    k = out_ids.shape[1]
    for i in range(len(q)):
        r = q[i]
        for s in range(ids.shape[1]):
            j, d = ids[i, s], sq_dist[i, s]
            if j >= 0 and _before(d, j, out_d[r, k - 1], out_ids[r, k - 1]):
                _sift_in(out_d, out_ids, out_pos, r, k - 1, d, j, pos[i, s])


_insert, _close_candidates, _before, _sift_in, _topk_of_pairs, _fold_into = (
    jit(_insert),
    jit(_close_candidates),
    jit(_before),
    jit(_sift_in),
    jit(_topk_of_pairs),
    jit(_fold_into),
)


def close_candidates(k, g, tau_max):
    """``(limit, cut, rows, flat_pos)`` of :func:`_close_candidates` for proposals ``g``
    (n, M, k + 1) and each query's largest bound ``tau_max`` (n)."""
    n, M, _ = g.shape
    g = np.ascontiguousarray(g, dtype=np.float64)
    limit = np.empty(n)
    cut = np.empty((n, M), dtype=np.bool_)
    rows = np.empty(n * M * k, dtype=np.int64)
    pos = np.empty(n * M * k, dtype=np.int64)
    found = _close_candidates(
        g, np.ascontiguousarray(tau_max, dtype=np.float64), int(k), limit, cut, rows, pos
    )
    return limit, cut, rows[:found], pos[:found]


def topk_of_pairs(k, n_rows, rows, ids, sq_dist):
    """:func:`~elmscale.graph._select.topk_of_pairs` compiled: per row the k best of flat
    (row, id, squared distance) triples by (distance, id), padded with (-1, inf)."""
    out_ids = np.full((n_rows, k), -1, dtype=np.int64)
    out_d = np.full((n_rows, k), np.inf)
    _topk_of_pairs(
        np.ascontiguousarray(rows, dtype=np.int64),
        np.ascontiguousarray(ids, dtype=np.int64),
        np.ascontiguousarray(sq_dist, dtype=np.float64),
        out_ids,
        out_d,
    )
    return out_ids, out_d


def fold_lists(best, pieces):
    """Each row's k best lists ``best`` (positions, ids, squared distances; (n, k), sorted
    by (distance, id), padded with (-1, -1, inf)) with the lists ``pieces`` (``(rows,
    positions, ids, squared distances)``, each (m, w)) folded in, as new arrays: per row the
    k best of its lists by (distance, id), as
    :func:`~elmscale.graph._cell_search._merge_lists` ranks them. The pieces' candidates
    must be distinct from each other and from ``best``'s."""
    types = (np.int64, np.int64, np.float64)
    out = tuple(np.array(b, dtype=t) for b, t in zip(best, types, strict=True))
    for q, pos, ids, sq_dist in pieces:
        if len(q):
            _fold_into(
                *out,
                np.ascontiguousarray(q, dtype=np.int64),
                np.ascontiguousarray(pos, dtype=np.int64).reshape(len(q), -1),
                np.ascontiguousarray(ids, dtype=np.int64).reshape(len(q), -1),
                np.ascontiguousarray(sq_dist, dtype=np.float64).reshape(len(q), -1),
            )
    return out
