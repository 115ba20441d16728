"""The in-cell selection: proposals against a dense definition on data full of ties, and
the kernel seam of CellSearch (another kernel, the same graph)."""

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits

from elmscale.graph import CellSearch, Operands, propose
from elmscale.graph._select import lexorder, proposals


def _tied_block(rng, nq, nr, d):
    """Small integer rows, many repeated: every product below is exact in float32, so the
    dense reference sees the very values the selection does, ties included."""
    R = rng.integers(-3, 4, size=(nr, d)).astype(np.float64)
    R[nr // 2 :] = R[: nr - nr // 2]
    rows = rng.choice(nr, nq, replace=False)
    return R[rows], rows, R


def _dense(Q, R, q_ids, r_ids):
    G = (Q.query.astype(np.float64) @ R.reference.T.astype(np.float64)).astype(Q.dtype)
    G[q_ids[:, None] == r_ids[None, :]] = np.inf
    return G


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("nq", "nr", "d", "m"), [(300, 700, 3, 12), (9, 9, 2, 12), (20, 300, 1, 5)]
)
def test_proposals_are_the_m_smallest(nq, nr, d, m, dtype):
    """Unbounded: each row gets its m smallest values (300 queries: two blocks of the
    product). In float32, among equal values the smaller column, so the proposals are a
    function of the block alone."""
    rng = np.random.default_rng(nq + nr)
    Xq, rows, Xr = _tied_block(rng, nq, nr, d)
    r_ids = rng.permutation(10 * nr)[:nr]
    Q, R = Operands(Xq, 0.0, dtype), Operands(Xr, 0.0, dtype)
    cols, g = proposals(Q.query, R.reference, r_ids[rows], r_ids, m)
    G = _dense(Q, R, r_ids[rows], r_ids)
    for i in range(nq):
        if nr <= m:  # every column, the row itself with inf
            assert sorted(cols[i][:nr]) == list(range(nr))
            continue
        np.testing.assert_array_equal(g[i], G[i, cols[i]])
        np.testing.assert_array_equal(np.sort(g[i]), np.sort(G[i])[:m])
        if dtype == np.float32:
            assert sorted(cols[i]) == sorted(np.lexsort((np.arange(nr), G[i]))[:m]), i


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("nr", "m"), [(200, 13), (13, 13), (600, 12)])
def test_the_largest_proposal_is_last(nr, m, dtype):
    """decide() reads a row's m-th proposal from the last column: it must be the largest
    of the row's proposals, also when every column is below the first threshold (200
    references, all in the subsample) and when there are exactly m references."""
    rng = np.random.default_rng(nr)
    Xq, Xr = rng.normal(size=(50, 6)), rng.normal(size=(nr, 6))
    Q, R = Operands(Xq, 0.0, dtype), Operands(Xr, 0.0, dtype)
    cols, g = proposals(Q.query, R.reference, np.full(50, -1), np.arange(nr), m)
    np.testing.assert_array_equal(g[:, -1], g.max(axis=1))
    dense = np.sort(_dense(Q, R, np.full(50, -1), np.arange(nr)))[:, m - 1]
    np.testing.assert_allclose(g[:, -1], dense, rtol=1e-5)


def test_bounded_proposals_are_those_at_most_the_bound():
    rng = np.random.default_rng(5)
    Xq, rows, Xr = _tied_block(rng, 200, 600, 3)
    ids = np.arange(600)
    Q, R = Operands(Xq, 0.0, np.float32), Operands(Xr, 0.0, np.float32)
    G = _dense(Q, R, ids[rows], ids)
    bound = np.sort(G, axis=1)[:, rng.integers(0, 20, 200)].diagonal().astype(np.float64)
    cols, g = proposals(Q.query, R.reference, ids[rows], ids, 8, bound)
    for i in range(200):
        below = np.flatnonzero(G[i] <= bound[i])
        want = below[np.lexsort((below, G[i, below]))][:8]
        got = cols[i][cols[i] >= 0]
        assert sorted(got) == sorted(want)
        assert (g[i, len(got) :] == np.inf).all() and (cols[i, len(got) :] == -1).all()


def _dense_kernel(Q, R, q_ids, r_ids, m, bound=None):
    """A kernel of float64 distances and a full sort: nothing shared with the built-in one
    but the protocol."""
    D = ((Q.rows[:, None, :].astype(np.float64) - R.rows[None].astype(np.float64)) ** 2).sum(-1)
    D[np.asarray(q_ids)[:, None] == np.asarray(r_ids)[None, :]] = np.inf
    if bound is not None:
        D[D > np.asarray(bound)[:, None]] = np.inf
    order = np.argsort(D, axis=1, kind="stable")[:, :m]
    g = np.take_along_axis(D, order, axis=1)
    cols = np.where(np.isfinite(g), order, -1)
    out = np.full((len(q_ids), m), np.inf), np.full((len(q_ids), m), -1, dtype=np.int64)
    out[0][:, : g.shape[1]], out[1][:, : g.shape[1]] = g, cols
    return out[1], out[0]


def test_another_kernel_gives_the_same_graph():
    rng = np.random.default_rng(0)
    X = load_digits().data[:700]
    X = np.concatenate([X, X[rng.choice(700, 100, replace=False)]])  # zero-distance ties
    Xd = da.from_array(X, chunks=(300, X.shape[1]))
    params = {"rows_per_cell": 60, "n_probes": 3}
    ref = dask.compute(*CellSearch(**params)(Xd, 10, random_state=0))
    got = dask.compute(*CellSearch(kernel=_dense_kernel, **params)(Xd, 10, random_state=0))
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    assert CellSearch(kernel=propose).kernel is propose
    assert "kernel=<function _dense_kernel" in repr(CellSearch(kernel=_dense_kernel))


def test_kernel_must_be_callable():
    with pytest.raises(TypeError, match="kernel must be a callable or None, got str"):
        CellSearch(kernel="faiss")


@pytest.mark.parametrize("n_groups", [3, 1 << 20])
def test_lexorder_sorts_like_lexsort(n_groups):
    """Packed keys, with every kind of key and many ties: the sorted keys are np.lexsort's,
    whether all keys fit in 64 bits or later ones (and float bits) are cut and ties
    re-sorted; -0.0 sorts with +0.0."""
    rng = np.random.default_rng(0)
    n = 20_000
    group = rng.integers(0, n_groups, n)
    dist = rng.choice([0.25, 1.0, np.inf], n) + rng.integers(0, 3, n) * 2.0**-40
    zero = rng.random(n) < 0.2
    dist[zero] = rng.choice([0.0, -0.0], zero.sum())
    flag = rng.random(n) < 0.5
    ids = rng.integers(0, 5, n) * (1 << 40)
    small = rng.integers(0, 4, n)
    for keys in [
        (group, small, flag),
        (group, dist, ids),
        (group, flag, dist.astype(np.float32), small),
        (dist, flag, ids, group),
    ]:
        order = lexorder(*keys)
        expected = np.lexsort(keys[::-1])
        assert np.array_equal(np.sort(order), np.arange(n))
        for key in keys:
            np.testing.assert_array_equal(key[order], key[expected])
