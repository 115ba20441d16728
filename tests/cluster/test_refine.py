"""Neighbour-majority refinement on the graph equals the same votes done densely, in any
chunking and row order; cluster means equal NumPy's."""

import dask.array as da
import numpy as np
import pytest

from elmscale.cluster import cluster_means, refine_labels
from elmscale.graph import knn_graph


def _dense_votes(W, labels, k, rounds):
    """Synchronous rounds: each row takes the label of most votes, a neighbour one vote and
    the row's own label 1.5."""
    A = (W != 0).astype(float)
    for _ in range(rounds):
        Y = np.eye(k)[labels]
        labels = np.argmax(A @ Y + 1.5 * Y, axis=1)
    return labels


@pytest.fixture
def blobs():
    from sklearn.datasets import make_blobs

    return make_blobs(600, n_features=3, centers=4, cluster_std=2.5, random_state=4)


@pytest.mark.parametrize(("order", "rows"), [(False, 600), (True, 70), (True, 150)])
def test_refine_equals_dense_votes(blobs, order, rows):
    X, y = blobs
    Xd = da.from_array(X, chunks=(rows, 3))
    graph = knn_graph(Xd, 6, backend="cells", order=order, random_state=0)
    L = graph.laplacian().toarray()  # in the graph's row order
    W = np.diag(np.diag(L)) - L
    positions = np.arange(len(X))
    if graph.order is not None:
        positions = graph.order.apply(da.from_array(positions, chunks=Xd.chunks[0])).compute()
    start = np.where(np.random.default_rng(0).random(len(y)) < 0.2, (y + 1) % 4, y)  # noisy
    for rounds in (0, 1, 3):
        got = refine_labels(graph, da.from_array(start, chunks=rows), 4, rounds)
        assert got.chunks[0] == Xd.chunks[0]
        expected = np.empty_like(start)
        expected[positions] = _dense_votes(W, start[positions], 4, rounds)
        np.testing.assert_array_equal(got.compute(), expected)
    # the votes clean the noise: more rows agree with the blobs after the rounds
    assert np.mean(got.compute() == y) > np.mean(start == y) + 0.1


@pytest.mark.parametrize("order", [False, True])
def test_columns_are_partitions_voted_on_as_each_alone(blobs, order):
    """A 2-D array of labels is several partitions voted on in the same passes: each column
    equals the votes on that partition alone."""
    X, y = blobs
    Xd = da.from_array(X, chunks=(150, 3))
    graph = knn_graph(Xd, 6, backend="cells", order=order, random_state=0)
    rng = np.random.default_rng(1)
    starts = np.stack(
        [np.where(rng.random(len(y)) < 0.3, rng.integers(0, 4, len(y)), y) for _ in range(3)],
        axis=1,
    )
    got = refine_labels(graph, da.from_array(starts, chunks=(150, 3)), 4, 2)
    assert got.shape == starts.shape and got.chunks[0] == Xd.chunks[0]
    got = got.compute()
    for j in range(3):
        alone = refine_labels(graph, da.from_array(starts[:, j], chunks=150), 4, 2).compute()
        np.testing.assert_array_equal(got[:, j], alone)
    assert not np.array_equal(got[:, 0], got[:, 1])


def test_refine_rejects_negative_rounds(blobs):
    X, y = blobs
    graph = knn_graph(da.from_array(X, chunks=300), 6, backend="exact")
    with pytest.raises(ValueError, match="rounds"):
        refine_labels(graph, da.from_array(y, chunks=300), 4, -1)


def test_cluster_means_equal_numpy(blobs):
    X, y = blobs
    y = np.where(y == 3, 2, y)  # cluster 3 empty
    centers, inertia = cluster_means(
        da.from_array(X, chunks=(130, 3)), da.from_array(y, chunks=200), 4
    )
    expected = np.array([X[y == j].mean(0) if (y == j).any() else np.zeros(3) for j in range(4)])
    np.testing.assert_allclose(centers, expected, rtol=1e-12, atol=1e-12)
    assert inertia == pytest.approx(((X - expected[y]) ** 2).sum(), rel=1e-10)
