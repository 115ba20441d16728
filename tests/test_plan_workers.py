"""``config_context(plan_workers=W)`` sizes a fit's tasks for W worker threads whatever
cluster runs it: more, smaller tasks for a larger cluster, the same fit."""

import collections

import dask.array as da
import numpy as np
import pytest
from dask.utils import key_split
from sklearn.datasets import make_blobs

import elmscale
from elmscale.algorithms import USELM
from elmscale.graph import CellSearch
from elmscale.graph._chunking import graph_chunks
from elmscale.utils._dask import planned_threads, row_groups


@pytest.mark.parametrize(
    ("value", "error"), [("16", TypeError), (True, TypeError), (2.0, TypeError), (-1, ValueError)]
)
def test_plan_workers_is_checked(value, error):
    with pytest.raises(error, match=f"plan_workers must be a non-negative integer, got {value!r}"):
        elmscale.set_config(plan_workers=value)
    assert elmscale.get_config()["plan_workers"] is None


def test_zero_returns_to_the_cluster_that_runs_the_fit():
    with elmscale.config_context(plan_workers=16):
        assert planned_threads() == 16
        with elmscale.config_context(plan_workers=0):
            assert elmscale.get_config()["plan_workers"] is None
            assert planned_threads() == 0  # no cluster in this test
    assert elmscale.get_config()["plan_workers"] is None


def test_tasks_are_sized_for_the_planned_threads():
    """1M rows in 62 chunks of up to 16,384: planned for 16 threads, the blockwise passes (the
    Gram pass's included) get two tasks a thread, and the graph's runs are those a 16-worker
    cluster gets; planned for up to 4 threads the tasks are those of a small cluster: 16
    groups of up to 4 chunks, runs of 65,536 rows."""
    chunks = (16_384,) * 61 + (576,)
    row_bytes, group_bytes = 4_000, 4 * 64 * 2**20  # n_hidden 1000 in float32, 4 chunks
    with elmscale.config_context(plan_workers=1):
        unplanned = (row_groups(chunks, row_bytes, group_bytes), graph_chunks(chunks))
    assert len(unplanned[0]) == 16 and set(unplanned[1][:-1]) == {65_536}
    for threads in (2, 4):
        with elmscale.config_context(plan_workers=threads):
            assert (row_groups(chunks, row_bytes, group_bytes), graph_chunks(chunks)) == unplanned
    with elmscale.config_context(plan_workers=16):
        groups, runs = row_groups(chunks, row_bytes, group_bytes), graph_chunks(chunks)
    assert len(groups) >= 32 and [b for g in groups for b in g] == list(range(len(chunks)))
    assert runs == graph_chunks(chunks, n_workers=16)
    ten_million = (16_384,) * 610 + (5_760,)  # 4 runs a worker past 16 workers
    with elmscale.config_context(plan_workers=128):
        assert len(graph_chunks(ten_million)) > 2 * len(graph_chunks(ten_million, n_workers=2))


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_one_process_keeps_eight_tasks_a_thread(threads):
    """Without a cluster or a plan, a blockwise pass keeps LOCAL_GROUPS_PER_THREAD tasks per
    thread of dask's pool (``num_workers``): the tasks running share the input's memory and
    no worker limit caps them. A group is still at least one chunk, and the groups cover the
    chunks in order."""
    import dask

    from elmscale.utils._dask import LOCAL_GROUPS_PER_THREAD, MIN_ROW_GROUPS, local_threads

    chunks = (16_384,) * 61 + (576,)
    with dask.config.set(num_workers=threads):
        assert planned_threads() == 0 and local_threads() == threads
        groups = row_groups(chunks, 4_000, 4 * 64 * 2**20)
    wanted = max(MIN_ROW_GROUPS, LOCAL_GROUPS_PER_THREAD * threads)
    assert len(groups) >= min(wanted, len(chunks))
    assert max(map(len, groups)) <= max(1, len(chunks) // wanted)
    assert [b for g in groups for b in g] == list(range(len(chunks)))


def _fit(Xd):
    from distributed import get_task_stream

    model = USELM(n_clusters=6, n_hidden=60, graph=CellSearch(rows_per_cell=200), random_state=0)
    with get_task_stream() as stream:
        labels = model.fit(Xd).labels_.compute()
    return labels, collections.Counter(key_split(t["key"]) for t in stream.data)


@pytest.mark.distributed
def test_a_fit_planned_for_16_threads_on_2_workers_gives_the_same_labels(dask_client):
    """On a 2-worker cluster, the fit planned for 16 threads runs a Gram task per chunk of X
    (16) where the unplanned fit groups them (8), as it does the graph's blockwise passes,
    and gives the same labels."""
    X, _ = make_blobs(6_000, n_features=8, centers=6, random_state=0)
    Xd = da.from_array(X.astype(np.float32), chunks=(375, 8)).persist()
    labels, tasks = _fit(Xd)
    with elmscale.config_context(plan_workers=16):
        planned, planned_tasks = _fit(Xd)
    np.testing.assert_array_equal(planned, labels)
    assert tasks["elmscale-gram-block"] == 8 and planned_tasks["elmscale-gram-block"] == 16
    assert tasks["elmscale-graph-pattern"] < planned_tasks["elmscale-graph-pattern"]
