"""Shared fixtures. Tests never load installed entry points except where marked
``integration``; the distributed cluster is started once per run and only for tests marked
``distributed``."""

import os

import dask
import dask.array as da
import numpy as np
import pytest

# the real datasets: $ELMSCALE_DATASETS, else ../shared/datasets next to the repository
from benchmarks._common import DATASETS_DIR as DATASETS

# hermetic: installed third-party plugins are not loaded by the suite
os.environ.setdefault("ELMSCALE_LOAD_PLUGINS", "")

# sample plugin modules (some raise on import on purpose), not tests: never collected,
# not even by --doctest-modules
collect_ignore = ["plugins"]


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run slow tests")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _synchronous_by_default(request):
    """Tests not marked ``distributed`` run on dask's synchronous scheduler (fast, and
    tracebacks point at our code) unless they ask for ``dask_client``."""
    if "dask_client" in request.fixturenames or "distributed" in request.keywords:
        yield
        return
    with dask.config.set(scheduler="sync"):
        yield


@pytest.fixture(scope="session")
def global_seed():
    """The seed of the run (``ELMSCALE_TESTS_SEED``, default 42); any seed must pass."""
    return int(os.environ.get("ELMSCALE_TESTS_SEED", "42"))


@pytest.fixture
def rng(global_seed):
    """A ``RandomState`` seeded with ``global_seed``."""
    return np.random.RandomState(global_seed)


@pytest.fixture(scope="session")
def dask_client():
    """One real multi-process ``distributed.LocalCluster`` (2 workers x 1 thread) for the
    whole run; tests using it must be marked ``distributed``."""
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit="4GiB",
    ) as cluster:
        with Client(cluster) as client:
            yield client


@pytest.fixture
def blobs(global_seed):
    """(X, y): 240 points in 5-d, 3 well-separated Gaussian blobs (NumPy)."""
    from sklearn.datasets import make_blobs

    return make_blobs(
        n_samples=240, n_features=5, centers=3, cluster_std=1.0, random_state=global_seed
    )


@pytest.fixture
def blobs_dask(blobs):
    """The ``blobs`` data as a dask array with uneven row chunks (70, 90, 80)."""
    X, y = blobs
    return da.from_array(X, chunks=((70, 90, 80), (X.shape[1],))), y


@pytest.fixture
def moons_partially_labelled(global_seed):
    """(X, y) two moons, 300 points, all but 5 labels per class set to -1."""
    from sklearn.datasets import make_moons

    X, y = make_moons(n_samples=300, noise=0.08, random_state=global_seed)
    rng = np.random.RandomState(global_seed)
    y_semi = np.full_like(y, -1)
    for c in (0, 1):
        keep = rng.choice(np.flatnonzero(y == c), 5, replace=False)
        y_semi[keep] = c
    return X, y, y_semi


def missing_dataset(name):
    """Why a test needing ``<name>.npz`` skips: where it was looked for and how to point the
    suite at the data (None when the file is there)."""
    path = DATASETS / f"{name}.npz"
    if path.is_file():
        return None
    return (
        f"dataset {name}.npz not found in {DATASETS} (set ELMSCALE_DATASETS to a folder of "
        "<name>.npz files with arrays X, y; see README.md, Set up)"
    )


def load_dataset(name):
    """(X, y) from ``<DATASETS>/<name>.npz``, or skip the test saying where the file was
    looked for."""
    reason = missing_dataset(name)
    if reason:
        pytest.skip(reason)
    path = DATASETS / f"{name}.npz"
    data = np.load(path)
    return data["X"].astype(np.float64), data["y"]
