"""Files in and out of the ``elmscale`` command: lazy row-chunked dask arrays from .csv,
.parquet (file or folder), .npy and .zarr, and writers chosen by the output's extension that
keep the row order. Nothing with N rows is gathered on the client: readers and writers run
block by block in dask tasks (the files must be reachable from the workers)."""

import importlib
import os
from pathlib import Path
from typing import NamedTuple

import dask
import dask.array as da
import numpy as np

#: Extensions ``read_matrix`` understands, and those the writers produce.
INPUT_KINDS = (".csv", ".parquet", ".npy", ".zarr")
OUTPUT_KINDS = (".parquet", ".npy", ".zarr", ".csv")
#: Extensions of ``--plot`` (matplotlib's formats).
PLOT_KINDS = (".png", ".pdf", ".svg")

#: Rows per block for .npy input (a block of X, not of H: the estimators size their own).
NPY_BLOCK_ROWS = 100_000


#: The optional modules that reading or writing each kind of file needs.
NEEDS = {
    ".csv": ("pandas", "dask.dataframe"),
    ".parquet": ("pandas", "dask.dataframe", "pyarrow"),
    ".zarr": ("zarr",),
    **{kind: ("matplotlib",) for kind in PLOT_KINDS},
}

#: The extra of pyproject.toml that installs each optional module.
EXTRAS = {
    "pandas": "cli",
    "dask.dataframe": "cli",
    "pyarrow": "cli",
    "zarr": "cli",
    "bokeh": "cli",
    "matplotlib": "plot",
}


class InputError(ValueError):
    """A file the command cannot read or write as asked (exit status 2)."""


def require(kind):
    """Import the optional modules that files of ``kind`` (an extension) need, or raise an
    InputError naming the extra that installs them."""
    for module in NEEDS.get(kind, ()):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing_dependency(exc, module, f"{kind} files") from None


def missing_dependency(exc, module=None, what="this command"):
    """The InputError for an ImportError of an optional module: which extra installs it.
    Returns None for a module no extra installs."""
    names = [n for n in (getattr(exc, "name", None), module) if n]
    for name in names:
        for known, extra in EXTRAS.items():
            if name == known or name.startswith(known + "."):
                return InputError(
                    f"missing {known}, needed for {what}: pip install 'elmscale[{extra}]'"
                )
    return None


def _kind(path, kinds, what):
    suffix = Path(str(path).rstrip("/")).suffix.lower()
    if suffix not in kinds:
        raise InputError(
            f"{what} {str(path)!r}: unknown extension {suffix or '(none)'!r}; "
            f"expected one of {', '.join(kinds)}"
        )
    return suffix


class Data(NamedTuple):
    """What :func:`read_data` returns."""

    #: float64 dask array chunked by rows only, row chunk sizes known
    X: object
    #: 1-D dask array of the target column, row-aligned with X, or None
    y: object
    #: the feature columns' names (None for .npy/.zarr)
    names: object


def check_input(path):
    """The kind (extension) of the input ``path``, checked: known, its optional modules
    installed, the file there."""
    kind = _kind(path, INPUT_KINDS, "input")
    require(kind)
    if not os.path.exists(path):
        raise InputError(f"input {str(path)!r} does not exist")
    return kind


def read_matrix(path, columns=None, block_rows=NPY_BLOCK_ROWS):
    """``(X, names)`` of :func:`read_data` without a target."""
    data = read_data(path, columns, block_rows=block_rows)
    return data.X, data.names


def read_data(path, columns=None, target=None, unlabelled=False, block_rows=NPY_BLOCK_ROWS):
    """The features and, with ``target``, the target column of the file at ``path``.

    ``columns``: the feature columns, names for .csv and .parquet, integer positions for .npy
    and .zarr; None takes every column but the target. ``target``: the target column (a name
    or a position likewise), or None. A missing target value (empty CSV field, NaN, null)
    becomes -1, scikit-learn's mark of an unlabelled row, when ``unlabelled`` is true, and
    is an error raised by the task that reads it otherwise. Feature columns are read as
    float64 whatever the first rows look like."""
    kind = check_input(path)
    if kind in (".csv", ".parquet"):
        X, y, names = _read_frame(path, kind, columns, target, unlabelled)
    else:
        X, y = _read_array(path, kind, columns, target, unlabelled, block_rows)
        names = None
    if X.shape[0] == 0:
        raise InputError(f"input {str(path)!r} has no rows")
    return Data(X.rechunk({1: -1}), y, names)


def _read_frame(path, kind, columns, target, unlabelled):
    import dask.dataframe as dd

    try:
        if kind == ".csv":
            # dtypes inferred from the first rows only; the final read below fixes them
            df = dd.read_csv(path, assume_missing=True)
        else:
            df = dd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - the reader's own message is the useful part
        raise InputError(f"cannot read {str(path)!r}: {one_line(exc)}") from None
    if kind == ".csv" and _csv_is_empty(path):
        raise InputError(f"input {str(path)!r} has a header but no rows")
    all_names = list(df.columns)
    _check_names("--target", [] if target is None else [target], all_names, path)
    if columns is None:
        features = [c for c in all_names if c != target]
    else:
        _check_names("--columns", columns, all_names, path)
        features = list(columns)
    if target is not None and target in features:
        raise InputError(f"--target {target!r} is also a feature column; drop it from --columns")
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    dtypes = df.dtypes
    bad = [c for c in features if not (is_numeric_dtype(dtypes[c]) or is_bool_dtype(dtypes[c]))]
    if bad:
        raise InputError(
            f"column(s) {', '.join(map(repr, bad))} of {str(path)!r} are not "
            "numeric; choose the feature columns with --columns"
        )
    wanted = features + ([] if target is None else [target])
    if kind == ".csv":
        # every feature column as float64: a column whose first rows look integer may hold
        # decimals further down (dask would fail on the mismatch in the reading task)
        df = dd.read_csv(
            path,
            usecols=wanted,
            dtype={c: np.float64 for c in features if not is_bool_dtype(dtypes[c])},
            assume_missing=True,
        )
    else:
        df = df[wanted]
    X, y = frame_arrays(df, features, target, unlabelled)
    return X, y, [str(c) for c in features]


def _csv_is_empty(path):
    import pandas as pd

    return pd.read_csv(path, nrows=1).empty


def _check_names(option, wanted, names, path):
    missing = [c for c in wanted if c not in names]
    if missing:
        raise InputError(
            f"{option}: {', '.join(map(repr, missing))} not in "
            f"{str(path)!r}; its columns: {', '.join(map(str, names))}"
        )


def frame_arrays(df, features, target, unlabelled):
    """``(X, y)`` from one pass over the partitions of ``df``: X the float64 ``features``,
    y the ``target`` column (None without one), one block per partition, row counts known."""
    parts = df.to_delayed()
    lengths = dask.compute(*[dask.delayed(len)(part) for part in parts])
    X = da.concatenate(
        [
            da.from_delayed(
                dask.delayed(_features)(part, features), shape=(n, len(features)), dtype=float
            )
            for part, n in zip(parts, lengths, strict=True)
        ]
    )
    if target is None:
        return X, None
    dtype = df[target].dtype
    dtype = np.dtype(object) if dtype.kind not in "biuf" else np.dtype(np.float64)
    y = da.concatenate(
        [
            da.from_delayed(
                dask.delayed(_target)(part[target].to_numpy(), target, unlabelled, dtype),
                shape=(n,),
                dtype=dtype,
            )
            for part, n in zip(parts, lengths, strict=True)
        ]
    )
    return X, y


def _features(part, features):
    return part[features].to_numpy(dtype=np.float64)


def _target(values, name, unlabelled, dtype):
    """A block of the target column as ``dtype``, missing values -1 when ``unlabelled``."""
    values = np.asarray(values)
    missing = np.isnan(values) if values.dtype.kind == "f" else _isna(values)
    if missing.any():
        if not unlabelled:
            raise ValueError(
                f"the target column {name!r} has {int(missing.sum())} missing value(s) in a "
                "block; only semi-supervised algorithms (ss-elm) take unlabelled rows"
            )
        values = values.copy()
        values[missing] = -1
    return values.astype(dtype)


def _isna(values):
    if values.dtype.kind in "biu":
        return np.zeros(values.shape, dtype=bool)
    import pandas as pd

    return np.asarray(pd.isna(values))


def _read_array(path, kind, columns, target, unlabelled, block_rows):
    if kind == ".npy":
        A = _read_npy(path, block_rows)
    else:
        try:
            A = da.from_zarr(path)
        except Exception as exc:  # noqa: BLE001
            raise InputError(f"cannot read {str(path)!r}: {one_line(exc)}") from None
    if A.ndim != 2:
        raise InputError(
            f"input {str(path)!r} holds a {A.ndim}-D array; expected a 2-D table (rows x features)"
        )
    width = A.shape[1]
    t = None if target is None else _positions("--target", [target], width)[0]
    if columns is None:
        idx = [i for i in range(width) if i != t]
    else:
        idx = _positions("--columns", columns, width)
    if t is not None and t in idx:
        raise InputError(f"--target {target} is also a feature column; drop it from --columns")
    X = (A if columns is None and t is None else A[:, idx]).astype(np.float64)
    if t is None:
        return X, None
    y = A[:, t].astype(np.float64)
    return X, y.map_blocks(_target, target, unlabelled, np.dtype(np.float64), dtype=np.float64)


def _positions(option, columns, width):
    """Column positions of .npy/.zarr input, each checked against the width (negative ones
    counted from the end and returned as such)."""
    try:
        idx = [int(c) for c in columns]
    except ValueError:
        raise InputError(
            f"{option} for .npy/.zarr input are column positions "
            f"(integers), got {', '.join(map(str, columns))}"
        ) from None
    if any(not -width <= i < width for i in idx):
        raise InputError(f"{option} {idx} out of range for {width} columns")
    return [i % width for i in idx]


def one_line(exc, limit=500):
    """An exception's message on one line, at most ``limit`` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def check_output(path, option, kinds=OUTPUT_KINDS):
    """Check, before any data is read, that ``path`` (given to ``option``) can be written:
    an extension among ``kinds`` (any when None), its optional modules installed, an
    existing folder."""
    kind = _kind(path, kinds, option) if kinds else None
    require(kind)
    folder = Path(str(path).rstrip("/")).parent
    if not folder.is_dir():
        raise InputError(f"{option} {str(path)!r}: folder {str(folder)!r} does not exist")


def write_array(x, path, name):
    """Write the dask array ``x`` (N rows, 1-D labels or 2-D embedding) to ``path`` by its
    extension, rows in order. ``name`` names the column(s) in tables: ``label`` or
    ``<name>0, <name>1, ...``."""
    kind = _kind(path, OUTPUT_KINDS, "output")
    require(kind)
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
