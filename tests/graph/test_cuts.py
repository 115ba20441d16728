"""The normalised cut and the modularity of partitions on the graph equal a dense NumPy
computation, in any chunking and row order, for plain and normalised graphs."""

import dask.array as da
import numpy as np
import pytest

import elmscale
from elmscale.graph import cut_and_modularity, knn_graph, modularity, normalized_cut


def _dense_ncut(W, labels, k):
    Y = np.eye(k)[labels]
    within = np.diag(Y.T @ W @ Y)
    volume = Y.T @ W.sum(1)
    present = volume > 0  # an empty cluster cuts nothing
    return np.sum((volume[present] - within[present]) / volume[present])


def _dense_modularity(W, labels, k):
    """Newman and Girvan's Q = sum_ij (W_ij - d_i d_j / 2m) [c_i = c_j] / 2m."""
    d = W.sum(1)
    same = labels[:, None] == labels[None, :]
    return float(((W - np.outer(d, d) / d.sum()) * same).sum() / d.sum())


@pytest.fixture
def data():
    from sklearn.datasets import make_blobs

    X, y = make_blobs(800, n_features=4, centers=4, cluster_std=3.0, random_state=3)
    return X, y


@pytest.mark.parametrize(("order", "normalized"), [(False, False), (True, True)])
@pytest.mark.parametrize("rows", [150, 25])  # 6 chunks, one per task; 32, four per task
def test_ncut_equals_dense_in_any_row_order(data, order, normalized, rows):
    X, y = data
    Xd = da.from_array(X, chunks=(rows, 4))
    graph = knn_graph(Xd, 6, backend="cells", order=order, normalized=normalized, random_state=0)
    plain = knn_graph(Xd, 6, backend="cells", order=order, normalized=False, random_state=0)
    L = plain.laplacian().toarray()  # D - W in the graph's row order
    W = np.diag(np.diag(L)) - L
    positions = np.arange(len(X))
    if graph.order is not None:
        positions = graph.order.apply(da.from_array(positions, chunks=Xd.chunks[0])).compute()
    rng = np.random.default_rng(0)
    partitions = np.stack([y, rng.integers(0, 4, len(y)), (X[:, 0] > 0).astype(int)], axis=1)
    with elmscale.config_context(plan_workers=1):  # 8 tasks at least, not 8 a local thread
        assert max(map(len, graph.row_groups(32))) == (1 if rows == 150 else 4)
        got = normalized_cut(graph, [da.from_array(p, chunks=rows) for p in partitions.T], 4)
    expected = [_dense_ncut(W, partitions[positions, j], 4) for j in range(3)]
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    assert got[0] < got[1] / 4  # the blobs cut far fewer edges than random labels
    single = normalized_cut(graph, da.from_array(y, chunks=rows), 4)
    assert single == pytest.approx(got[0], rel=1e-12)
    q = modularity(graph, [da.from_array(p, chunks=rows) for p in partitions.T], 4)
    expected = [_dense_modularity(W, partitions[positions, j], 4) for j in range(3)]
    np.testing.assert_allclose(q, expected, rtol=1e-10)
    assert q[0] > 0.5 > abs(q[1]) * 10  # the blobs keep their edges, random labels do not
    assert modularity(graph, da.from_array(y, chunks=rows), 4) == pytest.approx(q[0], rel=1e-12)
    both = cut_and_modularity(graph, [da.from_array(p, chunks=rows) for p in partitions.T], 4)
    np.testing.assert_allclose(both[0], got, rtol=1e-12)
    np.testing.assert_allclose(both[1], q, rtol=1e-12)
