"""Named graph tasks: every task key starts with ``elmscale-graph-<stage>-`` so that the
dashboard and progress displays tell the graph's stages apart.

Keys are unique per call rather than hashes of the inputs. A graph build persists
intermediate results; with content-hashed keys, building the same graph again could hand the
scheduler keys that the previous build's results, still being garbage-collected, are about
to release, and the new build would lose them.
"""

import uuid

import dask
import dask.array as da
import numpy as np


def task_name(stage):
    """A fresh key name for a graph stage."""
    return f"elmscale-graph-{stage}-{uuid.uuid4().hex}"


def task(stage, fn, *args):
    """``fn(*args)`` as a delayed call keyed ``elmscale-graph-<stage>-<unique>``."""
    return dask.delayed(fn, pure=False)(*args, dask_key_name=task_name(stage))


def row_numbers(chunks):
    """The global row numbers 0..N-1 as an int64 dask array with these row chunks."""
    starts = np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)
    return da.concatenate(
        [
            da.from_delayed(task("rows", np.arange, int(a), int(b)), (int(b - a),), dtype=np.int64)
            for a, b in zip(starts[:-1], starts[1:], strict=True)
        ]
    )
