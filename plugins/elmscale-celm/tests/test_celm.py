"""Tests of the elmscale-celm plugin: its contracts (via ``elmscale.testing``), its
registration, and C-ELM-FS against a dense NumPy reference."""

import dask
import dask.array as da
import numpy as np
import pytest
from elmscale.registry import Registry
from elmscale.testing import check_activation, check_algorithm
from sklearn.datasets import load_iris, make_blobs
from sklearn.metrics import adjusted_rand_score

import elmscale_celm
from elmscale_celm import CELM, softplus


@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler="sync"):
        yield


@pytest.fixture
def blobs():
    return make_blobs(n_samples=200, n_features=4, centers=3, random_state=0)


def test_contracts():
    check_activation(softplus)
    check_algorithm(CELM)


def test_registers_through_the_hooks(monkeypatch):
    monkeypatch.setenv("ELMSCALE_LOAD_PLUGINS", "")  # only what this test registers
    reg = Registry()
    assert reg.register_plugin(elmscale_celm, name="celm") == "celm"
    assert reg.get("algorithm", "c-elm") is CELM
    assert reg.get("algorithm", "celm") is CELM
    assert reg.get("activation", "softplus") is softplus
    assert reg.failures == []


def test_softplus_values():
    Z = np.array([[-800.0, -1.0, 0.0, 1.0, 800.0]])
    expected = np.array([[0.0, np.log1p(np.exp(-1.0)), np.log(2.0), 1 + np.log1p(np.exp(-1)),
                          800.0]])
    np.testing.assert_allclose(softplus(Z.copy()), expected, rtol=1e-15)
    assert softplus(Z.astype(np.float32)).dtype == np.float32


@pytest.mark.parametrize("as_dask", [False, True])
def test_fit_is_a_lloyd_fixed_point_in_the_dense_feature_space(blobs, as_dask):
    """With tol=0 k-means stops only when no label changes: then every centre is the mean
    of its rows of the dense H, and every row is labelled by its nearest centre."""
    X, _ = blobs
    Xin = da.from_array(X, chunks=((60, 80, 60), (4,))) if as_dask else X
    model = CELM(3, n_hidden=50, tol=0.0, n_init=3, random_state=0).fit(Xin)
    labels = np.asarray(model.labels_)
    assert isinstance(model.labels_, da.Array if as_dask else np.ndarray)
    H = model.hidden_layer_(X)  # dense reference, small data only
    means = np.stack([H[labels == c].mean(axis=0) for c in range(3)])
    np.testing.assert_allclose(model.cluster_centers_, means, rtol=1e-10)
    d2 = ((H[:, None, :] - means[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(labels, d2.argmin(axis=1))
    np.testing.assert_allclose(model.inertia_, d2.min(axis=1).sum(), rtol=1e-10)
    np.testing.assert_allclose(model.transform(X), np.sqrt(d2), rtol=1e-8, atol=1e-12)


def test_chunking_does_not_change_the_result(blobs):
    X, _ = blobs
    a = CELM(3, n_hidden=50, random_state=1).fit(X)
    b = CELM(3, n_hidden=50, random_state=1).fit(da.from_array(X, chunks=((17, 100, 83), (4,))))
    np.testing.assert_array_equal(a.labels_, b.labels_.compute())
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10)


def test_predict_unseen_points_and_output_follows_input(blobs):
    X, _ = blobs
    model = CELM(3, n_hidden=50, random_state=0).fit(X[:150])
    pred = model.predict(X[150:])
    assert isinstance(pred, np.ndarray) and pred.shape == (50,)
    d = model.transform(X[150:])
    np.testing.assert_array_equal(pred, d.argmin(axis=1))
    lazy = model.predict(da.from_array(X[150:], chunks=20))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), pred)


def test_clusters_iris():
    X, y = load_iris(return_X_y=True)
    model = CELM(3, n_hidden=200, activation="sigmoid",
                 random_state=0).fit(X)
    assert adjusted_rand_score(y, model.labels_) > 0.55


def test_errors(blobs):
    X, _ = blobs
    with pytest.raises(ValueError, match="n_clusters=300 must be <= n_samples=200"):
        CELM(300, n_hidden=10).fit(X)
    with pytest.raises(ValueError, match="'activation' parameter of CELM must be a registered"):
        CELM(3, n_hidden=10, activation="sofplus").fit(X)
    model = CELM(3, n_hidden=10, random_state=0).fit(X)
    with pytest.raises(ValueError, match="X has 3 features, but .* is expecting 4 features"):
        model.predict(X[:, :3])
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        CELM(3, n_hidden=10).fit(X_nan)
