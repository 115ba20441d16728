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
        reg.register_plugin(importlib.import_module("good_plugin"), name="good",
                            entry_point="good = good_plugin", distribution="good-dist 1.0")
        reg.register_plugin(importlib.import_module("duplicate_sigmoid"), name="dup",
                            entry_point="dup = duplicate_sigmoid", distribution="dup-dist 0.1")
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
    assert ("good  (good-dist 1.0, entry point 'good = good_plugin')\n"
            "    algorithm  toy-elm-kmeans\n    activation cube\n") in text
    assert "dup  (dup-dist 0.1, entry point 'dup = duplicate_sigmoid')\n" \
           "    activation hard-sigmoid\n" in text
    assert "\n2 plugin problem(s):\n" in text
    assert ("  dup (entry point 'dup = duplicate_sigmoid', dup-dist 0.1): ValueError: plugin "
            "'dup' registers activation 'sigmoid', which plugin "
            "'elmscale._builtins.activations' already registered") in text
    assert ("  broken (entry point 'broken = broken_import', broken-dist 2.0): ImportError: "
            "simulated: needs 'notinstalled'\n") in text
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
    assert plugins["good"]["registered"] == {"algorithm": ["toy-elm-kmeans"],
                                            "activation": ["cube"]}
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
        "error: elmscale plugin 'broken' (entry point 'broken = x') failed: ImportError: nope\n")


def test_info_prints_versions_and_blas():
    status, text = run("info")
    assert status == 0
    lines = dict(line.split(None, 1) for line in text.splitlines() if line.strip()
                 and not line.startswith(" "))
    assert lines["numpy"] == np.__version__
    for name in ("elmscale", "scipy", "scikit-learn", "dask", "distributed", "pynndescent",
                 "pluggy"):
        assert lines[name] == importlib.metadata.version(name)
    pytest.importorskip("threadpoolctl")
    report = cli.info_report()
    assert any(lib["internal_api"] in ("openblas", "mkl", "blis", "flexiblas")
               for lib in report["blas"])
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
    proc = subprocess.run([sys.executable, "-m", "elmscale.cli", "plugins"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "elmscale._builtins.uselm" in proc.stdout
