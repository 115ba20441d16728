"""Tests of the elmscale-faiss plugin: its contracts, its registration, its kernel's
proposals, and the graph it builds against the built-in cells graph (the same neighbours,
ties included). Skipped without faiss-cpu."""

import pytest

pytest.importorskip("faiss")

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import numpy as np  # noqa: E402
from elmscale.graph import CellSearch, Operands, knn_graph  # noqa: E402
from elmscale.registry import Registry  # noqa: E402
from elmscale.testing import check_graph_backend  # noqa: E402
from sklearn.datasets import load_digits, make_blobs  # noqa: E402

import elmscale_faiss  # noqa: E402
from elmscale_faiss import cell_search, propose  # noqa: E402


@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler="sync"):
        yield


def _with_duplicates(X, rng, n_copies):
    """X with ``n_copies`` rows repeated (two or three times each) and rows shuffled: many
    exactly tied distances, including ties at zero."""
    rep = rng.choice(len(X), n_copies, replace=False)
    X = np.concatenate([X, X[rep], X[rep[: n_copies // 2]]])
    return X[rng.permutation(len(X))]


@pytest.fixture(scope="module")
def digits_dup():
    rng = np.random.default_rng(0)
    return _with_duplicates(load_digits().data[:900], rng, 150)


@pytest.fixture(scope="module")
def blobs_dup():
    rng = np.random.default_rng(1)
    X, _ = make_blobs(1500, n_features=6, centers=8, random_state=0)
    return _with_duplicates(np.round(X * 10), rng, 300)  # integers: exact ties


def test_contracts():
    check_graph_backend(cell_search(rows_per_cell=40, n_probes=3))


def test_registers_through_the_hooks(monkeypatch):
    monkeypatch.setenv("ELMSCALE_LOAD_PLUGINS", "")
    reg = Registry()
    assert reg.register_plugin(elmscale_faiss, name="faiss") == "faiss"
    backend = reg.get("graph", "faiss")
    assert isinstance(backend, CellSearch) and backend.kernel is propose
    assert reg.get("graph", "cells-faiss") is backend
    assert reg.failures == []


@pytest.mark.parametrize(
    ("data", "rows_per_cell", "n_probes", "k", "chunks"),
    [
        ("digits_dup", 60, 3, 10, 300),
        ("digits_dup", 5000, 1, 7, 400),  # one cell: an exact search
        ("blobs_dup", 80, 1, 10, 500),  # own cell only
        ("blobs_dup", 50, 4, 15, 700),
        ("blobs_dup", 8, 2, 12, 700),  # cells smaller than k: probes extended
    ],
)
def test_same_neighbours_as_the_built_in_cells_graph(
    request, data, rows_per_cell, n_probes, k, chunks
):
    X = request.getfixturevalue(data)
    Xd = da.from_array(X, chunks=(chunks, X.shape[1]))
    params = {"rows_per_cell": rows_per_cell, "n_probes": n_probes}
    ref = dask.compute(*CellSearch(**params)(Xd, k, random_state=0))
    got = dask.compute(*cell_search(**params)(Xd, k, random_state=0))
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    # and those are the k nearest of the rows' probed cells by (distance, index)
    d = got[1]
    assert (d[:, 1:] >= d[:, :-1]).all()
    tied = (d[:, 1:] == d[:, :-1]) & np.isfinite(d[:, 1:])
    assert (np.diff(got[0], axis=1)[tied] > 0).all()
    assert tied.sum() > len(X) // 10  # the data does exercise ties


def test_symmetrised_graph_equals_the_built_in_one(blobs_dup):
    Xd = da.from_array(blobs_dup, chunks=(600, blobs_dup.shape[1]))
    graphs = [
        knn_graph(Xd, 10, backend=b, random_state=2)
        for b in (
            CellSearch(rows_per_cell=100, n_probes=3),
            cell_search(rows_per_cell=100, n_probes=3),
        )
    ]
    ref, got = (dask.compute(*g.blocks) for g in graphs)
    assert len(ref) == len(got) == 4
    for r, g in zip(ref, got, strict=True):
        np.testing.assert_array_equal(g.halo, r.halo)
        np.testing.assert_array_equal(g.degree, r.degree)
        assert (g.W != r.W).nnz == 0 and g.W.nnz > 0


def _operands(X, center):
    return Operands(X, center, np.float32)


@pytest.mark.parametrize("bounded", [False, True])
def test_kernel_proposes_the_m_nearest_by_its_own_distances(bounded):
    """Every proposal is within the error bound of the exact squared distance, the query's
    own row is never proposed, and nothing unproposed is nearer than the m-th proposal by
    more than twice the bound; with a bound, nothing above it."""
    rng = np.random.default_rng(3)
    R = np.round(rng.standard_normal((300, 9)), 1)
    R = np.concatenate([R, R[:40]])
    Qrows = np.arange(0, 340, 7)
    center = R.mean(axis=0)
    Qo, Ro = _operands(R[Qrows], center), _operands(R, center)
    ids = np.arange(1000, 1340)
    m = 12
    exact = ((R[Qrows, None, :] - R[None]) ** 2).sum(-1)
    bound = np.quantile(exact, 0.02, axis=1) if bounded else None
    cols, g = propose(Qo, Ro, ids[Qrows], ids, m, bound)
    tau = Qo.error_bound(ref_sq_max=float(Ro.sq.max()))
    for i, q in enumerate(Qrows):
        c = cols[i][cols[i] >= 0]
        assert q not in c and len(set(c)) == len(c)
        np.testing.assert_array_less(np.abs(g[i, : len(c)] - exact[i, c]), tau[i])
        assert (g[i, len(c) :] == np.inf).all()
        others = np.setdiff1d(np.delete(np.arange(len(R)), q), c)
        if bounded:
            assert (g[i, : len(c)] <= bound[i] * (1 + 1e-6)).all()
            assert (exact[i, others] > bound[i] - 2 * tau[i]).all()
        else:
            assert len(c) == m
            assert exact[i, others].min() >= g[i, m - 1] - 2 * tau[i]


def test_kernel_with_fewer_references_than_m():
    X = np.arange(12, dtype=float).reshape(4, 3)
    Qo = Ro = _operands(X, X.mean(axis=0))
    cols, g = propose(Qo, Ro, np.arange(4), np.arange(4), 6)
    for i in range(4):
        assert sorted(cols[i, :3]) == sorted(set(range(4)) - {i})
    assert (cols[:, 3:] == -1).all() and (g[:, 3:] == np.inf).all()
    np.testing.assert_allclose(np.sort(g[:, :3], axis=1)[0], [27, 108, 243], rtol=1e-6)


def test_faiss_runs_on_one_thread_after_a_search():
    import faiss
    from threadpoolctl import threadpool_info

    X = np.ones((3, 2), dtype=np.float32)
    Q = _operands(X, X.mean(axis=0))
    propose(Q, Q, np.arange(3), np.arange(3), 2)
    assert faiss.omp_get_max_threads() == 1
    assert faiss.cvar.distance_compute_blas_threshold == elmscale_faiss.BLAS_THRESHOLD
    bundled = [i for i in threadpool_info() if i["user_api"] == "blas" and "faiss" in i["filepath"]]
    assert all(i["num_threads"] == 1 for i in bundled)


def test_kernel_rejects_float64_rows():
    X = np.ones((3, 2))
    Q = Operands(X, X.mean(axis=0), np.float64)
    with pytest.raises(TypeError, match="float32"):
        propose(Q, Q, np.arange(3), np.arange(3), 2)
