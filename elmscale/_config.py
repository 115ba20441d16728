"""Library-wide settings: how large a row block is, which float type the blocks use."""

import contextlib
import numbers
import threading

import numpy as np

#: the largest mmap threshold glibc accepts on 64-bit systems (half a thread arena's heap)
MAX_MMAP_THRESHOLD = 32 * 2**20

_DEFAULTS = {
    # Bytes of one block of H (rows x n_hidden x itemsize) when elmscale chunks NumPy input.
    "chunk_bytes": 64 * 2**20,
    # Float type of the hidden layer and the block products. Partial sums are always
    # accumulated, and every solve is done, in float64, so float32 blocks (twice the BLAS
    # throughput) give reduced matrices that agree with float64 to about 1e-6 relative.
    "compute_dtype": "float64",
    # BLAS threads inside each task that dask's threaded scheduler runs: "auto" is one (each
    # of dask's threads calls BLAS at once, so more would oversubscribe the cores); an integer
    # sets the limit on every scheduler. Distributed workers pin their own BLAS.
    "task_blas_threads": "auto",
    # Row chunks the kNN graph is built on: "auto" joins small chunks of X into runs (larger
    # search tasks, fewer exchange tasks, at least one run per worker); "data" keeps X's own.
    "graph_chunks": "auto",
    # Bytes one unpack task of the graph's all-to-all exchanges may hold: the pieces a run of
    # destination chunks receives (see elmscale.graph._exchange); lower it for workers with
    # little memory.
    "exchange_bytes": 256 * 2**20,
    # Run the compiled (numba) kernels where NumPy and SciPy are the bottleneck (the graph
    # products of the Gram pass, see elmscale.utils._compiled; the kNN graph's local join,
    # elmscale.graph._join_compiled, and its searches' selection,
    # elmscale.graph._select_compiled); False takes the NumPy/SciPy path, equal up to float
    # rounding (the same graph).
    "compiled": True,
    # Worker threads the fit's tasks are sized for (graph chunks, the blockwise passes' row
    # groups, the Gram pass's tasks): None sizes them for the cluster that runs the fit; an
    # integer sizes them for that many threads on any cluster, e.g. to see on 2 workers, in
    # the task stream, the tasks a 16-thread cluster would get (benchmarks/scale/bench_parallel).
    "plan_workers": None,
    # glibc's mmap threshold on the dask workers a computation runs on (bytes, the trim
    # threshold twice that; 0 leaves the workers as they are): dask's nanny freezes it at
    # 128 KiB, so every larger temporary is mapped and faulted in anew
    # (elmscale.utils._malloc). Set once per client by a worker plugin; where the blocks
    # live changes, never a result.
    "worker_mmap_threshold": MAX_MMAP_THRESHOLD,
}
_local = threading.local()


def get_config():
    """Return a copy of the current settings (a dict)."""
    return dict(getattr(_local, "config", _DEFAULTS))


def set_config(
    *,
    chunk_bytes=None,
    compute_dtype=None,
    task_blas_threads=None,
    graph_chunks=None,
    exchange_bytes=None,
    compiled=None,
    plan_workers=None,
    worker_mmap_threshold=None,
):
    """Change settings for this thread. ``None`` leaves a setting as it is; ``plan_workers=0``
    returns to sizing tasks for the cluster that runs the fit; ``worker_mmap_threshold=0``
    leaves the workers' allocator as it is."""
    config = get_config()
    for name, value in (("chunk_bytes", chunk_bytes), ("exchange_bytes", exchange_bytes)):
        if value is not None:
            if int(value) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
            config[name] = int(value)
    if compute_dtype is not None:
        if np.dtype(compute_dtype) not in (np.float32, np.float64):
            raise ValueError(f"compute_dtype must be 'float32' or 'float64', got {compute_dtype!r}")
        config["compute_dtype"] = np.dtype(compute_dtype).name
    if task_blas_threads is not None:
        if task_blas_threads != "auto" and not (
            isinstance(task_blas_threads, numbers.Integral)
            and not isinstance(task_blas_threads, bool)
            and task_blas_threads >= 1
        ):
            raise ValueError(
                f"task_blas_threads must be 'auto' or a positive integer, got {task_blas_threads!r}"
            )
        config["task_blas_threads"] = (
            task_blas_threads if task_blas_threads == "auto" else int(task_blas_threads)
        )
    if graph_chunks is not None:
        if graph_chunks not in ("auto", "data"):
            raise ValueError(f"graph_chunks must be 'auto' or 'data', got {graph_chunks!r}")
        config["graph_chunks"] = graph_chunks
    if compiled is not None:
        if not isinstance(compiled, (bool, np.bool_)):
            raise TypeError(f"compiled must be True or False, got {compiled!r}")
        config["compiled"] = bool(compiled)
    if plan_workers is not None:
        if not isinstance(plan_workers, numbers.Integral) or isinstance(plan_workers, bool):
            raise TypeError(f"plan_workers must be a non-negative integer, got {plan_workers!r}")
        if plan_workers < 0:
            raise ValueError(f"plan_workers must be a non-negative integer, got {plan_workers!r}")
        config["plan_workers"] = int(plan_workers) or None
    if worker_mmap_threshold is not None:
        if not (
            isinstance(worker_mmap_threshold, numbers.Integral)
            and not isinstance(worker_mmap_threshold, bool)
            and 0 <= worker_mmap_threshold <= MAX_MMAP_THRESHOLD
        ):
            raise ValueError(
                f"worker_mmap_threshold must be an integer of bytes in [0, {MAX_MMAP_THRESHOLD}] "
                f"(0 leaves the workers as they are), got {worker_mmap_threshold!r}"
            )
        config["worker_mmap_threshold"] = int(worker_mmap_threshold)
    _local.config = config


@contextlib.contextmanager
def config_context(**settings):
    """Temporarily change settings, e.g. ``with config_context(compute_dtype="float32"):``."""
    old = get_config()
    set_config(**settings)
    try:
        yield
    finally:
        _local.config = old
