"""ProjectedLayer: a hidden layer's rows centred and projected, block by block."""

import pickle

import dask.array as da
import numpy as np
import pytest

from elmscale.gram import hidden_stats
from elmscale.hidden import HiddenFeatures, ProjectedLayer, RandomHiddenLayer

from ._reference import hidden


@pytest.fixture
def parts(rng):
    X = rng.standard_normal((230, 6))
    layer = RandomHiddenLayer.draw(6, 30, "sigmoid", rng)
    H = hidden(X, layer)
    basis = np.linalg.qr(rng.standard_normal((30, 5)))[0]
    return X, layer, H, H.mean(axis=0), basis


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rows_are_the_centred_hidden_rows_projected(parts, dtype):
    X, layer, H, mean, basis = parts
    P = ProjectedLayer(layer, mean, basis)(X.astype(dtype))
    assert P.dtype == dtype and P.shape == (230, 5)
    rtol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(P, (H - mean) @ basis, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("cache", [True, False])
def test_features_project_and_label_sums_in_the_basis(parts, cache):
    """Through HiddenFeatures: P Y and P^T F, whatever the chunks, as dense NumPy."""
    X, layer, H, mean, basis = parts
    features = HiddenFeatures(
        da.from_array(X, chunks=((70, 100, 60), (6,))), ProjectedLayer(layer, mean, basis), cache
    )
    P = (H - mean) @ basis
    Y = np.arange(10.0).reshape(5, 2)
    np.testing.assert_allclose(features.project(Y).compute(), P @ Y, rtol=1e-12, atol=1e-12)
    labels = np.arange(230) % 3
    stats = hidden_stats(
        features, ("htf", "sizes"), labels=da.from_array(labels, ((70, 100, 60),)), n_labels=3
    )
    np.testing.assert_allclose(stats["htf"], P.T @ np.eye(3)[labels], rtol=1e-12, atol=1e-12)


def test_pickles_without_its_casts(parts):
    X, layer, _, mean, basis = parts
    projected = ProjectedLayer(layer, mean, basis)
    before = projected(X.astype(np.float32))
    copy = pickle.loads(pickle.dumps(projected))
    assert copy._cast == {} and copy.n_hidden == 5
    np.testing.assert_array_equal(copy(X.astype(np.float32)), before)


@pytest.mark.parametrize("n_rows", [0, 1, 7, 30])
def test_project_block_builds_slices_as_the_whole_block(parts, monkeypatch, n_rows):
    """``layer(X) @ W`` built a few hidden rows at a time: the same rows, any slice width,
    an empty block included."""
    from elmscale.hidden import _layer

    X, layer, _, _, basis = parts
    whole = layer(X[:n_rows]) @ basis
    monkeypatch.setattr(_layer, "PROJECT_ROWS", 7)
    sliced = _layer.project_block(layer, X[:n_rows], basis)
    assert sliced.shape == (n_rows, 5) and sliced.dtype == whole.dtype
    np.testing.assert_allclose(sliced, whole, rtol=1e-13, atol=1e-13)
