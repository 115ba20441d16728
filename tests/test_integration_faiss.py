"""Installs plugins/elmscale-faiss with pip, then checks in fresh interpreters (installed entry
points loaded, as for a user) that the backend "faiss" is discovered, that on a two-process
LocalCluster it gives the built-in cells graph's neighbour lists on data with duplicate rows,
and that the plugin's own test suite passes against the installed package. Installed into a
temporary directory on the subprocesses' path, never into this environment; skipped without
faiss-cpu (``pip install "elmscale[faiss]"``) or when pip cannot run."""

import importlib.util
import subprocess
import sys

import pytest

from .test_integration_plugins import ROOT, _env, pip_installed, run_python

pytestmark = pytest.mark.integration

PLUGIN = ROOT / "plugins" / "elmscale-faiss"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    # looked up, not imported: faiss would load its own BLAS into this process, which
    # elmscale's per-task BLAS limit (built on the libraries loaded before) does not cover
    if importlib.util.find_spec("faiss") is None:
        pytest.skip("faiss-cpu is not installed")
    yield from pip_installed({"elmscale-faiss": PLUGIN}, tmp_path_factory.mktemp("site"))


ON_A_CLUSTER = """
import json
import dask, dask.array as da, numpy as np
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits
import elmscale

X = load_digits().data
X = np.concatenate([X, X[::3]])  # every third row twice: exact ties at distance 0
graph = elmscale.get("graph", "faiss")
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                  dashboard_address=None) as cluster, Client(cluster):
    Xd = da.from_array(X, chunks=(500, X.shape[1]))
    out = {}
    for name in ("cells", "faiss"):
        backend = elmscale.get("graph", name)
        backend = type(backend)(rows_per_cell=100, n_probes=3, kernel=backend.kernel)
        out[name] = [a.tolist() for a in dask.compute(*backend(Xd, 10, random_state=0))]
plugins = {p["name"]: p for p in elmscale.list_plugins()}
print(json.dumps({
    "names": elmscale.available("graph"),
    "alias": elmscale.get("graph", "cells-faiss") is graph,
    "plugin": plugins.get("faiss"),
    "kernel": type(graph).__name__ + " " + graph.kernel.__module__,
    "same": out["cells"] == out["faiss"],
    "rows": len(out["faiss"][0]),
}))
"""


def test_installed_backend_gives_the_cells_graph_on_a_cluster(installed):
    out = run_python(ON_A_CLUSTER, installed)
    assert {"faiss", "cells"} <= set(out["names"]) and out["alias"]
    assert out["plugin"]["distribution"] == "elmscale-faiss 0.1.0"
    assert out["plugin"]["entry_point"] == "faiss = elmscale_faiss"
    assert out["plugin"]["registered"] == {"graph": ["faiss"]}
    assert out["kernel"] == "CellSearch elmscale_faiss._kernel"
    assert out["rows"] == 2396 and out["same"]


def test_plugin_suite_passes_against_the_installed_package(installed):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**_env(installed), "ELMSCALE_STRICT_PLUGINS": "1"},
        cwd=ROOT,  # the elmscale of this checkout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout
