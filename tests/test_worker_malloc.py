"""The workers' allocator setting (``worker_mmap_threshold``): a real multi-process cluster's
workers get it once the data reaches them, then reuse a freed block instead of mapping and
faulting it in anew; it changes no result, and 0 leaves the workers as they are."""

import sys
import time

import numpy as np
import pytest
from distributed import Client, LocalCluster

import elmscale
from elmscale.utils._validation import as_row_chunked
from elmscale.utils._worker_malloc import TRIM_EVERY_S, trim_point

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt"),
]

BLOCK_BYTES = 4 * 2**20


def _threshold(dask_worker):
    return getattr(dask_worker, "elmscale_mmap_threshold", "unset")


def _faults_reusing_a_block():
    """Minor page faults while a worker thread allocates, fills and frees a 4 MiB block 50
    times: hundreds each time where every block is mapped anew, a few where it is reused."""
    import resource

    def faults():
        return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt

    np.ones(BLOCK_BYTES // 8)  # the heap grows once
    before = faults()
    for _ in range(50):
        np.ones(BLOCK_BYTES // 8)
    return faults() - before


@pytest.fixture(scope="module")
def client():
    """A cluster of its own: the session's shared one may have the setting already."""
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as c,
        Client(c) as cl,
    ):
        yield cl


def test_workers_reuse_freed_blocks_once_data_reaches_them(client):
    with elmscale.config_context(worker_mmap_threshold=0):
        as_row_chunked(np.zeros((10, 3)))
    assert set(client.run(_threshold).values()) == {"unset"}
    mapped_anew = client.submit(_faults_reusing_a_block, pure=False).result()
    as_row_chunked(np.zeros((10, 3)))
    assert set(client.run(_threshold).values()) == {32 * 2**20}
    reused = client.submit(_faults_reusing_a_block, pure=False).result()
    pages = 50 * BLOCK_BYTES // 4096
    assert mapped_anew > pages / 4, mapped_anew  # the nanny's MALLOC_TRIM_THRESHOLD_
    assert reused < mapped_anew / 10, (reused, mapped_anew)


def test_a_graph_of_dask_rows_tunes_the_workers_too():
    """``knn_graph`` of a dask array (no estimator, no input validation before it) gives
    the workers the setting as the estimators do: without it its search and join tasks
    fault their temporaries in anew."""
    import dask.array as da

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as c,
        Client(c) as cl,
    ):
        assert set(cl.run(_threshold).values()) == {"unset"}
        X = da.from_array(np.random.default_rng(0).random((200, 3)), chunks=100)
        elmscale.graph.knn_graph(X, 5)
        assert set(cl.run(_threshold).values()) == {32 * 2**20}


HOLE_BYTES, N_HOLES = 16 * 2**20, 48


def _rss(dask_worker):
    return dask_worker.monitor.get_process_memory(), dask_worker.elmscale_heap_trims


def _free_blocks_between_held_ones():
    """Fill 48 blocks of 16 MiB from the heap, each followed by a small block that is kept,
    then free the large ones: 768 MiB of free pages that no trim of the heap's top can
    reach. Returns the small blocks, to keep them held on the worker."""
    held, large = [], []
    for _ in range(N_HOLES):
        large.append(np.ones(HOLE_BYTES // 8))
        held.append(np.ones(2**16 // 8))
    del large
    return held


def _resident_after(client, seconds):
    time.sleep(seconds)
    ((rss, trims),) = client.run(_rss).values()
    return rss, trims


def test_free_pages_go_back_before_dask_would_spill(client):
    """Free pages between held blocks stay resident where the worker is far from its memory
    limit (the module's cluster), and go back to the system where they would bring it near
    the point at which dask starts spilling (1.25 GiB here), before it spills."""
    holes = N_HOLES * HOLE_BYTES
    as_row_chunked(np.zeros((10, 3)))  # the setting on the workers of both clusters
    worker = next(iter(client.scheduler_info()["workers"]))
    before = client.run(_rss, workers=[worker])[worker][0]
    kept = client.submit(_free_blocks_between_held_ones, workers=[worker], pure=False)
    kept.result()
    time.sleep(2 * TRIM_EVERY_S)
    assert client.run(_rss, workers=[worker])[worker][0] > before + 0.8 * holes
    del kept
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            memory_limit="1.5GiB",
        ) as c,
        Client(c) as small,
    ):
        as_row_chunked(np.zeros((10, 3)))
        (point,) = small.run(lambda dask_worker: trim_point(dask_worker.memory_manager)).values()
        before, _ = _resident_after(small, 0)
        assert before + holes > point  # the holes would take the worker past the trim point
        kept = small.submit(_free_blocks_between_held_ones, pure=False)
        kept.result()
        rss, trims = _resident_after(small, 3 * TRIM_EVERY_S)
        assert trims >= 1 and rss < before + 0.25 * holes, (before, rss, trims)


def test_the_labels_do_not_depend_on_the_setting(client):
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(600, 8, centers=4, random_state=0)
    fits = []
    for nbytes in (0, 2**20):
        with elmscale.config_context(worker_mmap_threshold=nbytes):
            fits.append(elmscale.USELM(n_clusters=4, n_hidden=60, random_state=0).fit(X).labels_)
    np.testing.assert_array_equal(*fits)


@pytest.mark.parametrize("bad", [-1, 2**26, 1.5, True, "32MiB"])
def test_a_bad_threshold_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="worker_mmap_threshold"):
        elmscale.set_config(worker_mmap_threshold=bad)
