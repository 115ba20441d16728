"""Every estimator, small and fast, with the targets its ``fit`` takes: shared by the
reliability tests (bad inputs, persistence, determinism, faults)."""

from contextlib import contextmanager

import dask
import numpy as np

from elmscale import ELMJEC, EMMC, SSELM, TUMKELM, USELM, ELMClassifier, ELMRegressor

SUPERVISED = ("SSELM", "ELMClassifier", "ELMRegressor")


def make(name, **params):
    """A small instance of estimator ``name`` (exact graph, few hidden nodes, seed 0)."""
    defaults = {
        "USELM": dict(n_clusters=3, n_hidden=30, graph="exact", n_neighbors=5, n_init=2),
        "SSELM": dict(n_hidden=30, graph="exact", n_neighbors=5),
        "ELMClassifier": dict(n_hidden=30),
        "ELMRegressor": dict(n_hidden=30),
        "ELMJEC": dict(
            n_clusters=3, n_hidden=30, graph="exact", n_neighbors=5, n_restarts=2, max_iter=3
        ),
        "EMMC": dict(n_clusters=3, n_hidden=30, n_init=2, max_iter=5),
        "TUMKELM": dict(n_clusters=3, max_iter=3, n_landmarks=20),
    }[name]
    cls = {
        "USELM": USELM,
        "SSELM": SSELM,
        "ELMClassifier": ELMClassifier,
        "ELMRegressor": ELMRegressor,
        "ELMJEC": ELMJEC,
        "EMMC": EMMC,
        "TUMKELM": TUMKELM,
    }
    return cls[name](**{**defaults, "random_state": 0, **params})


NAMES = ("USELM", "SSELM", "ELMClassifier", "ELMRegressor", "ELMJEC", "EMMC", "TUMKELM")


def targets(name, y):
    """What ``fit`` of ``name`` takes as y, from class labels y: None for the clusterers,
    all but 3 labels per class set to -1 for SS-ELM, floats for the regressor."""
    if name == "SSELM":
        semi = np.full_like(y, -1)
        for c in np.unique(y):
            semi[np.flatnonzero(y == c)[:3]] = c
        return semi
    if name == "ELMRegressor":
        return y.astype(np.float64)
    if name in SUPERVISED:
        return y
    return None


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
