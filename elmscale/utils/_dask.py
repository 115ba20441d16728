"""Small helpers on top of dask.delayed, and the one rule for naming elmscale's tasks.

Every task elmscale submits has the key ``elmscale-<stage>-<suffix>``: ``elmscale-graph-...``
(the kNN graph), ``elmscale-gram-...`` (the Gram pass), ``elmscale-hidden-...``,
``elmscale-input-...`` (validated X),
``elmscale-kmeans-...``, ``elmscale-embed-...``, so that the dashboard,
``Client.get_task_stream`` and the progress display, which group keys by ``key_split``, tell
the stages of a fit apart. The suffix is chosen by what the result is:

- :func:`named`: a hash of the function and its inputs, as a pure delayed call's token. Equal
  calls share a key; use it for results computed within one ``compute``.
- :func:`task`: unique per call. Use it for results that are persisted and may be built
  again (a graph built twice): with hashed keys the second build could hand the scheduler
  keys that the first build's results, still being released, are about to drop, and lose
  them.
"""

import functools
import logging
import os
import uuid

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from .._config import get_config

logger = logging.getLogger(__name__)


def cluster_worker_info():
    """The default distributed client's workers, ``{address: info}`` as the scheduler
    reports them (``memory_limit``, ``nthreads``, ...), or ``{}``: without a client, or when
    a local scheduler was chosen explicitly (the work then runs in this process)."""
    client = distributed_client()
    return {} if client is None else client.scheduler_info(n_workers=-1)["workers"]


def distributed_client():
    """The default distributed client when dask computes on it, else None: without a
    client, or when a local scheduler was chosen explicitly (``dask.config.set(
    scheduler="threads")``)."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return None
    if dask.config.get("scheduler", None) not in (None, "dask.distributed", "distributed"):
        return None
    return client


def one_key(value):
    """``value`` as one key of the task graphs that take it (one delayed object), not a
    copy in every task's spec. Not scattered: data scattered to a worker is lost with it,
    while a key of the graph is sent again to the worker that replaces it."""
    return dask.delayed(value, pure=True, traverse=False)


def scatter_rows(client, X, chunks, name):
    """NumPy ``X`` as a dask array ``name`` of ``chunks`` whose blocks are sent to the
    workers once by ``client.scatter``, like a persisted array, in X's own dtype (uint8
    pixels travel as one byte each; the caller casts them on the workers).

    ``da.from_array`` would put X inside the task graph of every computation that reads
    it. The keys are unique per call rather than hashed from X: releasing the blocks of an
    earlier fit of the same data travels on another channel than a new scatter and could
    arrive after it, dropping the new blocks. Scattered blocks cannot be recomputed: a
    worker lost during the fit loses its blocks of X with it."""
    from dask.highlevelgraph import HighLevelGraph

    starts = np.cumsum((0, *chunks[0]))
    blocks = {  # row-major blocks whatever X's order: every reader takes rows
        (name, i, 0): np.ascontiguousarray(X[a:b])
        for i, (a, b) in enumerate(zip(starts[:-1], starts[1:], strict=True))
    }
    futures = client.scatter(blocks)
    graph = HighLevelGraph.from_collections(name, futures, dependencies=())
    return da.Array(graph, name, chunks, dtype=X.dtype)


def row_views(X, chunks, name):
    """NumPy ``X`` as a dask array ``name`` of ``chunks`` whose blocks are read-only views
    of X's rows: no copy, where ``da.from_array`` copies the whole array first (a
    column-major X is copied into row-major blocks). Nothing reading a block can write into
    the caller's array."""
    from dask.highlevelgraph import HighLevelGraph

    starts = np.cumsum((0, *chunks[0]))
    blocks = {}
    for i, (a, b) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        # a column-major X (a DataFrame's values) is copied block by block into row-major
        # blocks: its readers take rows, each strided across a column-major block
        view = np.ascontiguousarray(X[a:b])
        view.flags.writeable = False
        blocks[(name, i, 0)] = view
    graph = HighLevelGraph.from_collections(name, blocks, dependencies=())
    return da.Array(graph, name, chunks, dtype=X.dtype)


def in_worker_memory(X):
    """X persisted on the active distributed client for a fit that reads it several times
    (in the fewest bytes that hold it exactly, :func:`persist_compact`), or X itself:
    without a client, or when its blocks are already in the workers' memory.

    A fit reads X in several computations (scaling, row order, the graph, the Gram pass).
    Tasks that produce X's blocks, submitted in several graphs, are fused differently from
    one graph to the next while the scheduler still holds them for results kept on the
    workers, and one key would then stand for two different tasks (dask/dask#9888);
    persisted once, X's blocks are data in every later graph, and X is read from its
    source once."""
    client = distributed_client()
    if client is None or not isinstance(X, da.Array):  # NumPy: fitted in this process
        return X
    from distributed import Future

    if all(isinstance(v, Future) for v in _block_tasks(held_rows(X)[0])):
        return X
    logger.info(
        "keeping X (%d x %d, %s) in the workers' memory for the fit",
        *X.shape,
        dask.utils.format_bytes(X.nbytes),
    )
    return persist_compact(X, "elmscale-input", persist=client.persist)


def persist_compact(X, prefix, *, dtype=None, persist=None):
    """X persisted at the fewest bytes that hold its values exactly, seen as ``dtype``.

    What is persisted is what X's rows are held as (:func:`held_rows`: the input's own
    dtype for validated input), each float64 block stored as float32 when that holds every
    value exactly; the array returned (a *rows view*) reads each block back as X has it,
    cast to ``dtype`` (default X's). Every reader gets the values it would get from
    ``X.persist()``, bit for bit, while the workers (or this process) hold data read as
    float32 at half the bytes; the cast is one pass over a block in memory, cheap beside
    any product over it. ``persist`` (default ``dask.persist``) persists the stored array,
    e.g. ``client.persist``; ``prefix`` names the stored blocks (``<prefix>-<unique>``).
    """
    dtype = np.dtype(dtype or X.dtype)
    held, read = held_rows(X)
    if read is None or dtype != X.dtype:
        held, read = X, functools.partial(_read, to=dtype)
    stored = held.map_blocks(_narrowed, dtype=held.dtype, name=task_name(prefix))
    stored = persist(stored) if persist is not None else dask.persist(stored)[0]
    return rows_view(stored, read, dtype, f"{stored.name}-as-{dtype.name}")


def rows_view(held, read, dtype, name):
    """A dask array ``name`` of ``dtype`` whose block b is ``read(held block b)``, where
    ``read`` works row by row (a cast, a check, an elementwise scaling). It remembers how
    it is made: :func:`held_blocks` gives readers that take a few rows of many blocks the
    held blocks, and moving its rows (:func:`moved_rows`) moves the held rows."""
    view = held.map_blocks(read, dtype=dtype, name=name)
    view._elmscale_held = (held, read)  # an array derived otherwise (a product) has none
    return view


def held_rows(X):
    """``(held, read)`` of a :func:`rows_view`, else ``(X, None)``."""
    return getattr(X, "_elmscale_held", None) or (X, None)


def read_rows(rows, read):
    """Rows taken from held blocks as X's rows: ``read(rows)``, or ``rows`` themselves where
    the blocks are X's own (``read`` None, as :func:`held_rows` and :func:`held_blocks`
    return it)."""
    return rows if read is None else read(rows)


def read_through(view, fn):
    """A rows view's rows passed through ``fn``, a function of a block of rows that works
    row by row (an elementwise scaling): ``fn(view)``, read as the view is read."""
    held, read = view._elmscale_held
    both = functools.partial(_read_then, read=read, fn=fn)
    return rows_view(held, both, view.dtype, task_name(f"{view.name}-read"))


def moved_rows(X, move):
    """``move(X)`` for ``move`` that only moves or regroups rows (a row order, a rechunk):
    on a rows view, the held rows are moved and the result is a view read the same way,
    so the rows travel and wait in the dtype they are held in."""
    held, read = held_rows(X)
    if read is None:
        return move(X)
    moved = move(held)
    return rows_view(moved, read, X.dtype, task_name(f"{moved.name}-as-{X.dtype.name}"))


def is_compact_view(X):
    """Whether X is a :func:`rows_view`."""
    return held_rows(X)[1] is not None


def held_blocks(X):
    """``(blocks, read)``: X's blocks as held in memory (delayed, one per row chunk) and the
    function that turns rows taken from them into X's rows, None when they are X's own.
    For a rows view these are the held blocks: a task that takes a few rows of many blocks
    (a halo, the queries of a search) reads only those rows, and no block is held read
    (widened, scaled) while all its readers run."""
    held, read = held_rows(X)
    return held.to_delayed(optimize_graph=False).ravel(), read


def _narrowed(block):
    """``block`` as float32 when that holds its values exactly, else ``block``; in row-major
    order either way. A block read from a table (``DataFrame.to_numpy``, ``to_dask_array``)
    is column-major: every later reader takes rows of it (a cell's rows, a halo, a
    sample), each row then strided across the whole block."""
    if block.dtype == np.float64:
        narrow = block.astype(np.float32, order="C")
        if np.array_equal(narrow, block):
            return narrow
    return np.ascontiguousarray(block)


def _read(block, to):
    return block.astype(to, copy=False)


def _read_then(block, read, fn):
    return fn(read(block))


def _block_tasks(X):
    graph = X.__dask_graph__()
    return [graph.get(key) for key in dask.core.flatten(X.__dask_keys__())]


def worker_memory_per_thread():
    """The smallest ``memory_limit / nthreads`` over the workers of
    :func:`cluster_worker_info`, in bytes: what one task may count on. None without workers
    or without limits."""
    shares = [
        w["memory_limit"] // max(w.get("nthreads", 1), 1)
        for w in cluster_worker_info().values()
        if w.get("memory_limit")
    ]
    return min(shares) if shares else None


def cluster_threads():
    """The number of worker threads of :func:`cluster_worker_info`'s workers (0 without)."""
    return sum(max(w.get("nthreads", 1), 1) for w in cluster_worker_info().values())


def planned_threads():
    """The worker threads a fit's tasks are sized for: the ``plan_workers`` setting, else
    :func:`cluster_threads` (0 without a cluster). Memory budgets use the real threads."""
    return get_config()["plan_workers"] or cluster_threads()


#: a task's group of rows (of H in the Gram pass, of filtered X in the graph filter) takes
#: at most this share of a worker thread's memory: with its output rows, its halo rows and a
#: product temporary a task holds about four times as much, a quarter of the thread's memory;
#: the rest is for what the worker stores
GROUP_MEMORY_SHARE = 1 / 16


def default_group_bytes():
    """The bytes of rows one task of a blockwise pass takes: 4 x the ``chunk_bytes`` setting,
    capped by :data:`GROUP_MEMORY_SHARE` of a worker thread's memory on a cluster."""
    group_bytes = 4 * get_config()["chunk_bytes"]
    per_thread = worker_memory_per_thread()
    if per_thread:
        group_bytes = min(group_bytes, int(per_thread * GROUP_MEMORY_SHARE))
    return group_bytes


def local_threads():
    """Threads of dask's local threaded scheduler: ``num_workers`` when set, else the CPU
    count (its default)."""
    return max(1, int(dask.config.get("num_workers", None) or os.cpu_count() or 1))


#: a blockwise pass on row groups keeps at least this many tasks, and this many per worker
#: thread the fit is planned for (:func:`planned_threads`)
MIN_ROW_GROUPS = 8
GROUPS_PER_THREAD = 2
#: in one process (no cluster, no plan), this many per thread of dask's pool
#: (:func:`local_threads`). No worker's memory limit caps a group there, and every thread
#: holds a task's rows, its product and its halo in the memory that also holds the input:
#: at this many the tasks running hold about an eighth of a pass's rows (a few times that
#: with their temporaries), so a fit on NumPy input stays within a few times the input's
#: size. A group is still at least one chunk.
LOCAL_GROUPS_PER_THREAD = 8


def row_groups(chunks, row_bytes, group_bytes, min_groups=None):
    """Consecutive row ``chunks`` joined into groups, one task each: as many chunks as fit in
    ``group_bytes`` at ``row_bytes`` per row (at least one), while keeping at least
    ``min_groups`` groups when there are that many chunks (default: :data:`MIN_ROW_GROUPS`,
    and :data:`GROUPS_PER_THREAD` per planned worker thread, so that no task of the pass
    holds much more than its share of the threads' work; in one process
    :data:`LOCAL_GROUPS_PER_THREAD` per thread of dask's pool, so that the tasks running
    hold a small share of the rows). Returns lists of chunk numbers."""
    if min_groups is None:
        planned = planned_threads()
        if planned:
            min_groups = max(MIN_ROW_GROUPS, GROUPS_PER_THREAD * planned)
        else:
            min_groups = max(MIN_ROW_GROUPS, LOCAL_GROUPS_PER_THREAD * local_threads())
    nb = len(chunks)
    most = max(1, nb // max(1, int(min_groups)))
    groups, cur, rows = [], [], 0
    for b, n in enumerate(chunks):
        if cur and (len(cur) >= most or (rows + n) * row_bytes > group_bytes):
            groups.append(cur)
            cur, rows = [], 0
        cur.append(b)
        rows += n
    groups.append(cur)
    return groups


def _add(*parts):
    """Sum partial results: arrays, or dicts of arrays with the same keys."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: sum(p[key] for p in parts[1:]) + first[key] for key in first}
    total = first.copy() if hasattr(first, "copy") else first
    for p in parts[1:]:
        total = total + p
    return total


def named(func, prefix, *, nout=None):
    """``dask.delayed(func, pure=True)`` whose calls get the key ``<prefix>-<token>``.

    The token hashes the function and its arguments, as a pure delayed call's does, so equal
    calls share one key; only the readable part of the key changes."""
    wrapped = dask.delayed(func, pure=True, nout=nout)

    def call(*args, **kwargs):
        key = f"{prefix}-{tokenize(func, prefix, *args, **kwargs)}"
        return wrapped(*args, dask_key_name=key, **kwargs)

    return call


def task_name(prefix):
    """A fresh key ``<prefix>-<unique>``."""
    return f"{prefix}-{uuid.uuid4().hex}"


def task(prefix, fn, *args, nout=None):
    """``fn(*args)`` as a delayed call keyed ``<prefix>-<unique>`` (see the module docstring)."""
    return dask.delayed(fn, pure=False, nout=nout)(*args, dask_key_name=task_name(prefix))


def _tree(parts, fan_in, add, name):
    """Sum ``parts`` in groups of ``fan_in``, level by level, with ``add(*group)``."""
    parts = list(parts)
    if not parts:
        raise ValueError(f"{name} needs at least one part")
    while len(parts) > 1:
        parts = [add(*parts[i : i + fan_in]) for i in range(0, len(parts), fan_in)]
    return parts[0]


def tree_sum(parts, fan_in=8, prefix=None):
    """Tree-reduce a list of delayed partial sums (arrays or dicts of arrays).

    The order of additions depends only on the list, never on timing, so the result is
    reproducible. Fan-in bounds how many partials one task holds in memory at once.
    ``prefix`` names the summing tasks (``<prefix>-<token>``)."""
    add = dask.delayed(_add, pure=True) if prefix is None else named(_add, prefix)
    return _tree(parts, fan_in, add, "tree_sum")


def local_tree_sum(parts, fan_in=8):
    """:func:`tree_sum` of partial sums held in memory, added in the same order: the same
    numbers as the delayed tree gives."""
    return _tree(parts, fan_in, _add, "local_tree_sum")


def tree_reduce(parts, combine, fan_in=8):
    """Reduce a list of delayed parts with ``combine(*group)`` (a call that returns a
    delayed), level by level in groups of ``fan_in``: :func:`tree_sum` for any associative
    combination, in an order that depends only on the list."""
    return _tree(parts, fan_in, combine, "tree_reduce")


def frame_to_array(frame):
    """A dask DataFrame or Series as a dask array with known row chunks, one block per
    partition.

    The partitions' lengths are counted in one pass over them. The array is built from the
    frame's delayed partitions rather than by ``to_dask_array``: after a column selection on
    ``read_parquet``'s output that conversion fuses partitions differently from one graph to
    the next (``lengths=True`` then raises, dask/dask#12411), and a second conversion of the
    same frame reuses its task keys with other tasks, which the distributed scheduler
    refuses."""
    dtype = frame.to_dask_array().dtype  # from the frame's metadata; nothing is computed
    parts = frame.to_delayed()
    lengths = dask.compute(*[dask.delayed(len)(part) for part in parts])
    tail = () if frame.ndim == 1 else (len(frame.columns),)
    blocks = [
        da.from_delayed(dask.delayed(_values)(part, dtype), shape=(n, *tail), dtype=dtype)
        for part, n in zip(parts, lengths, strict=True)
    ]
    return da.concatenate(blocks)


def _values(part, dtype):
    return part.to_numpy(dtype=dtype)
