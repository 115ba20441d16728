"""The log switch and the per-stage task display."""

import io
import logging
import time
import uuid

import dask
import dask.array as da
import pytest
from distributed import wait

from elmscale import USELM, log_to_stderr
from elmscale._progress import StageProgress, stage_of


@pytest.fixture
def stream():
    """A StringIO that elmscale's log goes to; the handler is removed afterwards."""
    buf = io.StringIO()
    handler = log_to_stderr("INFO", buf)
    yield buf
    logger = logging.getLogger("elmscale")
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


def test_log_to_stderr_shows_the_fit_stages(blobs, stream):
    USELM(n_clusters=3, n_hidden=30, graph="exact", random_state=0).fit(blobs[0])
    (line,) = [ln for ln in stream.getvalue().splitlines() if "USELM fit:" in ln]
    for stage in ("hidden", "graph", "gram", "solve"):
        assert f"{stage} " in line.split("USELM fit:")[1]


def test_log_to_stderr_is_idempotent_and_checks_the_level(stream):
    handler = log_to_stderr("DEBUG", stream)
    assert [h for h in logging.getLogger("elmscale").handlers if h is handler]
    assert sum(getattr(h, "_elmscale", False) for h in logging.getLogger("elmscale").handlers) == 1
    assert handler.level == logging.DEBUG
    with pytest.raises(ValueError, match="level must be a logging level"):
        log_to_stderr("LOUD")


def test_stage_of_groups_by_task_name_prefix():
    assert stage_of("elmscale-graph-knn") == "graph"
    assert stage_of("elmscale-gram-hth") == "gram"
    assert stage_of("elmscale-kmeans-lloyd") == "k-means"
    assert stage_of("read-parquet") == "read"
    assert stage_of("toparquetdata") == "write"
    assert stage_of("finalize-hlgfinalizecompute") == "collect"
    assert stage_of("my_plugin_step") == "my_plugin_step"  # unknown: shown by its own name


def _named_work(n_blocks):
    """Two arrays of n_blocks tasks each, named like the gram and k-means stages (a fresh
    token per call, so a shared cluster computes them anew)."""
    x = da.ones((10 * n_blocks, 2), chunks=(10, 2))
    slow = lambda b: (time.sleep(0.02), b * 2)[1]  # noqa: E731 - pickled by value
    gram = x.map_blocks(slow, name=f"elmscale-gram-{uuid.uuid4().hex}")
    km = x.map_blocks(slow, name=f"elmscale-kmeans-{uuid.uuid4().hex}")
    return gram, km


def test_stage_progress_counts_tasks_by_stage_on_local_schedulers():
    gram, km = _named_work(6)
    buf = io.StringIO()
    with dask.config.set(scheduler="threads"), StageProgress(stream=buf, interval=0) as p:
        dask.compute(gram, km)
    assert p.counts["gram"] == [6, 6] and p.counts["k-means"] == [6, 6]
    assert "gram 6/6" in buf.getvalue().splitlines()[-1]


@pytest.mark.distributed
def test_stage_progress_reads_the_scheduler_task_prefixes(dask_client):
    gram, km = _named_work(5)
    buf = io.StringIO()
    with StageProgress(dask_client, stream=buf, interval=0.05) as p:
        # held as futures until the display's last read: a computed-and-released task can be
        # forgotten by the scheduler between two reads, and its count with it
        held = dask_client.persist([gram, km])
        wait(held)
    assert p.counts["gram"] == [5, 5] and p.counts["k-means"] == [5, 5]
    del held
    assert "progress:" in buf.getvalue()
