"""Installs plugins/elmscale-celm and a deliberately broken distribution with pip, then checks
in fresh interpreters (installed entry points loaded, as for a user) that "c-elm" is discovered
and usable by name, and that the broken plugin is reported, naming it and its entry point,
while everything else keeps working. Both are uninstalled at the end.

Skipped when pip cannot run, or cannot build without a network it does not have.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "elmscale-celm": ROOT / "plugins" / "elmscale-celm",
    "elmscale-broken-example": ROOT / "tests" / "plugins" / "broken_dist",
}
BROKEN_WARNING = (
    "elmscale plugin 'broken-example' (entry point 'broken-example = elmscale_broken_example', "
    "distribution elmscale-broken-example 0.0.1) failed: ImportError: simulated: "
    "elmscale_broken_example needs the package 'notinstalled'"
)
NETWORK_ERRORS = (
    "Could not find a version that satisfies",
    "No matching distribution",
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeout",
    "ReadTimeout",
)


def _pip(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _installed(dist):
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _can_build_offline():
    """setuptools can build an editable wheel from the current environment."""
    try:
        import setuptools
    except ImportError:
        return False
    version = tuple(int(p) for p in setuptools.__version__.split(".")[:2])
    if version < (64, 0):
        return False
    if version >= (70, 1):
        return True
    try:
        import wheel  # noqa: F401 - setuptools < 70.1 builds wheels with it
    except ImportError:
        return False
    return True


def _env():
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ELMSCALE_LOAD_PLUGINS", "ELMSCALE_DISABLE_PLUGINS", "ELMSCALE_STRICT_PLUGINS")
    }
    env["PYTHONWARNINGS"] = "default"
    return env


@pytest.fixture(scope="module")
def installed():
    """Both distributions pip-installed (editable, no dependencies) for this module."""
    yield from pip_installed(PACKAGES)


def pip_installed(packages):
    """A fixture's body: the distributions ``packages`` ({name: path}) pip-installed
    (editable, no dependencies) until it resumes, those it installed then uninstalled; a file
    lock keeps two concurrent runs on one environment from uninstalling under each other."""
    import fcntl
    import tempfile

    lock = open(Path(tempfile.gettempdir()) / "elmscale-integration-plugins.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield from _install(packages)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def _install(packages):
    try:
        probe = _pip("--version", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"pip cannot run: {exc}")
    if probe.returncode != 0:
        pytest.skip(f"pip cannot run: {probe.stderr.strip()[-300:]}")
    ours = [name for name in packages if not _installed(name)]
    args = ["install", "--no-deps", "--quiet"]
    if _can_build_offline():
        args.append("--no-build-isolation")
    for name in ours:
        args += ["-e", str(packages[name])]
    if ours:
        try:
            proc = _pip(*args)
        except subprocess.TimeoutExpired:
            _pip("uninstall", "-y", *ours)
            pytest.skip("pip install timed out (no network to fetch the build backend?)")
        if proc.returncode != 0:
            _pip("uninstall", "-y", *ours)
            output = proc.stdout + proc.stderr
            if any(marker in output for marker in NETWORK_ERRORS):
                pytest.skip(f"pip needs the network to build and has none:\n{output[-500:]}")
            pytest.fail(f"pip install failed:\n{output}")
    try:
        yield
    finally:
        if ours:  # only what this test installed
            _pip("uninstall", "-y", *ours)


def run_python(code, **env):
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), **env},
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


DISCOVER = """
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as record:
    import elmscale
    names = {kind: elmscale.available(kind) for kind in ("algorithm", "activation", "graph")}
from elmscale.exceptions import PluginLoadWarning
from sklearn.datasets import load_iris
from sklearn.metrics import adjusted_rand_score

X, y = load_iris(return_X_y=True)
celm = elmscale.make("c-elm", n_clusters=3, n_hidden=100, random_state=0).fit(X)
uselm = elmscale.make("us-elm", n_clusters=3, n_hidden=100, graph="exact",
                      activation="softplus", random_state=0).fit(X)
plugins = {p["name"]: p for p in elmscale.list_plugins()}
print(json.dumps({
    "names": names,
    "warnings": [str(w.message) for w in record if issubclass(w.category, PluginLoadWarning)],
    "celm_class": type(celm).__module__ + "." + type(celm).__name__,
    "celm_ari": adjusted_rand_score(y, celm.labels_),
    "uselm_ari": adjusted_rand_score(y, uselm.labels_),
    "celm_plugin": plugins.get("celm"),
    "failures": [(f.plugin, f.entry_point, f.distribution) for f in
                 elmscale.registry.get_registry().failures],
}))
"""


def test_installed_plugin_is_discovered_and_the_broken_one_reported(installed):
    out = run_python(DISCOVER)
    assert out["warnings"] == [BROKEN_WARNING]
    assert out["failures"] == [
        [
            "broken-example",
            "broken-example = elmscale_broken_example",
            "elmscale-broken-example 0.0.1",
        ]
    ]
    assert "c-elm" in out["names"]["algorithm"] and "us-elm" in out["names"]["algorithm"]
    assert "softplus" in out["names"]["activation"]
    assert {"sigmoid", "tanh", "relu", "gaussian"} <= set(out["names"]["activation"])
    assert {"exact", "pynndescent"} <= set(out["names"]["graph"])
    assert out["celm_class"] == "elmscale_celm._celm.CELM"
    assert out["celm_plugin"] == {
        "name": "celm",
        "distribution": "elmscale-celm 0.1.0",
        "entry_point": "celm = elmscale_celm",
        "registered": {"algorithm": ["c-elm"], "activation": ["softplus"]},
    }
    assert out["celm_ari"] > 0.55  # C-ELM-FS on iris
    assert out["uselm_ari"] > 0.5  # a built-in, with the plugin's activation


SWITCHES = """
import io, json, os, warnings
from elmscale import cli
from elmscale.exceptions import PluginLoadError, PluginLoadWarning
from elmscale.registry import Registry

def load(**env):
    for var in ("ELMSCALE_LOAD_PLUGINS", "ELMSCALE_DISABLE_PLUGINS", "ELMSCALE_STRICT_PLUGINS"):
        os.environ.pop(var, None)
    os.environ.update(env)
    reg = Registry()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            reg.load_plugins()
        except PluginLoadError as exc:
            return {"error": str(exc)}
    return {"algorithms": reg.available("algorithm"),
            "warnings": [str(w.message) for w in record]}

out = {
    "disable": load(ELMSCALE_DISABLE_PLUGINS="broken-example"),
    "only": load(ELMSCALE_LOAD_PLUGINS="celm"),
    "none": load(ELMSCALE_LOAD_PLUGINS=""),
    "strict": load(ELMSCALE_STRICT_PLUGINS="1"),
}
for var in ("ELMSCALE_LOAD_PLUGINS", "ELMSCALE_DISABLE_PLUGINS", "ELMSCALE_STRICT_PLUGINS"):
    os.environ.pop(var, None)
text = io.StringIO()
with warnings.catch_warnings(record=True) as record:
    warnings.simplefilter("always")
    out["cli_status"] = cli.main(["plugins", "--verbose"], out=text)
out["cli_text"] = text.getvalue()
out["cli_warnings"] = [str(w.message) for w in record if issubclass(w.category, PluginLoadWarning)]
print(json.dumps(out))
"""


def test_switches_and_cli_with_installed_entry_points(installed):
    out = run_python(SWITCHES)
    for case in ("disable", "only"):
        assert out[case]["warnings"] == [], case
        assert {"c-elm", "us-elm"} <= set(out[case]["algorithms"]), case
    assert out["none"]["warnings"] == []
    assert "c-elm" not in out["none"]["algorithms"] and "us-elm" in out["none"]["algorithms"]
    assert out["strict"] == {"error": BROKEN_WARNING}
    # `elmscale plugins --verbose` lists the plugin, the failure and its traceback
    assert out["cli_status"] == 1  # a plugin failed
    text = out["cli_text"]
    assert (
        "celm  (elmscale-celm 0.1.0, entry point 'celm = elmscale_celm')\n"
        "    algorithm  c-elm  - k-means in the ELM feature space (C-ELM-FS)\n"
        "    activation softplus  - log(1 + exp(z)), a smooth ReLU\n"
    ) in text
    assert (
        "  broken-example (entry point 'broken-example = elmscale_broken_example', "
        "elmscale-broken-example 0.0.1): ImportError: simulated"
    ) in text
    assert "      Traceback (most recent call last):" in text
    assert out["cli_warnings"] == []  # the failure is listed, not also warned
