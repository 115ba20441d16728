"""The ``elmscale`` command line: ``elmscale plugins [--verbose] [--json]``, ``elmscale info``."""

import importlib
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from elmscale import cli, registry
from elmscale.registry import Registry

PLUGINS = Path(__file__).parent / "plugins"


def run(*argv):
    out = io.StringIO()
    status = cli.main(list(argv), out=out)
    return status, out.getvalue()


@pytest.fixture
def broken_registry(monkeypatch):
    """The CLI's registry replaced by a fresh one holding the good sample plugin, the
    duplicate one and one whose import failed (as an entry point would)."""
    registry.load_plugins()
    monkeypatch.syspath_prepend(str(PLUGINS))
    for name in ("good_plugin", "duplicate_sigmoid"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("ELMSCALE_LOAD_PLUGINS", "")
    monkeypatch.delenv("ELMSCALE_STRICT_PLUGINS", raising=False)
    reg = Registry()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.load_plugins()
        reg.register_plugin(
            importlib.import_module("good_plugin"),
            name="good",
            entry_point="good = good_plugin",
            distribution="good-dist 1.0",
        )
        reg.register_plugin(
            importlib.import_module("duplicate_sigmoid"),
            name="dup",
            entry_point="dup = duplicate_sigmoid",
            distribution="dup-dist 0.1",
        )
        try:
            raise ImportError("simulated: needs 'notinstalled'")
        except ImportError as exc:
            reg._fail("broken", "broken = broken_import", "broken-dist 2.0", exc)
    monkeypatch.setattr(registry, "get_registry", lambda: reg)
    return reg


def test_plugins_lists_builtins_and_what_they_registered():
    status, text = run("plugins")
    assert status == 0
    version = importlib.metadata.version("elmscale")
    assert f"elmscale._builtins.uselm  (elmscale {version})\n    algorithm  us-elm" in text
    assert re.search(r"\n    activation [a-z, -]*\bsigmoid, tanh\b", text)
    assert re.search(r"\n    graph      [a-z, -]*\bexact, pynndescent\b", text)
    assert "problem" not in text


def test_plugins_shows_third_party_plugins_and_failures(broken_registry):
    status, text = run("plugins")
    assert status == 1  # a broken plugin fails a CI job that runs `elmscale plugins`
    assert (
        "good  (good-dist 1.0, entry point 'good = good_plugin')\n"
        "    algorithm  toy-elm-kmeans\n    activation cube\n"
    ) in text
    assert (
        "dup  (dup-dist 0.1, entry point 'dup = duplicate_sigmoid')\n"
        "    activation hard-sigmoid\n" in text
    )
    assert "\n2 plugin problem(s):\n" in text
    assert (
        "  dup (entry point 'dup = duplicate_sigmoid', dup-dist 0.1): ValueError: plugin "
        "'dup' registers activation 'sigmoid', which plugin "
        "'elmscale._builtins.activations' already registered"
    ) in text
    assert (
        "  broken (entry point 'broken = broken_import', broken-dist 2.0): ImportError: "
        "simulated: needs 'notinstalled'\n"
    ) in text
    assert text.endswith("run `elmscale plugins --verbose` for the tracebacks\n")
    assert "Traceback" not in text


def test_plugins_verbose_shows_descriptions_and_tracebacks(broken_registry):
    status, text = run("plugins", "--verbose")
    assert status == 1
    assert "    algorithm  toy-elm-kmeans  - k-means on H\n" in text
    assert "    activation cube  - z ** 3\n" in text
    assert "      Traceback (most recent call last):\n" in text
    assert "      ImportError: simulated: needs 'notinstalled'" in text
    assert "--verbose for the tracebacks" not in text


def test_plugins_json(broken_registry):
    status, text = run("plugins", "--json", "-v")
    report = json.loads(text)
    plugins = {p["name"]: p for p in report["plugins"]}
    assert plugins["good"]["registered"] == {
        "algorithm": ["toy-elm-kmeans"],
        "activation": ["cube"],
    }
    assert plugins["good"]["descriptions"]["activation"] == {"cube": "z ** 3"}
    assert [f["plugin"] for f in report["failures"]] == ["dup", "broken"]
    assert report["failures"][1]["traceback"].startswith("Traceback")


def test_plugins_under_strict_mode_reports_the_error(monkeypatch, capsys):
    reg = Registry()
    monkeypatch.setattr(registry, "get_registry", lambda: reg)
    monkeypatch.setenv("ELMSCALE_STRICT_PLUGINS", "1")
    monkeypatch.setenv("ELMSCALE_LOAD_PLUGINS", "")

    def failing_load(**kwargs):
        reg._fail("broken", "broken = x", "", ImportError("nope"))

    monkeypatch.setattr(reg, "load_plugins", failing_load)
    status, _ = run("plugins")
    assert status == 1
    assert capsys.readouterr().err == (
        "error: elmscale plugin 'broken' (entry point 'broken = x') failed: ImportError: nope\n"
    )


def test_info_prints_versions_and_blas():
    status, text = run("info")
    assert status == 0
    lines = dict(
        line.split(None, 1)
        for line in text.splitlines()
        if line.strip() and not line.startswith(" ")
    )
    assert lines["numpy"] == np.__version__
    for name in (
        "elmscale",
        "scipy",
        "scikit-learn",
        "dask",
        "distributed",
        "pynndescent",
        "pluggy",
    ):
        assert lines[name] == importlib.metadata.version(name)
    pytest.importorskip("threadpoolctl")
    report = cli.info_report()
    assert any(
        lib["internal_api"] in ("openblas", "mkl", "blis", "flexiblas") for lib in report["blas"]
    )
    blas = next(lib for lib in report["blas"] if lib["internal_api"] != "openmp")
    assert f"num_threads={blas['num_threads']}" in text


def test_info_without_threadpoolctl(monkeypatch):
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # import fails
    status, text = run("info")
    assert status == 0
    assert "blas           unknown (pip install threadpoolctl to see the BLAS in use)" in text
    assert json.loads(run("info", "--json")[1])["blas"] is None


def test_command_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2
    assert "the following arguments are required: command" in capsys.readouterr().err


def test_console_script_runs_in_a_fresh_interpreter():
    env = {**os.environ, "ELMSCALE_LOAD_PLUGINS": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "elmscale.cli", "plugins"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "elmscale._builtins.uselm" in proc.stdout


# -- elmscale fit / predict ---------------------------------------------------------------------
from elmscale._cli_io import read_matrix, write_array  # noqa: E402


def read_labels(path):
    """A written labels file back as a NumPy array."""
    path = str(path)
    if path.endswith(".npy"):
        return np.load(path)
    if path.endswith(".zarr"):
        import dask.array as da

        return da.from_zarr(path).compute()
    import pandas as pd

    df = pd.read_csv(path) if path.endswith(".csv") else pd.read_parquet(path)
    return df.iloc[:, 0].to_numpy() if df.shape[1] == 1 else df.to_numpy()


FIT_PARAMS = ["n_clusters=3", "n_hidden=40", "graph=exact", "n_neighbors=5", "random_state=0"]


def run_cmd(*argv):
    """(status, stdout, stderr) of ``elmscale ARGV`` run in-process."""
    out, err = io.StringIO(), io.StringIO()
    status = cli.main([str(a) for a in argv], out=out, err=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def table(blobs, tmp_path):
    """The ``blobs`` data written as a Parquet folder of 3 files (80 rows each, with a
    string id column), a .npy file and a .csv file; returns (X, paths)."""
    import dask.dataframe as dd
    import pandas as pd

    X, _ = blobs
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    df["id"] = [f"row{i}" for i in range(len(df))]
    paths = {
        "parquet": tmp_path / "data.parquet",
        "npy": tmp_path / "data.npy",
        "csv": tmp_path / "data.csv",
    }
    dd.from_pandas(df, npartitions=3, sort=False).to_parquet(paths["parquet"])
    np.save(paths["npy"], X)
    df.to_csv(paths["csv"], index=False)
    return X, paths


def _python_labels(X, chunks):
    import dask.array as da

    from elmscale import USELM

    model = USELM(n_clusters=3, n_hidden=40, graph="exact", n_neighbors=5, random_state=0)
    return model.fit(da.from_array(X, chunks=(chunks, X.shape[1]))).labels_.compute()


@pytest.mark.distributed
def test_fit_parquet_folder_on_the_cluster_equals_python_api(table, tmp_path, dask_client):
    """`elmscale fit us-elm` on a Parquet folder, on the session's LocalCluster: the labels
    file equals the Python API's labels (same chunks), and `elmscale predict` from the
    saved model writes the same labels again."""
    X, paths = table
    cols = ",".join(f"f{i}" for i in range(X.shape[1]))
    labels, model = tmp_path / "labels.parquet", tmp_path / "model.pkl"
    status, out, err = run_cmd(
        "fit",
        "us-elm",
        paths["parquet"],
        "--columns",
        cols,
        "--param",
        *FIT_PARAMS,
        "--scheduler",
        dask_client.scheduler.address,
        "--labels",
        labels,
        "--embedding",
        tmp_path / "emb.zarr",
        "--save",
        model,
    )
    assert status == 0, err
    assert "dashboard" in err and "progress:" in err
    got = read_labels(labels)
    np.testing.assert_array_equal(got, _python_labels(X, 80))
    assert read_labels(tmp_path / "emb.zarr").shape == (
        X.shape[0],
        cli.load_model(model).n_components_,
    )

    status, _, err = run_cmd(
        "predict",
        model,
        paths["parquet"],
        "--columns",
        cols,
        "--labels",
        tmp_path / "again.csv",
        "--scheduler",
        dask_client.scheduler.address,
        "-q",
    )
    assert status == 0, err
    np.testing.assert_array_equal(read_labels(tmp_path / "again.csv"), got)


@pytest.mark.distributed
def test_fit_npy_on_two_local_workers_equals_python_api(table, tmp_path):
    """`elmscale fit us-elm X.npy --workers 2` (a LocalCluster of its own): labels equal
    the Python API's; predict from the saved model (local scheduler) gives them again."""
    X, paths = table
    labels, model = tmp_path / "labels.npy", tmp_path / "model.pkl"
    status, out, err = run_cmd(
        "fit",
        "us-elm",
        paths["npy"],
        "--param",
        *FIT_PARAMS,
        "--workers",
        2,
        "--labels",
        labels,
        "--save",
        model,
    )
    assert status == 0, err
    assert "2 worker(s)" in err
    assert out.split() == ["labels:", str(labels), "model:", str(model)]
    got = np.load(labels)
    np.testing.assert_array_equal(got, _python_labels(X, X.shape[0]))
    status, _, err = run_cmd(
        "predict", model, paths["npy"], "--labels", tmp_path / "again.parquet", "-q"
    )
    assert status == 0 and err == ""
    np.testing.assert_array_equal(read_labels(tmp_path / "again.parquet"), got)


def test_fit_writes_a_plot(table, tmp_path):
    pytest.importorskip("matplotlib")
    X, paths = table
    png = tmp_path / "emb.png"
    status, out, err = run_cmd(
        "fit", "us-elm", paths["npy"], "--param", *FIT_PARAMS, "--plot", png, "-q"
    )
    assert status == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--param", "n_cluster=3"],
            "has no parameter 'n_cluster' (did you mean 'n_clusters'?)"
            "; valid: activation, cache, data_nodes, graph",
        ),
        (["--param", "n_clusters=-1"], "The 'n_clusters' parameter of USELM must be"),
        (["--param", "graph=exakt"], "'graph' parameter of USELM"),
        (["--param", "n_clusters"], "--param expects NAME=VALUE"),
        (
            ["--param", "n_clusters=500"],
            "has 240 row(s); us-elm needs at least 501 for n_clusters=500",
        ),
        (["--columns", "f0,nope"], "--columns: 'nope' not in"),
        (["--labels", "out.txt"], "unknown extension '.txt'"),
    ],
)
def test_fit_user_errors_exit_2_with_one_line(table, tmp_path, argv, message):
    """Bad parameters, columns and outputs: exit status 2 and one line on stderr that names
    the problem (no traceback)."""
    X, paths = table
    argv = [a if a != "out.txt" else tmp_path / a for a in argv]
    src = paths["csv"] if "--columns" in argv else paths["npy"]
    status, out, err = run_cmd("fit", "us-elm", src, "-q", *argv)
    assert status == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fit", "us-elmm", "{npy}"], "us-elmm"),
        (["fit", "us-elm", "{missing}"], "does not exist"),
        (["fit", "us-elm", "{parquet}"], "'id' of"),
        (["fit", "elm-classifier", "{npy}"], "needs targets: name the target column with --target"),
        pytest.param(  # the client waits its 15 s connect timeout
            ["fit", "us-elm", "{npy}", "--scheduler", "tcp://127.0.0.1:1"],
            "cannot connect",
            marks=pytest.mark.slow,
        ),
        (["predict", "{npy}", "{npy}", "--labels", "x.npy"], "cannot load the model"),
        (["predict", "{missing}", "{npy}", "--labels", "x.npy"], "does not exist"),
    ],
)
def test_input_errors_exit_2(table, tmp_path, argv, message):
    X, paths = table
    names = {"npy": paths["npy"], "parquet": paths["parquet"], "missing": tmp_path / "no.npy"}
    argv = [a.format(**names) if "{" in a else a for a in argv]
    status, _, err = run_cmd(*argv, "-q")
    assert status == 2
    assert message in err and "Traceback" not in err


def test_predict_with_wrong_width_exits_2(table, tmp_path):
    X, paths = table
    model = tmp_path / "m.pkl"
    assert (
        run_cmd("fit", "us-elm", paths["npy"], "--param", *FIT_PARAMS, "--save", model, "-q")[0]
        == 0
    )
    status, _, err = run_cmd(
        "predict", model, paths["npy"], "--columns", "0,1", "--labels", tmp_path / "l.npy", "-q"
    )
    assert status == 2 and "features" in err


def test_parse_value():
    assert cli.parse_value("3") == 3 and cli.parse_value("0.5") == 0.5
    assert cli.parse_value("None") is None and cli.parse_value("True") is True
    assert cli.parse_value("exact") == "exact" and cli.parse_value("[1, 2]") == [1, 2]


def test_read_npy_is_lazy_and_row_chunked(tmp_path, rng):
    """A .npy file is read in row blocks by tasks (a memory map per block), columns chosen
    by position; values equal the file's."""
    import dask.array as da

    X = rng.randn(1050, 4)
    np.save(tmp_path / "x.npy", X)
    Xd, names = read_matrix(str(tmp_path / "x.npy"), block_rows=100)
    assert isinstance(Xd, da.Array) and names == ["0", "1", "2", "3"]  # by position
    assert Xd.chunks == ((100,) * 10 + (50,), (4,))
    np.testing.assert_array_equal(Xd.compute(), X)
    Xc, _ = read_matrix(str(tmp_path / "x.npy"), columns=["2", "0"], block_rows=100)
    np.testing.assert_array_equal(Xc.compute(), X[:, [2, 0]])


@pytest.mark.parametrize("ext", [".parquet", ".csv", ".npy", ".zarr"])
@pytest.mark.parametrize("ndim", [1, 2])
def test_writers_keep_row_order(tmp_path, rng, ext, ndim):
    """Every output format gives back the rows in order, also with more than 10 blocks
    (where lexicographic file names would reorder a Parquet folder)."""
    import dask.array as da

    x = rng.randint(0, 7, size=(230,)) if ndim == 1 else rng.randn(230, 3)
    path = tmp_path / f"out{ext}"
    write_array(da.from_array(x, chunks=20), str(path), "label" if ndim == 1 else "e")
    got = read_labels(str(path))
    np.testing.assert_allclose(got, x, rtol=1e-15)


# -- reading every numeric CSV; errors without worker tracebacks ------------------------------
def _write_6g_csv(path, X):
    """X written with '%.6g' as a numeric CSV: the first rows of column 0 are whole numbers
    (they look integer to dask's 10-row dtype sample), decimals follow."""
    X = X.copy()
    X[:20, 0] = np.round(X[:20, 0])
    header = ",".join(f"f{i}" for i in range(X.shape[1]))
    np.savetxt(path, X, fmt="%.6g", delimiter=",", header=header, comments="")
    return np.loadtxt(path, delimiter=",", skiprows=1)


def test_fit_reads_a_6g_csv_whose_first_rows_look_integer(blobs, tmp_path):
    """The CSV that dask's own dtype inference fails on fits, with the labels of the Python
    API on the same numbers; every feature column is read as float64."""
    import dask.array as da
    import dask.dataframe as dd

    from elmscale import USELM

    path = tmp_path / "six_g.csv"
    X = _write_6g_csv(path, blobs[0])
    with pytest.raises(ValueError, match="Mismatched dtypes"):
        dd.read_csv(path).compute()  # the defect this reader avoids
    Xd, names = read_matrix(str(path))
    assert Xd.dtype == np.float64 and names == [f"f{i}" for i in range(X.shape[1])]
    np.testing.assert_array_equal(Xd.compute(), X)
    status, _, err = run_cmd(
        "fit", "us-elm", path, "-p", *FIT_PARAMS, "--labels", tmp_path / "l.npy", "-q"
    )
    assert status == 0, err
    model = USELM(n_clusters=3, n_hidden=40, graph="exact", n_neighbors=5, random_state=0)
    expected = model.fit(da.from_array(X, chunks=X.shape)).labels_.compute()
    np.testing.assert_array_equal(np.load(tmp_path / "l.npy"), expected)


ROOT = Path(__file__).resolve().parents[1]


def _cli_process(*argv, prelude=""):
    """``elmscale ARGV`` in a fresh interpreter running this checkout, after ``prelude``."""
    code = f"import sys\n{prelude}\nfrom elmscale.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, argv)],
        env={**os.environ, "ELMSCALE_LOAD_PLUGINS": "", "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.distributed
def test_a_failing_reading_task_is_one_short_line_without_worker_traceback(tmp_path):
    """A value that is not a number deep in a CSV fails in a worker's reading task: with
    --workers and -q, stderr is the one error line (no worker log, no traceback)."""
    lines = ["a,b"] + [f"{i},{i / 7:.6g}" for i in range(50)] + ["3,not-a-number"]
    (tmp_path / "bad.csv").write_text("\n".join(lines) + "\n")
    proc = _cli_process(
        "fit", "us-elm", tmp_path / "bad.csv", "--workers", 1, "-q", "-p", "n_clusters=2"
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: ") and "not-a-number" in line and len(line) <= 510


# -- optional dependencies: which extra, exit status 2 -----------------------------------------
BLOCK = """
import importlib.abc
class _Missing(importlib.abc.MetaPathFinder):
    # these modules behave as not installed (as after `pip install .` without extras)
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Missing())
"""


def test_without_the_cli_extra_fit_on_parquet_names_it_and_exits_2(table, tmp_path):
    """A fresh interpreter where pandas, pyarrow, zarr, bokeh and matplotlib cannot be
    imported: `elmscale fit us-elm data.parquet` exits 2 with one line naming
    elmscale[cli]; .npy in and out needs no extra."""
    X, paths = table
    blocked = {"pandas", "pyarrow", "zarr", "bokeh", "matplotlib"}
    prelude = BLOCK.format(blocked=blocked)
    proc = _cli_process("fit", "us-elm", paths["parquet"], prelude=prelude)
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: missing pandas, needed for .parquet files: pip install 'elmscale[cli]'\n"
    )
    labels = tmp_path / "l.npy"
    proc = _cli_process(
        "fit", "us-elm", paths["npy"], "-p", *FIT_PARAMS, "--labels", labels, "-q", prelude=prelude
    )
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(labels), _python_labels(X, X.shape[0]))


@pytest.mark.parametrize(
    "missing, argv, message",
    [
        ("pandas", ["{csv}"], "missing pandas, needed for .csv files: pip install 'elmscale[cli]'"),
        ("pyarrow", ["{npy}", "--labels", "{tmp}/l.parquet"], "missing pyarrow, needed for "),
        ("zarr", ["{npy}", "--embedding", "{tmp}/e.zarr"], "zarr, needed for .zarr files"),
        ("matplotlib", ["{npy}", "--plot", "{tmp}/p.png"], "pip install 'elmscale[plot]'"),
    ],
)
def test_each_missing_optional_module_names_its_extra(
    table, tmp_path, monkeypatch, missing, argv, message
):
    """Checked before a cluster starts or data is read (hence --workers 2 costs nothing)."""
    X, paths = table
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError
    names = {"csv": paths["csv"], "npy": paths["npy"], "tmp": tmp_path}
    argv = [a.format(**names) for a in argv]
    status, _, err = run_cmd("fit", "us-elm", *argv, "--workers", 2)
    assert status == 2
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1


def test_an_import_error_during_the_run_names_the_extra(table, monkeypatch):
    """A step that imports an optional module late: exit 2 and its extra; an ImportError of
    a module no extra installs stays an unexpected failure (exit 1)."""
    from elmscale import _cli_io

    X, paths = table

    def fail(name):
        def read(*args, **kwargs):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        return read

    monkeypatch.setattr(_cli_io, "read_data", fail("pyarrow.parquet"))
    status, _, err = run_cmd("fit", "us-elm", paths["npy"], "-q")
    assert status == 2 and "pip install 'elmscale[cli]'" in err
    monkeypatch.setattr(_cli_io, "read_data", fail("somethingelse"))
    status, _, err = run_cmd("fit", "us-elm", paths["npy"], "-q")
    assert status == 1 and "ModuleNotFoundError" in err


# -- the dashboard -----------------------------------------------------------------------------
@pytest.mark.distributed
def test_the_printed_dashboard_link_serves_the_dashboard_on_loopback():
    """--workers N: the link printed is the dashboard (bokeh installed), on 127.0.0.1."""
    import urllib.request

    pytest.importorskip("bokeh")
    args = cli.argparse.Namespace(workers=1, scheduler=None, debug=False)
    err = io.StringIO()
    with cli._dask(args, err) as client:
        link = re.search(r"dashboard (\S+)", err.getvalue()).group(1)
        assert link == client.dashboard_link
        assert link.startswith("http://127.0.0.1:") and link.endswith("/status")
        with urllib.request.urlopen(link, timeout=30) as page:
            assert page.status == 200


def test_a_scheduler_without_bokeh_gets_no_dead_link():
    class Client:
        dashboard_link = "http://127.0.0.1:8787/status"

    assert cli.dashboard_link(Client(), {"services": {"dashboard": 8787}}) == Client.dashboard_link
    assert cli.dashboard_link(Client(), {"services": {}}) == (
        "not served (the scheduler needs bokeh: pip install 'elmscale[cli]')"
    )


# -- the command line's shape ------------------------------------------------------------------
def test_params_before_the_positionals_leave_them_alone(table, tmp_path):
    X, paths = table
    status, _, err = run_cmd(
        "fit", "-p", *FIT_PARAMS, "us-elm", paths["npy"], "--labels", tmp_path / "l.npy", "-q"
    )
    assert status == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "l.npy"), _python_labels(X, X.shape[0]))
    assert cli.split_params(["fit", "-p", "a=1", "b=[1, 2]", "us-elm", "x.csv", "-p", "c=x"]) == [
        "fit", "--param", "a=1", "--param", "b=[1, 2]", "us-elm", "x.csv", "--param", "c=x",
    ]  # fmt: skip
    # the first value is always taken (a malformed one gets its own message)
    assert cli.split_params(["-p", "n_clusters", "us-elm"]) == ["--param", "n_clusters", "us-elm"]


@pytest.mark.parametrize(
    "command, option, path, message",
    [
        ("fit", "labels", "out.txt", "unknown extension '.txt'; expected one of .parquet"),
        ("fit", "embedding", "out.json", "unknown extension '.json'"),
        ("fit", "plot", "p.jpg", "unknown extension '.jpg'; expected one of .png, .pdf, .svg"),
        ("fit", "save", "no/such/folder/m.pkl", "folder"),
        ("predict", "labels", "no/such/folder/l.npy", "folder"),
        ("predict", "labels", "out.txt", "unknown extension '.txt'"),
        ("transform", "embedding", "out.json", "unknown extension '.json'"),
    ],
)
def test_outputs_are_checked_before_anything_starts(
    table, tmp_path, command, option, path, message
):
    """A bad output fails in well under 2 s although --workers 2 would start a cluster and
    the input is read only after it: nothing started, nothing read."""
    X, paths = table
    model = tmp_path / "m.pkl"
    cli.save_model(cli.make_estimator("us-elm", FIT_PARAMS).fit(X), model)
    head = ["fit", "us-elm"] if command == "fit" else [command, model]
    t0 = time.perf_counter()
    status, _, err = run_cmd(*head, paths["npy"], f"--{option}", tmp_path / path, "--workers", 2)
    assert time.perf_counter() - t0 < 2
    assert status == 2 and message in err and "dask:" not in err


@pytest.mark.parametrize(
    "rows, message",
    [("f0,f1\n", "has a header but no rows"), (None, "has no rows")],
)
def test_an_input_without_rows_says_so(tmp_path, rows, message):
    if rows is None:
        path = tmp_path / "empty.npy"
        np.save(path, np.zeros((0, 3)))
    else:
        path = tmp_path / "header.csv"
        path.write_text(rows)
    status, _, err = run_cmd("fit", "us-elm", path, "-q")
    assert status == 2 and message in err


@pytest.mark.parametrize("n", ["0", "-1", "two"])
def test_workers_must_be_positive(table, capsys, n):
    X, paths = table
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "us-elm", str(paths["npy"]), "--workers", n])
    assert exc.value.code == 2
    assert f"--workers: expected a positive number of workers, got '{n}'" in capsys.readouterr().err


def test_fit_algorithm_help_lists_its_parameters(capsys):
    """`elmscale fit ALGO --help`: every parameter of every registered algorithm with its
    default, and the first sentence of its docstring entry."""
    from elmscale import available, make

    for name in available("algorithm"):
        with pytest.raises(SystemExit) as exc:
            cli.main(["fit", name, "--help"])
        assert exc.value.code == 0
        text = capsys.readouterr().out
        params = make(name).get_params(deep=False)
        assert f"parameters of {name} ({type(make(name)).__name__})" in text
        for param, default in params.items():
            assert re.search(rf"^  {param}={re.escape(repr(default))}( |$)", text, re.M), param
    with pytest.raises(SystemExit):
        cli.main(["fit", "us-elm", "x.csv", "-p", "lam=1", "--help"])
    text = capsys.readouterr().out
    assert re.search(r"^  n_clusters=8 +Clusters found by k-means on the embedding$", text, re.M)
    assert re.search(r"^  n_hidden=1000 +Hidden nodes n_h\.$", text, re.M)
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    assert "`elmscale fit ALGORITHM --help` lists" in capsys.readouterr().out


# -- supervised fits and transform --------------------------------------------------------------
@pytest.fixture
def labelled_csv(blobs, tmp_path):
    """The blobs as a CSV with a class column 'kind' (names) and 10 labelled rows per class
    in a column 'partial' (empty elsewhere)."""
    import pandas as pd

    X, y = blobs
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    df["kind"] = np.array(["ant", "bee", "cat"])[y]
    keep = np.concatenate([np.flatnonzero(y == c)[:10] for c in range(3)])
    partial = np.full(len(y), np.nan)
    partial[keep] = y[keep]
    df["partial"] = partial
    path = tmp_path / "labelled.csv"
    df.to_csv(path, index=False)
    return X, y, partial, path


def _dask_rows(X):
    import dask.array as da

    return da.from_array(X, chunks=(X.shape[0], X.shape[1]))


def test_elm_classifier_fits_from_the_shell_with_a_target_column(labelled_csv, tmp_path):
    from elmscale import ELMClassifier

    X, y, _, path = labelled_csv
    cols = ",".join(f"f{i}" for i in range(X.shape[1]))
    status, out, err = run_cmd(
        "fit", "elm-classifier", path, "--columns", cols, "--target", "kind",
        "-p", "n_hidden=50", "random_state=0", "--labels", tmp_path / "pred.parquet",
        "--save", tmp_path / "m.pkl", "-q",
    )  # fmt: skip
    assert status == 0, err
    model = ELMClassifier(n_hidden=50, random_state=0)
    expected = model.fit(_dask_rows(X), np.array(["ant", "bee", "cat"])[y]).predict(X)
    got = read_labels(tmp_path / "pred.parquet")
    np.testing.assert_array_equal(got, expected)
    assert (got == np.array(["ant", "bee", "cat"])[y]).mean() > 0.95
    status, _, err = run_cmd(
        "predict", tmp_path / "m.pkl", path, "--columns", cols, "--labels", tmp_path / "p.csv"
    )
    assert status == 0, err
    np.testing.assert_array_equal(read_labels(tmp_path / "p.csv"), expected)


def test_ss_elm_takes_empty_target_values_as_unlabelled(labelled_csv, tmp_path):
    """--target partial: its 30 filled rows are the labels, the empty ones unlabelled rows
    (-1 to SSELM); the labels written equal the Python API's predictions."""
    from elmscale import SSELM

    X, y, partial, path = labelled_csv
    cols = ",".join(f"f{i}" for i in range(X.shape[1]))
    params = ["n_hidden=50", "graph='exact'", "n_neighbors=5", "random_state=0"]
    status, _, err = run_cmd(
        "fit", "ss-elm", path, "--columns", cols, "--target", "partial", "-p", *params,
        "--labels", tmp_path / "l.npy", "-q",
    )  # fmt: skip
    assert status == 0, err
    y_semi = np.where(np.isnan(partial), -1.0, partial)
    model = SSELM(n_hidden=50, graph="exact", n_neighbors=5, random_state=0)
    model.fit(_dask_rows(X), _dask_rows(y_semi[:, None])[:, 0])
    assert model.n_labelled_ == 30
    np.testing.assert_array_equal(np.load(tmp_path / "l.npy"), model.predict(X))


def test_ss_elm_reads_null_targets_of_a_parquet_as_unlabelled(blobs, tmp_path):
    """Parquet with a nullable string target (class names, nulls for unlabelled rows): the
    labels written equal SSELM's on the same targets with -1 for the nulls."""
    import pandas as pd

    from elmscale import SSELM

    X, y = blobs
    names = np.array(["ant", "bee", "cat"], dtype=object)[y]
    names[np.arange(len(y)) % 6 != 0] = -1
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    df["kind"] = pd.array([None if v == -1 else v for v in names], dtype="string")
    df.to_parquet(tmp_path / "t.parquet")
    params = ["n_hidden=50", "graph='exact'", "n_neighbors=5", "random_state=0"]
    status, _, err = run_cmd(
        "fit", "ss-elm", tmp_path / "t.parquet", "--target", "kind", "-p", *params,
        "--labels", tmp_path / "l.parquet", "-q",
    )  # fmt: skip
    assert status == 0, err
    model = SSELM(n_hidden=50, graph="exact", n_neighbors=5, random_state=0)
    model.fit(_dask_rows(X), names)
    assert model.n_labelled_ == 40
    np.testing.assert_array_equal(read_labels(tmp_path / "l.parquet"), model.predict(X))


def test_elm_regressor_fits_a_target_position_of_an_npy(blobs, tmp_path):
    from elmscale import ELMRegressor

    X, _ = blobs
    target = X[:, 0] * 2 - X[:, 1]
    np.save(tmp_path / "xy.npy", np.column_stack([X[:, 1:], target]))
    status, _, err = run_cmd(
        "fit", "elm-regressor", tmp_path / "xy.npy", "--target", -1,
        "-p", "n_hidden=60", "random_state=0", "--labels", tmp_path / "pred.npy", "-q",
    )  # fmt: skip
    assert status == 0, err
    expected = ELMRegressor(n_hidden=60, random_state=0).fit(_dask_rows(X[:, 1:]), target)
    np.testing.assert_allclose(np.load(tmp_path / "pred.npy"), expected.predict(X[:, 1:]))


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["elm-classifier", "{csv}", "--target", "partial", "--columns", "f0,f1"],
            "'partial' has 210 missing value(s)",
        ),
        (["elm-classifier", "{csv}", "--target", "nope"], "--target: 'nope' not in"),
        (["elm-classifier", "{csv}", "--target", "kind", "--columns", "f0,kind"], "also a feature"),
        (["us-elm", "{csv}", "--target", "kind"], "us-elm is unsupervised: drop --target"),
        (["ss-elm", "{npy}", "--target", "kind"], "a column position (an integer), got 'kind'"),
        (["ss-elm", "{csv}"], "--target COLUMN; empty values mark unlabelled rows"),
    ],
)
def test_target_errors_exit_2(labelled_csv, tmp_path, argv, message):
    X, y, partial, path = labelled_csv
    np.save(tmp_path / "x.npy", X)
    names = {"csv": path, "npy": tmp_path / "x.npy"}
    status, _, err = run_cmd("fit", *[a.format(**names) for a in argv], "-q")
    assert status == 2 and message in err and len(err.splitlines()) == 1


def test_transform_writes_the_embedding_of_new_data(table, tmp_path, rng):
    """`elmscale transform MODEL NEW --embedding OUT` equals the saved model's transform."""
    X, paths = table
    model = tmp_path / "m.pkl"
    assert run_cmd("fit", "us-elm", paths["npy"], "-p", *FIT_PARAMS, "--save", model, "-q")[0] == 0
    new = X[:50] + rng.randn(50, X.shape[1]) * 0.1
    np.save(tmp_path / "new.npy", new)
    status, out, err = run_cmd(
        "transform", model, tmp_path / "new.npy", "--embedding", tmp_path / "e.parquet", "-q"
    )
    assert status == 0, err and out == f"embedding: {tmp_path / 'e.parquet'}\n"
    got = read_labels(tmp_path / "e.parquet")
    np.testing.assert_allclose(got, cli.load_model(model).transform(new), rtol=1e-12)
    assert got.shape == (50, cli.load_model(model).n_components_)


# -- progress names every stage and reaches its totals ------------------------------------------
def _last_progress(err):
    line = [ln for ln in err.splitlines() if ln.startswith("progress: ")][-1]
    return {
        stage: tuple(map(int, count.split("/")))
        for stage, count in (part.rsplit(" ", 1) for part in line[10:].split(", "))
    }


def test_every_registered_algorithm_shows_named_stages_that_complete(labelled_csv, tmp_path):
    """Fit (with --labels and --embedding where it has them) every built-in algorithm from
    the shell: the last progress line has only stages of STAGES, each at its total."""
    from elmscale import available, make
    from elmscale._progress import STAGES

    X, y, partial, path = labelled_csv
    labels = {label for label, _ in STAGES}
    cols = ",".join(f"f{i}" for i in range(X.shape[1]))
    for name in available("algorithm"):
        est = make(name)
        argv = ["fit", name, path, "--labels", tmp_path / f"{name}.npy"]
        if not est.__sklearn_tags__().target_tags.required:
            argv += ["--columns", cols]
        else:  # a class name, an integer class with unlabelled rows, a number
            target = {"ss-elm": "partial", "elm-regressor": "f4"}.get(name, "kind")
            argv += ["--columns", cols.replace(",f4", ""), "--target", target]
        if hasattr(est, "transform"):
            argv += ["--embedding", tmp_path / f"{name}-e.npy"]
        small = {"n_hidden": 40, "n_clusters": 3, "random_state": 0}
        argv += ["-p", *(f"{k}={v}" for k, v in small.items() if k in est.get_params())]
        status, _, err = run_cmd(*argv)
        assert status == 0, err
        counts = _last_progress(err)
        assert set(counts) <= labels, (name, counts)
        assert all(done == total for done, total in counts.values()), (name, counts)


def test_saved_model_predicts_as_the_fitted_one(tmp_path):
    """`elmscale fit --save` then `elmscale predict`: on the training file the fit's
    ``--labels`` again, and on new rows the labels the fitted model (the Python API on the
    same chunks) gives them: the model file holds what the out-of-sample step searches
    (``reference_``), not the dask attributes the CLI leaves out."""
    import dask.array as da
    from sklearn.datasets import load_digits

    from elmscale import USELM

    X, _ = load_digits(return_X_y=True)
    new = X[::2] + np.random.RandomState(0).normal(0, 1.0, X[::2].shape)
    np.save(tmp_path / "train.npy", X)
    np.save(tmp_path / "new.npy", new)
    model, params = tmp_path / "m.pkl", ["n_clusters=10", "random_state=0"]
    args = ("fit", "us-elm", tmp_path / "train.npy", "-p", *params, "--save", model)
    assert run_cmd(*args, "--labels", tmp_path / "fit.npy", "-q")[0] == 0
    for name in ("train", "new"):
        status, _, err = run_cmd(
            "predict", model, tmp_path / f"{name}.npy", "--labels", tmp_path / f"{name}_l.npy"
        )
        assert status == 0, err
    fitted = USELM(n_clusters=10, random_state=0).fit(da.from_array(X, chunks=X.shape))
    assert fitted.smoothing_steps_ > 0 and fitted.refine_rounds_ > 0
    np.testing.assert_array_equal(np.load(tmp_path / "fit.npy"), fitted.labels_.compute())
    np.testing.assert_array_equal(np.load(tmp_path / "train_l.npy"), np.load(tmp_path / "fit.npy"))
    np.testing.assert_array_equal(np.load(tmp_path / "new_l.npy"), fitted.predict(new))
    assert not hasattr(cli.load_model(model), "embedding_")


@pytest.mark.parametrize("memory_share", [0.25, 0.0])
def test_a_csv_input_is_parsed_once_for_the_whole_fit(tmp_path, monkeypatch, memory_share):
    """With dask's local scheduler the fit's passes read the parsed rows, not the file: kept
    in memory where they fit the share of it, else copied once to a temporary Zarr folder
    (deleted after the fit); the progress lines say which; the labels equal a fit on the
    NumPy rows."""
    import pandas as pd

    from elmscale import USELM

    X = np.random.RandomState(0).rand(600, 4)
    pd.DataFrame(X, columns=list("abcd")).to_csv(tmp_path / "x.csv", index=False)
    monkeypatch.setattr(cli, "READ_ONCE_MEMORY_SHARE", memory_share)
    import dask.dataframe.io.csv as dask_csv

    parsed = []
    real = dask_csv.pandas_read_text

    def counting(*args, **kwargs):  # dask parses each block of the file with it
        parsed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dask_csv, "pandas_read_text", counting)
    status, _, err = run_cmd(
        "fit", "us-elm", tmp_path / "x.csv", "-p", *FIT_PARAMS, "--labels", tmp_path / "l.npy"
    )
    assert status == 0, err
    expected = "read once into this process's memory" if memory_share else "copied once to"
    assert f"input: {expected}" in err
    reads = len(parsed)
    np.testing.assert_array_equal(
        np.load(tmp_path / "l.npy"),
        USELM(n_clusters=3, n_hidden=40, graph="exact", n_neighbors=5, random_state=0)
        .fit(X)
        .labels_,
    )
    # opening the file reads its header and counts its rows; the fit parses it once more
    from elmscale._cli_io import read_data

    del parsed[:]
    read_data(str(tmp_path / "x.csv"), None)
    assert reads == len(parsed) + 1
    assert not list(Path(tempfile.gettempdir()).glob("elmscale-input-*"))
