"""The graph's tasks: :func:`task` keys them ``elmscale-graph-<stage>-<unique>``, by the
naming rule of :mod:`elmscale.utils._dask` (unique keys: the graph's intermediate results are
persisted, and a graph may be built again while an earlier build's are released)."""

import dask.array as da
import numpy as np

from ..utils import _dask

PREFIX = "elmscale-graph"


def task_name(stage):
    """A fresh key name for a graph stage."""
    return _dask.task_name(f"{PREFIX}-{stage}")


def task(stage, fn, *args, nout=None):
    """``fn(*args)`` as a delayed call keyed ``elmscale-graph-<stage>-<unique>``."""
    return _dask.task(f"{PREFIX}-{stage}", fn, *args, nout=nout)


def row_numbers(chunks):
    """The global row numbers 0..N-1 as an int64 dask array with these row chunks."""
    starts = np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)
    return da.concatenate(
        [
            da.from_delayed(task("rows", np.arange, int(a), int(b)), (int(b - a),), dtype=np.int64)
            for a, b in zip(starts[:-1], starts[1:], strict=True)
        ]
    )
