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
    fitted = cli.load_model(model)
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
    expected = model.fit(X[:, [0, 2]], y.astype(float)).predict(X[:, [0, 2]])
    np.testing.assert_array_equal(np.load(tmp_path / "l.npy"), expected)
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
