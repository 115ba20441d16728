"""The one entry point for data: dask wrapping and its NumPy shortcut agree."""

import dask.array as da
import numpy as np
import pytest

from elmscale import config_context
from elmscale.utils._validation import as_row_chunked, row_chunks


@pytest.mark.parametrize("n_samples, n_hidden", [(1, 10), (999, 100), (10_000, 7),
                                                 (12_345, 1500)])
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
    Xd, was_dask = as_row_chunked(da.from_array(X64, chunks=2), numpy_ok=True)
    assert was_dask and isinstance(Xd, da.Array)  # dask input stays dask


@pytest.mark.parametrize("bad, error, match", [
    (np.array([[1.0, np.nan]]), ValueError, "X contains NaN or infinity"),
    (np.zeros(3), ValueError, "X must be 2-D"),
    (np.array([["a", "b"]]), TypeError, "X must hold numbers"),
])
def test_numpy_ok_validates_as_the_wrapper(bad, error, match):
    for numpy_ok in (False, True):
        with pytest.raises(error, match=match):
            as_row_chunked(bad, numpy_ok=numpy_ok)
