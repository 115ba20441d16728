"""The long-lived thread pools and BLAS limits of the in-process paths."""

import multiprocessing

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from elmscale.utils._threads import blas_threads, shared_pool


def _blas_threads():
    return {
        lib["filepath"]: lib["num_threads"]
        for lib in threadpool_info()
        if lib["user_api"] == "blas"
    }


def test_shared_pool_is_kept_per_size():
    pool = shared_pool(2)
    assert shared_pool(2) is pool and shared_pool(3) is not pool
    assert pool._max_workers == 2
    # a task may run on it twice without anyone shutting it down
    assert list(pool.map(np.square, [1, 2, 3])) == [1, 4, 9]
    assert list(shared_pool(2).map(np.negative, [1])) == [-1]


@pytest.mark.parametrize("n", [0, -1])
def test_shared_pool_rejects_no_threads(n):
    with pytest.raises(ValueError, match="n_threads must be >= 1"):
        shared_pool(n)


def test_blas_threads_limits_and_restores():
    before = _blas_threads()
    if not before:
        pytest.skip("no BLAS found by threadpoolctl")
    with blas_threads(1):
        assert set(_blas_threads().values()) == {1}
        with blas_threads(None):  # None leaves the current limit alone
            assert set(_blas_threads().values()) == {1}
    assert _blas_threads() == before


def _child(queue):
    from elmscale.utils import _threads

    had = dict(_threads._pools)
    queue.put((len(had), list(shared_pool(2).map(abs, [-3]))))


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
def test_forked_child_builds_its_own_pool():
    shared_pool(2)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    try:
        n_inherited, result = queue.get(timeout=60)
    finally:
        proc.join(60)
    assert n_inherited == 0 and result == [3]


def test_threaded_scheduler_is_detected():
    import dask
    import dask.array as da

    from elmscale.utils._threads import threaded_scheduler

    x = da.ones(4, chunks=2)
    with dask.config.set(scheduler="threads", num_workers=2):
        assert threaded_scheduler(x)
    with dask.config.set(scheduler="threads", num_workers=1):
        assert not threaded_scheduler(x)
    with dask.config.set(scheduler="sync"):
        assert not threaded_scheduler(x)


@pytest.mark.distributed
def test_threaded_scheduler_is_not_a_distributed_client(dask_client):
    import dask.array as da

    from elmscale.utils._threads import threaded_scheduler

    assert not threaded_scheduler(da.ones(4, chunks=2))


def _recording_activation(seen):
    def activation(Z):
        seen.append(set(_blas_threads().values()))
        return np.tanh(Z)

    return activation


@pytest.mark.parametrize("scheduler, workers", [("threads", 2), ("sync", 1)])
def test_estimators_run_dask_tasks_on_one_blas_thread(scheduler, workers):
    """Fit and predict on NumPy input compute dask graphs in this process: on the threaded
    scheduler every task sees BLAS on one thread (no oversubscription), on the sync
    scheduler BLAS keeps its threads; the limit is lifted afterwards."""
    import dask

    from elmscale import ELMRegressor

    before = _blas_threads()
    if not before:
        pytest.skip("no BLAS found by threadpoolctl")
    X = np.random.RandomState(0).standard_normal((400, 3))
    seen = []
    model = ELMRegressor(n_hidden=20, activation=_recording_activation(seen))
    with dask.config.set(scheduler=scheduler, num_workers=workers):
        model.fit(X, X[:, 0])
        n_fit = len(seen)
        model.predict(X)
    assert n_fit >= 1 and len(seen) > n_fit
    want = {1} if scheduler == "threads" else set(before.values())
    assert all(s == want for s in seen), seen
    assert _blas_threads() == before


@pytest.mark.parametrize("scheduler, workers", [("threads", 2), ("sync", 1)])
def test_task_blas_threads_setting_replaces_the_rule(scheduler, workers):
    """``task_blas_threads=n`` gives every task n BLAS threads on either scheduler."""
    import dask

    from elmscale import ELMRegressor, config_context

    before = _blas_threads()
    if not before:
        pytest.skip("no BLAS found by threadpoolctl")
    X = np.random.RandomState(0).standard_normal((400, 3))
    seen = []
    model = ELMRegressor(n_hidden=20, activation=_recording_activation(seen))
    with dask.config.set(scheduler=scheduler, num_workers=workers):
        with config_context(task_blas_threads=3):
            model.fit(X, X[:, 0]).predict(X)
    assert seen and all(s == {3} for s in seen), seen
    assert _blas_threads() == before


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "one"])
def test_task_blas_threads_rejects_bad_values(bad):
    from elmscale import config_context, get_config

    with pytest.raises(ValueError, match="task_blas_threads must be 'auto' or a positive"):
        with config_context(task_blas_threads=bad):
            pass
    assert get_config()["task_blas_threads"] == "auto"
