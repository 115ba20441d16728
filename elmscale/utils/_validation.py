"""One entry point for the data: anything array-like becomes a float dask array chunked by
rows only, the feature axis in one block."""

import numbers

import dask.array as da
import numpy as np
from dask.base import is_dask_collection

from .._config import get_config


def _reject(condition, message):
    if condition:
        raise ValueError(message)


def as_row_chunked(X, *, n_hidden=1000, name="X", dtype=None, check_finite=True,
                   numpy_ok=False):
    """Validate ``X`` and return ``(dask_array, was_dask)``.

    - NumPy / lists / pandas are converted with ``np.asarray`` (never modified) and wrapped by
      ``da.from_array`` with row blocks sized so one block of H (rows x n_hidden) is about
      ``config["chunk_bytes"]``.
    - dask arrays and DataFrames keep their row chunks; the feature axis is merged into one
      block. Unknown chunk sizes are an error that says how to fix it.
    - 2-D, at least one row and one column, numeric (bool/int/float), finite.

    Finiteness of dask input is checked lazily: the first computation that touches a bad
    block raises the same ``ValueError``.

    With ``numpy_ok``, input that is not dask comes back validated as a NumPy array of
    ``dtype`` (copied only to change the dtype) for callers that work on it in-process;
    :func:`row_chunks` gives the row chunks it would have had.
    """
    dtype = np.dtype(dtype or get_config()["compute_dtype"])
    was_dask = is_dask_collection(X)
    if was_dask and hasattr(X, "to_dask_array"):  # dask DataFrame
        X = X.to_dask_array(lengths=True)
    if not was_dask:
        if hasattr(X, "__dataframe__") or hasattr(X, "iloc"):
            X = X.to_numpy() if hasattr(X, "to_numpy") else np.asarray(X)
        if not hasattr(X, "dtype") or not hasattr(X, "ndim"):
            try:
                X = np.asarray(X)
            except Exception as exc:
                raise TypeError(f"{name} must be array-like, got {type(X).__name__}") from exc
        if getattr(X, "format", None) is not None:  # scipy.sparse
            raise TypeError(f"{name} is a sparse matrix; elmscale needs dense input "
                            "(call .toarray() on small data)")
    if not hasattr(X, "ndim"):
        raise TypeError(f"{name} must be array-like, got {type(X).__name__}")
    _reject(X.ndim != 2, f"{name} must be 2-D (n_samples, n_features), got {X.ndim}-D "
            f"with shape {tuple(X.shape)}. Reshape your data, e.g. X.reshape(-1, 1) for a "
            "single feature")
    kind = np.dtype(X.dtype).kind
    if kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {X.dtype}")
    if kind == "O" and not was_dask:
        try:
            X = X.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must hold numbers (bool, int or float); converting its "
                            f"object dtype failed: {exc}") from None
        kind = "f"
    if kind not in "biuf":
        raise TypeError(f"{name} must hold numbers (bool, int or float), got dtype {X.dtype}")
    if was_dask:
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError(f"{name} has unknown chunk sizes; call "
                             f"{name}.compute_chunk_sizes() (or pass lengths=True when "
                             "converting a DataFrame) first")
    _reject(X.shape[0] < 1, f"{name} is empty: 0 sample(s) (shape={tuple(X.shape)}) while a "
            "minimum of 1 is required.")
    _reject(X.shape[1] < 1, f"{name} has 0 feature(s) (shape={tuple(X.shape)}) while a "
            "minimum of 1 is required.")
    if not was_dask:
        X = np.asarray(X)
        if check_finite and kind == "f" and not np.isfinite(X).all():
            raise ValueError(f"{name} contains NaN or infinity")
        if numpy_ok:
            return X.astype(dtype, copy=False), False
        Xd = da.from_array(X, chunks=(row_chunks(X.shape[0], n_hidden, dtype), X.shape[1]))
    else:
        Xd = X
        if len(Xd.chunks[1]) > 1:
            Xd = Xd.rechunk({1: -1})
        if check_finite and kind == "f":
            Xd = Xd.map_blocks(_assert_finite, name_=name, dtype=Xd.dtype)
    if Xd.dtype != dtype:
        Xd = Xd.astype(dtype)
    return Xd, was_dask


def row_chunks(n_samples, n_hidden=1000, dtype=None):
    """Row chunks of NumPy input in :func:`as_row_chunked`: blocks of rows such that one
    block of H (rows x n_hidden) is about ``config["chunk_bytes"]``, the last one shorter."""
    dtype = np.dtype(dtype or get_config()["compute_dtype"])
    rows = max(1, int(get_config()["chunk_bytes"] // (max(n_hidden, 1) * dtype.itemsize)))
    rows = min(rows, n_samples)
    return (rows,) * (n_samples // rows) + ((n_samples % rows,) if n_samples % rows else ())


def _assert_finite(block, name_="X"):
    if not np.isfinite(block).all():
        raise ValueError(f"{name_} contains NaN or infinity")
    return block


def check_features(X, n_features, name="X", estimator="the estimator"):
    """Raise if ``X`` does not have the number of features seen in ``fit``."""
    if X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features, but {estimator} is expecting {n_features} "
            "features as input (the number it was fitted with)"
        )


def check_positive_int(value, name, minimum=1):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


__all__ = ["as_row_chunked", "check_features", "check_positive_int", "is_dask_collection"]
