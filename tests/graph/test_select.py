"""The in-cell selection: proposals against a dense definition on data full of ties, and
the kernel seam of CellSearch (another kernel, the same graph)."""

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits

from elmscale.graph import CellSearch, Operands, propose
from elmscale.graph._select import exact_sq_distances, lexorder, pair_sq_distances, proposals
from elmscale.utils._compiled import compiled_available


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


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("nq", "nr", "d", "m"), [(300, 700, 3, 12), (9, 9, 2, 12), (20, 300, 1, 5)]
)
def test_proposals_are_the_m_smallest(nq, nr, d, m, dtype, compiled):
    """Unbounded: each row gets its m smallest values (300 queries: two blocks of the
    product). In float32, among equal values the smaller column, so the proposals are a
    function of the block alone."""
    rng = np.random.default_rng(nq + nr)
    Xq, rows, Xr = _tied_block(rng, nq, nr, d)
    r_ids = rng.permutation(10 * nr)[:nr]
    Q, R = Operands(Xq, 0.0, dtype), Operands(Xr, 0.0, dtype)
    cols, g = proposals(Q.query, R.reference, r_ids[rows], r_ids, m, compiled=compiled)
    G = _dense(Q, R, r_ids[rows], r_ids)
    for i in range(nq):
        if nr <= m:  # every column, the row itself with inf
            assert sorted(cols[i][:nr]) == list(range(nr))
            continue
        np.testing.assert_array_equal(g[i], G[i, cols[i]])
        np.testing.assert_array_equal(np.sort(g[i]), np.sort(G[i])[:m])
        if dtype == np.float32:
            assert sorted(cols[i]) == sorted(np.lexsort((np.arange(nr), G[i]))[:m]), i


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("nr", "m"), [(200, 13), (13, 13), (600, 12)])
def test_the_largest_proposal_is_last(nr, m, dtype, compiled):
    """decide() reads a row's m-th proposal from the last column: it must be the largest
    of the row's proposals, also when every column is below the first threshold (200
    references, all in the subsample) and when there are exactly m references."""
    rng = np.random.default_rng(nr)
    Xq, Xr = rng.normal(size=(50, 6)), rng.normal(size=(nr, 6))
    Q, R = Operands(Xq, 0.0, dtype), Operands(Xr, 0.0, dtype)
    cols, g = proposals(Q.query, R.reference, np.full(50, -1), np.arange(nr), m, compiled=compiled)
    np.testing.assert_array_equal(g[:, -1], g.max(axis=1))
    dense = np.sort(_dense(Q, R, np.full(50, -1), np.arange(nr)))[:, m - 1]
    np.testing.assert_allclose(g[:, -1], dense, rtol=1e-5)


@pytest.mark.parametrize("compiled", [False, True])
def test_bounded_proposals_are_those_at_most_the_bound(compiled):
    rng = np.random.default_rng(5)
    Xq, rows, Xr = _tied_block(rng, 200, 600, 3)
    ids = np.arange(600)
    Q, R = Operands(Xq, 0.0, np.float32), Operands(Xr, 0.0, np.float32)
    G = _dense(Q, R, ids[rows], ids)
    bound = np.sort(G, axis=1)[:, rng.integers(0, 20, 200)].diagonal().astype(np.float64)
    bound[:5] = np.inf  # every column, the row itself last with inf
    cols, g = proposals(Q.query, R.reference, ids[rows], ids, 8, bound, compiled=compiled)
    for i in range(200):
        below = np.flatnonzero(G[i] <= bound[i])
        want = below[np.lexsort((below, G[i, below]))][:8]
        got = cols[i][cols[i] >= 0]
        assert sorted(got) == sorted(want)
        assert (g[i, len(got) :] == np.inf).all() and (cols[i, len(got) :] == -1).all()


@pytest.mark.parametrize("bound", [None, "finite", "inf"])
def test_the_compiled_selection_proposes_what_numpy_does(bound):
    """Values of both signs, -0.0 beside 0.0, ties, a query's own column and rows with fewer
    entries within their bound than m: the same columns and values in the same places."""

    if not compiled_available(True):
        pytest.skip("numba (installed with pynndescent) is absent")
    rng = np.random.default_rng(2)
    nq, nr, m = 120, 400, 11
    Q = rng.integers(-2, 3, size=(nq, 4)).astype(np.float32)
    R = rng.integers(-2, 3, size=(nr, 4)).astype(np.float32)
    Q[0] = 0.0
    R[:3] = [[-0.0] * 4, [0.0] * 4, [-0.0] * 4]
    r_ids = np.arange(nr)
    q_ids = np.where(rng.random(nq) < 0.5, rng.integers(0, nr, nq), -1)
    if bound is not None:
        G = Q @ R.T
        bound = np.sort(G, axis=1)[:, 5].astype(np.float64) if bound == "finite" else None
        bound = np.full(nq, np.inf) if bound is None else bound
    got = proposals(Q, R, q_ids, r_ids, m, bound, compiled=True)
    want = proposals(Q, R, q_ids, r_ids, m, bound, compiled=False)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.sort(g, axis=1), np.sort(w, axis=1))
    np.testing.assert_array_equal(got[1][:, -1], want[1][:, -1])
    order = np.lexsort((got[0], got[1]), axis=1)  # the same (column, value) pairs
    worder = np.lexsort((want[0], want[1]), axis=1)
    np.testing.assert_array_equal(
        np.take_along_axis(got[0], order, 1), np.take_along_axis(want[0], worder, 1)
    )


@pytest.mark.parametrize("n_blocks", [1, 4])
def test_the_compiled_decision_ranks_what_numpy_does(n_blocks):
    """decide() with its bookkeeping compiled: the same neighbours and distances, with tied
    proposals and exact distances, padded blocks, blocks cut at their (k + 1)-th proposal
    and a fallback that adds rows unsorted."""
    from elmscale.graph._select import decide

    if not compiled_available(True):
        pytest.skip("numba (installed with pynndescent) is absent")
    rng = np.random.default_rng(n_blocks)
    n, k = 300, 5
    g = np.sort(rng.integers(0, 12, size=(n, n_blocks, k + 1)).astype(np.float64), axis=2)
    g[rng.random((n, n_blocks)) < 0.1, 3:] = np.inf  # blocks with fewer proposals
    ids = rng.permutation(n * n_blocks * (k + 1)).reshape(g.shape) + 10
    ids[np.isinf(g)] = -1
    tau = rng.choice([0.0, 0.25, 1.0], size=(n, n_blocks))
    exact_value = np.round(g.reshape(n, -1) + rng.integers(-1, 2, size=(n, g[0].size)) * 0.25, 2)

    def exact(rows, pos):
        return exact_value[rows, pos]

    def fallback(rows, blocks, limits):
        extra = rng.integers(0, 3, size=len(rows))
        q = np.repeat(rows, extra)[::-1]
        return q, rng.permutation(len(q)) + 10**6, rng.integers(0, 12, len(q)).astype(float)

    got, want = [], []
    for compiled, out in ((True, got), (False, want)):
        rng = np.random.default_rng(7)  # the same fallback rows for both
        out.extend(decide(k, g, ids, tau, exact, fallback, compiled=compiled))
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


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


@pytest.mark.parametrize("d", [50, 256, 784])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_unordered_pair_once_gives_every_pair_s_exact_distance(d, dtype):
    """The join's exact distances computed once per unordered pair are, bit for bit, those of
    each ordered pair on its own, whether both directions, one or a row with itself are
    asked for, in blocks of any size."""
    rng = np.random.RandomState(0)
    X = rng.randn(200, d).astype(dtype)
    p, q = rng.randint(0, 200, 3000), rng.randint(0, 200, 3000)
    p, q = np.concatenate([p, q[:1000], [7]]), np.concatenate([q, p[:1000], [7]])
    for block in (None, 1, 333):
        got = pair_sq_distances(X, p, q, block)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, exact_sq_distances(X, p, X, q))


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


@pytest.mark.parametrize("compiled", [False, True])
def test_block_topk_within_keeps_every_row_within_it(compiled, monkeypatch):
    """``within`` (a k-th nearest found elsewhere): the rows at most it are ranked as
    without it; after them come only rows beyond it at their exact distance, in order, then
    padding (id -1, inf), never the query itself."""
    from elmscale.graph._select import block_topk

    rng = np.random.default_rng(4)
    X = np.round(rng.normal(size=(400, 3)), 1)  # many equal distances
    ids = np.arange(400)
    from elmscale.graph import _select

    full = block_topk(X[:60], ids[:60], X, ids, 8, compiled=compiled)
    within = np.where(np.arange(60) % 3 == 0, full[1][:, 7], full[1][:, 2])
    within[::7] = 0.0  # nothing (or only duplicates) within
    searched = []  # a query with fewer proposals than k is not searched again in full
    counted = _select.within_limits
    monkeypatch.setattr(
        _select, "within_limits", lambda Q, *a: searched.append(len(Q)) or counted(Q, *a)
    )
    got = block_topk(X[:60], ids[:60], X, ids, 8, compiled=compiled, within=within)
    assert sum(searched) <= 10
    for i in range(60):
        n = int((full[1][i] <= within[i]).sum())
        np.testing.assert_array_equal(got[0][i, :n], full[0][i, :n])
        np.testing.assert_array_equal(got[1][i, :n], full[1][i, :n])
        rest, d2 = got[0][i, n:], got[1][i, n:]
        real = rest >= 0
        assert (d2[real] > within[i]).all() and np.isinf(d2[~real]).all()
        assert real.tolist() == sorted(real.tolist(), reverse=True) and i not in rest
        np.testing.assert_allclose(d2[real], ((X[rest[real]] - X[i]) ** 2).sum(axis=1), rtol=1e-12)
        assert (np.diff(d2[real]) >= 0).all()
