"""Installs plugins/elmscale-celm and a deliberately broken distribution with pip, then checks
in fresh interpreters (installed entry points loaded, as for a user) that "c-elm" is discovered
and usable by name, and that the broken plugin is reported, naming it and its entry point,
while everything else keeps working.

They are installed into a temporary directory that only those interpreters have on their path
(``PYTHONPATH``), never into the environment the tests run in: a CLI call in that environment,
during the run or after it (even after an interrupted run), sees no broken plugin.

Skipped when pip cannot run, or cannot build without a network it does not have.
"""

import importlib.metadata
import json
import os
import shutil
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


def _env(site=None):
    """The subprocesses' environment: the plugin switches unset, warnings shown, and the
    directory ``site`` (the installed test distributions) first on ``PYTHONPATH``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ELMSCALE_LOAD_PLUGINS", "ELMSCALE_DISABLE_PLUGINS", "ELMSCALE_STRICT_PLUGINS")
    }
    env["PYTHONWARNINGS"] = "default"
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Both distributions pip-installed (no dependencies) into a temporary directory for this
    module: the directory, for :func:`run_python`'s ``site``."""
    yield from pip_installed(PACKAGES, tmp_path_factory.mktemp("site"))


def pip_installed(packages, target):
    """A fixture's body: the distributions ``packages`` ({name: path}) that the environment
    does not hold pip-installed (no dependencies) into the directory ``target``, which it
    yields. The running environment is never written to, so nothing needs uninstalling and
    concurrent runs on one environment do not see each other's distributions. Each is built
    from a copy of its sources, which the build would otherwise leave ``build/`` and
    ``*.egg-info`` in."""
    try:
        probe = _pip("--version", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"pip cannot run: {exc}")
    if probe.returncode != 0:
        pytest.skip(f"pip cannot run: {probe.stderr.strip()[-300:]}")
    ours = [name for name in packages if not _installed(name)]
    args = ["install", "--no-deps", "--quiet", "--target", str(target / "site")]
    if _can_build_offline():
        args.append("--no-build-isolation")
    for name in ours:
        source = target / "src" / name
        ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        shutil.copytree(packages[name], source, ignore=ignore)
        args.append(str(source))
    if ours:
        try:
            proc = _pip(*args)
        except subprocess.TimeoutExpired:
            pytest.skip("pip install timed out (no network to fetch the build backend?)")
        if proc.returncode != 0:
            output = proc.stdout + proc.stderr
            if any(marker in output for marker in NETWORK_ERRORS):
                pytest.skip(f"pip needs the network to build and has none:\n{output[-500:]}")
            pytest.fail(f"pip install failed:\n{output}")
    yield target / "site"


def run_python(code, site=None, **env):
    """Run ``code`` in a fresh interpreter of this environment (with the directory ``site``
    on its path) and return the JSON its last output line holds."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(site), **env},
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
    out = run_python(DISCOVER, installed)
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
    out = run_python(SWITCHES, installed)
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


DISTRIBUTIONS = """
import importlib.metadata, json
from elmscale.registry import ENTRY_POINT_GROUP
print(json.dumps(sorted(
    ep.dist.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
)))
"""


def test_the_environment_is_left_without_the_test_distributions(installed):
    """The distributions went into the temporary directory only: a fresh interpreter of the
    running environment finds their elmscale entry points with that directory on its path and
    none without, so a CLI call in this environment, during the run or after it, does not
    warn of the broken plugin."""
    assert set(PACKAGES) <= set(run_python(DISTRIBUTIONS, installed))
    assert not set(PACKAGES) & set(run_python(DISTRIBUTIONS))
    assert not any(_installed(name) for name in PACKAGES)
