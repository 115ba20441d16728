"""SS-ELM: chunked == dense NumPy (eq. 16), primal == dual (eq. 17), lam = 0 is the supervised
ELM (eq. 7), input kinds, bad input, the scikit-learn contract."""

import dask
import dask.array as da
import numpy as np
import pytest

import elmscale
from elmscale.algorithms._elm import ELMClassifier, elm_output_weights
from elmscale.algorithms._sselm import SSELM, sselm_dual_output_weights, sselm_output_weights

from .._reference import hidden, knn_laplacian

RTOL = 1e-10


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max()


def dense_sselm(model, X, y_semi, *, n_neighbors, weights, normalized, power, lam, C0):
    """Eq. 16 with dense NumPy: H, L (exact kNN, in the model's scaled space), C, Y~."""
    layer = model.hidden_layer_
    H = hidden(X, layer)
    Xs = (X - layer.offset) / layer.scale
    L = knn_laplacian(Xs, n_neighbors, weights=weights, normalized=normalized)
    Lp = np.linalg.matrix_power(L, power)
    classes = np.unique(y_semi[y_semi != -1])
    lab = y_semi != -1
    codes = np.searchsorted(classes, y_semi[lab])
    c = np.zeros(len(X))
    c[lab] = C0 / np.bincount(codes)[codes]
    Y = np.zeros((len(X), len(classes)))
    Y[np.flatnonzero(lab), codes] = 1.0
    A = np.eye(H.shape[1]) + H.T @ (c[:, None] * H) + lam * H.T @ Lp @ H
    return np.linalg.solve(A, H.T @ (c[:, None] * Y))


@pytest.mark.parametrize(
    "power,normalized,weights",
    [
        (1, False, "binary"),
        (1, True, "heat"),
        (2, True, "heat"),
        (2, False, "heat"),
        (3, True, "heat"),
        (5, True, "binary"),
    ],
)
def test_chunked_equals_dense_reference(moons_partially_labelled, power, normalized, weights):
    X, _, y_semi = moons_partially_labelled
    Xd = da.from_array(X, chunks=((90, 110, 100), 2))
    kw = dict(n_neighbors=8, weights=weights, normalized=normalized, lam=0.5, C0=20.0)
    model = SSELM(
        n_hidden=40,
        graph="exact",
        laplacian_power=power,
        random_state=0,
        **{k: v for k, v in kw.items()},
    ).fit(Xd, y_semi)
    assert model._solver == "primal"
    ref = dense_sselm(model, X, y_semi, power=power, **kw)
    assert _rel(model.output_weights_, ref) < RTOL


@pytest.mark.parametrize("power", [1, 2, 5])
def test_primal_equals_dual(rng, power):
    X = rng.normal(size=(50, 3))
    y = np.full(50, -1)
    y[:4], y[4:10] = 0, 1  # unbalanced labelled classes: C_i differ
    kw = dict(
        n_hidden=70,
        C0=5.0,
        lam=0.3,
        graph="exact",
        n_neighbors=6,
        laplacian_power=power,
        random_state=1,
    )
    dual = SSELM(**kw).fit(X, y)
    primal = SSELM(solver="primal", **kw).fit(X, y)
    assert dual._solver == "dual"
    assert _rel(dual.output_weights_, primal.output_weights_) < 1e-8
    ref = dense_sselm(
        primal, X, y, n_neighbors=6, weights="heat", normalized=True, power=power, lam=0.3, C0=5.0
    )
    assert _rel(primal.output_weights_, ref) < RTOL


@pytest.mark.parametrize("power,weights", [(3, "binary"), (5, "binary"), (4, "heat")])
def test_dual_higher_power_equals_dense(rng, power, weights):
    """p > 2 (the SS-ELM authors' G50C demo uses p = 5): the dual's L^p by repeated sparse
    products equals eq. 16 with numpy.linalg.matrix_power(L, p)."""
    X = rng.normal(size=(60, 3))
    y = np.full(60, -1)
    y[:5], y[5:12] = 0, 1
    kw = dict(n_neighbors=7, weights=weights, normalized=True, lam=0.2, C0=4.0)
    model = SSELM(n_hidden=90, graph="exact", laplacian_power=power, random_state=2, **kw).fit(X, y)
    assert model._solver == "dual"
    ref = dense_sselm(model, X, y, power=power, **kw)
    assert _rel(model.output_weights_, ref) < 1e-8


def test_lam_zero_equal_weights_is_supervised_elm(blobs):
    """Eq. 16 -> eq. 7: (I + C H^T H)^-1 C H^T Y = (H^T H + I/C)^-1 H^T Y."""
    X, y = blobs  # 80 points per class: C_i = C0 / 80 for every labelled point
    C = 0.5
    ss = SSELM(n_hidden=30, C0=C * 80, lam=0.0, random_state=3).fit(X, y)
    elm = ELMClassifier(n_hidden=30, C=C, random_state=3).fit(X, y)
    assert _rel(ss.output_weights_, elm.output_weights_) < RTOL
    # and between the functions over reduced matrices
    H = hidden(X, elm.hidden_layer_)
    Y = (y[:, None] == np.arange(3)).astype(float)
    hth, hty = H.T @ H, H.T @ Y
    assert (
        _rel(sselm_output_weights(C * hth, C * hty, H.T @ H, 0.0), elm_output_weights(hth, hty, C))
        < 1e-9
    )
    # the dual too (n_hidden > N)
    ss_d = SSELM(n_hidden=300, C0=C * 80, lam=0.0, random_state=3).fit(X, y)
    elm_d = ELMClassifier(n_hidden=300, C=C, random_state=3).fit(X, y)
    assert ss_d._solver == elm_d._solver == "dual"
    assert _rel(ss_d.output_weights_, elm_d.output_weights_) < 1e-8


def test_dual_function(rng):
    H = rng.uniform(size=(12, 20))
    Y = np.eye(3)[rng.randint(0, 3, 12)]
    c = np.r_[np.full(5, 2.0), np.zeros(7)]
    W = (rng.uniform(size=(12, 12)) > 0.6).astype(float)
    W = np.maximum(W, W.T)
    np.fill_diagonal(W, 0)
    L = np.diag(W.sum(1)) - W
    primal = np.linalg.solve(
        np.eye(20) + H.T @ (c[:, None] * H) + 0.7 * H.T @ L @ H, H.T @ (c[:, None] * Y)
    )
    assert _rel(sselm_dual_output_weights(H, Y, c, L, 0.7), primal) < 1e-9


def test_manifold_term_helps_on_moons(moons_partially_labelled):
    X, y, y_semi = moons_partially_labelled
    kw = dict(n_hidden=200, C0=10.0, activation="tanh", graph="exact", random_state=0)
    with_graph = SSELM(lam=1e4, **kw).fit(X, y_semi).score(X, y)
    without = SSELM(lam=0.0, **kw).fit(X, y_semi).score(X, y)
    assert with_graph > 0.97 and with_graph > without + 0.05


# -- input kinds ---------------------------------------------------------------------------------
def test_numpy_dask_and_chunkings_agree(moons_partially_labelled):
    X, y, y_semi = moons_partially_labelled
    kw = dict(n_hidden=30, lam=0.2, C0=10.0, graph="exact", random_state=0)
    ref = SSELM(**kw).fit(X, y_semi)
    pred = ref.predict(X)
    assert isinstance(pred, np.ndarray)
    for chunks in [(300,), (100, 100, 100), (50,) * 6]:
        Xd = da.from_array(X, chunks=(chunks, 2))
        m = SSELM(**kw).fit(Xd, da.from_array(y_semi, chunks=150))
        assert _rel(m.output_weights_, ref.output_weights_) < RTOL
        out = m.predict(Xd)
        assert isinstance(out, da.Array)
        np.testing.assert_array_equal(out.compute(), pred)
        assert isinstance(m.decision_function(Xd), da.Array)


def test_string_labels_with_unlabelled(moons_partially_labelled):
    X, y, y_semi = moons_partially_labelled
    names = np.array(["left", "right"], dtype=object)
    y_obj = np.where(y_semi == -1, -1, names[np.maximum(y_semi, 0)]).astype(object)
    kw = dict(n_hidden=30, lam=0.2, C0=10.0, graph="exact", random_state=0)
    m = SSELM(**kw).fit(X, y_obj)
    ref = SSELM(**kw).fit(X, y_semi)
    np.testing.assert_array_equal(m.classes_, ["left", "right"])
    assert m.n_labelled_ == 10
    np.testing.assert_array_equal(m.predict(X), names[ref.predict(X)])
    # plain string arrays have no -1: every sample is labelled
    m2 = SSELM(**kw).fit(X, names[y].astype(str))
    assert m2.n_labelled_ == len(y)


def test_class_weights_balance_the_labelled_classes(moons_partially_labelled):
    X, _, y_semi = moons_partially_labelled
    y2 = y_semi.copy()
    y2[np.flatnonzero(y_semi == 0)[:4]] = -1  # class 0 keeps a single labelled point
    m = SSELM(n_hidden=20, graph="exact", random_state=0).fit(X, y2)
    np.testing.assert_array_equal(m.class_counts_, [1, 5])


def test_registered():
    assert "ss-elm" in elmscale.available("algorithm")
    assert isinstance(elmscale.make("ss-elm", n_hidden=10), SSELM)


# -- bad input -----------------------------------------------------------------------------------
def test_bad_input(moons_partially_labelled):
    X, y, y_semi = moons_partially_labelled
    m = SSELM(n_hidden=10, graph="exact")
    with pytest.raises(ValueError, match="y has 299 samples, but X has 300 samples"):
        m.fit(X, y_semi[:-1])
    with pytest.raises(ValueError, match="y has 299 samples, but X has 300 samples"):
        m.fit(da.from_array(X, chunks=(100, 2)), da.from_array(y_semi[:-1]))
    with pytest.raises(ValueError, match="needs labelled samples: every label in y is -1"):
        m.fit(X, np.full(300, -1))
    with pytest.raises(ValueError, match="at least 2 classes in y; got 1 class: \\[1\\]"):
        m.fit(X, np.where(y_semi == 1, 1, -1))
    Xn = X.copy()
    Xn[7, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        m.fit(Xn, y_semi)
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        m.fit(da.from_array(Xn, chunks=(100, 2)), y_semi)
    with pytest.raises(ValueError, match="Unknown label type"):
        m.fit(X, np.linspace(0, 1, 300))
    with pytest.raises(ValueError, match="laplacian_power"):
        SSELM(laplacian_power=0).fit(X, y_semi)


# -- distributed ---------------------------------------------------------------------------------
@pytest.mark.distributed
def test_distributed_matches_sync(dask_client, moons_partially_labelled):
    X, _, y_semi = moons_partially_labelled
    Xd = da.from_array(X, chunks=(100, 2))
    kw = dict(n_hidden=40, lam=0.3, C0=10.0, graph="exact", laplacian_power=2, random_state=0)
    with dask.config.set(scheduler="sync"):
        ref = SSELM(**kw).fit(Xd, y_semi)
    m = SSELM(**kw).fit(Xd, y_semi)
    assert _rel(m.output_weights_, ref.output_weights_) < RTOL
    np.testing.assert_array_equal(m.predict(Xd).compute(), ref.predict(X))
