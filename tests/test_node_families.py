"""Hidden-node families (``register_hidden_layers``): a third-party family registered through
the hook and used by name gives the H of a dense NumPy computation, on a real cluster too; the
built-in data-row Gaussian nodes, now registered through the same hook, are bit-identical to
the engine's RBF layer they replaced; bad names and bad families fail clearly; the example
plugin plugins/elmscale-landmarks works on a cluster."""

import pickle
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from scipy.spatial.distance import cdist, pdist
from sklearn.datasets import load_digits

import elmscale
from elmscale import USELM, registry
from elmscale.exceptions import PluginLoadWarning, UnknownPluginError
from elmscale.hidden import (
    GaussianRows,
    MixedHiddenLayer,
    NodeFamily,
    NodeFamilyLayer,
    RandomHiddenLayer,
    activation,
    apply_scaling,
)
from elmscale.testing import check_node_family

ROOT = Path(__file__).resolve().parents[1]
LANDMARKS_SRC = ROOT / "plugins" / "elmscale-landmarks" / "src"


class InverseMultiquadric(NodeFamily):
    """``1 / sqrt(1 + ||x - c||^2 / (width s)^2)``: centres c drawn from ``rng`` among a
    sample of three rows per node, s the RMS distance of the sample to its mean. No
    ``input_weights``: its parameters are its own."""

    node = "imq"

    def sample_size(self, n_nodes, n_samples):
        return min(3 * n_nodes, n_samples)

    def fit(self, sample, n_nodes, rng, *, width):
        pick = rng.choice(len(sample), n_nodes, replace=False)
        s = np.sqrt(((sample - sample.mean(0)) ** 2).sum(1).mean())
        return {"centres": sample[pick], "width": width * s}

    def transform(self, rows, params):
        c = params["centres"].astype(rows.dtype)
        d2 = (rows**2).sum(1)[:, None] - 2 * rows @ c.T + (c**2).sum(1)[None, :]
        np.maximum(d2, 0, out=d2)
        return 1 / np.sqrt(1 + d2 / rows.dtype.type(params["width"]) ** 2)


def _imq_dense(X, n_nodes, width, seed, offset, scale):
    """The family's H by the same draws in plain NumPy: the sample, then the centres."""
    rng = np.random.RandomState(seed)
    Xs = (X - offset) / scale
    sample = Xs[np.sort(rng.choice(len(X), min(3 * n_nodes, len(X)), replace=False))]
    centres = sample[rng.choice(len(sample), n_nodes, replace=False)]
    s = np.sqrt(((sample - sample.mean(0)) ** 2).sum(1).mean())
    return 1 / np.sqrt(1 + cdist(Xs, centres, "sqeuclidean") / (width * s) ** 2)


class _ImqPlugin:
    @elmscale.hookimpl
    def register_hidden_layers(self, register):
        register("imq-rows", InverseMultiquadric(), description="inverse multiquadrics")


@pytest.fixture
def imq_registered():
    """The plugin above in the process-wide registry, removed afterwards."""
    reg = registry.get_registry()
    assert reg.register_plugin(_ImqPlugin(), name="tests-imq") == "tests-imq"
    yield
    reg.unregister_plugin("tests-imq")


def _standard(X):
    return X.mean(0), X.std(0)


# -- the built-in family -----------------------------------------------------------------------
def test_builtin_family_registers_through_the_hook():
    entry = registry.get_registry().entry("hidden", "gaussian-rows")
    assert isinstance(entry.obj, GaussianRows) and entry.plugin == "elmscale._builtins.hidden"
    assert "gaussian-rows" in elmscale.available("hidden")


@activation("rbf")
def _gaussian_sq(Z):
    Z *= Z
    np.negative(Z, out=Z)
    return np.exp(Z, out=Z)


def _engine_rbf_nodes(family, Xd, n_nodes, width, rng, *, offset=None, scale=None):
    """The data nodes as elmscale drew them before families: an engine RBF layer whose
    centres are the sampled rows, ``b = 1 / (width m)``."""
    idx = np.sort(rng.choice(Xd.shape[0], n_nodes, replace=n_nodes > Xd.shape[0]))
    centres = apply_scaling(np.asarray(Xd[idx].compute(), dtype=np.float64), offset, scale)
    b = np.full(n_nodes, 1.0 / (width * np.median(pdist(centres[:1000]))))
    return RandomHiddenLayer(centres.T, b, _gaussian_sq, offset=offset, scale=scale)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_builtin_data_nodes_are_bit_identical_to_the_engine_rbf_layer(dtype, fraction, monkeypatch):
    """On digits, the hidden layer and the embedding through the registered family equal,
    bit for bit, those of the engine RBF layer the data nodes used to be."""
    X = load_digits().data.astype(dtype)
    Xd = da.from_array(X, chunks=(400, 64))
    params = dict(n_hidden=120, rbf_fraction=fraction, rbf_width=0.8, graph="exact")
    new = USELM(10, **params, random_state=3).fit(Xd)
    import elmscale.hidden._data_nodes

    monkeypatch.setattr(elmscale.hidden._data_nodes, "fit_node_family", _engine_rbf_nodes)
    old = USELM(10, **params, random_state=3).fit(Xd)
    layers = [m.hidden_layer_ for m in (new, old)]
    if fraction == 1.0:
        assert isinstance(layers[0], NodeFamilyLayer) and layers[0].node == "rbf"
        assert type(layers[1]) is RandomHiddenLayer
    assert np.array_equal(layers[0](X), layers[1](X)) and layers[0](X).dtype == dtype
    np.testing.assert_array_equal(np.asarray(new.embedding_), np.asarray(old.embedding_))
    np.testing.assert_array_equal(new.input_weights_, old.input_weights_)
    np.testing.assert_array_equal(new.biases_, old.biases_)


def test_builtin_family_passes_its_contract():
    def gaussians(rows, params):
        d2 = cdist(rows, params["input_weights"].T, "sqeuclidean")
        return np.exp(-d2 * params["biases"] ** 2)

    check_node_family("gaussian-rows", reference=gaussians)


# -- a third-party family ----------------------------------------------------------------------
def test_third_party_family_passes_the_contract():
    check_node_family(
        InverseMultiquadric(),
        reference=lambda rows, p: (
            1 / np.sqrt(1 + cdist(rows, p["centres"], "sqeuclidean") / p["width"] ** 2)
        ),
    )


@pytest.mark.distributed
def test_registered_family_by_name_gives_dense_h_on_a_cluster(
    dask_client, imq_registered, blobs, global_seed
):
    """USELM(data_nodes="imq-rows") on a two-process LocalCluster: H built by the workers
    and transform's h(x) beta equal the dense NumPy computation of the family."""
    X, _ = blobs
    Xd = da.from_array(X, chunks=((70, 90, 80), 5))
    kw = dict(n_hidden=30, rbf_fraction=1.0, rbf_width=1.3, data_nodes="imq-rows")
    kw.update(scaling="standard", graph="exact", random_state=global_seed)
    model = USELM(3, **kw)
    H = _imq_dense(X, 30, 1.3, global_seed, *_standard(X))
    reduction = model.reduce(Xd)
    np.testing.assert_allclose(reduction.features.H.compute(), H, rtol=1e-10, atol=1e-12)
    model.solve(reduction)
    assert isinstance(model.hidden_layer_, NodeFamilyLayer) and model.hidden_layer_.node == "imq"
    np.testing.assert_allclose(
        model.transform(Xd).compute(), H @ model.output_weights_, rtol=1e-8, atol=1e-10
    )


def test_family_nodes_follow_the_engine_nodes(imq_registered, blobs, global_seed):
    """rbf_fraction=0.5: the engine's sigmoid nodes, then the family's, from one random
    state in that order; the family's parameters are not input weights."""
    X, _ = blobs
    kw = dict(n_hidden=20, activation="sigmoid", rbf_fraction=0.5, data_nodes="imq-rows")
    model = USELM(3, scaling="standard", graph="exact", random_state=global_seed, **kw).fit(X)
    layer = model.hidden_layer_
    sig, fam = layer.parts
    assert isinstance(layer, MixedHiddenLayer) and [sig.n_hidden, fam.n_hidden] == [10, 10]
    offset, scale = _standard(X)
    Xs = (X - offset) / scale
    rng = np.random.RandomState(global_seed)
    A = rng.uniform(-1, 1, size=(5, 10))
    b = rng.uniform(-1, 1, size=10)
    # the family's draws continue the same stream
    sample = Xs[np.sort(rng.choice(len(X), 30, replace=False))]
    centres = sample[rng.choice(30, 10, replace=False)]
    s = np.sqrt(((sample - sample.mean(0)) ** 2).sum(1).mean())
    expected = np.hstack(
        [1 / (1 + np.exp(-(Xs @ A + b))), 1 / np.sqrt(1 + cdist(Xs, centres, "sqeuclidean") / s**2)]
    )
    np.testing.assert_allclose(layer(X), expected, rtol=1e-10, atol=1e-12)
    with pytest.raises(AttributeError, match="no 'input_weights' parameter"):
        _ = model.input_weights_


def test_family_params_pickle_with_the_model(imq_registered, blobs):
    X, _ = blobs
    model = USELM(3, n_hidden=20, rbf_fraction=1.0, data_nodes="imq-rows", graph="exact")
    model.set_params(random_state=0).fit(X)
    loaded = pickle.loads(pickle.dumps(model))
    params = loaded.hidden_layer_.params
    assert set(params) == {"centres", "width"}
    np.testing.assert_array_equal(params["centres"], model.hidden_layer_.params["centres"])
    assert isinstance(loaded.hidden_layer_.family, InverseMultiquadric)
    np.testing.assert_array_equal(loaded.transform(X), model.transform(X))


def test_family_object_works_like_its_name(imq_registered, blobs):
    X, _ = blobs
    kw = dict(n_hidden=20, rbf_fraction=1.0, graph="exact", random_state=0)
    by_name = USELM(3, data_nodes="imq-rows", **kw).fit(X)
    by_object = USELM(3, data_nodes=InverseMultiquadric(), **kw).fit(X)
    np.testing.assert_array_equal(by_name.embedding_, by_object.embedding_)


def test_sweep_shares_one_reduction_with_a_family_object(blobs, monkeypatch):
    """Clones deep-copy the family; equal by value, they still share the reduction."""
    import elmscale.hidden._data_nodes as data_nodes

    calls = []
    real = data_nodes.fit_node_family
    monkeypatch.setattr(
        data_nodes, "fit_node_family", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    model = USELM(3, n_hidden=20, rbf_fraction=1.0, data_nodes=InverseMultiquadric())
    results = elmscale.sweep(model.set_params(graph="exact"), blobs[0], {"lam": [0.1, 1.0]})
    assert len(results) == 2 and len(calls) == 1
    assert InverseMultiquadric() == InverseMultiquadric() != GaussianRows()


# -- errors ------------------------------------------------------------------------------------
def test_unknown_name_is_a_value_error_listing_the_registered(imq_registered, blobs):
    with pytest.raises(ValueError, match=r"'data_nodes'.*\['gaussian-rows', 'imq-rows'\]"):
        USELM(3, rbf_fraction=0.5, data_nodes="imq-row").fit(blobs[0])
    with pytest.raises(ValueError, match="'data_nodes'.*fit.*transform"):
        USELM(3, rbf_fraction=0.5, data_nodes=object()).fit(blobs[0])
    with pytest.raises(UnknownPluginError, match="data_nodes='x'.*gaussian-rows, imq-rows"):
        registry.resolve("hidden", "x", "data_nodes")


def test_registering_an_object_without_the_methods_is_reported(monkeypatch):
    monkeypatch.setenv("ELMSCALE_LOAD_PLUGINS", "")

    class Plugin:
        @elmscale.hookimpl
        def register_hidden_layers(self, register):
            register("not-a-family", lambda rows: rows)

    reg = registry.Registry()
    with pytest.warns(PluginLoadWarning, match="'not-a-family' must have methods fit"):
        reg.register_plugin(Plugin(), name="bad-family")
    assert "not-a-family" not in reg.available("hidden")


class _Broken(InverseMultiquadric):
    def __init__(self, fault):
        self.fault = fault

    def fit(self, sample, n_nodes, rng, *, width):
        params = super().fit(sample, n_nodes, rng, width=width)
        return list(params.values()) if self.fault == "list" else params

    def transform(self, rows, params):
        H = super().transform(rows, params)
        if self.fault == "shape":
            return H[:, 1:]
        if self.fault == "blockwise":
            return H / H.mean()
        if self.fault == "dtype":
            return H.astype(np.float64)
        return H


@pytest.mark.parametrize(
    "fault, message",
    [
        ("list", "fit must return a dict of parameters, got list"),
        ("shape", r"transform has shape \(150, 6\), expected \(150, 7\)"),
        ("blockwise", "transform is not row-wise"),
        ("dtype", "transform changed the dtype: float32 rows in, float64 out"),
    ],
)
def test_check_node_family_names_what_is_wrong(fault, message):
    with pytest.raises(AssertionError, match=message):
        check_node_family(_Broken(fault))


def test_layer_rejects_a_transform_of_the_wrong_width(blobs):
    X, _ = blobs
    layer = NodeFamilyLayer(_Broken("shape"), {"centres": X[:4], "width": 1.0}, 4, 5)
    with pytest.raises(ValueError, match=r"returned shape \(240, 3\) for 240 rows; expected"):
        layer(X)


# -- the example plugin ------------------------------------------------------------------------
def _on_path(path, present):
    """Put ``path`` first on this process's ``sys.path``, or take it off (run on workers: a
    bound ``sys.path.insert`` would travel with the client's list, not change theirs)."""
    while path in sys.path:
        sys.path.remove(path)
    if present:
        sys.path.insert(0, path)


@pytest.fixture
def landmarks(monkeypatch, dask_client):
    """plugins/elmscale-landmarks imported from its source tree, on the client and on the
    workers (as if installed there too), and registered in the process-wide registry."""
    monkeypatch.syspath_prepend(str(LANDMARKS_SRC))
    import elmscale_landmarks

    dask_client.run(_on_path, str(LANDMARKS_SRC), True)
    reg = registry.get_registry()
    assert reg.register_plugin(elmscale_landmarks, name="tests-landmarks") == "tests-landmarks"
    yield elmscale_landmarks
    reg.unregister_plugin("tests-landmarks")
    dask_client.run(_on_path, str(LANDMARKS_SRC), False)


@pytest.mark.distributed
def test_landmark_plugin_on_a_cluster(dask_client, landmarks, global_seed):
    """USELM(data_nodes="landmarks") on the LocalCluster: centres are the k-means centres of
    the sample (dense scikit-learn k-means on the same rows, same seed) and H the Gaussians
    on them."""
    from sklearn.cluster import KMeans

    from elmscale.utils import draw_seed

    X = load_digits().data[:600]
    Xd = da.from_array(X, chunks=(200, 64))
    n, width = 15, 0.9
    kw = dict(n_hidden=n, rbf_fraction=1.0, rbf_width=width, scaling="standard")
    model = USELM(10, data_nodes="landmarks", graph="exact", random_state=global_seed, **kw)
    model.fit(Xd)
    assert isinstance(model.hidden_layer_.family, landmarks.LandmarkGaussians)
    rng = np.random.RandomState(global_seed)
    offset, scale = _standard(X)
    Xs = (X - offset) / np.where(scale > 0, scale, 1.0)
    sample = Xs[np.sort(rng.choice(len(X), 10 * n, replace=False))]
    km = KMeans(n, n_init=1, max_iter=100, random_state=draw_seed(rng)).fit(sample)
    c = km.cluster_centers_
    H = np.exp(-cdist(Xs, c, "sqeuclidean") / (width * np.median(pdist(c))) ** 2)
    np.testing.assert_allclose(model.input_weights_.T, c, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        model.transform(Xd).compute(), H @ model.output_weights_, rtol=1e-7, atol=1e-9
    )
