"""Files as other tools write them, through ``elmscale fit/predict/transform``: every row in
is a row out (a CSV without a header keeps its first row), whatever the input and output
formats."""

import numpy as np
import pytest

from elmscale import _cli_io, cli

from .test_cli import FIT_PARAMS, read_labels, run_cmd

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


def _savetxt(path, X):
    np.savetxt(path, X, delimiter=",", fmt="%.6g")
    return np.loadtxt(path, delimiter=",")


def _pandas(path, X, **kwargs):
    import pandas as pd

    pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).to_csv(path, **kwargs)
    index = kwargs.get("index", True)
    return np.column_stack([np.arange(len(X)), X]) if index else X


def _pandas_default_names(path, X, **kwargs):
    """A DataFrame made from an array has the column names 0, 1, ...: the header line is
    numbers."""
    import pandas as pd

    pd.DataFrame(X).to_csv(path, **kwargs)
    return np.column_stack([np.arange(len(X)), X]) if kwargs.get("index", True) else X


def _pyarrow(path, X):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({f"f{i}": X[:, i] for i in range(X.shape[1])}), path)
    return X


def _npy(path, X):
    np.save(path, X)
    return X


def _zarr(path, X):
    import dask.array as da

    da.from_array(X, chunks=(100, X.shape[1])).to_zarr(str(path))
    return X


#: (file name, writer): each writer returns the feature matrix the file holds.
WRITERS = {
    "savetxt": ("x.csv", _savetxt),
    "pandas-no-index": ("x.csv", lambda p, X: _pandas(p, X, index=False)),
    "pandas-index": ("x.csv", _pandas),
    "pandas-no-header": ("x.csv", lambda p, X: _pandas(p, X, header=False, index=False)),
    "pandas-names-0-1": ("x.csv", lambda p, X: _pandas_default_names(p, X, index=False)),
    "pandas-names-index": ("x.csv", _pandas_default_names),
    "pyarrow": ("x.parquet", _pyarrow),
    "npy": ("x.npy", _npy),
    "zarr": ("x.zarr", _zarr),
}
OUT = _cli_io.OUTPUT_KINDS


@pytest.mark.parametrize("writer", list(WRITERS))
def test_every_output_has_a_row_for_every_input_row(blobs, tmp_path, writer):
    """fit --labels/--embedding, predict and transform of a file written by another tool: each
    output has the input's row count, and its rows are those of the whole matrix (row 0
    included): the fit's labels equal the Python API's, the others the saved model's."""
    from .test_cli import _python_labels

    name, write = WRITERS[writer]
    X = write(tmp_path / name, blobs[0])
    src = tmp_path / name
    k = list(WRITERS).index(writer)
    outs = [tmp_path / f"{what}{OUT[(k + i) % len(OUT)]}" for i, what in enumerate("letp")]
    model = tmp_path / "m.pkl"
    status, _, err = run_cmd(
        "fit", "us-elm", src, "-p", *FIT_PARAMS, "--labels", outs[0], "--embedding", outs[1],
        "--save", model,
    )  # fmt: skip
    assert status == 0, err
    assert f": {len(X)} rows x {X.shape[1]} columns" in err
    fitted = _Named(cli.load_model(model))
    labels = read_labels(outs[0])
    assert labels.shape == (len(X),)
    # the Python API on the same row blocks (zarr: its chunks; the others: one block)
    np.testing.assert_array_equal(labels, _python_labels(X, 100 if writer == "zarr" else len(X)))
    np.testing.assert_allclose(read_labels(outs[1]), fitted.transform(X), rtol=1e-9)
    assert run_cmd("predict", model, src, "--labels", outs[2], "-q")[0] == 0
    np.testing.assert_array_equal(read_labels(outs[2]), fitted.predict(X))
    assert run_cmd("transform", model, src, "--embedding", outs[3], "-q")[0] == 0
    np.testing.assert_allclose(read_labels(outs[3]), fitted.transform(X), rtol=1e-9)


def test_a_headerless_csv_whose_first_row_looks_like_names_keeps_it(blobs, tmp_path):
    """First row 1,2,3,4,5 (numbers that could be column names): it is data."""
    X = blobs[0].copy()
    X[0] = np.arange(1, X.shape[1] + 1)
    path = tmp_path / "x.csv"
    X = _savetxt(path, X)
    assert path.read_text().startswith("1,2,3,4,5\n")
    Xd, names = _cli_io.read_matrix(str(path))
    assert names == ["0", "1", "2", "3", "4"]
    np.testing.assert_array_equal(Xd.compute(), X)
    status, _, err = run_cmd(
        "fit", "us-elm", path, "-p", *FIT_PARAMS, "--labels", tmp_path / "l.csv"
    )
    assert status == 0, err
    assert "240 rows x 5 columns" in err and "no header line" in err
    assert read_labels(tmp_path / "l.csv").shape == (240,)


def test_pandas_positional_names_are_read_as_names_and_said_so(blobs, tmp_path):
    """pandas writes an array's columns as 0,1,...: a header, but one a first data row could
    equal, so the fit says how it read the line and how to override it."""
    path = tmp_path / "x.csv"
    X = _pandas_default_names(path, blobs[0], index=False)
    status, _, err = run_cmd("fit", "us-elm", path, "-p", *FIT_PARAMS)
    assert status == 0, err
    assert f"{len(X)} rows x 5 columns" in err and "--no-header if it is data" in err
    status, _, err = run_cmd("fit", "us-elm", path, "--no-header", "-p", *FIT_PARAMS)
    assert status == 0 and f"{len(X) + 1} rows" in err, err


@pytest.mark.parametrize(
    "lines, header",
    [
        (["1,2,3", "4,5,6"], False),
        (["a,b,c", "1,2,3"], True),
        (['"1.5","2",3', "1,2,3"], False),  # quoted numbers are numbers
        (["nan,inf,-inf", "1,2,3"], False),
        (["NaN,-Infinity,1e-3", "1,2,3"], False),
        (["1,,3", "1,2,3"], False),  # an empty field is a missing value
        (["NA,null,2", "1,2,3"], False),  # pandas' missing-value marks
        (["True,1.5", "False,2"], False),
        (["0,1,2", "0.5,0.25,3"], True),  # pandas' names of a DataFrame made from an array
        ([",0,1,2", "0,0.5,0.25,3"], True),  # the same with its index column
        (["1,0,1,2", "0,0.5,0.25,3"], False),
        (["f0,kind", "0.5,ant"], True),  # f0 is text over a number
        (["a,b", ""], True),  # a header and no rows
        (["", "", "1,2", "3,4"], False),  # blank lines are skipped
        (["1_000,2", "3,4"], True),  # not a number to pandas
    ],
)
def test_the_header_rule(tmp_path, lines, header):
    path = tmp_path / "x.csv"
    path.write_text("\n".join(lines) + "\n")
    assert _cli_io.csv_header(str(path)) is header


def test_a_first_line_whose_text_columns_stay_text_is_ambiguous(tmp_path):
    """0.5,ant over 0.6,bee: a headerless file with a text column, or a header naming two
    columns '0.5' and 'ant'? The user says which."""
    path = tmp_path / "x.csv"
    path.write_text("0.5,ant\n0.6,bee\n0.7,cat\n")
    with pytest.raises(_cli_io.InputError, match="--header or --no-header"):
        _cli_io.csv_header(str(path))
    status, _, err = run_cmd("fit", "us-elm", path, "-q")
    assert status == 2 and "'ant'" in err and "--header or --no-header" in err
    X, names = _cli_io.read_matrix(str(path), columns=["0"], header=False)
    np.testing.assert_array_equal(X.compute(), [[0.5], [0.6], [0.7]])


@pytest.mark.parametrize("option, rows", [("--no-header", 241), ("--header", 240)])
def test_header_options_override_the_rule(blobs, tmp_path, option, rows):
    """A header line of numbers (pandas' 0,1,...) read as data with --no-header; a first data
    line read as names with --header: the user decides, the row count follows."""
    X = _pandas_default_names(tmp_path / "x.csv", blobs[0], index=False)
    status, _, err = run_cmd(
        "fit", "us-elm", tmp_path / "x.csv", option, "-p", *FIT_PARAMS, "--labels",
        tmp_path / "l.npy",
    )  # fmt: skip
    assert status == 0, err
    assert np.load(tmp_path / "l.npy").shape == (rows,)
    if option == "--header":
        _savetxt(tmp_path / "y.csv", X)
        status, _, err = run_cmd(
            "fit", "us-elm", tmp_path / "y.csv", option, "-p", *FIT_PARAMS, "--labels",
            tmp_path / "l.npy",
        )  # fmt: skip
        assert status == 0, err
        assert np.load(tmp_path / "l.npy").shape == (rows - 1,)


def test_header_options_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "us-elm", "x.csv", "--header", "--no-header"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_headerless_columns_and_target_are_positions(blobs, tmp_path):
    """Columns of a CSV without a header are named by position: --columns 0,2 and --target -1
    (from the end, as for .npy)."""
    from elmscale import ELMClassifier

    X, y = blobs
    path = tmp_path / "xy.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
    data = _cli_io.read_data(str(path), columns=["0", "2"], target="-1")
    np.testing.assert_array_equal(data.X.compute(), X[:, [0, 2]])
    assert data.names == ["0", "2"]
    status, _, err = run_cmd(
        "fit", "elm-classifier", path, "--columns", "0,2", "--target", "-1",
        "-p", "n_hidden=30", "random_state=0", "--labels", tmp_path / "l.npy", "-q",
    )  # fmt: skip
    assert status == 0, err
    model = ELMClassifier(n_hidden=30, random_state=0)
    expected = model.fit(X[:, [0, 2]], y).predict(X[:, [0, 2]])
    got = np.load(tmp_path / "l.npy")
    assert got.dtype.kind == "i"  # whole numbers in the file: integer classes
    np.testing.assert_array_equal(got, expected)
    status, _, err = run_cmd("fit", "us-elm", path, "--columns", "0,x", "-q")
    assert status == 2 and "headerless .csv" in err and "positions" in err


def test_a_glob_of_csv_files_applies_the_rule_to_each(blobs, tmp_path):
    """part-*.csv of three headerless files: every row of every file; a glob mixing files with
    and without a header is refused, naming one of each."""
    X = blobs[0]
    for i, part in enumerate(np.array_split(X, 3)):
        _savetxt(tmp_path / f"part-{i}.csv", part)
    pattern = str(tmp_path / "part-*.csv")
    Xd, names = _cli_io.read_matrix(pattern)
    np.testing.assert_allclose(Xd.compute(), X, rtol=1e-5)
    status, _, err = run_cmd(
        "fit", "us-elm", pattern, "-p", *FIT_PARAMS, "--labels", tmp_path / "l.npy", "-q"
    )
    assert status == 0, err
    assert np.load(tmp_path / "l.npy").shape == (len(X),)
    _pandas(tmp_path / "part-3.csv", X[:5], index=False)
    status, _, err = run_cmd("fit", "us-elm", pattern, "-q")
    assert status == 2 and "part-0.csv" in err and "part-3.csv" in err and "header" in err
    status, _, err = run_cmd("fit", "us-elm", str(tmp_path / "nothing-*.csv"), "-q")
    assert status == 2 and "matches no file" in err


# -- the model remembers its columns; integer targets stay integers ----------------------------
@pytest.fixture
def numbered_csv(blobs, tmp_path):
    """The blobs with their class as an integer column 'label' (0, 1, 2) after features
    f0..f4, and a column 'note' of text: what a CSV of labelled data looks like."""
    import pandas as pd

    X, y = blobs
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    df["label"] = y + 5  # classes 5, 6, 7
    df["note"] = "n"
    path = tmp_path / "numbered.csv"
    df.to_csv(path, index=False)
    return X, y + 5, path


def test_predict_on_the_fits_own_csv_selects_the_fitted_columns(numbered_csv, tmp_path):
    """Fitted with --target label --drop-columns note, the model predicts and transforms the
    same file (label and note present) by the names of its feature columns; its labels are
    the integers of the column, not floats."""
    from elmscale import ELMClassifier

    X, y, path = numbered_csv
    model = tmp_path / "m.pkl"
    status, _, err = run_cmd(
        "fit", "elm-classifier", path, "--target", "label", "--drop-columns", "note",
        "-p", "n_hidden=40", "random_state=0", "--labels", tmp_path / "fit.npy",
        "--save", model, "-q",
    )  # fmt: skip
    assert status == 0, err
    saved = cli.load_model(model)
    assert list(saved.feature_names_in_) == [f"f{i}" for i in range(5)]
    assert saved.classes_.dtype.kind == "i" and list(saved.classes_) == [5, 6, 7]
    expected = ELMClassifier(n_hidden=40, random_state=0).fit(_rows(X), y).predict(X)
    fit_labels = np.load(tmp_path / "fit.npy")
    assert fit_labels.dtype.kind == "i"
    np.testing.assert_array_equal(fit_labels, expected)
    status, _, err = run_cmd("predict", model, path, "--labels", tmp_path / "p.csv", "-q")
    assert status == 0, err
    assert err == ""  # no warning about feature names
    assert (tmp_path / "p.csv").read_text().splitlines()[1] == str(expected[0])
    np.testing.assert_array_equal(read_labels(tmp_path / "p.csv"), expected)


def test_a_file_without_the_fitted_columns_is_one_line_naming_them(numbered_csv, tmp_path):
    import pandas as pd

    X, y, path = numbered_csv
    model = tmp_path / "m.pkl"
    status, _, err = run_cmd(
        "fit", "us-elm", path, "--columns", "f0,f1,f2,f3", "-p", *FIT_PARAMS, "--save", model,
        "-q",
    )  # fmt: skip
    assert status == 0, err
    assert run_cmd("transform", model, path, "--embedding", tmp_path / "e.npy", "-q")[0] == 0
    assert np.load(tmp_path / "e.npy").shape == (len(X), cli.load_model(model).n_components_)
    pd.read_csv(path).drop(columns=["f1", "f3"]).to_csv(tmp_path / "less.csv", index=False)
    for command, output in (("predict", "--labels"), ("transform", "--embedding")):
        status, _, err = run_cmd(command, model, tmp_path / "less.csv", output, tmp_path / "o.npy")
        assert status == 2
        (line,) = err.splitlines()
        assert "'f1', 'f3'" in line and "the model's columns" in line and "--columns" in line


def test_drop_columns(numbered_csv, tmp_path):
    """--drop-columns: every column but these (and the target) are the features; by position
    for .npy; an unknown column is an error; it excludes --columns."""
    X, y, path = numbered_csv
    data = _cli_io.read_data(str(path), drop=["note", "f2"], target="label")
    assert data.names == ["f0", "f1", "f3", "f4"]
    np.testing.assert_array_equal(data.X.compute(), X[:, [0, 1, 3, 4]])
    np.save(tmp_path / "x.npy", X)
    Xd, _ = _cli_io.read_matrix(str(tmp_path / "x.npy"), drop=["-1", "0"])
    np.testing.assert_array_equal(Xd.compute(), X[:, 1:4])
    status, _, err = run_cmd("fit", "us-elm", path, "--drop-columns", "note,nope", "-q")
    assert status == 2 and "--drop-columns: 'nope' not in" in err
    with pytest.raises(SystemExit):
        cli.main(["fit", "us-elm", str(path), "--columns", "f0", "--drop-columns", "f1"])


def test_a_positional_model_selects_its_positions(blobs, tmp_path):
    """Fitted on an .npy with its target in column 2: predict on the same .npy takes the
    other columns again; an integer target column of an .npy stays integer."""
    X, y = blobs
    np.save(tmp_path / "xy.npy", np.column_stack([X[:, :2], y, X[:, 2:]]))
    model = tmp_path / "m.pkl"
    status, _, err = run_cmd(
        "fit", "elm-classifier", tmp_path / "xy.npy", "--target", 2, "-p", "n_hidden=40",
        "random_state=0", "--save", model, "-q",
    )  # fmt: skip
    assert status == 0, err
    assert cli.load_model(model).classes_.dtype.kind == "f"  # the file's float column
    status, _, err = run_cmd("predict", model, tmp_path / "xy.npy", "--labels", tmp_path / "l.npy")
    assert status == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "l.npy"), cli.load_model(model).predict(X))


def test_ss_elm_keeps_integer_classes_with_unlabelled_rows(numbered_csv, tmp_path):
    import pandas as pd

    X, y, path = numbered_csv
    df = pd.read_csv(path)
    df["label"] = df["label"].where(np.arange(len(df)) % 4 == 0)  # NaN: unlabelled
    df.to_csv(path, index=False)
    status, _, err = run_cmd(
        "fit", "ss-elm", path, "--target", "label", "--drop-columns", "note",
        "-p", "n_hidden=40", "graph=exact", "n_neighbors=5", "random_state=0",
        "--labels", tmp_path / "l.parquet", "--save", tmp_path / "m.pkl", "-q",
    )  # fmt: skip
    assert status == 0, err
    assert list(cli.load_model(tmp_path / "m.pkl").classes_) == [5, 6, 7]
    labels = read_labels(tmp_path / "l.parquet")
    assert labels.dtype.kind == "i" and set(labels) <= {5, 6, 7}


class _Named:
    """A saved model applied to NumPy rows from Python: as a DataFrame with the columns'
    names when it was fitted on named columns (scikit-learn checks them)."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, method):
        import pandas as pd

        names = getattr(self.model, "feature_names_in_", None)
        return lambda X: getattr(self.model, method)(
            X if names is None else pd.DataFrame(X, columns=names)
        )


def _rows(X):
    import dask.array as da

    return da.from_array(X, chunks=X.shape)


# -- errors come early and fast -----------------------------------------------------------------
HEAVY = ("sklearn", "dask.array", "dask.dataframe", "pandas", "elmscale.algorithms", "scipy")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fit", "us-elm", "{tmp}/missing.csv"], "does not exist"),
        (["fit", "us-elm", "{tmp}/x.txt"], "unknown extension '.txt'"),
        (["fit", "us-elm", "{npy}", "--labels", "{tmp}/l.txt"], "unknown extension '.txt'"),
        (["fit", "us-elm", "{npy}", "--save", "{tmp}/no/m.pkl"], "does not exist"),
        (["predict", "{tmp}/m.pkl", "{npy}", "--labels", "l.npy"], "does not exist"),
        (["transform", "{npy}", "{tmp}/missing.npy", "--embedding", "e.npy"], "does not exist"),
    ],
)
def test_usage_errors_import_nothing_heavy(tmp_path, argv, message):
    """A command line with a missing input or a bad output fails before scikit-learn, dask's
    arrays, pandas or the estimators are imported (they take seconds to import)."""
    from .test_cli import _cli_process

    np.save(tmp_path / "x.npy", np.zeros((3, 2)))
    argv = [a.format(tmp=tmp_path, npy=tmp_path / "x.npy") for a in argv]
    prelude = "import atexit\natexit.register(lambda: print(sorted(sys.modules)))"
    proc = _cli_process(*argv, prelude=prelude)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.splitlines()) == 1
    loaded = set(eval(proc.stdout.splitlines()[-1]))
    assert not {m for m in HEAVY if m in loaded}


@pytest.mark.parametrize(
    "rows, params, message",
    [
        (1, ["n_clusters=1"], "has 1 row(s); us-elm needs at least 11 for n_neighbors=10"),
        (3, [], "has 3 row(s); us-elm needs at least 11 for n_neighbors=10"),
        (3, ["n_neighbors=2"], "has 3 row(s); us-elm needs at least 9 for n_clusters=8 with"),
        (2, ["n_neighbors=1", "n_clusters=2", "n_components=2"], "at least 3 for n_components=2"),
        (
            3,
            ["n_neighbors=2", "n_clusters=3"],
            "at least 4 for n_clusters=3 with n_components='auto'",
        ),
    ],
)
def test_too_few_rows_is_an_error_about_the_data(tmp_path, rows, params, message):
    """A file with too few rows for the parameters: one line naming its rows and the
    parameter that needs more, not a parameter the user never set."""
    path = tmp_path / "few.csv"
    _savetxt(path, np.arange(rows * 3, dtype=float).reshape(rows, 3) ** 1.5)
    status, _, err = run_cmd("fit", "us-elm", path, *(["-p", *params] if params else []), "-q")
    assert status == 2
    assert message in err and "n_samples" not in err and len(err.splitlines()) == 1


def test_checkpoint_without_a_seed_is_refused_before_the_data_is_read(blobs, tmp_path, monkeypatch):
    def unread(*args, **kwargs):
        raise AssertionError("the data was read")

    np.save(tmp_path / "x.npy", blobs[0])
    monkeypatch.setattr(_cli_io, "read_data", unread)
    status, _, err = run_cmd(
        "fit", "us-elm", tmp_path / "x.npy", "--checkpoint", tmp_path / "ck", "-q"
    )
    assert status == 2
    assert "--checkpoint needs a seed: add -p random_state=0" in err


@pytest.mark.parametrize("idx", [[1, 2, 3], [4, 0, 2], [3]])
def test_take_columns_equals_numpy(idx):
    """Feature columns of .npy/.zarr input are chosen by a slice or inside each block, never by
    dask's fancy index (a take rerun in every pass over X): the same values, any chunking."""
    import dask.array as da

    X = np.arange(60.0).reshape(12, 5)
    for chunks in ((5, -1), (5, 2)):
        got = _cli_io.take_columns(da.from_array(X, chunks=chunks), idx)
        np.testing.assert_array_equal(got.compute(), X[:, idx])


def _csv_with_a_word(path, at, n=6000, header=True, word="abc"):
    """A numeric CSV of ``n`` rows, 3 columns, whose data row ``at`` (0-based) holds ``word``
    in its second column."""
    rows = np.random.RandomState(0).rand(n, 3).round(4).astype(str)
    rows[at, 1] = word
    lines = ([",".join(["f0", "f1", "f2"])] if header else []) + [",".join(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("header", [True, False])
def test_a_word_far_down_a_numeric_column_names_file_line_and_column(tmp_path, header):
    """dask infers the dtypes from the first rows only: a string at row 5,000 fails when the
    block is read, and the error says where (the file, its line, the column) on one line,
    exit status 2, as the same string in the first rows does."""
    path = _csv_with_a_word(tmp_path / "x.csv", 5000, header=header)
    status, _, err = run_cmd("fit", "us-elm", path, "-p", *FIT_PARAMS, "-q")
    line, column = (5002, "'f1'") if header else (5001, "1")  # headerless: its position
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err == (
        f"error: {str(path)!r}, line {line}, column {column}: 'abc' is not a number; choose "
        "the feature columns with --columns or --drop-columns\n"
    )
    early = _csv_with_a_word(tmp_path / "early.csv", 3)
    status, _, err = run_cmd("fit", "us-elm", early, "-p", *FIT_PARAMS, "-q")
    assert status == 2 and "'f1'" in err and "--columns or --drop-columns" in err


def test_a_word_in_one_file_of_a_glob_names_that_file(tmp_path):
    first = _csv_with_a_word(tmp_path / "a.csv", 10, word="1.0")
    second = _csv_with_a_word(tmp_path / "b.csv", 4000, word="n/a?")
    assert first.exists()
    status, _, err = run_cmd("fit", "us-elm", tmp_path / "*.csv", "-p", *FIT_PARAMS, "-q")
    assert status == 2 and len(err.splitlines()) == 1, err
    assert f"{str(second)!r}, line 4002, column 'f1': 'n/a?' is not a number" in err


def test_a_csv_is_read_into_row_major_blocks(blobs, tmp_path):
    """pandas hands a block of float columns over column-major; the fit takes rows of X
    everywhere, so the rows read from a .csv are row-major, with the file's values."""
    X, _ = blobs
    path = tmp_path / "x.csv"
    np.savetxt(path, X, delimiter=",")
    blocks = _cli_io.read_data(path).X.to_delayed().ravel()
    got = [b.compute() for b in blocks]
    assert all(b.flags.c_contiguous for b in got)
    np.testing.assert_allclose(np.vstack(got), X, rtol=1e-15)


def test_a_file_read_in_one_large_block_is_split_for_the_fit(tmp_path):
    """A fit runs a task per block in most stages: a file read as one block is cut where
    the estimators cut NumPy input, labels and rows kept aligned."""
    from elmscale.utils._validation import row_chunks

    rng = np.random.RandomState(0)
    X = rng.rand(20_000, 3)
    np.save(tmp_path / "x.npy", X)
    data = _cli_io.read_data(str(tmp_path / "x.npy"))
    assert len(data.X.chunks[0]) > 1 and max(data.X.chunks[0]) <= row_chunks(20_000)[0]
    np.testing.assert_array_equal(data.X.compute(), X)
    labelled = np.column_stack([X, rng.randint(0, 3, 20_000)])
    np.savetxt(tmp_path / "xy.csv", labelled, delimiter=",", header="a,b,c,y", comments="")
    data = _cli_io.read_data(str(tmp_path / "xy.csv"), target="y", classes=True)
    assert data.X.chunks[0] == data.y.chunks[0] and len(data.X.chunks[0]) > 1
    np.testing.assert_allclose(data.X.compute(), X, rtol=1e-15)
    np.testing.assert_array_equal(data.y.compute(), labelled[:, 3])


@pytest.mark.parametrize(
    "chunks, most, split",
    [((10,), 4, (4, 3, 3)), ((3, 8, 2), 4, (3, 4, 4, 2)), ((5,), 5, (5,)), ((1,), 1, (1,))],
)
def test_split_rows_splits_large_blocks_evenly_and_merges_none(chunks, most, split):
    assert _cli_io.split_rows(chunks, most) == split
