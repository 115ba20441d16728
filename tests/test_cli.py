"""The ``elmscale`` command line: ``elmscale plugins [--verbose] [--json]``, ``elmscale info``."""

import importlib
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
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
    assert read_labels(tmp_path / "emb.zarr").shape == (X.shape[0], 3)

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
            "; valid: activation, cache, graph",
        ),
        (["--param", "n_clusters=-1"], "The 'n_clusters' parameter of USELM must be"),
        (["--param", "graph=exakt"], "'graph' parameter of USELM"),
        (["--param", "n_clusters"], "--param expects NAME=VALUE"),
        (["--param", "n_clusters=500"], "n_clusters=500 must be <= n_samples=240"),
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
        (["fit", "elm-classifier", "{npy}"], "needs targets y"),
        (["fit", "us-elm", "{npy}", "--scheduler", "tcp://127.0.0.1:1"], "cannot connect"),
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
    assert isinstance(Xd, da.Array) and names is None
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
