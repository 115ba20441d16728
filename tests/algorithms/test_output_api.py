"""scikit-learn's output API on elmscale's estimators: feature names out and set_output on
the transformers, ``score`` on the clusterers, and TUMK-ELM's out-of-sample map."""

import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import (
    check_get_feature_names_out_error,
    check_global_output_transform_pandas,
    check_set_output_transform,
    check_set_output_transform_pandas,
    check_transformer_get_feature_names_out,
    check_transformer_get_feature_names_out_pandas,
)

from elmscale import ELMJEC, EMMC, TUMKELM, USELM

pd = pytest.importorskip("pandas")

TRANSFORMERS = [
    USELM(n_clusters=3, n_hidden=30, graph="exact", n_neighbors=3, random_state=0),
    ELMJEC(
        n_clusters=2,
        n_hidden=20,
        graph="exact",
        n_neighbors=3,
        n_restarts=2,
        max_iter=3,
        random_state=0,
    ),
    TUMKELM(
        n_clusters=3,
        kernels=["linear", ("rbf", {"width": 1.0})],
        n_init=2,
        max_iter=5,
        random_state=0,
    ),
]
SET_OUTPUT_CHECKS = [
    check_set_output_transform,
    check_set_output_transform_pandas,
    check_global_output_transform_pandas,
    check_transformer_get_feature_names_out,
    check_transformer_get_feature_names_out_pandas,
    check_get_feature_names_out_error,
]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.filterwarnings("ignore:H~\\^T M H~ had only:UserWarning")
@pytest.mark.parametrize("check", SET_OUTPUT_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("estimator", TRANSFORMERS, ids=lambda e: type(e).__name__)
def test_set_output_checks(estimator, check):
    """scikit-learn's set_output and get_feature_names_out checks pass on the transformers."""
    import warnings

    from elmscale.exceptions import ElmscaleWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ElmscaleWarning)
        check(type(estimator).__name__, estimator)


@pytest.mark.parametrize("estimator", TRANSFORMERS, ids=lambda e: type(e).__name__)
def test_pandas_output_in_a_pipeline(blobs, estimator):
    """A Pipeline's set_output reaches the estimator: a DataFrame whose columns are the
    estimator's feature names and whose values are the NumPy transform."""
    X, _ = blobs
    pipe = make_pipeline(StandardScaler(), estimator).fit(X)
    expected = pipe.transform(X)
    out = pipe.set_output(transform="pandas").transform(X)
    assert isinstance(out, pd.DataFrame)
    name = type(estimator).__name__.lower()
    assert list(out.columns) == [f"{name}{i}" for i in range(expected.shape[1])]
    np.testing.assert_array_equal(out.to_numpy(), expected)


def _dense_sse(E, centers, labels):
    return -float(((E - centers[labels]) ** 2).sum())


@pytest.mark.parametrize("as_dask", [False, True])
@pytest.mark.parametrize("row_normalize", [False, True])
def test_uselm_score_is_negative_kmeans_inertia(blobs, as_dask, row_normalize):
    """USELM.score(X_train) is -inertia_ (k-means on the embedding, on its unit-length rows
    with row_normalize), as KMeans.score, and on other points -sum of squared distances to
    the nearest centre."""
    X, _ = blobs
    model = USELM(
        n_clusters=3, n_hidden=40, graph="exact", row_normalize=row_normalize, random_state=0
    ).fit(X)
    Xs = da.from_array(X, chunks=(70, 5)) if as_dask else X
    assert model.score(Xs) == pytest.approx(-model.inertia_, rel=1e-10)
    Xnew = X[:50] + 0.3
    E = model.transform(Xnew)
    if row_normalize:
        E = E / np.linalg.norm(E, axis=1, keepdims=True)
    d2 = ((E[:, None] - model.cluster_centers_[None]) ** 2).sum(axis=2)
    assert model.score(Xnew) == pytest.approx(-d2.min(axis=1).sum(), rel=1e-10)


def test_elmjec_score_is_its_kmeans_objective(blobs):
    """ELMJEC.score(X_train) is minus the k-means term of the last iteration (history_)."""
    X, _ = blobs
    model = ELMJEC(n_clusters=3, n_hidden=40, graph="exact", n_restarts=3, random_state=0).fit(X)
    assert model.score(X) == pytest.approx(-model.history_["kmeans_objective"][-1], rel=1e-8)


@pytest.mark.parametrize("as_dask", [False, True])
def test_emmc_score_is_the_elm_squared_error(blobs, as_dask):
    """EMMC.score is minus the squared error of the ELM's outputs against the target code
    of each point's predicted cluster."""
    X, _ = blobs
    model = EMMC(n_clusters=3, n_hidden=30, random_state=0).fit(X)
    F, labels = model.decision_function(X), model.predict(X)
    Xs = da.from_array(X, chunks=(70, 5)) if as_dask else X
    assert model.score(Xs) == pytest.approx(_dense_sse(F, model.targets_, labels), rel=1e-10)


def test_elmjec_graph_default_is_auto(blobs):
    """ELMJEC's graph default is "auto", as USELM's and SSELM's: exact on small data."""
    assert ELMJEC().graph == USELM().graph == "auto"
    from elmscale.graph import resolve_backend

    model = ELMJEC(n_clusters=3, n_hidden=30, n_restarts=2, random_state=0).fit(blobs[0])
    assert resolve_backend(model.graph, len(blobs[0])) == "exact"


KERNELS = ["linear", ("rbf", {"width": 1.0}), ("polynomial", {"degree": 2})]


@pytest.mark.parametrize("mode", ["exact", "scalable"])
@pytest.mark.parametrize("assignment", ["argmax", "kmeans"])
@pytest.mark.parametrize("as_dask", [False, True])
def test_tumkelm_predict_on_training_points_gives_labels(blobs, mode, assignment, as_dask):
    """TUMKELM.transform(X_train) is embedding_ and predict(X_train) is labels_, NumPy and
    dask input alike."""
    X, _ = blobs
    Xs = da.from_array(X, chunks=(80, 5)) if as_dask else X
    model = TUMKELM(
        n_clusters=3, kernels=KERNELS, mode=mode, assignment=assignment, random_state=0
    ).fit(Xs)
    E, labels = model.transform(Xs), model.predict(Xs)
    assert isinstance(labels, da.Array) == as_dask
    if as_dask:
        E, labels = E.compute(), labels.compute()
    emb = np.asarray(model.embedding_)
    np.testing.assert_allclose(E, emb, atol=1e-10 * np.abs(emb).max())
    np.testing.assert_array_equal(labels, np.asarray(model.labels_))
    assert model.get_feature_names_out().tolist() == ["tumkelm0", "tumkelm1", "tumkelm2"]


def test_tumkelm_exact_transform_is_the_nystrom_extension(blobs):
    """Exact mode: transform(x) = K^(x, X_fit) U / s with K^ the weighted dense kernels."""
    from sklearn.metrics.pairwise import polynomial_kernel, rbf_kernel

    X, _ = blobs
    model = TUMKELM(n_clusters=3, kernels=KERNELS, mode="exact", random_state=0).fit(X)
    lo, hi = X.min(axis=0), X.max(axis=0)
    Xnew = np.random.RandomState(1).uniform(lo, hi, size=(20, X.shape[1]))
    offset, scale = model.scaling_
    A, B = (X - offset) / scale, (Xnew - offset) / scale
    mu = model.kernel_weights_
    widths = model.kernels_[1].width
    K = (
        mu[0] * B @ A.T
        + mu[1] * rbf_kernel(B, A, gamma=1 / (2 * widths**2))
        + mu[2] * polynomial_kernel(B, A, degree=2, gamma=1, coef0=1)
    )
    expected = K @ model.embedding_ / model.eigenvalues_
    np.testing.assert_allclose(model.transform(Xnew), expected, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("mode", ["exact", "scalable"])
def test_tumkelm_labels_unseen_points(mode):
    """Held-out points of well-separated blobs get the cluster of their blob."""
    X, y = make_blobs(n_samples=400, centers=3, n_features=4, cluster_std=0.6, random_state=3)
    model = TUMKELM(
        n_clusters=3, kernels=KERNELS, mode=mode, assignment="kmeans", random_state=0
    ).fit(X[:300])
    assert adjusted_rand_score(y[:300], model.labels_) == 1.0
    assert adjusted_rand_score(y[300:], model.predict(X[300:])) == 1.0


def test_tumkelm_transform_rejects_wrong_width(blobs):
    X, _ = blobs
    model = TUMKELM(n_clusters=3, kernels=KERNELS, random_state=0).fit(X)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :3])


def test_tumkelm_score_is_negative_sse_to_cluster_means(blobs):
    """TUMKELM.score(X_train) is -sum ||u_i - mean of u over its cluster||^2."""
    X, _ = blobs
    model = TUMKELM(n_clusters=3, kernels=KERNELS, random_state=0).fit(X)
    E, labels = model.embedding_, model.labels_
    centers = np.array([E[labels == c].mean(axis=0) for c in range(3)])
    assert model.score(X) == pytest.approx(_dense_sse(E, centers, labels), rel=1e-10)
