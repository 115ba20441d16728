"""The one blockwise query-vs-reference search behind exact kNN, ``neighbour_mean`` and
``KNNGraphTransformer.transform``, against dense NumPy computations."""

import dask.array as da
import numpy as np
import pytest

from elmscale.graph import neighbour_mean
from elmscale.graph._backends import exact_kneighbors


@pytest.fixture
def rows():
    """Continuous random rows (no tied distances): 230 training rows, 70 new ones."""
    rng = np.random.RandomState(3)
    return rng.randn(230, 6), rng.randn(70, 6)


def _dense_knn(Q, R, k):
    d2 = ((Q[:, None, :] - R[None, :, :]) ** 2).sum(-1)
    idx = np.argsort(d2, axis=1, kind="stable")[:, :k]  # ties by the smaller index
    return idx, np.sqrt(np.take_along_axis(d2, idx, axis=1))


@pytest.mark.parametrize("chunks", [(230, 70), (50, 30), (17, 70)])
def test_exact_kneighbors_equals_dense_search(rows, chunks):
    X_fit, X = rows
    idx, dist = exact_kneighbors(
        da.from_array(X, chunks=(chunks[1], 6)), da.from_array(X_fit, chunks=(chunks[0], 6)), 7
    )
    ref_idx, ref_dist = _dense_knn(X, X_fit, 7)
    np.testing.assert_array_equal(idx.compute(), ref_idx)
    np.testing.assert_allclose(dist.compute(), ref_dist, rtol=1e-12)


def test_exact_kneighbors_of_the_reference_itself_leaves_each_row_out(rows):
    X_fit, _ = rows
    Xd = da.from_array(X_fit, chunks=(40, 6))
    idx, _ = exact_kneighbors(Xd, Xd, 5, same=True)
    ref_idx, _ = _dense_knn(X_fit, X_fit, 6)
    np.testing.assert_array_equal(idx.compute(), ref_idx[:, 1:])


@pytest.mark.parametrize("weights", ["binary", "heat"])
def test_neighbour_mean_equals_dense_weighted_mean(rows, weights):
    """Also with training chunks smaller than k and a transform of the rows."""
    X_fit, X = rows
    values = np.random.RandomState(4).randn(230, 3)
    sigma = 1.3
    k = 12
    got = neighbour_mean(
        da.from_array(X, chunks=(25, 6)),
        da.from_array(X_fit, chunks=(9, 6)),
        da.from_array(values, chunks=(9, 3)),
        k,
        weights=weights,
        sigma=sigma,
        transform=lambda A: 2.0 * A,
    ).compute()
    idx, dist = _dense_knn(2.0 * X, 2.0 * X_fit, k)
    w = np.ones_like(dist) if weights == "binary" else np.exp(-(dist**2) / (2 * sigma**2))
    ref = np.einsum("ik,ikj->ij", w / w.sum(axis=1, keepdims=True), values[idx])
    np.testing.assert_allclose(got, ref, rtol=1e-10)


@pytest.mark.parametrize("chunks", [(9, 25, 40), (230, 70, 23)])
def test_neighbour_mean_counts_labels_among_the_same_neighbours(rows, chunks):
    """With labels, the same search also counts each label among a row's k nearest training
    rows (one vote each, heat weights or not) and the means are unchanged; any chunking,
    labels chunked unlike the rows."""
    X_fit, X = rows
    rng = np.random.RandomState(5)
    values, labels = rng.randn(230, 3), rng.randint(0, 4, 230)
    fit_chunks, query_chunks, label_chunks = chunks
    args = (
        da.from_array(X, chunks=(query_chunks, 6)),
        da.from_array(X_fit, chunks=(fit_chunks, 6)),
        da.from_array(values, chunks=(fit_chunks, 3)),
        12,
    )
    kw = dict(weights="heat", sigma=1.3)
    got = neighbour_mean(
        *args, labels=da.from_array(labels, chunks=label_chunks), n_labels=5, **kw
    ).compute()
    assert got.shape == (70, 3 + 5 + 1)
    np.testing.assert_array_equal(got[:, :3], neighbour_mean(*args, **kw).compute())
    idx, _ = _dense_knn(X, X_fit, 12)
    ref = np.stack([np.bincount(labels[i], minlength=5) for i in idx])
    np.testing.assert_array_equal(got[:, 3:8], ref)
    np.testing.assert_array_equal(got[:, 8], 0)  # no new row equals a training row
    with pytest.raises(ValueError, match="n_labels"):
        neighbour_mean(*args, labels=da.from_array(labels, chunks=50), **kw)


def test_neighbour_mean_of_training_rows_gives_their_own_values(rows):
    """A new row equal to training rows takes their mean and their labels' counts, not its
    neighbourhood's (a training row finds itself; a duplicated one, its copies); the other
    rows keep the weighted mean over their k nearest."""
    X_fit, X = rows
    X_fit = np.vstack([X_fit, X_fit[:5]])  # rows 0-4 twice: at 0-4 and 230-234
    rng = np.random.RandomState(6)
    values, labels = rng.randn(235, 3), rng.randint(0, 4, 235)
    labels[230:] = labels[:5]
    queries = np.vstack([X_fit[:40], X])
    args = (
        da.from_array(queries, chunks=(33, 6)),
        da.from_array(X_fit, chunks=(50, 6)),
        da.from_array(values, chunks=(50, 3)),
        12,
    )
    got = neighbour_mean(*args, labels=da.from_array(labels, chunks=50), n_labels=4).compute()
    expected = values[:40].copy()
    expected[:5] = (values[:5] + values[230:]) / 2
    np.testing.assert_allclose(got[:40, :3], expected, rtol=1e-12)
    np.testing.assert_array_equal(got[:40, 3:7].argmax(axis=1), labels[:40])
    np.testing.assert_array_equal(got[:40, 3:7].sum(axis=1), [2] * 5 + [1] * 35)
    np.testing.assert_array_equal(got[:, 7], [2] * 5 + [1] * 35 + [0] * 70)
    idx, _ = _dense_knn(X, X_fit, 12)
    np.testing.assert_allclose(got[40:, :3], values[idx].mean(axis=1), rtol=1e-10)
