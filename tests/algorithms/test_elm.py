"""Supervised ELM: chunked == dense NumPy, primal == dual, input kinds, bad input, contract."""

import dask.array as da
import numpy as np
import pytest

import elmscale
from elmscale.algorithms._elm import (
    ELMClassifier,
    ELMRegressor,
    elm_dual_output_weights,
    elm_output_weights,
)
from elmscale.gram import hidden_stats
from elmscale.hidden import HiddenFeatures

from .._reference import elm_ridge, hidden

RTOL = 1e-10


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max()


def _one_hot(y):
    classes = np.unique(y)
    return (y[:, None] == classes[None, :]).astype(float)


@pytest.fixture
def regression(rng):
    X = rng.normal(size=(230, 6))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rng.normal(size=230)
    return X, y


# -- the maths -----------------------------------------------------------------------------------
@pytest.mark.parametrize("chunks", [(230,), (70, 90, 70), (33,) * 6 + (32,)])
def test_regressor_chunked_equals_dense_reference(regression, chunks):
    X, y = regression
    Xd = da.from_array(X, chunks=(chunks, X.shape[1]))
    model = ELMRegressor(n_hidden=40, C=10.0, random_state=0).fit(Xd, y)
    assert model._solver == "primal"
    H = hidden(X, model.hidden_layer_)
    ref = elm_ridge(H, y[:, None], 10.0)
    assert _rel(model.output_weights_, ref) < RTOL
    pred = model.predict(Xd)
    assert isinstance(pred, da.Array)
    np.testing.assert_allclose(pred.compute(), H @ ref[:, 0], rtol=RTOL, atol=1e-12)


def test_classifier_chunked_equals_dense_reference(blobs_dask, blobs):
    X, y = blobs
    model = ELMClassifier(n_hidden=30, C=5.0, random_state=1).fit(blobs_dask[0], y)
    H = hidden(X, model.hidden_layer_)
    ref = elm_ridge(H, _one_hot(y), 5.0)
    assert _rel(model.output_weights_, ref) < RTOL
    np.testing.assert_array_equal(
        model.predict(blobs_dask[0]).compute(), np.argmax(H @ ref, axis=1)
    )


@pytest.mark.parametrize("class_weight", [None, "balanced", {0: 3.0, 2: 0.5}])
def test_primal_equals_dual_and_weighted_reference(rng, class_weight):
    X = rng.normal(size=(45, 4))
    y = np.r_[np.zeros(25), np.ones(12), 2 * np.ones(8)].astype(int)
    kw = dict(n_hidden=60, C=3.0, class_weight=class_weight, random_state=2)
    primal = ELMClassifier(solver="primal", **kw).fit(X, y)
    dual = ELMClassifier(**kw).fit(X, y)
    assert dual._solver == "dual"  # n_hidden > n_samples
    H = hidden(X, primal.hidden_layer_)
    if class_weight is None:
        w = np.ones(len(y))
    elif class_weight == "balanced":
        w = len(y) / (3 * np.bincount(y)[y])
    else:
        w = np.array([class_weight.get(k, 1.0) for k in y])
    Y = _one_hot(y)
    ref = np.linalg.solve(H.T @ (w[:, None] * H) + np.eye(60) / 3.0, H.T @ (w[:, None] * Y))
    assert _rel(primal.output_weights_, ref) < RTOL
    assert _rel(dual.output_weights_, ref) < 1e-8
    np.testing.assert_allclose(
        primal.class_weight_, np.unique(w) if class_weight == "balanced" else primal.class_weight_
    )


def test_functions_over_reduced_matrices(regression):
    X, y = regression
    model = ELMRegressor(n_hidden=20, C=2.0, random_state=3).fit(X, y)
    features = HiddenFeatures(da.from_array(X, chunks=(50, 6)), model.hidden_layer_, cache=False)
    stats = hidden_stats(features, ("hth", "hty"), Y=da.from_array(y[:, None], chunks=(50, 1)))
    beta = elm_output_weights(stats["hth"], stats["hty"], 2.0)
    assert _rel(beta, model.output_weights_) < RTOL
    H = hidden(X, model.hidden_layer_)
    assert _rel(elm_dual_output_weights(H, y[:, None], 2.0), beta) < 1e-8


def test_sweep_over_C_reuses_one_pass(regression):
    X, y = regression
    model = ELMRegressor(n_hidden=20, random_state=3).fit(X, y)
    H = hidden(X, model.hidden_layer_)
    hth, hty = H.T @ H, H.T @ y[:, None]
    for C in (1e-3, 1.0, 1e3):
        assert _rel(elm_output_weights(hth, hty, C), elm_ridge(H, y[:, None], C)) < 1e-9


# -- input kinds ---------------------------------------------------------------------------------
@pytest.mark.parametrize("as_dask", [False, True])
def test_output_follows_input(blobs, as_dask):
    X, y = blobs
    Xin = da.from_array(X, chunks=(100, 5)) if as_dask else X
    model = ELMClassifier(n_hidden=25, random_state=0).fit(Xin, y)
    for out in (model.predict(Xin), model.predict_proba(Xin), model.decision_function(Xin)):
        assert isinstance(out, da.Array) == as_dask
    reg = ELMRegressor(n_hidden=25, random_state=0).fit(Xin, y.astype(float))
    assert isinstance(reg.predict(Xin), da.Array) == as_dask


def test_chunkings_and_dask_y_agree(blobs):
    X, y = blobs
    ref = ELMClassifier(n_hidden=25, random_state=0).fit(X, y)
    for chunks in [(240,), (70, 90, 80), (40,) * 6]:
        Xd = da.from_array(X, chunks=(chunks, 5))
        yd = da.from_array(y, chunks=(120,))  # y's chunks differ from X's: realigned
        m = ELMClassifier(n_hidden=25, random_state=0).fit(Xd, yd)
        assert _rel(m.output_weights_, ref.output_weights_) < RTOL
        np.testing.assert_array_equal(m.classes_, ref.classes_)
        assert m.score(Xd, yd) == ref.score(X, y)


def test_string_labels_and_probabilities(blobs):
    X, y = blobs
    names = np.array(["cat", "dog", "emu"])[y]
    model = ELMClassifier(n_hidden=40, C=10.0, random_state=0).fit(X, names)
    np.testing.assert_array_equal(model.classes_, ["cat", "dog", "emu"])
    pred = model.predict(X)
    assert pred.dtype.kind == "U" and model.score(X, names) > 0.95
    P = model.predict_proba(X)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    out = model.decision_function(X)
    np.testing.assert_allclose(P, np.exp(out) / np.exp(out).sum(1, keepdims=True))
    np.testing.assert_array_equal(model.classes_[P.argmax(1)], pred)


def test_binary_decision_function(blobs):
    X, y = blobs
    keep = y < 2
    model = ELMClassifier(n_hidden=30, random_state=0).fit(X[keep], y[keep])
    D = model.decision_function(X[keep])
    assert D.shape == (keep.sum(),)
    np.testing.assert_array_equal(model.predict(X[keep]), (D > 0).astype(int))


def test_multioutput_regression(regression):
    X, y = regression
    Y = np.c_[y, -2 * y]
    model = ELMRegressor(n_hidden=30, random_state=0).fit(X, Y)
    assert model.predict(X).shape == (len(y), 2)
    np.testing.assert_allclose(model.predict(X)[:, 1], -2 * model.predict(X)[:, 0], rtol=1e-9)


def test_registered():
    assert {"elm-classifier", "elm-regressor"} <= set(elmscale.available("algorithm"))
    assert isinstance(elmscale.make("elm-classifier", n_hidden=10), ELMClassifier)


# -- bad input -----------------------------------------------------------------------------------
def test_bad_input(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match="y has 239 samples, but X has 240 samples"):
        ELMClassifier(n_hidden=10).fit(X, y[:-1])
    with pytest.raises(ValueError, match="y has 239 samples, but X has 240 samples"):
        ELMRegressor(n_hidden=10).fit(X, y[:-1].astype(float))
    with pytest.raises(ValueError, match="at least 2 classes in y; got 1 class"):
        ELMClassifier(n_hidden=10).fit(X, np.zeros(240, dtype=int))
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        ELMClassifier(n_hidden=10).fit(Xn, y)
    with pytest.raises(ValueError, match="X contains NaN or infinity"):  # lazily, at the pass
        ELMClassifier(n_hidden=10).fit(da.from_array(Xn, chunks=(60, 5)), y)
    with pytest.raises(ValueError, match="Unknown label type"):
        ELMClassifier(n_hidden=10).fit(X, np.linspace(0, 1, 240))
    with pytest.raises(ValueError, match="y contains NaN"):
        ELMRegressor(n_hidden=10).fit(X, np.full(240, np.nan))
    model = ELMClassifier(n_hidden=10).fit(X, y)
    with pytest.raises(ValueError, match="X has 4 features, but ELMClassifier is expecting 5"):
        model.predict(X[:, :4])


# -- distributed ---------------------------------------------------------------------------------
@pytest.mark.distributed
def test_distributed_matches_sync(dask_client, blobs):
    X, y = blobs
    Xd = da.from_array(X, chunks=(80, 5))
    import dask

    with dask.config.set(scheduler="sync"):
        ref = ELMClassifier(n_hidden=30, random_state=0).fit(Xd, y)
        ref_reg = ELMRegressor(n_hidden=300, random_state=0).fit(Xd, y.astype(float))
    model = ELMClassifier(n_hidden=30, random_state=0).fit(Xd, y)  # primal, on the cluster
    reg = ELMRegressor(n_hidden=300, random_state=0).fit(Xd, y.astype(float))  # dual
    assert _rel(model.output_weights_, ref.output_weights_) < RTOL
    assert _rel(reg.output_weights_, ref_reg.output_weights_) < RTOL
    np.testing.assert_array_equal(model.predict(Xd).compute(), ref.predict(X))


# -- the scikit-learn contract -------------------------------------------------------------------
