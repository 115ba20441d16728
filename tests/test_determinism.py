"""One seed, one model: every estimator gives the same labels (exactly) and the same
embeddings and scores (to 1e-8, up to the sign of each column) whatever the row chunking
of a dask input and however many worker processes run the fit.

Float data (blobs) must agree everywhere, and so must integer-valued data (scikit-learn's
digits), where many distances tie exactly: the kNN graph ranks neighbours by an exact
distance and the global row index, not by a rounding that depends on the block shapes."""

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits, make_blobs

from ._estimators import (
    NAMES,
    assert_same_results,
    estimators,
    fit,
    make,
    on_cluster,
    outputs,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore::sklearn.exceptions.ConvergenceWarning",
    "ignore::elmscale.algorithms._elmjec.FewerComponentsWarning",
)

RTOL = 1e-8
BLOBS = make_blobs(400, n_features=5, centers=3, cluster_std=2.5, random_state=1)
CHUNKINGS = {"one": (400,), "even": (100, 100, 100, 100), "uneven": (35, 180, 61, 124)}
# TUMK-ELM in its scalable (dask) mode; "auto" would pick the exact one at this size
PARAMS = {"TUMKELM": {"mode": "scalable"}}


def _fit_outputs(name, X, y, chunks, **params):
    Xd = da.from_array(X, chunks=(chunks, X.shape[1]))
    model = fit(make(name, **{**PARAMS.get(name, {}), **params}), name, Xd, y)
    return outputs(model, X)


@pytest.fixture(scope="module")
def references():
    """Each estimator's outputs on the blobs in one chunk, on the synchronous scheduler."""
    X, y = BLOBS
    with dask.config.set(scheduler="sync"):
        return {name: _fit_outputs(name, X, y, CHUNKINGS["one"]) for name in NAMES}


@pytest.mark.parametrize("chunking", ["even", "uneven"])
@pytest.mark.parametrize("name", NAMES)
def test_chunking_does_not_change_the_model(references, name, chunking):
    X, y = BLOBS
    got = _fit_outputs(name, X, y, CHUNKINGS[chunking])
    assert_same_results(
        references[name], got, f"{name}, {chunking} chunks", rtol=RTOL, up_to_sign=True
    )


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda n: f"{n}_workers")
def workers(request):
    """A LocalCluster of n single-threaded worker processes, shared by every estimator and
    chunking (pytest groups the tests by this parameter); for two, the session's cluster,
    which is that already."""
    if request.param == 2:
        client = request.getfixturevalue("dask_client")
        assert len(client.scheduler_info()["workers"]) == 2
        yield client
        return
    with LocalCluster(
        n_workers=request.param,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit="1GiB",
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(request.param, timeout=120)
            yield client


@pytest.mark.distributed
@pytest.mark.parametrize(
    "chunking",
    [
        "uneven",
        pytest.param("even", marks=pytest.mark.slow),
        pytest.param("one", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("name", NAMES)
def test_worker_count_does_not_change_the_model(references, workers, name, chunking):
    X, y = BLOBS
    with on_cluster(workers):
        got = _fit_outputs(name, X, y, CHUNKINGS[chunking])
    assert_same_results(
        references[name],
        got,
        f"{name}, {len(workers.scheduler_info()['workers'])} workers, {chunking} chunks",
        rtol=RTOL,
        up_to_sign=True,
    )


# -- integer-valued data with exactly tied distances --------------------------------------
DIGITS = load_digits(return_X_y=True)
DIGIT_ROWS = 600
DIGIT_CHUNKINGS = [(600,), (100,) * 6, (250, 250, 100)]
#: the ten digits, more hidden nodes and neighbours, for the parameters an estimator has
DIGIT_PARAMS = {"n_clusters": 10, "n_hidden": 100, "n_neighbors": 10}


@pytest.mark.parametrize("name", NAMES)
def test_chunking_does_not_change_the_model_on_tied_integer_data(name):
    X, y = DIGITS[0][:DIGIT_ROWS], DIGITS[1][:DIGIT_ROWS]
    params = {k: v for k, v in DIGIT_PARAMS.items() if k in estimators()[name]().get_params()}
    results = [_fit_outputs(name, X, y, chunks, **params) for chunks in DIGIT_CHUNKINGS]
    for chunks, got in zip(DIGIT_CHUNKINGS[1:], results[1:], strict=True):
        assert_same_results(
            results[0], got, f"{name} on digits, chunks {chunks}", rtol=RTOL, up_to_sign=True
        )
    assert np.array_equal(DIGITS[0], np.round(DIGITS[0]))  # the data are integers
