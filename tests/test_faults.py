"""Worker loss is survived, not just tolerated: a worker process SIGKILLed mid-fit (during
the Gram pass, or during an iteration while H's blocks are cached on it) leaves a fit whose
results are identical to an undisturbed fit on the same cluster.

The kill is deterministic: a worker plugin kills its own process when the n-th task whose
key starts with a given name (counted over all workers, through a file) begins to execute.
The nanny then starts a new worker and the scheduler recomputes what was lost from the
task graph; this holds only while every task is a pure function of its inputs."""

import fcntl
import os
import signal
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from dask.utils import key_split
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning

from ._estimators import assert_same_results, fit, make, outputs

pytestmark = [pytest.mark.distributed,
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]

X, Y = make_blobs(2000, n_features=6, centers=3, cluster_std=2.0, random_state=0)
CHUNKS = (500, 6)  # 4 row blocks, 2 per worker


class KillOnTask(WorkerPlugin):
    """SIGKILL this worker's process when the ``nth`` task named ``prefix`` (over all
    workers) starts executing; ``folder`` holds the shared counter and, once done, a
    ``killed`` file naming the task."""

    name = "kill-on-task"

    def __init__(self, prefix, nth, folder):
        self.prefix, self.nth, self.folder = prefix, nth, str(folder)

    def setup(self, worker):
        self.pid = os.getpid()

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or key_split(key) != self.prefix:
            return
        counter = Path(self.folder) / "count"
        with open(Path(self.folder) / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            count = int(counter.read_text()) + 1 if counter.exists() else 1
            counter.write_text(str(count))
        if count == self.nth:
            (Path(self.folder) / "killed").write_text(f"{key} on pid {self.pid}")
            os.kill(self.pid, signal.SIGKILL)


def _start():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None, memory_limit="2GiB")
    return cluster, Client(cluster)


@pytest.fixture(scope="module")
def _clusters():
    """Two worker processes with nannies (which restart a killed worker), one thread each;
    replaced by a new cluster when a nanny failed to bring its worker back (worker start-up
    can time out on a loaded machine, and the nanny does not try twice)."""
    state = {"pair": _start()}
    yield state
    cluster, client = state["pair"]
    client.close()
    cluster.close()


@pytest.fixture
def client(_clusters):
    cluster, client = _clusters["pair"]
    try:
        client.wait_for_workers(2, timeout=30)
    except Exception:  # noqa: BLE001 - any failure to come back: start afresh
        client.close()
        cluster.close()
        _clusters["pair"] = cluster, client = _start()
    return client


# (estimator, parameters, stage, task name, which occurrence of it to kill at)
# block_partials: one row block's partial Gram sums (gram.hidden_stats); the fits that
# iterate compute it first for the fixed Grams, then for each labelling; matmul projects
# a cached block of H (EMMC's scores); cluster_block_features: TUMK-ELM's per-iteration pass
# over its persisted kernel factors; gram_block: its pass over X.
FAULTS = [
    ("USELM", {}, "gram", "block_partials", 2),
    ("SSELM", {}, "gram", "block_partials", 2),
    ("ELMClassifier", {}, "gram", "block_partials", 2),
    ("ELMRegressor", {}, "gram", "block_partials", 2),
    ("ELMJEC", {"cache": True}, "iteration", "block_partials", 4 + 4 + 2),
    ("EMMC", {"cache": True}, "iteration", "matmul", 3),
    ("TUMKELM", {"mode": "scalable"}, "iteration", "cluster_block_features", 3),
    pytest.param("ELMJEC", {"cache": True}, "gram", "block_partials", 2,
                 marks=pytest.mark.slow),
    pytest.param("EMMC", {"cache": True}, "gram", "block_partials", 2,
                 marks=pytest.mark.slow),
    pytest.param("TUMKELM", {"mode": "scalable"}, "gram", "gram_block", 2,
                 marks=pytest.mark.slow),
]


def _ids(case):
    values = case.values if hasattr(case, "values") else case
    return f"{values[0]}-{values[2]}"


@pytest.mark.parametrize("name, params, stage, prefix, nth", FAULTS,
                         ids=[_ids(c) for c in FAULTS])
def test_worker_killed_mid_fit_gives_the_same_model(client, tmp_path, name, params, stage,
                                                    prefix, nth):
    Xd = da.from_array(X, chunks=CHUNKS)
    reference = outputs(fit(make(name, **params), name, Xd, Y), X)
    workers_before = set(client.scheduler_info()["workers"])
    client.register_plugin(KillOnTask(prefix, nth, tmp_path))
    try:
        model = fit(make(name, **params), name, Xd, Y)
        disturbed = outputs(model, X)
    finally:
        client.unregister_worker_plugin(KillOnTask.name)
    killed = tmp_path / "killed"
    assert killed.exists(), f"no {prefix} task #{nth} ran: the fault was not injected"
    # the fit went on without the killed worker: the scheduler had removed it
    assert workers_before - set(client.scheduler_info()["workers"])
    # labels exactly; floats to 1e-9 (a new worker process may round BLAS products
    # differently: 3e-16 absolute seen on US-ELM's embedding)
    assert_same_results(reference, disturbed, name, rtol=1e-9)


def _worker_pids(client):
    return client.run(os.getpid)


@pytest.mark.slow
def test_memory_too_small_for_the_h_cache_recomputes_without_losing_a_worker(caplog):
    """With worker memory below what caching H would need (cache="auto" caches when H takes
    at most a quarter of the cluster's memory), EMMC recomputes H's blocks each pass: same
    labels as a fit that caches, and no worker is restarted by its nanny."""
    X_big, _ = make_blobs(130_000, n_features=6, centers=3, random_state=0)
    Xd = da.from_array(X_big, chunks=(10_000, 6))
    params = dict(n_clusters=3, n_hidden=500, init="kmeans", max_iter=3, n_init=1,
                  random_state=0)
    # H = 130,000 x 500 float64 = 520 MB; a quarter of 2 x 1 GB is 500 MB
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="1GB") as cluster, \
            Client(cluster) as small:
        pids = _worker_pids(small)
        with caplog.at_level("INFO", logger="elmscale"), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            recomputed = make("EMMC", **params).fit(Xd)
            labels = recomputed.labels_.compute()
        assert any("recomputed per pass" in r.getMessage() for r in caplog.records), \
            [r.getMessage() for r in caplog.records]
        assert _worker_pids(small) == pids  # nobody killed, nobody restarted
    with dask.config.set(scheduler="sync"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        cached = make("EMMC", cache=True, **params).fit(Xd)
        np.testing.assert_array_equal(labels, cached.labels_.compute())
