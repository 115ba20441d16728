"""The one entry point for data: dask wrapping and its NumPy shortcut agree, DataFrames
keep their column names, and anything else is refused naming X."""

import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.base import BaseEstimator

from elmscale import config_context
from elmscale.utils import validate_data
from elmscale.utils._validation import as_row_chunked, row_chunks


@pytest.mark.parametrize("n_samples, n_hidden", [(1, 10), (999, 100), (10_000, 7), (12_345, 1500)])
def test_row_chunks_are_those_of_the_dask_wrapper(n_samples, n_hidden):
    X = np.zeros((n_samples, 3))
    with config_context(chunk_bytes=2**20):
        Xd, was_dask = as_row_chunked(X, n_hidden=n_hidden)
        chunks = row_chunks(n_samples, n_hidden)
    assert not was_dask and Xd.chunks[0] == chunks and sum(chunks) == n_samples


def test_numpy_ok_returns_the_validated_array_unmodified():
    X32 = np.arange(12, dtype=np.float32).reshape(4, 3)
    before = X32.copy()
    X, was_dask = as_row_chunked(X32, numpy_ok=True)
    assert not was_dask and isinstance(X, np.ndarray) and X.dtype == np.float64
    np.testing.assert_array_equal(X, before)
    np.testing.assert_array_equal(X32, before)
    X64 = X32.astype(np.float64)
    assert as_row_chunked(X64, numpy_ok=True)[0] is X64  # no copy when nothing changes
    assert as_row_chunked([[1, 2], [3, 4]], numpy_ok=True)[0].dtype == np.float64
    Xd, was_dask = as_row_chunked(da.from_array(X64, chunks=(2, -1)), numpy_ok=True)
    assert was_dask and isinstance(Xd, da.Array)  # dask input stays dask


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.array([[1.0, np.nan]]), ValueError, "X contains NaN or infinity"),
        (np.zeros(3), ValueError, "X must be 2-D"),
        (np.array([["a", "b"]]), TypeError, "X must hold numbers"),
    ],
)
def test_numpy_ok_validates_as_the_wrapper(bad, error, match):
    for numpy_ok in (False, True):
        with pytest.raises(error, match=match):
            as_row_chunked(bad, numpy_ok=numpy_ok)


# -- the input contract: DataFrames, feature names, dask layouts ------------------------------


class _Fitted(BaseEstimator):
    """The least an estimator needs for validate_data: attributes, and to look fitted."""

    def fit(self, X):
        return self

    def __sklearn_is_fitted__(self):
        return hasattr(self, "n_features_in_")


_shapes = st.tuples(st.integers(1, 40), st.integers(1, 6))
_finite = arrays(np.float64, _shapes, elements=st.floats(-1e6, 1e6))


@settings(max_examples=60, deadline=None)
@given(X=_finite, rows=st.integers(1, 40))
def test_any_finite_array_comes_back_equal_and_chunked_by_rows(X, rows):
    """NumPy, NumPy through ``numpy_ok`` and dask in any row chunking give the same values,
    as float64 chunked by rows only."""
    before = X.copy()
    Xd, was_dask = as_row_chunked(X, n_hidden=rows)
    assert not was_dask and len(Xd.chunks[1]) == 1
    np.testing.assert_array_equal(Xd.compute(), before)
    Xn, _ = as_row_chunked(X, numpy_ok=True)
    np.testing.assert_array_equal(Xn, before)
    Xd2, was_dask = as_row_chunked(da.from_array(X, chunks=(rows, -1)))
    assert was_dask and Xd2.chunks[0] == da.from_array(X, chunks=(rows, -1)).chunks[0]
    np.testing.assert_array_equal(Xd2.compute(), before)
    np.testing.assert_array_equal(X, before)


@settings(max_examples=60, deadline=None)
@given(
    X=_finite,
    where=st.tuples(st.integers(0, 39), st.integers(0, 5)),
    bad=st.sampled_from([np.nan, np.inf, -np.inf]),
)
def test_any_non_finite_value_is_refused_naming_X(X, where, bad):
    X = X.copy()
    X[where[0] % X.shape[0], where[1] % X.shape[1]] = bad
    before = X.copy()
    for numpy_ok in (False, True):
        with pytest.raises(ValueError, match="^X contains NaN or infinity"):
            as_row_chunked(X, numpy_ok=numpy_ok)
    with pytest.raises(ValueError, match="^X contains NaN or infinity"):
        as_row_chunked(da.from_array(X, chunks=(7, -1)))[0].compute()
    np.testing.assert_array_equal(X, before)


@settings(max_examples=40, deadline=None)
@given(ndim=st.sampled_from([0, 1, 3]), n=st.integers(1, 5))
def test_any_array_not_2d_is_refused_naming_X(ndim, n):
    X = np.ones((n,) * ndim)
    with pytest.raises(ValueError, match=f"^X must be 2-D .* got {ndim}-D"):
        as_row_chunked(X)


def test_pandas_and_dask_dataframes_record_their_column_names():
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    X = np.arange(40, dtype=np.float64).reshape(10, 4)
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    for data in (df, dd.from_pandas(df, npartitions=3)):
        est = _Fitted()
        Xd, was_dask = validate_data(est, data, reset=True)
        assert list(est.feature_names_in_) == ["a", "b", "c", "d"]
        assert est.feature_names_in_.dtype == object and est.n_features_in_ == 4
        assert not any(np.isnan(c) for c in Xd.chunks[0]) and len(Xd.chunks[1]) == 1
        np.testing.assert_array_equal(Xd.compute(), X)
        validate_data(est, data, reset=False)  # the same columns pass
        with pytest.raises(ValueError, match="same order as they were in fit"):
            validate_data(est, data[["b", "a", "c", "d"]], reset=False)
        with pytest.raises(ValueError, match="unseen at fit time:\n- e"):
            validate_data(est, data.rename(columns={"d": "e"}), reset=False)


def test_refit_on_an_array_forgets_column_names():
    pd = pytest.importorskip("pandas")
    est = _Fitted()
    validate_data(est, pd.DataFrame(np.ones((3, 2)), columns=["a", "b"]), reset=True)
    validate_data(est, np.ones((3, 2)), reset=True)
    assert not hasattr(est, "feature_names_in_")


def test_nullable_pandas_columns_are_floats_with_nan_for_missing():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        {
            "a": pd.array([1, 2, 3], dtype="Int64"),
            "b": pd.array([True, False, True], dtype="boolean"),
        }
    )
    np.testing.assert_array_equal(as_row_chunked(df, numpy_ok=True)[0], [[1, 1], [2, 0], [3, 1]])
    df.loc[1, "a"] = pd.NA
    with pytest.raises(ValueError, match="^X contains NaN"):
        as_row_chunked(df)
