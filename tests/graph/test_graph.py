"""kNN backends and the chunked graph/Laplacian."""

import dask.array as da
import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from elmscale import available, get
from elmscale.exceptions import UnknownPluginError
from elmscale.graph import knn_graph

from .._reference import knn_laplacian


def _brute(X, k):
    return NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X)


@pytest.mark.parametrize("chunks", [(200,), (64, 64, 72), (13, 100, 87)])
def test_exact_backend_equals_brute_force(rng, chunks):
    X = rng.randn(200, 4)
    idx, dist = get("graph", "exact")(da.from_array(X, chunks=(chunks, 4)), 7)
    assert idx.chunks[0] == chunks
    d_ref, i_ref = _brute(X, 7)
    np.testing.assert_allclose(dist.compute(), d_ref[:, 1:], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(idx.compute(), i_ref[:, 1:])


def test_exact_backend_never_returns_self_even_with_duplicates():
    X = np.repeat(np.arange(10.0)[:, None], 3, axis=0)  # every point three times
    idx, _ = get("graph", "exact")(da.from_array(X, chunks=(7, 1)), 4)
    idx = idx.compute()
    assert not (idx == np.arange(30)[:, None]).any()


def test_nndescent_recall_on_clustered_data(rng):
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(2000, n_features=10, centers=10, random_state=0)
    idx, _ = get("graph", "pynndescent")(da.from_array(X, chunks=(500, 10)), 10, random_state=0)
    idx = idx.compute()
    _, ref = _brute(X, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(idx, ref[:, 1:], strict=True)])
    assert recall >= 0.9
    assert not (idx == np.arange(2000)[:, None]).any()


@pytest.mark.parametrize("weights", ["binary", "heat"])
@pytest.mark.parametrize("normalized", [False, True])
def test_laplacian_equals_dense(rng, weights, normalized):
    X = rng.randn(120, 3)
    g = knn_graph(
        da.from_array(X, chunks=(35, 3)), 6, backend="exact", weights=weights, normalized=normalized
    )
    L = g.laplacian().toarray()
    np.testing.assert_allclose(
        L, knn_laplacian(X, 6, weights=weights, normalized=normalized), atol=1e-12
    )
    np.testing.assert_allclose(L, L.T, atol=1e-14)
    if not normalized:
        np.testing.assert_allclose(L.sum(axis=1), 0, atol=1e-12)  # rows of D - W sum to zero


def test_halo_counts_only_cross_chunk_neighbours(rng):
    X = np.sort(rng.rand(100, 1), axis=0)  # sorted 1-d: neighbours are mostly in the chunk
    g = knn_graph(da.from_array(X, chunks=(50, 1)), 3, backend="exact")
    assert 0 < g.halo_size() <= 12
    assert g.halo_sources == [[1], [0]]


def test_graph_parameter_errors(rng):
    Xd = da.from_array(rng.randn(20, 2), chunks=(10, 2))
    with pytest.raises(ValueError, match="n_neighbors must be in"):
        knn_graph(Xd, 20, backend="exact")
    with pytest.raises(ValueError, match="weights must be one of"):
        knn_graph(Xd, 3, backend="exact", weights="gauss")
    with pytest.raises(UnknownPluginError, match="available: cells, exact, pynndescent"):
        knn_graph(Xd, 3, backend="annoy")
    assert {"cells", "exact", "pynndescent"} <= set(available("graph"))


def test_locality_order_is_a_permutation_that_shrinks_the_halo():
    from sklearn.datasets import make_blobs

    from elmscale.graph._ordering import locality_order

    X, _ = make_blobs(3000, n_features=3, centers=6, random_state=0)
    Xd = da.from_array(X, chunks=(500, 3))
    order = locality_order(Xd, random_state=0)
    Xo = order.apply(Xd).compute()
    assert Xo.shape == X.shape
    np.testing.assert_array_equal(np.sort(Xo, axis=0), np.sort(X, axis=0))
    ids = order.apply(da.from_array(np.arange(3000), chunks=500)).compute()
    np.testing.assert_array_equal(np.sort(ids), np.arange(3000))  # each row exactly once
    np.testing.assert_array_equal(Xo, X[ids])
    plain = knn_graph(Xd, 10, backend="exact", order=False)
    ordered = knn_graph(Xd, 10, backend="exact", order=True)
    assert ordered.halo_size() < 0.25 * plain.halo_size()
