"""Compiled loops of NN-descent's local join (:mod:`elmscale.graph._local_join`): each step's
work is a loop over rows, each row touching a few dozen entries, which NumPy can only express
as sorts of every entry of a chunk at once (pynndescent compiles the same loops with numba).

Each kernel gives exactly what its NumPy path gives:

- :func:`hub_sets` -- step 1: each row's hub set (its list's entries and the rows that
  list it, new ones first, chosen by priority), per row instead of by sorting all entries,
  a long one (a row many lists name) ordered lazily until its set is chosen;
- :func:`join_pairs` -- step 3's filter: the pairs of a hub set whose squared distance from
  the float32 product of their centred rows lies within the first row's limit, per hub set
  (one small product each) instead of in blocks of hub sets with masks as large as their
  products; the exact distances of the pairs it keeps are computed as on the NumPy path, and
  both filters keep every pair within its threshold, so the join's output is the same;
- :func:`merge_lists` -- step 4: each row's best of its list and what it received.

The kernels are compiled by :func:`elmscale.utils._compiled.jit`, each beside its NumPy path.
"""

import numpy as np

from ..utils._compiled import jit

#: splitmix64's multipliers, for :func:`priority`
_MIX = tuple(np.uint64(m) for m in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def priority(a, b, salt):
    """A pseudo-random uint64 per pair of ordered positions (symmetric in a and b) and
    ``salt`` (seed and round): it picks a row's candidates, so the same ones on any
    chunking. Written for arrays (the NumPy path, :mod:`elmscale.graph._local_join`) and
    for scalars alike (compiled as ``_priority`` for :func:`_hub_sets`)."""
    x = np.uint64(np.minimum(a, b)) * _MIX[0]
    x ^= (np.uint64(np.maximum(a, b)) + np.uint64(salt)) * _MIX[1]
    x ^= x >> np.uint64(31)
    x *= _MIX[2]
    return x ^ (x >> np.uint64(29))


_priority = priority


def _before(a1, a2, i, j):
    """Whether entry i orders before entry j by (a1, a2)."""
    return a1[i] < a1[j] or (a1[i] == a1[j] and a2[i] < a2[j])


def _sift(a1, a2, heap, root, end):
    """Restore the min-heap order by (a1, a2) of ``heap[:end]`` below ``root``."""
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and _before(a1, a2, heap[child + 1], heap[child]):
            child += 1
        if not _before(a1, a2, heap[child], heap[root]):
            return
        heap[root], heap[child] = heap[child], heap[root]
        root = child


def _heapify(a1, a2, heap, end):
    """Make ``heap[:end]`` a min-heap by (a1, a2) of its entries."""
    for root in range(end // 2 - 1, -1, -1):
        _sift(a1, a2, heap, root, end)


def _pop_min(a1, a2, heap, end):
    """The entry first by (a1, a2) of the min-heap ``heap[:end]``, removed from it (the heap
    then ends at ``end - 1``)."""
    top = heap[0]
    heap[0] = heap[end - 1]
    _sift(a1, a2, heap, 0, end - 1)
    return top


def _order_by(a1, a2):
    """The indices that sort the entries by (a1, a2) (heapsort: a few lines to compile,
    where numba's library sorts take seconds per key type)."""
    n = len(a1)
    heap = np.arange(n)
    _heapify(a1, a2, heap, n)
    order = np.empty(n, dtype=np.int64)
    for j in range(n):
        order[j] = _pop_min(a1, a2, heap, n - j)
    return order


def _by_hub(n, lo, pos, target):
    """Where each hub's entries start in a flat array (forward entries, then reverse ones)."""
    counts = np.zeros(n + 1, dtype=np.int64)
    for r in range(n):
        for c in range(pos.shape[1]):
            if pos[r, c] >= 0:
                counts[r + 1] += 1
    for e in range(len(target)):
        counts[target[e] - lo + 1] += 1
    return np.cumsum(counts)


def _hub_entries(lo, pos, new, target, source, flag, start):
    """Each hub's entries ``(member, is_new)``, grouped as ``start`` says."""
    n = pos.shape[0]
    member = np.empty(start[n], dtype=np.int64)
    is_new = np.empty(start[n], dtype=np.bool_)
    fill = start[:n].copy()
    for r in range(n):
        for c in range(pos.shape[1]):
            if pos[r, c] >= 0:
                member[fill[r]], is_new[fill[r]] = pos[r, c], new[r, c]
                fill[r] += 1
    for e in range(len(target)):
        h = target[e] - lo
        member[fill[h]], is_new[fill[h]] = source[e], flag[e]
        fill[h] += 1
    return member, is_new


#: entries up to which :func:`_sort_by` sorts by insertion, and :func:`_hub_sets` orders a
#: hub in full rather than lazily from a heap
INSERTION_MAX = 64


def _sort_by(a1, a2, idx, key, n):
    """Sort ``idx[:n]`` in place by (a1, a2) of its entries (``key``: scratch of a1's type):
    insertion on the keys held beside the indices for the few dozen entries of a typical hub,
    heapsort (:func:`_order_by`) beyond."""
    if n > INSERTION_MAX:
        idx[:n] = idx[:n][_order_by(a1[idx[:n]], a2[idx[:n]])]
        return
    for i in range(n):
        key[i] = a1[idx[i]]
    for i in range(1, n):
        e, v = idx[i], key[i]
        j = i - 1
        while j >= 0 and (v < key[j] or (v == key[j] and a2[e] < a2[idx[j]])):
            idx[j + 1], key[j + 1] = idx[j], key[j]
            j -= 1
        idx[j + 1], key[j + 1] = e, v


def _hub_sets(max_candidates, salt, lo, pos, new, target, source, flag):
    n, m = pos.shape
    start = _by_hub(n, lo, pos, target)
    member, is_new = _hub_entries(lo, pos, new, target, source, flag, start)
    kept = np.empty((n, 2 * max_candidates), dtype=np.int64)
    n_new = np.zeros(n, dtype=np.int64)
    n_old = np.zeros(n, dtype=np.int64)
    old = np.empty(max_candidates, dtype=np.int64)
    used = np.zeros((n, m), dtype=np.bool_)
    longest = max(int((start[1:] - start[:-1]).max()) if n else 0, 1)
    prio = np.empty(longest, dtype=np.uint64)
    idx = np.empty(longest, dtype=np.int64)
    popped = np.empty(longest, dtype=np.int64)
    key = np.empty(longest, dtype=np.uint64)
    column = np.empty(m, dtype=np.int64)
    for h in range(n):
        s0, size = start[h], start[h + 1] - start[h]
        seg = member[s0 : s0 + size]
        n_fwd = 0  # the forward entries come first, in column order
        for c in range(m):
            if pos[h, c] >= 0:
                column[n_fwd] = c
                n_fwd += 1
        new_left = 0  # copies not yet scanned, new and old
        for i in range(size):
            prio[i] = _priority(h + lo, seg[i], np.uint64(salt))
            idx[i] = i
            if is_new[s0 + i]:
                new_left += 1
        old_left = size - new_left
        # by (priority, member): the copies of a member are neighbours, the members in the
        # order they are chosen. A long hub (a popular row's reverse entries) is ordered
        # lazily, popped from a heap until both kinds are chosen: most of it is never needed
        lazy = size > INSERTION_MAX
        if lazy:
            _heapify(prio, seg, idx, size)
            order = popped
        else:
            _sort_by(prio, seg, idx, key, size)
            order = idx
        ready = 0 if lazy else size  # entries of ``order`` in place
        i = 0
        while i < size:
            j, fresh = i, False
            while j < size:
                if j == ready:
                    order[j] = _pop_min(prio, seg, idx, size - j)
                    ready += 1
                if seg[order[j]] != seg[order[i]]:
                    break
                fresh |= is_new[s0 + order[j]]
                if is_new[s0 + order[j]]:
                    new_left -= 1
                else:
                    old_left -= 1
                j += 1
            if fresh and n_new[h] < max_candidates:
                kept[h, n_new[h]] = seg[order[i]]
                n_new[h] += 1
                for t in range(i, j):  # its forward copies that were new are now used
                    if order[t] < n_fwd and new[h, column[order[t]]]:
                        used[h, column[order[t]]] = True
            elif not fresh and n_old[h] < max_candidates:
                old[n_old[h]] = seg[order[i]]
                n_old[h] += 1
            i = j
            # nothing further can be chosen: each kind is full or has no copy left
            if (n_new[h] == max_candidates or new_left == 0) and (
                n_old[h] == max_candidates or old_left == 0
            ):
                break
        kept[h, n_new[h] : n_new[h] + n_old[h]] = old[: n_old[h]]
    width = max(int((n_new + n_old).max()) if n else 0, 1)
    H = np.full((n, width), -1, dtype=np.int64)
    H_new = np.zeros((n, width), dtype=np.bool_)
    for h in range(n):
        H[h, : n_new[h] + n_old[h]] = kept[h, : n_new[h] + n_old[h]]
        H_new[h, : n_new[h]] = True
    return H, H_new, used


def _join_pairs(at, H_new, rows, sq, limit):
    """Table indices ``(p, q)`` packed as ``p * len(rows) + q``: per hub set (``at``, its
    members' table rows, -1 padded), the ordered pairs of distinct members, one of them new,
    whose squared distance ``sq[p] + sq[q] - 2 rows[p] . rows[q]`` (float32 product) is at
    most ``limit[p]``. Only the new members' rows enter a product (pairs of two old members
    were joined in an earlier round). Unsorted; a pair found in two hub sets appears twice."""
    n, s = at.shape
    T = rows.shape[0]
    out = np.empty(max(16 * n, 16), dtype=np.int64)
    found = 0
    members = np.empty(s, dtype=np.int64)
    for h in range(n):
        f = 0  # the new members first, then the old ones
        for i in range(s):
            if at[h, i] >= 0 and H_new[h, i]:
                members[f] = at[h, i]
                f += 1
        m = f
        for i in range(s):
            if at[h, i] >= 0 and not H_new[h, i]:
                members[m] = at[h, i]
                m += 1
        if m < 2 or f == 0:
            continue
        G = np.dot(rows[members[:f]], rows[members[:m]].T)
        if found + 2 * f * m > len(out):
            grown = np.empty(2 * len(out) + 2 * f * m, dtype=np.int64)
            grown[:found] = out[:found]
            out = grown
        for i in range(f):
            p = members[i]
            for j in range(i + 1, m):
                q = members[j]
                d = np.float64(sq[p]) + np.float64(sq[q]) - 2.0 * np.float64(G[i, j])
                if d <= limit[p]:
                    out[found] = p * T + q
                    found += 1
                if d <= limit[q]:
                    out[found] = q * T + p
                    found += 1
    return out[:found]


def _merge_lists(width, lo, pos, orig, sq_dist, own_new, target, cand, ids, e):
    n, m = pos.shape
    start = np.zeros(n + 1, dtype=np.int64)
    for t in range(len(target)):
        start[target[t] - lo + 1] += 1
    start = np.cumsum(start)
    fill = start[:n].copy()
    at = np.empty(len(target), dtype=np.int64)  # received triples grouped by row
    for t in range(len(target)):
        at[fill[target[t] - lo]] = t
        fill[target[t] - lo] += 1
    out_pos = np.full((n, width), -1, dtype=np.int64)
    out_ids = np.full((n, width), -1, dtype=np.int64)
    out_e = np.full((n, width), np.inf)
    out_new = np.zeros((n, width), dtype=np.bool_)
    cap = m + int((start[1:] - start[:-1]).max()) if n else m
    c_pos = np.empty(cap, dtype=np.int64)
    c_ids = np.empty(cap, dtype=np.int64)
    c_e = np.empty(cap, dtype=np.float64)
    c_new = np.empty(cap, dtype=np.bool_)
    order = np.empty(cap, dtype=np.int64)
    key = np.empty(cap, dtype=np.float64)
    for r in range(n):
        u = 0
        for c in range(m):  # the list's own entries first: they keep their flags
            if pos[r, c] >= 0:
                c_pos[u], c_ids[u], c_e[u], c_new[u] = (
                    pos[r, c],
                    orig[r, c],
                    sq_dist[r, c],
                    own_new[r, c],
                )
                u += 1
        for t in at[start[r] : start[r + 1]]:
            seen = False
            for i in range(u):
                if c_pos[i] == cand[t]:
                    seen = True
                    break
            if not seen:
                c_pos[u], c_ids[u], c_e[u], c_new[u] = cand[t], ids[t], e[t], True
                u += 1
        for i in range(u):
            order[i] = i
        _sort_by(c_e, c_ids, order, key, u)  # by (squared distance, original index)
        for k in range(min(width, u)):
            i = order[k]
            out_pos[r, k], out_ids[r, k], out_e[r, k], out_new[r, k] = (
                c_pos[i],
                c_ids[i],
                c_e[i],
                c_new[i],
            )
    return out_pos, out_ids, out_e, out_new


_priority, _before, _sift, _heapify = (jit(f) for f in (priority, _before, _sift, _heapify))
_pop_min, _order_by = jit(_pop_min), jit(_order_by)
_sort_by, _by_hub, _hub_entries = jit(_sort_by), jit(_by_hub), jit(_hub_entries)
_hub_sets, _join_pairs, _merge_lists = jit(_hub_sets), jit(_join_pairs), jit(_merge_lists)


def _typed(arrays, dtypes):
    """The arrays as contiguous arrays of these dtypes (one compiled signature each)."""
    return [np.ascontiguousarray(a, dtype=t) for a, t in zip(arrays, dtypes, strict=True)]


_I, _B, _F = np.int64, np.bool_, np.float64


def hub_sets(max_candidates, salt, lo, pos, new, target, source, flag):
    """:func:`elmscale.graph._local_join._hub_sets` from its forward entries (``pos``,
    ``new``) and reverse ones (``target``, ``source``, ``flag``): ``(H, H_new, used)``."""
    arrays = _typed((pos, new, target, source, flag), (_I, _B, _I, _I, _B))
    return _hub_sets(int(max_candidates), np.uint64(salt), int(lo), *arrays)


def join_pairs(at, H_new, rows, sq, limit):
    """The candidate pairs of a wave's hub sets (:func:`_join_pairs`), for float32 rows."""
    return _join_pairs(*_typed((at, H_new, rows, sq, limit), (_I, _B, np.float32, np.float32, _F)))


def merge_lists(width, lo, pos, orig, sq_dist, own_new, target, cand, ids, e):
    """:func:`elmscale.graph._local_join._merge` of the lists (``own_new``: the flags the
    list's own entries keep) and the received triples."""
    arrays = (pos, orig, sq_dist, own_new, target, cand, ids, e)
    return _merge_lists(int(width), int(lo), *_typed(arrays, (_I, _I, _F, _B, _I, _I, _I, _F)))
