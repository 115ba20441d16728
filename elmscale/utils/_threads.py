"""Threads of the in-process (NumPy input) paths: one long-lived pool per size, and BLAS
thread limits without re-scanning the loaded libraries on every fit.

Both matter for fits that take a fraction of a second (TUMK-ELM on Frogs): the first BLAS
and ufunc calls of a freshly started thread are slower than on a warm one, and
``threadpool_limits`` inspects every loaded shared library each time it is entered. Like
dask's threaded scheduler, which keeps its default pool between computes, the pools live as
long as the process (a forked child starts with none).
"""

import contextlib
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.threaded
from threadpoolctl import ThreadpoolController

from .._config import get_config
from ._dask import local_threads

_lock = threading.Lock()
_pools = {}
_controller = None


def shared_pool(n_threads):
    """The process-wide executor with ``n_threads`` threads (created on first use).
    Callers never shut it down; tasks of concurrent callers simply share its threads."""
    n_threads = int(n_threads)
    if n_threads < 1:
        raise ValueError(f"n_threads must be >= 1, got {n_threads}")
    with _lock:
        pool = _pools.get(n_threads)
        if pool is None:
            pool = _pools[n_threads] = ThreadPoolExecutor(
                n_threads, thread_name_prefix=f"elmscale-{n_threads}"
            )
        return pool


@contextlib.contextmanager
def blas_threads(limit):
    """``threadpool_limits(limit, user_api="blas")`` on a controller built once per
    process (so a BLAS first loaded after the first call is not limited; NumPy's and
    SciPy's are loaded with elmscale); ``limit=None`` leaves the libraries as they are."""
    with limited_threads(limit, "blas"):
        yield


@contextlib.contextmanager
def limited_threads(limit, user_api):
    """``threadpool_limits(limit, user_api=user_api)`` ("blas" or "openmp") on the
    controller built once per process; ``limit=None`` leaves the libraries as they are."""
    global _controller
    if limit is None:
        yield
        return
    with _lock:
        if _controller is None:
            _controller = ThreadpoolController()
        controller = _controller
    with controller.limit(limits=limit, user_api=user_api):
        yield


def threaded_scheduler(collection=None):
    """Whether computing the dask ``collection`` (default: a dask array) runs on several
    threads of this process: dask's threaded scheduler (an array's default when no
    distributed client or other scheduler is set) with ``num_workers`` > 1."""
    collections = None if collection is None else [collection]
    scheduler = dask.base.get_scheduler(collections=collections)
    if scheduler is None:  # nothing set: a dask array's own default
        scheduler = dask.threaded.get
    if scheduler is not dask.threaded.get:
        return False
    return local_threads() > 1


@contextlib.contextmanager
def blas_for_dask(collection=None):
    """BLAS on one thread while dask's threaded scheduler computes ``collection`` (default:
    a dask array): each of dask's threads runs its own BLAS calls, and at BLAS's default
    threads the cores are oversubscribed (measured in benchmarks/RESULTS.md, "BLAS threads").
    Distributed workers pin their own BLAS; with the sync scheduler BLAS
    keeps its threads. The setting ``task_blas_threads`` (an integer) replaces this rule."""
    setting = get_config()["task_blas_threads"]
    if setting == "auto":
        setting = 1 if threaded_scheduler(collection) else None
    with blas_threads(setting):
        yield


def one_blas_thread_per_task(method):
    """Decorator for the estimator methods that compute dask graphs: the method runs
    inside :func:`blas_for_dask`."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with blas_for_dask():
            return method(*args, **kwargs)

    return wrapper


def _forget_after_fork():
    # threads (and a lock held by one) do not survive fork: a child starts afresh
    global _controller, _lock
    _lock = threading.Lock()
    _pools.clear()
    _controller = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
