"""An estimator in one file: a small new estimator, registered through a plugin module the
way any plugin registers one, is in the public listing (``elmscale.all_estimators``,
``elmscale.available``, ``elmscale.make``) and passes the common tests, with no other file
of the repository touched.

The estimator is the architecture page's (k-means on the leading principal directions of H,
written on ``BaseELM`` and ``EmbeddingClusterMixin``, so it gets ``transform``, ``predict``,
``score``...). It and its registration are written to a temporary folder as a plugin module;
the common test modules then run in a fresh pytest process in which a ``-p`` plugin
registers it before they are collected."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import elmscale
from elmscale import registry

from .test_docs_run import rst_python_blocks

ROOT = Path(__file__).resolve().parents[1]

#: the new estimator's file: the one the architecture page writes (docs/developer.rst, run
#: as written by tests/test_docs_run.py), with its registration
(ESTIMATOR,) = [
    b for b in rst_python_blocks(ROOT / "docs" / "developer.rst") if "class YourELM" in b
]
ESTIMATOR += """

@elmscale.hookimpl
def register_algorithms(register):
    register("your-elm", YourELM, description="k-means on H's principal directions")
"""

#: what the fresh pytest process loads first (``-p``): the plugin, registered
REGISTER = """
from elmscale.registry import get_registry

import elmscale_tiny

get_registry().register_plugin(elmscale_tiny, name="elmscale_tiny")
"""

#: the common test modules the new estimator must pass
COMMON = (
    "tests/test_common.py",
    "tests/test_persistence.py",
    "tests/test_determinism.py",
    "tests/test_dataframe_input.py",
    "tests/test_numpy_dask_agreement.py",
    "tests/test_bad_inputs.py",
)


@pytest.fixture
def plugin_folder(tmp_path, monkeypatch):
    """A folder holding the estimator's module (``elmscale_tiny``) and the ``-p`` plugin,
    on ``sys.path``."""
    (tmp_path / "elmscale_tiny.py").write_text(ESTIMATOR)
    (tmp_path / "register_tiny.py").write_text(REGISTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "elmscale_tiny", raising=False)
    return tmp_path


@pytest.fixture
def tiny(plugin_folder):
    """The plugin registered in this process's registry, and removed afterwards."""
    import elmscale_tiny

    name = registry.get_registry().register_plugin(elmscale_tiny, name="elmscale_tiny")
    assert name == "elmscale_tiny"
    yield elmscale_tiny
    registry.get_registry().unregister_plugin("elmscale_tiny")


def test_a_registered_estimator_is_in_the_public_listing(tiny):
    cls = tiny.YourELM
    assert ("your-elm", cls) in elmscale.all_estimators()
    assert ("your-elm", cls) in elmscale.all_estimators(type_filter="cluster")
    assert ("your-elm", cls) in elmscale.all_estimators(type_filter=["transformer"])
    assert cls not in dict(elmscale.all_estimators(type_filter="classifier")).values()
    assert "your-elm" in elmscale.available("algorithm")
    model = elmscale.make("your-elm", n_hidden=20, random_state=0)
    X = np.random.RandomState(0).randn(60, 3)
    model.fit(X)
    # the shared tail works from the one hook: predict is the nearest centre of transform
    E = model.transform(X)
    d2 = ((E[:, None, :] - model.cluster_centers_[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(model.predict(X), d2.argmin(axis=1))
    assert model.score(X) == pytest.approx(-d2.min(axis=1).sum(), rel=1e-10)
    # a plugin's estimator is not a name of the elmscale namespace: built-ins only
    assert "YourELM" not in elmscale.__all__


def test_all_estimators_rejects_an_unknown_type_filter():
    with pytest.raises(ValueError, match="type_filter must be None or among"):
        elmscale.all_estimators(type_filter="clusterer")


@pytest.mark.slow
def test_a_registered_estimator_passes_the_common_tests(plugin_folder):
    """The common test modules, run as they are with the plugin registered first, collect
    the new estimator and pass for it."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(plugin_folder), str(ROOT)]),
        ELMSCALE_LOAD_PLUGINS="",  # hermetic, as the suite: the -p plugin loads before conftest
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "register_tiny", "-p", "no:cacheprovider"]
        + ["-k", "YourELM", *COMMON],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert "failed" not in summary and "error" not in summary, summary
    # scikit-learn's checks alone are some forty items
    assert passed >= 40, summary
