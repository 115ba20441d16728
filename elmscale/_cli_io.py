"""Files in and out of the ``elmscale`` command: lazy row-chunked dask arrays from .csv,
.parquet (file or folder), .npy and .zarr, and writers chosen by the output's extension that
keep the row order. Nothing with N rows is gathered on the client: readers and writers run
block by block in dask tasks (the files must be reachable from the workers). dask is
imported by the readers and writers only: the checks of a command line run without it."""

import csv
import glob
import importlib
import importlib.util
import os
from pathlib import Path
from typing import NamedTuple

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
    """Check that the optional modules that files of ``kind`` (an extension) need are
    installed, without importing them (pandas and dask's DataFrame take seconds to import),
    or raise an InputError naming the extra that installs them."""
    for module in NEEDS.get(kind, ()):
        try:
            # the top-level package: looking for dask.dataframe would import dask, and a
            # subpackage whose own dependencies are missing fails on import all the same
            # (an ImportError that missing_dependency names)
            found = importlib.util.find_spec(module.partition(".")[0]) is not None
        except (ImportError, ValueError) as exc:
            found, error = False, exc
        else:
            error = ModuleNotFoundError(f"No module named {module!r}", name=module)
        if not found:
            raise missing_dependency(error, module, f"{kind} files") from None


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
    #: the feature columns' names (their positions "0", "1", ... for .npy, .zarr and a .csv
    #: without a header line)
    names: object
    #: for .csv input, whether its first line was read as a header; None otherwise
    header: object = None
    #: whether the columns are named by position (.npy, .zarr, a .csv without a header)
    by_position: bool = False


def check_input(path):
    """The kind (extension) of the input ``path``, checked: known, its optional modules
    installed, the file there (for .csv, a glob pattern matching files is accepted too)."""
    kind = _kind(path, INPUT_KINDS, "input")
    require(kind)
    if kind == ".csv":
        csv_files(path)
    elif not os.path.exists(path):
        raise InputError(f"input {str(path)!r} does not exist")
    return kind


def csv_files(path):
    """The files of a .csv input: the file itself, or the files a glob pattern matches
    (sorted, the order in which dask reads them)."""
    path = str(path)
    if os.path.exists(path):
        return [path]
    if any(c in path for c in "*?["):  # a glob pattern
        files = sorted(glob.glob(path))
        if files:
            return files
        raise InputError(f"input {path!r} matches no file")
    raise InputError(f"input {path!r} does not exist")


#: Fields pandas reads as a missing value or a boolean: like numbers, they are values, so
#: they do not make a first line a header.
_VALUE_WORDS = frozenset(
    ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN"]
    + ["<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"]
    + ["True", "False", "TRUE", "FALSE", "true", "false"]
)


def _is_number(field):
    text = field.strip()
    if "_" in text:  # Python's float() takes 1_000; pandas does not
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_value(field):
    return field.strip() in _VALUE_WORDS or _is_number(field)


def _first_records(path, n=2):
    """The first ``n`` records of a CSV file (fields unquoted), blank lines skipped as
    pandas skips them."""
    records = []
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        for record in csv.reader(f):
            if record and not (len(record) == 1 and not record[0].strip()):
                records.append(record)
                if len(records) == n:
                    break
    return records


def _positional_names(fields):
    """Whether ``fields`` are the names pandas gives the columns of a DataFrame made from an
    array, ``0,1,...,k-1``, after an empty name for its index when it wrote one."""
    names = [f.strip() for f in fields]
    if names and names[0] == "" and len(names) > 1:
        names = names[1:]
    elif len(names) < 2:
        return False
    return names == [str(i) for i in range(len(names))]


def csv_header(path):
    """Whether the first line of the CSV file at ``path`` is a header (True) or data (False).

    It is data when every field is a value: a number (quoted or not, ``nan`` and ``inf``
    included), empty, a missing-value mark of pandas (``NA``, ``null``...) or a boolean; the
    one exception is pandas' names of a DataFrame made from an array (``0,1,2,...``, after an
    empty field for its index), which is a header. A line with a text field is a header when
    one such field has a number below it in the second line (a name over its column); when
    every text field has text below it too (a headerless file with a text column, or a header
    of a text column only), the rule cannot tell and raises an InputError asking for
    ``--header`` or ``--no-header``. A file of one line with text is a header without rows."""
    records = _first_records(path)
    if not records:
        return False
    first, second = records[0], (records[1] if len(records) > 1 else None)
    text = [i for i, field in enumerate(first) if not _is_value(field)]
    if not text:
        return _positional_names(first)
    if second is None or any(i < len(second) and _is_number(second[i]) for i in text):
        return True
    fields = ", ".join(repr(first[i]) for i in text[:3])
    raise InputError(
        f"cannot tell whether the first line of {str(path)!r} is a header: its text "
        f"field(s) {fields} have text below them too; say --header or --no-header"
    )


def _csv_layout(path, header):
    """``(header, width, has_rows)`` of the .csv input ``path`` (a file or a glob): whether
    the first line of each file is a header (``header`` if given, else :func:`csv_header` of
    each file, which must agree), the number of fields of the first line, and whether any
    file has a data row. The files of a glob must have the same header (or width)."""
    files = csv_files(path)
    seen = {}  # header -> (file, its first record)
    has_rows = False
    for file in files:
        found = csv_header(file) if header is None else header
        records = _first_records(file)
        has_rows = has_rows or len(records) > int(found)
        seen.setdefault(found, (file, records[0] if records else []))
        if len(seen) > 1:
            raise InputError(
                f"the files of {str(path)!r} disagree: {seen[True][0]!r} starts with a "
                f"header line, {seen[False][0]!r} with data; give them all a header, or none"
            )
        first_file, first = seen[found]
        if records and (records[0] != first if found else len(records[0]) != len(first)):
            what = "header" if found else "number of columns"
            raise InputError(
                f"the files of {str(path)!r} disagree: {file!r} has another {what} than "
                f"{first_file!r}"
            )
    ((found, (_, first)),) = seen.items()
    return found, len(first), has_rows


class Pick(NamedTuple):
    """Which columns of a file :func:`read_data` reads (see there)."""

    #: the feature columns, or None for every column but ``drop`` and ``target``
    columns: object = None
    #: columns left out of the features when ``columns`` is None
    drop: object = None
    #: the target column, or None
    target: object = None
    #: the columns a saved model was fitted on, ``(names, positions)`` (either may be None):
    #: the features when neither ``columns`` nor ``drop`` is given
    fitted: object = None


def read_matrix(path, columns=None, block_rows=NPY_BLOCK_ROWS, header=None, drop=None):
    """``(X, names)`` of :func:`read_data` without a target."""
    data = read_data(path, columns, block_rows=block_rows, header=header, drop=drop)
    return data.X, data.names


def read_data(
    path,
    columns=None,
    target=None,
    unlabelled=False,
    block_rows=NPY_BLOCK_ROWS,
    header=None,
    drop=None,
    classes=False,
    fitted=None,
):
    """The features and, with ``target``, the target column of the file at ``path``.

    ``columns``: the feature columns, names for .csv and .parquet, integer positions for .npy
    and .zarr; None takes every column but those of ``drop`` and the target. ``target``: the
    target column (a name or a position likewise), or None. ``fitted``: ``(names,
    positions)`` of the columns a model was fitted on, the features when neither ``columns``
    nor ``drop`` is given (names for a table with names, positions otherwise). A missing
    target value (empty CSV field, NaN, null) becomes -1, scikit-learn's mark of an
    unlabelled row, when ``unlabelled`` is true, and is an error raised by the task that
    reads it otherwise. Feature columns are read as float64 whatever the first rows look
    like; the target as float64 too, or with ``classes`` (class labels) as int64 when its
    values are whole numbers (a .csv: in its first rows; a value further down that is not
    is then an error of the task that reads it).

    ``header``: whether the first line of a .csv file is a header (True), data (False) or
    None to decide by :func:`csv_header`, for each file of a glob. Without a header the
    columns are named by position, ``"0"``, ``"1"``..., and ``columns``/``target`` are
    positions (negative ones counted from the end) as for .npy."""
    kind = check_input(path)
    if columns is not None and drop is not None:
        raise InputError("--columns and --drop-columns exclude each other")
    pick = Pick(columns, drop, target, fitted)
    if kind in (".csv", ".parquet"):
        X, y, names, header = _read_frame(path, kind, pick, unlabelled, header, classes)
    else:
        X, y, names = _read_array(path, kind, pick, unlabelled, block_rows, classes)
        header = None
    if X.shape[0] == 0:
        raise InputError(f"input {str(path)!r} has no rows")
    by_position = kind in (".npy", ".zarr") or header is False
    from .utils._validation import row_chunks

    chunks = split_rows(X.chunks[0], row_chunks(X.shape[0])[0])
    y = None if y is None else y.rechunk({0: chunks})
    return Data(X.rechunk({0: chunks, 1: -1}), y, names, header, by_position)


def split_rows(chunks, most):
    """Row ``chunks`` with each one above ``most`` rows split into near-equal pieces of at
    most ``most``; smaller ones kept, none merged (each piece reads one block).

    A file is read in a few large blocks (a .csv of 100 MB is one); a fit runs a task per
    block in most stages, so a fit of one block would leave every worker but one idle. The
    estimators cut NumPy input at this size (:func:`~elmscale.utils._validation.row_chunks`).
    """
    out = []
    for n in chunks:
        pieces = -(-n // most)
        size, extra = divmod(n, pieces)
        out += [size + 1] * extra + [size] * (pieces - extra)
    return tuple(out)


def _choose(names, pick, path, where=None):
    """``(features, target)``: the names among ``names`` (all the file's columns) that
    ``pick`` selects. ``where`` says what the file is when its columns are named by position
    (``"0"``, ``"1"``...): the options then give positions."""
    columns, drop, target = pick.columns, pick.drop, pick.target
    fitted, option = None, "--columns"
    if pick.fitted is not None:
        fitted = pick.fitted[1 if where else 0]
    if where is not None:
        width = len(names)
        columns = _position_names("--columns", columns, width, where)
        drop = _position_names("--drop-columns", drop, width, where)
        fitted = _position_names("the model's columns", fitted, width, where)
        if target is not None:
            target = _position_names("--target", [target], width, where)[0]
    _check_names("--target", [] if target is None else [target], names, path)
    if columns is None and drop is None and fitted is not None:
        columns, option = [str(c) for c in fitted], "the model's columns"
    if columns is None:
        _check_names("--drop-columns", drop or [], names, path)
        features = [c for c in names if c != target and c not in (drop or [])]
    else:
        _check_names(option, columns, names, path)
        features = list(columns)
    if target is not None and target in features:
        raise InputError(f"--target {target!r} is also a feature column; drop it from {option}")
    return features, target


def _read_frame(path, kind, pick, unlabelled, header, classes):
    import dask.dataframe as dd

    options, where = {}, None
    if kind == ".csv":
        header, width, has_rows = _csv_layout(path, header)
        if not has_rows:
            raise InputError(f"input {str(path)!r} has {'a header but ' if header else ''}no rows")
        if not header:  # every row is data; the columns are named by position
            options = {"header": None, "names": [str(i) for i in range(width)]}
            where = "a headerless .csv"
    try:
        if kind == ".csv":
            # dtypes inferred from the first rows only; the final read below fixes them
            df = dd.read_csv(path, assume_missing=True, **options)
        else:
            df = dd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - the reader's own message is the useful part
        raise InputError(f"cannot read {str(path)!r}: {one_line(exc)}") from None
    features, target = _choose(list(df.columns), pick, path, where)
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    dtypes = df.dtypes
    bad = [c for c in features if not (is_numeric_dtype(dtypes[c]) or is_bool_dtype(dtypes[c]))]
    if bad:
        raise InputError(
            f"column(s) {', '.join(map(repr, bad))} of {str(path)!r} are not "
            "numeric; choose the feature columns with --columns or --drop-columns"
        )
    wanted = features + ([] if target is None else [target])
    whole = False
    if kind == ".csv":
        whole = classes and target is not None and _whole_numbers_first(path, target, options)
        # every feature column as float64: a column whose first rows look integer may hold
        # decimals further down (dask would fail on the mismatch in the reading task)
        df = dd.read_csv(
            path,
            usecols=wanted,
            dtype={c: np.float64 for c in features if not is_bool_dtype(dtypes[c])},
            assume_missing=True,
            **options,
        )
    else:
        whole = classes and target is not None and dtypes[target].kind in "iu"
        df = df[wanted]
    try:
        X, y = frame_arrays(df, features, target, unlabelled, whole)
    except ValueError as exc:  # a feature value beyond the rows the dtypes were inferred from
        if kind == ".csv" and "convert" in str(exc):
            floats = [c for c in features if not is_bool_dtype(dtypes[c])]
            _raise_where_not_a_number(path, floats, options, header)
        raise
    return X, y, [str(c) for c in features], header if kind == ".csv" else None


#: Rows per block of the pass that looks for a value that is not a number.
SCAN_ROWS = 100_000


def _raise_where_not_a_number(path, columns, options, header):
    """Raise an :class:`InputError` naming the file, the line and the column of the first
    value of ``columns`` in the .csv file(s) ``path`` that is not a number (pandas' missing
    value markers aside); return if there is none. The read itself fails without saying
    where (it is one of many blocks, inferred from the first rows); this pass over the files,
    on the client and only after that failure, stops at the value. Lines count from 1, the
    header included, one line per row."""
    import pandas as pd

    for file in csv_files(path):
        reader = pd.read_csv(file, usecols=columns, dtype=str, chunksize=SCAN_ROWS, **options)
        with reader:
            for block in reader:
                for c in columns:
                    values = block[c]
                    bad = values.notna() & pd.to_numeric(values, errors="coerce").isna()
                    if bad.any():
                        row = bad.idxmax()
                        name = repr(c) if header else c  # a headerless file's: its position
                        raise InputError(
                            f"{str(file)!r}, line {row + 1 + bool(header)}, column {name}: "
                            f"{values[row]!r} is not a number; choose the feature columns "
                            "with --columns or --drop-columns"
                        )


#: Rows of a .csv whose target values decide whether class labels are whole numbers.
TARGET_SAMPLE_ROWS = 10_000


def _whole_numbers_first(path, target, options):
    """Whether the first :data:`TARGET_SAMPLE_ROWS` values of the column ``target`` of the
    (first) .csv file are whole numbers, missing ones aside (at least one present)."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    first = csv_files(path)[0]
    column = pd.read_csv(first, usecols=[target], nrows=TARGET_SAMPLE_ROWS, **options)[target]
    if is_bool_dtype(column.dtype) or not is_numeric_dtype(column.dtype):
        return False
    values = column.dropna().to_numpy(dtype=np.float64)
    return bool(values.size) and bool(np.all(np.isfinite(values) & (values == np.round(values))))


def _position_names(option, columns, width, where):
    """Positions given for a table whose columns are named by position, as those names."""
    if columns is None:
        return None
    return [str(i) for i in _positions(option, columns, width, where)]


def _check_names(option, wanted, names, path):
    missing = [c for c in wanted if c not in names]
    if missing:
        shown = ", ".join(map(str, names[:20])) + (
            f", ... ({len(names)} columns)" if len(names) > 20 else ""
        )
        hint = "; choose the columns with --columns" if option == "the model's columns" else ""
        raise InputError(
            f"{option}: {', '.join(map(repr, missing))} not in "
            f"{str(path)!r}; its columns: {shown}{hint}"
        )


def frame_arrays(df, features, target, unlabelled, whole=False):
    """``(X, y)`` from one pass over the partitions of ``df``: X the float64 ``features``,
    y the ``target`` column (None without one; int64 with ``whole``, float64 for other
    numbers, objects otherwise), one block per partition, row counts known."""
    import dask
    import dask.array as da

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
    dtype = _target_dtype(df[target].dtype, whole)
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


def _target_dtype(dtype, whole):
    if whole:
        return np.dtype(np.int64)
    return np.dtype(object) if dtype.kind not in "biuf" else np.dtype(np.float64)


def _features(part, features):
    # row-major: pandas hands a block of float columns over column-major, and every reader
    # of X takes rows
    return np.ascontiguousarray(part[features].to_numpy(dtype=np.float64))


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
    if dtype.kind == "i" and values.dtype.kind == "f":
        odd = values != np.round(values)
        if odd.any():
            raise ValueError(
                f"the target column {name!r} holds {values[odd][0]!r}, not a whole number, "
                "though its first rows are whole numbers (class labels)"
            )
    return values.astype(dtype)


def _isna(values):
    if values.dtype.kind in "biu":
        return np.zeros(values.shape, dtype=bool)
    import pandas as pd

    return np.asarray(pd.isna(values))


def _read_array(path, kind, pick, unlabelled, block_rows, classes):
    import dask.array as da

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
    names = [str(i) for i in range(A.shape[1])]
    features, target = _choose(names, pick, path, where=".npy/.zarr input")
    idx = [int(c) for c in features]
    X = (A if features == names else take_columns(A, idx)).astype(np.float64)
    if target is None:
        return X, None, features
    dtype = _target_dtype(A.dtype, classes and A.dtype.kind in "iu")
    y = A[:, int(target)].astype(dtype)
    return X, y.map_blocks(_target, target, unlabelled, dtype, dtype=dtype), features


def take_columns(A, idx):
    """The columns ``idx`` of the row-chunked dask array ``A``: a slice when they are a run,
    else a selection inside each block. dask's fancy index ``A[:, idx]`` builds a take over
    the column blocks that costs about as much as reading the block, again in every pass
    over X."""
    idx = [int(i) for i in idx]
    if idx == list(range(idx[0], idx[0] + len(idx))):
        return A[:, idx[0] : idx[0] + len(idx)]
    A = A.rechunk({1: -1})
    return A.map_blocks(
        np.take, np.asarray(idx), axis=1, chunks=(A.chunks[0], (len(idx),)), dtype=A.dtype
    )


def _positions(option, columns, width, where=".npy/.zarr input"):
    """Column positions of .npy/.zarr input (or ``where``), each checked against the width
    (negative ones counted from the end)."""
    try:
        idx = [int(c) for c in columns]
    except ValueError:
        raise InputError(
            f"{option} for {where} are column positions "
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
    import dask
    import dask.array as da

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
    import dask.array as da

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
