"""Every registered estimator, small and fast, with the targets its ``fit`` takes: shared by
the common tests (scikit-learn's checks, bad inputs, persistence, determinism, NumPy/dask
agreement, faults). Nothing here names an estimator: a registered one is in."""

from contextlib import contextmanager

import dask
import numpy as np
from sklearn.base import is_classifier, is_regressor

import elmscale

#: small, fast settings for the parameters an estimator has (exact graph, few hidden nodes,
#: restarts, iterations and landmarks, seed 0), whatever the estimator
SMALL = {
    "n_clusters": 3,
    "n_hidden": 30,
    "graph": "exact",
    "n_neighbors": 5,
    "n_init": 2,
    "n_restarts": 2,
    "max_iter": 3,
    "n_landmarks": 20,
    "random_state": 0,
}


def estimators():
    """Every registered estimator class by class name (``elmscale.all_estimators``): the
    built-ins, and any plugin registered before the tests are collected."""
    return {cls.__name__: cls for _, cls in elmscale.all_estimators()}


#: the estimators every common test runs on
NAMES = tuple(sorted(estimators()))
SUPERVISED = tuple(
    n for n in NAMES if is_classifier(estimators()[n]()) or is_regressor(estimators()[n]())
)


def having(parameter):
    """The estimators with ``parameter`` in ``__init__``: the shared names mean the same
    everywhere, so each gets the bad values of that parameter."""
    return tuple(n for n in NAMES if parameter in estimators()[n]().get_params(deep=False))


def make(name, **params):
    """A small instance of estimator ``name``: ``SMALL`` for the parameters it has."""
    cls = estimators()[name]
    names = cls().get_params(deep=False)
    return cls(**{**{k: v for k, v in SMALL.items() if k in names}, **params})


def targets(name, y):
    """What ``fit`` of ``name`` takes as y, from class labels y: None for the estimators
    without targets (clusterers, embedders), floats for a regressor, y for a classifier (a
    semi-supervised one too, as scikit-learn's common tests fit them: every row
    labelled)."""
    model = estimators()[name]()
    if is_regressor(model):
        return y.astype(np.float64)
    return y if is_classifier(model) else None


def fit(model, name, X, y):
    """``model.fit`` with the targets ``name`` needs."""
    t = targets(name, y)
    return model.fit(X) if t is None else model.fit(X, t)


def outputs(model, X):
    """Everything a fitted model gives for X and for its training data: predictions,
    embeddings, scores, training labels and embedding, as NumPy."""
    out = {}
    for method in ("predict", "transform", "decision_function", "predict_proba"):
        if hasattr(model, method):
            out[method] = np.asarray(getattr(model, method)(X))
    for attr in ("labels_", "embedding_"):
        if hasattr(model, attr):
            out[attr] = np.asarray(getattr(model, attr))
    return out


def assert_same_results(expected, actual, where, *, rtol=0.0, up_to_sign=False):
    """The outputs of :func:`outputs` agree: integer ones (labels) exactly, float ones to
    ``rtol`` (0: bit for bit). BLAS may round differently in another process (memory
    alignment, kernel choice), hence a tolerance where results cross processes.
    ``up_to_sign``: each column of an embedding may also be negated."""
    assert set(expected) == set(actual), where
    for key, value in expected.items():
        got = actual[key]
        if value.dtype.kind in "biuO" or (rtol == 0 and not up_to_sign):
            np.testing.assert_array_equal(got, value, err_msg=f"{where}: {key}")
            continue
        if up_to_sign and value.ndim == 2:
            signs = np.where(np.sum(got * value, axis=0) < 0, -1.0, 1.0)
            got = got * signs
        np.testing.assert_allclose(
            got, value, rtol=rtol, atol=rtol * np.abs(value).max(), err_msg=f"{where}: {key}"
        )


@contextmanager
def on_cluster(client):
    """Run what the block computes (and persists) on ``client``'s cluster, whatever other
    clients the test session has opened or closed meanwhile. (The scheduler is named, not
    passed: a nanny hands dask's config to the worker it restarts, and a Client object in
    it cannot be pickled.)"""
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        yield client
