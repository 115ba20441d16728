"""NumPy and dask input give the same model: every estimator fitted on a NumPy array (in
process, synchronous scheduler) and on the same rows as a dask array in chunks of 600 rows
(on a multi-process ``LocalCluster``) gives identical labels and predictions, and the same
continuous outputs up to rounding.

The data are scikit-learn's digits (integer pixels, many exactly tied distances) and, when
the shared datasets are there, UCI segment and the first 2,000 rows of USPS: sets of more
than 1,000 rows, where the estimators take their large-data paths (US-ELM's graph filter,
TUMK-ELM's scalable mode)."""

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits

from ._estimators import NAMES, estimators, fit, make, on_cluster

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.filterwarnings(
        "ignore::sklearn.exceptions.ConvergenceWarning",
        "ignore::elmscale.algorithms._elmjec.FewerComponentsWarning",
    ),
]

CHUNK_ROWS = 600
# float outputs, relative to each array's largest entry: sums over other blocks round
# differently, and an eigenvector of a close pair of eigenvalues carries that further
RTOL = 1e-6
#: each estimator's defaults but for its size (hidden nodes, restarts, iterations, landmarks)
SIZE = {"n_hidden": 100, "n_init": 3, "n_restarts": 2, "max_iter": 3, "n_landmarks": 10}


def _digits():
    return load_digits(return_X_y=True)


def _shared(name, rows=None):
    from .conftest import load_dataset

    X, y = load_dataset(name)
    return (X, y) if rows is None else (X[:rows], y[:rows])


DATASETS = {
    "digits": _digits,
    "segment": lambda: _shared("segment"),
    "usps2000": lambda: _shared("usps", 2000),
}


def _model(name, n_classes):
    defaults = estimators()[name]().get_params(deep=False)
    params = {k: v for k, v in SIZE.items() if k in defaults}
    params.update({k: defaults[k] for k in ("graph", "n_neighbors") if k in defaults})
    if "n_clusters" in defaults:
        params["n_clusters"] = n_classes
    return make(name, **params)


def _outputs(model, X):
    """Labels and predictions (integers), decision values and embeddings (floats), as NumPy."""
    out = {}
    for attr in ("labels_", "embedding_"):
        if hasattr(model, attr):
            out[attr] = np.asarray(getattr(model, attr))
    for method in ("predict", "decision_function"):
        if hasattr(model, method):
            out[method] = np.asarray(getattr(model, method)(X))
    return out


def _assert_agree(expected, got, where):
    assert set(expected) == set(got), where
    for key, value in expected.items():
        if value.dtype.kind in "iub":
            np.testing.assert_array_equal(got[key], value, err_msg=f"{where}: {key}")
            continue
        other = got[key]
        if value.ndim == 2 and key == "embedding_":  # eigenvectors: up to each column's sign
            other = other * np.where(np.sum(other * value, axis=0) < 0, -1.0, 1.0)
        np.testing.assert_allclose(
            other, value, rtol=0, atol=RTOL * np.abs(value).max(), err_msg=f"{where}: {key}"
        )


@pytest.mark.parametrize("dataset", list(DATASETS))
@pytest.mark.parametrize("name", NAMES)
def test_numpy_and_dask_input_give_the_same_model(dask_client, name, dataset):
    X, y = DATASETS[dataset]()
    n_classes = len(np.unique(y))
    with dask.config.set(scheduler="sync"):
        reference = _outputs(fit(_model(name, n_classes), name, X, y), X)
    with on_cluster(dask_client):
        Xd = da.from_array(X, chunks=(CHUNK_ROWS, X.shape[1]))
        model = fit(_model(name, n_classes), name, Xd, y)
        got = _outputs(model, X)
    assert "predict" in reference
    _assert_agree(reference, got, f"{name} on {dataset}, NumPy vs dask in {CHUNK_ROWS}-row chunks")
