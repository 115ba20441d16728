"""A catalogue of bad inputs tried on every estimator it applies to: each must raise
ValueError or TypeError whose message names the offending argument, in the same words for
every estimator, within a time limit, and without modifying the input."""

import copy
import pathlib
import re
import signal
from contextlib import contextmanager

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs

from ._estimators import NAMES, SUPERVISED, having, make, targets

X_GOOD, Y_GOOD = make_blobs(60, n_features=4, centers=3, random_state=0)
COLUMNS = ["a", "b", "c", "d"]
CLUSTERERS = having("n_clusters")
WITH_GRAPH = ("USELM", "ELMJEC")  # SS-ELM clips n_neighbors to n_samples - 1 instead
#: the estimators with a random hidden layer (all but TUMK-ELM, whose layer is its kernels)
PREDICTORS = having("n_hidden")
SECONDS = 60


def _case(name, X, **rest):
    """A case: X, the estimator's good targets (none for the clusterers) and ``rest``."""
    good = targets(name, Y_GOOD)
    return dict(X=X, **({} if good is None else {"y": good}), **rest)


def _x(fn):
    """A fit-stage case whose bad value is X itself (``fn()`` builds it)."""
    return lambda name: _case(name, fn())


def _with_nan(value):
    X = X_GOOD.copy()
    X[3, 1] = value
    return X


def _nullable_with_na():
    df = pd.DataFrame(X_GOOD.round().astype(int), columns=COLUMNS).astype("Int64")
    df.iloc[5, 2] = pd.NA
    return df


def _with_string_column():
    df = pd.DataFrame(X_GOOD, columns=COLUMNS)
    df["b"] = "text"
    return df


def _y(value_fn):
    return lambda name: dict(X=X_GOOD, y=value_fn(name))


def _y_with_nan(name):
    y = targets(name, Y_GOOD).astype(np.float64)
    y[4] = np.nan
    return y


def _params(**params):
    return lambda name: _case(name, X_GOOD, params=params)


def _semi(fn):
    def build(name):
        y = targets(name, Y_GOOD).copy()
        return dict(X=X_GOOD, y=fn(y))

    return build


def _predict(fn):
    """A predict-stage case: fit on a DataFrame of X_GOOD, then predict ``fn()``."""
    return lambda name: _case(name, pd.DataFrame(X_GOOD, columns=COLUMNS), predict=fn())


# (id, argument the message must name, estimators it applies to, builder)
CASES = [
    # -- X at fit --------------------------------------------------------------------------
    ("nan", "X", NAMES, _x(lambda: _with_nan(np.nan))),
    ("inf", "X", NAMES, _x(lambda: _with_nan(np.inf))),
    ("minus_inf", "X", NAMES, _x(lambda: _with_nan(-np.inf))),
    ("0d", "X", NAMES, _x(lambda: np.float64(3.0))),
    ("1d", "X", NAMES, _x(lambda: X_GOOD[:, 0].copy())),
    ("3d", "X", NAMES, _x(lambda: X_GOOD.reshape(60, 2, 2))),
    ("no_rows", "X", NAMES, _x(lambda: np.empty((0, 4)))),
    ("no_columns", "X", NAMES, _x(lambda: np.empty((60, 0)))),
    ("str_dtype", "X", NAMES, _x(lambda: X_GOOD.astype(str))),
    (
        "object_with_dict",
        "X",
        NAMES,
        _x(lambda: np.array([[{"a": 1}] + [1.0] * 3] + X_GOOD[1:].tolist(), dtype=object)),
    ),
    ("complex", "X", NAMES, _x(lambda: X_GOOD + 1j)),
    ("sparse", "X", NAMES, _x(lambda: sp.csr_matrix(X_GOOD))),
    ("path_str", "X", NAMES, _x(lambda: "/data/train.csv")),
    ("path_obj", "X", NAMES, _x(lambda: pathlib.Path("/data/train.npy"))),
    ("bytes", "X", NAMES, _x(lambda: b"1,2,3\n4,5,6")),
    ("none", "X", NAMES, _x(lambda: None)),
    ("ragged", "X", NAMES, _x(lambda: [[1.0, 2.0], [3.0]] * 30)),
    ("df_string_column", "X", NAMES, _x(_with_string_column)),
    ("df_nullable_na", "X", NAMES, _x(_nullable_with_na)),
    (
        "df_mixed_column_types",
        "X",
        NAMES,
        _x(lambda: pd.DataFrame(X_GOOD, columns=["a", "b", 2, 3])),
    ),
    (
        "dask_unknown_chunks",
        "X",
        NAMES,
        _x(
            lambda: da.from_array(X_GOOD, chunks=(20, 4))[
                da.from_array(X_GOOD[:, 0] > -99, chunks=20)
            ]
        ),
    ),
    ("dask_column_chunks", "X", NAMES, _x(lambda: da.from_array(X_GOOD, chunks=(20, 2)))),
    ("dask_nan", "X", NAMES, _x(lambda: da.from_array(_with_nan(np.nan), chunks=(20, 4)))),
    ("dask_object", "X", NAMES, _x(lambda: da.from_array(X_GOOD.astype(str), chunks=(20, 4)))),
    # -- y ---------------------------------------------------------------------------------
    ("y_nan", "y", SUPERVISED, _y(_y_with_nan)),
    ("y_too_short", "y", SUPERVISED, _y(lambda name: targets(name, Y_GOOD)[:-5])),
    ("y_none", "y", SUPERVISED, _y(lambda name: None)),
    (
        "y_2d_labels",
        "y",
        ("SSELM", "ELMClassifier"),
        _y(lambda name: np.tile(targets(name, Y_GOOD)[:, None], (1, 3))),
    ),
    ("y_one_class", "y", ("ELMClassifier",), _y(lambda name: np.zeros(60, dtype=int))),
    ("y_no_labelled_row", "y", ("SSELM",), _semi(lambda y: np.full_like(y, -1))),
    ("y_one_labelled_class", "y", ("SSELM",), _semi(lambda y: np.where(y == 1, 1, -1))),
    # -- parameters against the data -------------------------------------------------------
    ("n_clusters_above_n_samples", "n_clusters", CLUSTERERS, _params(n_clusters=61)),
    ("n_neighbors_equal_n_samples", "n_neighbors", WITH_GRAPH, _params(n_neighbors=60)),
    ("n_components_above_n_hidden", "n_components", ("USELM", "ELMJEC"), _params(n_components=40)),
    # -- parameters ------------------------------------------------------------------------
    ("n_hidden_zero", "n_hidden", PREDICTORS, _params(n_hidden=0)),
    ("n_hidden_negative", "n_hidden", PREDICTORS, _params(n_hidden=-5)),
    ("n_hidden_float", "n_hidden", PREDICTORS, _params(n_hidden=20.5)),
    ("n_landmarks_zero", "n_landmarks", having("n_landmarks"), _params(n_landmarks=0)),
    ("n_clusters_zero", "n_clusters", CLUSTERERS, _params(n_clusters=0)),
    ("C_zero", "C", having("C"), _params(C=0.0)),
    ("C_negative", "C", having("C"), _params(C=-1.0)),
    ("C_nan", "C", having("C"), _params(C=np.nan)),
    ("C_inf", "C", having("C"), _params(C=np.inf)),
    ("C0_zero", "C0", having("C0"), _params(C0=0.0)),
    ("lam_negative", "lam", having("lam"), _params(lam=-0.5)),
    ("lam_nan", "lam", having("lam"), _params(lam=np.nan)),
    ("lam_inf", "lam", having("lam"), _params(lam=np.inf)),
    ("gamma_zero", "gamma", having("gamma"), _params(gamma=0.0)),
    ("sigma_zero", "sigma", having("sigma"), _params(sigma=0.0)),
    ("balance_above_1", "balance", having("balance"), _params(balance=1.5)),
    ("unknown_activation", "activation", PREDICTORS, _params(activation="sigmod")),
    ("unknown_graph", "graph", having("graph"), _params(graph="annoy-ish")),
    ("unknown_kernel", "kernels", having("kernels"), _params(kernels=["rbf-ish"])),
    ("unknown_scaling", "scaling", NAMES, _params(scaling="zscore")),
    ("random_state_str", "random_state", NAMES, _params(random_state="seed")),
    (
        "unknown_solver",
        "solver",
        having("solver"),
        _params(solver="qr"),
    ),
    ("init_wrong_length", "init", ("EMMC",), _params(init=np.zeros(10, dtype=int))),
    # -- X at predict / transform ----------------------------------------------------------
    ("predict_wrong_n_features", "X", PREDICTORS, _predict(lambda: X_GOOD[:, :3])),
    (
        "predict_reordered_columns",
        "X",
        PREDICTORS,
        _predict(lambda: pd.DataFrame(X_GOOD, columns=COLUMNS)[COLUMNS[::-1]]),
    ),
    (
        "predict_renamed_columns",
        "X",
        PREDICTORS,
        _predict(lambda: pd.DataFrame(X_GOOD, columns=["a", "b", "c", "e"])),
    ),
    (
        "predict_nan",
        "X",
        PREDICTORS,
        _predict(lambda: pd.DataFrame(_with_nan(np.nan), columns=COLUMNS)),
    ),
    ("predict_1d", "X", PREDICTORS, _predict(lambda: X_GOOD[0].copy())),
    ("predict_path", "X", PREDICTORS, _predict(lambda: "/data/test.csv")),
    (
        "predict_dask_column_chunks",
        "X",
        PREDICTORS,
        _predict(lambda: da.from_array(X_GOOD, chunks=(20, 2))),
    ),
]


@contextmanager
def _time_limit(seconds):
    def fail(signum, frame):
        raise TimeoutError(f"no error within {seconds} s: hangs")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _same(before, after):
    """Whether an input is unchanged (values, dtype, column names)."""
    if isinstance(before, np.ndarray):
        return before.dtype == after.dtype and (
            np.array_equal(before, after, equal_nan=before.dtype.kind in "fc")
            if before.dtype != object
            else before.tolist() == after.tolist()
        )
    if isinstance(before, pd.DataFrame):
        return before.equals(after) and list(before.columns) == list(after.columns)
    if sp.issparse(before):
        return (before != after).nnz == 0
    if isinstance(before, list):
        return before == after
    return True  # scalars, strings, None and dask arrays cannot be modified in place


def _call(name, case):
    """Run the case on estimator ``name``; return the exception raised (None if none)."""
    model = make(name, **case.get("params", {}))
    fit_args = (case["X"], case["y"]) if "y" in case else (case["X"],)
    kept = {
        key: copy.deepcopy(case[key])
        for key in ("X", "y", "predict")
        if key in case and not isinstance(case[key], da.Array)
    }
    try:
        with _time_limit(SECONDS):
            model.fit(*fit_args)
            if "predict" in case:
                method = "predict" if hasattr(model, "predict") else "transform"
                getattr(model, method)(case["predict"])
    except Exception as exc:  # noqa: BLE001 - the type is asserted by the caller
        error = exc
    else:
        error = None
    for key, before in kept.items():
        assert _same(before, case[key]), f"{name} modified its input {key}"
    return error


@pytest.mark.filterwarnings("ignore:X does not have valid feature names:UserWarning")
@pytest.mark.parametrize("case_id, argument, applies, build", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_a_clear_error(case_id, argument, applies, build):
    """The error is ValueError/TypeError, its message names the argument, and (for X) it is
    the same message, up to the estimator's name, for every estimator."""
    messages = {}
    for name in applies:
        error = _call(name, build(name))
        assert error is not None, f"{name} accepted {case_id}"
        assert isinstance(error, (ValueError, TypeError)), (
            f"{name} raised {type(error).__name__} for {case_id}: {error}"
        )
        message = str(error)
        assert re.search(rf"(?<![A-Za-z_]){re.escape(argument)}(?![A-Za-z_])", message), (
            f"{name}'s error for {case_id} does not name {argument!r}: {message}"
        )
        messages[name] = message.replace(name, "<estimator>")
    if argument == "X":
        assert len(set(messages.values())) == 1, f"{case_id} worded differently: {messages}"


def test_catalogue_size():
    """At least 30 distinct bad inputs, and every estimator is tried on at least 30."""
    assert len({c[0] for c in CASES}) >= 30
    for name in NAMES:
        assert sum(name in c[2] for c in CASES) >= 30, name


@pytest.mark.parametrize("name", ["SSELM"])
def test_all_rows_labelled_is_accepted(name):
    """SS-ELM with every row labelled is a valid (fully supervised) problem: it fits and
    reproduces the labelled classes."""
    model = make(name).fit(X_GOOD, Y_GOOD)
    assert model.n_labelled_ == 60 and model.score(X_GOOD, Y_GOOD) > 0.9
