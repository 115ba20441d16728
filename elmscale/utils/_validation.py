"""One entry point for the data: anything array-like becomes a float dask array chunked by
rows only, the feature axis in one block."""

import functools
import numbers
import os

import dask.array as da
import numpy as np
from dask.base import is_dask_collection
from sklearn.utils.validation import check_is_fitted

from .._config import get_config
from ._dask import (
    distributed_client,
    frame_to_array,
    row_views,
    rows_view,
    scatter_rows,
    task_name,
)
from ._sklearn import check_feature_names as _check_feature_names


def _reject(condition, message):
    if condition:
        raise ValueError(message)


def as_row_chunked(X, *, n_hidden=1000, name="X", dtype=None, check_finite=True, numpy_ok=False):
    """Validate ``X`` and return ``(dask_array, was_dask)``.

    - NumPy / lists / pandas DataFrames are converted with ``np.asarray`` (never modified)
      and cut into row blocks sized so one block of H (rows x n_hidden) is about
      ``config["chunk_bytes"]``: scattered to the workers once under a distributed client
      (:func:`~elmscale.utils._dask.scatter_rows`; ``da.from_array`` would put X in every
      task graph), else cut into read-only views of its rows
      (:func:`~elmscale.utils._dask.row_views`; ``da.from_array`` would copy X). pandas'
      nullable columns become float with NaN for missing values (and then fail the
      finiteness check).
    - dask arrays keep their chunks; dask DataFrames become dask arrays with known row
      chunks (one pass over the partitions counting their rows). A dask array
      with unknown chunk sizes, or with more than one block along the feature axis, is an
      error that says how to fix it: every task needs whole rows, and rechunking silently
      would move the whole array between workers.
    - 2-D, at least one row and one column, numeric (bool/int/float), finite. A string or a
      path is a ``TypeError`` that says how to read a file.

    Every error is a ``ValueError`` or ``TypeError`` whose message names ``name``.
    Finiteness of dask input is checked lazily: the first computation that touches a bad
    block raises the same ``ValueError``.

    With ``numpy_ok``, input that is not dask comes back validated as a NumPy array of
    ``dtype`` (copied only to change the dtype) for callers that work on it in-process;
    :func:`row_chunks` gives the row chunks it would have had.
    """
    dtype = np.dtype(dtype or get_config()["compute_dtype"])
    client = tune_current_workers()
    X = _to_array(X, name)
    was_dask = isinstance(X, da.Array)
    _reject(
        X.ndim != 2,
        f"{name} must be 2-D (n_samples, n_features), got {X.ndim}-D "
        f"with shape {tuple(X.shape)}. Reshape your data, e.g. X.reshape(-1, 1) for a "
        "single feature",
    )
    X, kind = _numeric(X, name, was_dask)
    if was_dask:
        _check_dask_chunks(X, name)
    _reject(
        X.shape[0] < 1,
        f"{name} is empty: 0 sample(s) (shape={tuple(X.shape)}) while a minimum of 1 is required.",
    )
    _reject(
        X.shape[1] < 1,
        f"{name} has 0 feature(s) (shape={tuple(X.shape)}) while a minimum of 1 is required.",
    )
    if not was_dask:
        X = np.asarray(X)
        if check_finite and kind == "f" and not np.isfinite(X).all():
            raise ValueError(f"{name} contains NaN or infinity")
        if numpy_ok:
            return X.astype(dtype, copy=False), False
        chunks = (row_chunks(X.shape[0], n_hidden, dtype), (X.shape[1],))
        if client is None:  # views of the caller's rows: da.from_array would copy them all
            X = row_views(X, chunks, task_name("elmscale-input"))
        else:  # sent to the workers once, not inside every graph, and cast there
            X = scatter_rows(client, X, chunks, task_name("elmscale-input"))
            if X.dtype == dtype:
                return X, False
    # one task per block under a name unique to this call, never a name hashed from the
    # input: a key must not stand for two different tasks on the distributed scheduler
    # (dask/dask#9888), and the fused forms of a hashed key differ from graph to graph
    read = functools.partial(
        _checked_block, label=name, finite=was_dask and check_finite and kind == "f", to=dtype
    )
    # a rows view: what moves X's rows (a row order, a halo) moves them in X's own dtype
    return rows_view(X, read, dtype, task_name("elmscale-input")), was_dask


def _numeric(X, name, was_dask):
    """``(X, kind)``: X of a numeric dtype (NumPy object arrays converted to float64) and
    its dtype's kind, or a TypeError (ValueError for complex data) naming ``name``."""
    kind = np.dtype(X.dtype).kind
    if kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {X.dtype}")
    if kind == "O" and not was_dask:
        try:
            X = X.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name} must hold numbers (bool, int or float); converting its "
                f"object dtype failed: {exc}"
            ) from None
        kind = "f"
    if kind not in "biuf":
        raise TypeError(f"{name} must hold numbers (bool, int or float), got dtype {X.dtype}")
    return X, kind


def _check_dask_chunks(X, name):
    """Known row chunks and one block along the feature axis, or a ValueError saying how."""
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError(
            f"{name} has unknown chunk sizes; call "
            f"{name}.compute_chunk_sizes() (or pass lengths=True when "
            "converting a DataFrame) first"
        )
    if len(X.chunks[1]) > 1:
        raise ValueError(
            f"{name} is chunked along the feature axis "
            f"({len(X.chunks[1])} column blocks {X.chunks[1]}); elmscale "
            "needs whole rows in every block: pass "
            f"{name}.rechunk({{1: -1}})"
        )


def _to_array(X, name):
    """``X`` as a dask array (dask input) or something with ``ndim`` and ``dtype``; the
    conversions that precede the checks of :func:`as_row_chunked`."""
    if isinstance(X, (str, bytes, os.PathLike)):
        shown = os.fspath(X) if not isinstance(X, bytes) else X
        raise TypeError(
            f"{name} must be array-like (n_samples, n_features), got "
            f"{type(X).__name__} {shown!r}; to read a file, load it first, e.g. "
            "numpy.loadtxt(path, delimiter=','), pandas.read_csv(path) or "
            "dask.dataframe.read_csv(path) / dask.array.from_zarr(path) for "
            "data larger than memory"
        )
    if X is None:
        raise TypeError(f"{name} must be array-like (n_samples, n_features), got None")
    if is_dask_collection(X):
        if hasattr(X, "to_dask_array"):  # dask DataFrame (or Series: 1-D, refused below)
            X = frame_to_array(X)
        if not isinstance(X, da.Array):
            raise TypeError(
                f"{name} must be a dask array or DataFrame among dask "
                f"collections, got {type(X).__name__}"
            )
        if not isinstance(X._meta, np.ndarray):
            raise TypeError(
                f"{name} has blocks of type {type(X._meta).__name__}; elmscale "
                "needs NumPy blocks (for sparse blocks call "
                f"{name}.map_blocks(lambda b: b.toarray()) on small data)"
            )
        return X
    if getattr(X, "format", None) is not None and hasattr(X, "tocsr"):  # scipy.sparse
        raise TypeError(
            f"{name} is a sparse matrix; elmscale needs dense input (call .toarray() on small data)"
        )
    if hasattr(X, "iloc") or hasattr(X, "__dataframe__"):  # pandas (or another DataFrame)
        if hasattr(X, "dtypes") and hasattr(X, "to_numpy"):
            numeric = all(getattr(t, "kind", "O") in "biuf" for t in np.atleast_1d(X.dtypes))
            # nullable columns (Int64, boolean, Float64) hold pd.NA: give NaN instead
            return X.to_numpy(dtype=np.float64, na_value=np.nan) if numeric else X.to_numpy()
        return np.asarray(X)
    if not hasattr(X, "dtype") or not hasattr(X, "ndim"):
        try:
            X = np.asarray(X)
        except Exception as exc:
            raise TypeError(
                f"{name} must be array-like (n_samples, n_features), got "
                f"{type(X).__name__} that NumPy cannot convert: {exc}"
            ) from None
    return X


def in_process_rows(X, name="X"):
    """Input that is not dask as the NumPy array :func:`as_row_chunked` validates, in its own
    dtype: the same object for a NumPy array (no copy), else converted as there (lists,
    DataFrames). For a model that keeps its training rows: a NumPy fit already holds them
    in this process, and computing the validated dask array back would gather every row,
    cast to the compute dtype, from the workers."""
    return np.asarray(_to_array(X, name))


def row_chunks(n_samples, n_hidden=1000, dtype=None):
    """Row chunks of NumPy input in :func:`as_row_chunked`: blocks of rows such that one
    block of H (rows x n_hidden) is about ``config["chunk_bytes"]``, the last one shorter."""
    dtype = np.dtype(dtype or get_config()["compute_dtype"])
    rows = max(1, int(get_config()["chunk_bytes"] // (max(n_hidden, 1) * dtype.itemsize)))
    rows = min(rows, n_samples)
    return (rows,) * (n_samples // rows) + ((n_samples % rows,) if n_samples % rows else ())


def _checked_block(block, label, finite, to):
    """A block of validated X: checked for NaN and infinity (dask input, whose values are
    seen only here) and cast to the compute dtype."""
    if finite and not np.isfinite(block).all():
        raise ValueError(f"{label} contains NaN or infinity")
    return block.astype(to, copy=False)


def tune_current_workers():
    """Give the workers of the current dask client, which will read the rows, the
    allocator setting ``worker_mmap_threshold`` (:mod:`elmscale.utils._worker_malloc`;
    once per client), and return that client (None without one). Every public entry that
    takes rows calls it: without it a worker maps and faults in each temporary above
    128 KiB anew."""
    client = distributed_client()
    if client is not None:
        from ._worker_malloc import tune_workers

        tune_workers(client)
    return client


def validate_data(estimator, X, *, reset, n_hidden=1000, numpy_ok=False):
    """scikit-learn's ``validate_data`` contract for elmscale's inputs: returns
    ``(X as in as_row_chunked, was_dask)``.

    With ``reset`` (in ``fit``) it records ``n_features_in_`` and, when X has string
    column names (pandas or dask DataFrame), ``feature_names_in_``; otherwise (``predict``,
    ``transform``...) it checks that the estimator is fitted, that the number of features is
    the one seen in ``fit`` and that the column names are the same, in the same order:
    reordered or renamed columns raise ``ValueError`` rather than giving silently wrong
    outputs (scikit-learn's wording and warnings, so its estimator checks apply). Every
    estimator, and any plugin, validates X through this one function so that bad input gets
    the same message everywhere.
    """
    if not reset:
        check_is_fitted(estimator)
    # a dask DataFrame's columns are those of its (empty pandas) _meta
    named = X._meta if is_dask_collection(X) and hasattr(X, "columns") else X
    try:
        _check_feature_names(estimator, named, reset=reset)
    except ValueError as exc:  # scikit-learn's text, which does not say which argument
        raise ValueError(f"X has columns other than those seen in fit. {exc}") from None
    Xd, was_dask = as_row_chunked(X, n_hidden=n_hidden, numpy_ok=numpy_ok)
    if reset:
        estimator.n_features_in_ = Xd.shape[1]
    else:
        check_features(Xd, estimator.n_features_in_, estimator=type(estimator).__name__)
    return Xd, was_dask


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


__all__ = [
    "as_row_chunked",
    "check_features",
    "check_positive_int",
    "is_dask_collection",
    "validate_data",
]
