"""Files in and out of the ``elmscale`` command: lazy row-chunked dask arrays from .csv,
.parquet (file or folder), .npy and .zarr, and writers chosen by the output's extension that
keep the row order. Nothing with N rows is gathered on the client: readers and writers run
block by block in dask tasks (the files must be reachable from the workers)."""

import os
from pathlib import Path

import dask
import dask.array as da
import numpy as np

from .utils._dask import frame_to_array

#: Extensions ``read_matrix`` understands, and those the writers produce.
INPUT_KINDS = (".csv", ".parquet", ".npy", ".zarr")
OUTPUT_KINDS = (".parquet", ".npy", ".zarr", ".csv")

#: Rows per block for .npy input (a block of X, not of H: the estimators size their own).
NPY_BLOCK_ROWS = 100_000


class InputError(ValueError):
    """A file the command cannot read or write as asked (exit status 2)."""


def _kind(path, kinds, what):
    suffix = Path(str(path).rstrip("/")).suffix.lower()
    if suffix not in kinds:
        raise InputError(
            f"{what} {str(path)!r}: unknown extension {suffix or '(none)'!r}; "
            f"expected one of {', '.join(kinds)}"
        )
    return suffix


def read_matrix(path, columns=None, block_rows=NPY_BLOCK_ROWS):
    """``(X, names)``: X a float64 dask array chunked by rows only (row chunk sizes known),
    ``names`` the column names used (None for .npy/.zarr). ``columns``: names for .csv and
    .parquet, integer positions for .npy and .zarr; None takes every column."""
    kind = _kind(path, INPUT_KINDS, "input")
    if not os.path.exists(path):
        raise InputError(f"input {str(path)!r} does not exist")
    if kind in (".csv", ".parquet"):
        import dask.dataframe as dd

        try:
            df = dd.read_csv(path) if kind == ".csv" else dd.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - the reader's own message is the useful part
            raise InputError(f"cannot read {str(path)!r}: {exc}") from None
        if columns is not None:
            missing = [c for c in columns if c not in df.columns]
            if missing:
                raise InputError(
                    f"--columns: {', '.join(map(repr, missing))} not in "
                    f"{str(path)!r}; its columns: {', '.join(map(str, df.columns))}"
                )
            df = df[list(columns)]
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        bad = [c for c, t in df.dtypes.items() if not (is_numeric_dtype(t) or is_bool_dtype(t))]
        if bad:
            raise InputError(
                f"column(s) {', '.join(map(repr, bad))} of {str(path)!r} are not "
                "numeric; choose the feature columns with --columns"
            )
        names = [str(c) for c in df.columns]
        # one pass counting the rows of each block so the chunk sizes are known (the
        # estimators need them); the data stays on the workers
        X = frame_to_array(df).astype(np.float64)
    elif kind == ".npy":
        X = _read_npy(path, block_rows)
        names = None
    else:
        try:
            X = da.from_zarr(path)
        except Exception as exc:  # noqa: BLE001
            raise InputError(f"cannot read {str(path)!r}: {exc}") from None
        names = None
    if X.ndim != 2:
        raise InputError(
            f"input {str(path)!r} holds a {X.ndim}-D array; expected a 2-D table (rows x features)"
        )
    if kind in (".npy", ".zarr"):
        if columns is not None:
            try:
                idx = [int(c) for c in columns]
            except ValueError:
                raise InputError(
                    "--columns for .npy/.zarr input are column positions "
                    f"(integers), got {', '.join(columns)}"
                ) from None
            if any(not -X.shape[1] <= i < X.shape[1] for i in idx):
                raise InputError(f"--columns {idx} out of range for {X.shape[1]} columns")
            X = X[:, idx]
        X = X.astype(np.float64)
    return X.rechunk({1: -1}), names


def _read_npy(path, block_rows):
    try:
        reader = NpyFile(path)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot read {str(path)!r}: {exc}") from None
    if reader.ndim != 2:
        raise InputError(
            f"input {str(path)!r} holds a {reader.ndim}-D array; expected a 2-D "
            "table (rows x features)"
        )
    token = dask.base.tokenize(reader.path, os.path.getmtime(reader.path), block_rows)
    return da.from_array(
        reader, chunks=(block_rows, -1), lock=False, asarray=True, name=f"npy-rows-{token}"
    )


class NpyFile:
    """A .npy file as an array-like for ``da.from_array``: each task memory-maps the file
    and copies its rows, so only the path travels to the workers."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        header = np.load(self.path, mmap_mode="r")
        self.shape, self.dtype, self.ndim = header.shape, header.dtype, header.ndim

    def __getitem__(self, index):
        return np.array(np.load(self.path, mmap_mode="r")[index])


def write_array(x, path, name):
    """Write the dask array ``x`` (N rows, 1-D labels or 2-D embedding) to ``path`` by its
    extension, rows in order. ``name`` names the column(s) in tables: ``label`` or
    ``<name>0, <name>1, ...``."""
    kind = _kind(path, OUTPUT_KINDS, "output")
    x = da.asarray(x)
    if kind == ".npy":
        np.lib.format.open_memmap(path, mode="w+", dtype=x.dtype, shape=x.shape).flush()
        da.store(x, _NpyTarget(os.path.abspath(path)), lock=False)
    elif kind == ".zarr":
        x.to_zarr(path, overwrite=True)
    else:
        import dask.dataframe as dd

        cols = [name] if x.ndim == 1 else [f"{name}{i}" for i in range(x.shape[1])]
        df = dd.from_dask_array(x, columns=cols[0] if x.ndim == 1 else cols)
        if x.ndim == 1:
            df = df.to_frame()
        if kind == ".csv":
            df.to_csv(path, single_file=True, index=False)
        else:
            # zero-padded part names: readers list the files in name order, so row order
            # survives more than 10 partitions
            df.to_parquet(
                path,
                write_index=False,
                overwrite=True,
                name_function=lambda i: f"part.{i:06d}.parquet",
            )


class _NpyTarget:
    """A ``da.store`` target writing each block into the .npy file at ``path`` (opened in
    the task that writes, so only the path travels)."""

    def __init__(self, path):
        self.path = path

    def __setitem__(self, region, block):
        out = np.load(self.path, mmap_mode="r+")
        out[region] = block
        out.flush()
