"""The local join's compiled kernels give exactly what its NumPy path gives."""

import dask
import dask.array as da
import numpy as np
import pytest

import elmscale
from elmscale.graph import CellSearch
from elmscale.graph._local_join import _hub_sets, _merge
from elmscale.utils._compiled import compiled_available

pytestmark = pytest.mark.skipif(
    not compiled_available(True), reason="numba (installed with pynndescent) is absent"
)


def _lists(rng, n, m, n_total):
    """Lists of m distinct entries (a few padded) per row, sorted by squared distance."""
    pos = np.array([rng.choice(n_total, m, replace=False) for _ in range(n)])
    sq = rng.random((n, m)).round(2)  # ties between distances, broken by the index
    pos[rng.random((n, m)) < 0.15] = -1
    sq[pos < 0] = np.inf
    order = np.lexsort((pos, sq), axis=1)
    return np.take_along_axis(pos, order, 1), np.take_along_axis(sq, order, 1)


@pytest.mark.parametrize("max_candidates", [1, 4, 30])
def test_hub_sets_equal_the_numpy_path(max_candidates):
    """Hub sets from forward entries and reverse ones that repeat them (a member new in one
    copy and old in another), rows nobody lists, a row many list, chunks that do not start
    at 0."""
    rng = np.random.default_rng(max_candidates)
    n, m, lo, n_total = 400, 10, 900, 2000
    pos, _ = _lists(rng, n, m, n_total)
    new = rng.random((n, m)) < 0.4
    rows, cols = np.nonzero(pos >= 0)
    copies = rng.random(len(rows)) < 0.3  # some forward entries come back reversed
    extra = 3000
    # and rows that many list (more entries than the kernel orders in full): mixed flags,
    # only new, only old, and a row listed many times by each of a few members
    crowded = np.repeat(lo + np.array([7, 8, 9, 10]), [150, 200, 120, 300])
    target = np.concatenate([rows[copies] + lo, rng.integers(lo, lo + n - 50, extra), crowded])
    source = np.concatenate(
        [pos[rows, cols][copies], rng.integers(0, n_total, extra + 470), rng.integers(0, 40, 300)]
    )
    flag = rng.random(len(target)) < 0.5
    flag[target == lo + 8], flag[target == lo + 9] = True, False
    pieces = [
        (target[:1000], source[:1000], flag[:1000]),
        (target[1000:], source[1000:], flag[1000:]),
    ]
    got = _hub_sets(max_candidates, 12345, lo, pos, new, pieces, compiled=True)
    want = _hub_sets(max_candidates, 12345, lo, pos, new, pieces, compiled=False)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_merge_equals_the_numpy_path():
    """Lists merged with received triples that repeat their own entries and each other,
    with tied distances, one row receiving many, for a chunk that does not start at 0."""
    rng = np.random.default_rng(1)
    n, m, lo, n_total = 300, 8, 500, 1500
    pos, sq = _lists(rng, n, m, n_total)
    orig = np.where(pos >= 0, 3 * pos + 1, -1)
    new = rng.random((n, m)) < 0.5
    used = rng.random((n, m)) < 0.3
    hubs = (None, None, used)
    k = 2500
    target = rng.integers(lo, lo + n, k)
    target[-120:] = lo + 5  # a row receiving more than the kernel sorts by insertion
    cand = rng.integers(0, n_total, k)
    # a received pair has the one distance of its two rows; some repeat the list's own
    own_rows, own_cols = np.nonzero(pos >= 0)
    pick = rng.choice(len(own_rows), 300, replace=False)
    target[:300], cand[:300] = own_rows[pick] + lo, pos[own_rows[pick], own_cols[pick]]
    table = rng.random((n, n_total)).round(2)
    table[own_rows, pos[own_rows, own_cols]] = sq[own_rows, own_cols]
    e = table[target - lo, cand]
    pieces = [(target[:1200], cand[:1200], 3 * cand[:1200] + 1, e[:1200])]
    pieces.append((target[1200:], cand[1200:], 3 * cand[1200:] + 1, e[1200:]))
    for width in (m, 2 * m):
        got = _merge(width, lo, pos, orig, sq, new, hubs, pieces, compiled=True)
        want = _merge(width, lo, pos, orig, sq, new, hubs, pieces, compiled=False)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_refined_graph_is_the_same_compiled_or_not(dtype):
    """Two rounds of the local join on data where the cells find few neighbours: the same
    lists and distances from the compiled kernels and the NumPy path, on two chunkings."""
    X = np.random.RandomState(0).randn(3000, 20).astype(dtype)
    graphs = []
    for compiled in (True, False):
        for chunks in (3000, 700):
            search = CellSearch(rows_per_cell=150, n_probes=2, n_refine=2, recall_sample=0)
            with elmscale.config_context(compiled=compiled):
                graphs.append(dask.compute(*search(da.from_array(X, chunks=(chunks, 20)), 10)))
    for idx, dist in graphs[1:]:
        np.testing.assert_array_equal(idx, graphs[0][0])
        np.testing.assert_array_equal(dist, graphs[0][1])
