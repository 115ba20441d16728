"""Tests of the elmscale-landmarks plugin: its contract (via ``elmscale.testing``), its
registration, and the nodes an estimator fits against a dense NumPy computation."""

import dask
import numpy as np
import pytest
from elmscale import USELM
from elmscale.registry import Registry
from elmscale.testing import check_node_family
from elmscale.utils import draw_seed
from scipy.spatial.distance import cdist, pdist
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

import elmscale_landmarks
from elmscale_landmarks import LandmarkGaussians


@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler="sync"):
        yield


def _gaussians(rows, params):
    return np.exp(-cdist(rows, params["input_weights"].T, "sqeuclidean") * params["biases"] ** 2)


def test_contract():
    check_node_family(LandmarkGaussians(), reference=_gaussians)
    check_node_family(LandmarkGaussians(oversample=1), reference=_gaussians)


def test_registers_through_the_hook(monkeypatch):
    monkeypatch.setenv("ELMSCALE_LOAD_PLUGINS", "")  # only what this test registers
    reg = Registry()
    assert reg.register_plugin(elmscale_landmarks, name="landmarks") == "landmarks"
    assert isinstance(reg.get("hidden", "landmarks"), LandmarkGaussians)
    assert reg.failures == []


def test_uselm_nodes_are_gaussians_on_kmeans_centres_of_the_sample():
    X, _ = make_blobs(n_samples=300, n_features=4, centers=3, random_state=0)
    n, width, seed = 12, 0.8, 5
    model = USELM(
        3,
        n_hidden=n,
        rbf_fraction=1.0,
        rbf_width=width,
        data_nodes=LandmarkGaussians(),
        scaling="standard",
        graph="exact",
        random_state=seed,
    ).fit(X)
    # the same draws in NumPy: 10 rows per node, then the k-means seed
    rng = np.random.RandomState(seed)
    Xs = (X - X.mean(0)) / X.std(0)
    sample = Xs[np.sort(rng.choice(len(X), 10 * n, replace=False))]
    centres = KMeans(n, n_init=1, max_iter=100, random_state=draw_seed(rng)).fit(sample)
    centres = centres.cluster_centers_
    H = np.exp(-cdist(Xs, centres, "sqeuclidean") / (width * np.median(pdist(centres))) ** 2)
    np.testing.assert_allclose(model.hidden_layer_(X), H, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.input_weights_.T, centres, rtol=1e-9, atol=1e-12)
