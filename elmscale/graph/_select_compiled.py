"""The cell search's in-cell selection compiled: each query's m smallest proposals in one pass
over its row of the block's product, where the NumPy path (:func:`~elmscale.graph._select.
_proposals`) masks the product against a threshold, gathers what passes and partitions it.

:func:`select_keys` keeps, per row, a max-heap of the m smallest keys seen so far: the keys
of :func:`~elmscale.graph._select._order_keys` (a float32 value's bits above its column), so
it selects exactly the entries the NumPy path selects, ties between equal values broken by
the column alike. A row's own reference (the query itself) counts as ``inf``, and only
entries within the row's limit enter, as on the NumPy path.

The kernel is compiled as :func:`elmscale.utils._compiled.jit` says, with the NumPy path beside it.
"""

import numpy as np

from ..utils._compiled import jit

#: the key of an empty place: after every real key (:data:`~elmscale.graph._select._PAD`)
_PAD = np.uint64(np.iinfo(np.uint64).max)


def _sift_down(heap, end):
    """Restore the max-heap ``heap[:end]`` after its root was replaced."""
    root = 0
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and heap[child] < heap[child + 1]:
            child += 1
        if heap[root] >= heap[child]:
            return
        heap[root], heap[child] = heap[child], heap[root]
        root = child


def _select_keys(G, bits, own_col, limit, m):
    """Per row of G (float32; ``bits`` the same values as uint32), its m smallest keys
    ``(order bits of the value) << 32 | column`` in increasing order, padded with
    :data:`_PAD`; the entry at ``own_col`` (-1: none) counts as ``inf``; entries above the
    row's ``limit`` are left out."""
    nq, nr = G.shape
    out = np.empty((nq, m), dtype=np.uint64)
    inf_bits = np.uint64(0xFF800000)  # +inf's order bits: its bit pattern with the sign set
    sign = np.uint32(0x80000000)
    for i in range(nq):
        heap = out[i]
        heap[:] = _PAD
        lim = limit[i]
        own = own_col[i]
        for j in range(nr):
            if j == own:
                if not (np.inf <= lim):
                    continue
                key = (inf_bits << np.uint64(32)) | np.uint64(j)
            else:
                if not (G[i, j] <= lim):
                    continue
                u = bits[i, j]
                u = u ^ sign if u < sign else ~u  # non-negative: set the sign; negative: flip
                key = (np.uint64(u) << np.uint64(32)) | np.uint64(j)
            if key < heap[0]:
                heap[0] = key
                _sift_down(heap, m)
        for end in range(m - 1, 0, -1):  # the heap sorted in increasing order
            heap[0], heap[end] = heap[end], heap[0]
            _sift_down(heap, end)
    return out


_sift_down, _select_keys = jit(_sift_down), jit(_select_keys)


def select_keys(G, own_col, limit, m):
    """:func:`_select_keys` of a float32 product block G (C-contiguous rows), its rows' own
    columns (-1: none) and limits (float32; ``inf``: none)."""
    G = np.ascontiguousarray(G, dtype=np.float32)
    own_col = np.ascontiguousarray(own_col, dtype=np.int64)
    limit = np.ascontiguousarray(limit, dtype=np.float32)
    return _select_keys(G, G.view(np.uint32), own_col, limit, int(m))
