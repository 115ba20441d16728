"""The graph's exchanges cost O(n_chunks) tasks: counted on a real multi-process cluster with
distributed's task stream at 10 and 40 chunks of the same data, and on the local
scheduler from the exchange itself; the results stay the same for every chunking."""

import collections

import dask
import dask.array as da
import numpy as np
import pytest
from dask.utils import key_split
from sklearn.datasets import make_blobs

import elmscale
from elmscale.algorithms import USELM
from elmscale.graph import CellSearch, knn_graph
from elmscale.graph._chunking import graph_chunks
from elmscale.graph._exchange import exchange, split_by_bytes, worker_groups

CHUNK_COUNTS = (10, 40)
#: tasks at 4x the chunks may be at most this many times the tasks at 1x (linear: 4)
LINEAR_BOUND = 4.4


@pytest.fixture(scope="module")
def mixture():
    """6,000 points in 8-d, 10 blobs, float32."""
    X, _ = make_blobs(6_000, n_features=8, centers=10, random_state=0)
    return X.astype(np.float32)


def _counted(fn):
    """``fn()``'s result and the tasks it ran on the cluster, by key prefix."""
    from distributed import get_task_stream

    with get_task_stream() as stream:
        out = fn()
    return out, collections.Counter(key_split(t["key"]) for t in stream.data)


def _per_chunk_count(X, nb, fn):
    Xd = da.from_array(X, chunks=(-(-len(X) // nb), X.shape[1])).persist()
    with elmscale.config_context(graph_chunks="data"):  # the graph follows X's chunks
        return _counted(lambda: fn(Xd))


def _graph(Xd):
    g = knn_graph(Xd, 10, backend=CellSearch(rows_per_cell=300), order=True, random_state=0)
    return g.laplacian(), g.order.apply(da.arange(Xd.shape[0], chunks=Xd.chunks[0])).compute()


def _assert_linear(counts):
    totals = {nb: sum(c.values()) for nb, c in counts.items()}
    growth = totals[CHUNK_COUNTS[-1]] / totals[CHUNK_COUNTS[0]]
    assert growth <= LINEAR_BOUND, (totals, counts[CHUNK_COUNTS[-1]].most_common(8))


@pytest.mark.slow
@pytest.mark.distributed
def test_graph_tasks_grow_linearly_and_the_graph_does_not_change(mixture, dask_client):
    results, counts = {}, {}
    for nb in CHUNK_COUNTS:
        results[nb], counts[nb] = _per_chunk_count(mixture, nb, _graph)
        assert counts[nb]["elmscale-graph-search"] == nb  # built on X's own chunks
    _assert_linear(counts)
    (L_ref, order_ref), (L, order) = results.values()
    np.testing.assert_array_equal(order, order_ref)
    assert (L != L_ref).nnz == 0


@pytest.mark.slow
@pytest.mark.distributed
def test_uselm_fit_tasks_grow_linearly_and_labels_do_not_change(mixture, dask_client):
    def fit(Xd):
        model = USELM(n_clusters=10, n_hidden=50, graph=CellSearch(rows_per_cell=300))
        return model.set_params(random_state=0).fit(Xd).labels_

    labels, counts = {}, {}
    for nb in CHUNK_COUNTS:
        labels[nb], counts[nb] = _per_chunk_count(mixture, nb, fit)
    _assert_linear(counts)
    np.testing.assert_array_equal(labels[CHUNK_COUNTS[-1]], labels[CHUNK_COUNTS[0]])


@pytest.mark.distributed
def test_unpack_tasks_run_on_their_groups_worker(dask_client):
    """Each pack crosses the network once: a group's unpack tasks run on its worker, and
    there is at most one pack per (source, group)."""
    blocks = dask.persist(*[dask.delayed(np.arange)(10 * s, 10 * s + 10) for s in range(12)])
    requests = [[(s, (s % 3,)) for s in range(12) if (s + b) % 2] for b in range(12)]
    out = exchange("test-swap", _pick, [(blk,) for blk in blocks], requests)
    groups = worker_groups(12)
    assert len(groups) == 2
    worker_of = {out[b].key: worker for worker, group in groups for b in group}
    from distributed import get_task_stream

    # work stealing may move a task off its preferred worker whenever the other is idle:
    # the placement tested is the exchange's, so it is paused for this computation
    dask_client.run_on_scheduler(_work_stealing, on=False)
    try:
        with get_task_stream() as stream:
            got = dask.compute(*out)
    finally:
        dask_client.run_on_scheduler(_work_stealing, on=True)
    assert got == tuple(tuple(10 * s + off for s, (off,) in req) for req in requests)
    ran = {t["key"]: t["worker"] for t in stream.data}
    assert {key: ran[key] for key in worker_of} == worker_of
    assert sum(key_split(k) == "test-swap" for k in ran) == 12 * 2


async def _work_stealing(dask_scheduler, on):
    """Start or stop the scheduler's work-stealing extension (both idempotent)."""
    stealing = dask_scheduler.extensions["stealing"]
    await (stealing.start() if on else stealing.stop())


def _pick(block, offset):
    return block[offset]


def test_exchange_gives_each_destination_its_pieces_in_order():
    rng = np.random.RandomState(0)
    nb = 9
    blocks = [dask.delayed(np.arange)(10 * s, 10 * s + 10) for s in range(nb)]
    requests = [
        [(int(s), (int(rng.randint(10)),)) for s in rng.permutation(nb)[: rng.randint(nb)]]
        for _ in range(nb)
    ]
    wants = [dask.delayed(int)(b) for b in range(nb)]
    out = exchange("test-swap", _pick_plus, [(blk,) for blk in blocks], requests, wants)
    got = dask.compute(*out)
    assert got == tuple(
        tuple(10 * s + off + b for s, (off,) in req) for b, req in enumerate(requests)
    )
    assert [g for g, r in zip(got, requests, strict=True) if not r] == [()] * sum(
        not r for r in requests
    )


@pytest.mark.parametrize("with_wants", [False, True])
def test_in_one_process_each_destination_takes_its_own_pieces(with_wants):
    """Without a client nothing crosses a network: no pack task holds pieces for all
    destinations until the last one has run; each destination's task reads the source
    blocks themselves and cuts its pieces, the same pieces in the same order."""
    nb = 6
    blocks = [dask.delayed(np.arange)(10 * s, 10 * s + 10) for s in range(nb)]
    requests = [[(s, (b,)) for s in range(nb) if s != b] for b in range(nb)]
    wants = [dask.delayed(int)(b) for b in range(nb)] if with_wants else None
    out = exchange(
        "test-swap", _pick_plus if with_wants else _pick, [(b,) for b in blocks], requests, wants
    )
    keys = set().union(*(dict(o.__dask_graph__()) for o in out))
    assert not [k for k in keys if key_split(k) == "test-swap"]  # no packs
    assert sum(key_split(k) == "test-swap-unpack" for k in keys) == nb
    assert dask.compute(*out) == tuple(
        tuple(10 * s + b + (b if with_wants else 0) for s, _ in req)
        for b, req in enumerate(requests)
    )


def _pick_plus(block, want, offset):
    return block[offset] + want


def test_without_a_client_an_exchange_has_one_group():
    assert worker_groups(5) == [(None, [0, 1, 2, 3, 4])]


def test_graph_chunks_follow_the_workers_and_the_setting():
    chunks = (1000,) * 2000  # 2M rows
    assert graph_chunks(chunks, n_workers=2) == graph_chunks(chunks, n_workers=0)
    assert len(graph_chunks(chunks, n_workers=2)) == 31  # runs of 65,536 rows or more
    many = (100_000,) * 1000  # 100M rows in 1,000 chunks
    assert len(graph_chunks(many, n_workers=2)) == 63  # at most 64 runs
    assert len(graph_chunks(many, n_workers=100)) == 334  # up to 4 runs per worker
    with elmscale.config_context(graph_chunks="data"):
        assert graph_chunks(chunks, n_workers=2) == chunks
    with pytest.raises(ValueError, match="graph_chunks must be 'auto' or 'data'"):
        elmscale.set_config(graph_chunks="workers")


def test_runs_of_destinations_receive_at_most_the_budget():
    nbytes = [5, 5, 5, 20, 1, 1, 9]
    runs = split_by_bytes(range(7), nbytes, 10)
    assert runs == [[0, 1], [2], [3], [4, 5], [6]]  # 20 > 10 alone: a run of its own
    assert [b for run in runs for b in run] == list(range(7))
    assert all(sum(nbytes[b] for b in run) <= 10 for run in runs if len(run) > 1)
    assert worker_groups(7, nbytes) == [(None, list(range(7)))]  # no workers: no split


@pytest.mark.slow
@pytest.mark.distributed
def test_a_small_exchange_budget_splits_the_groups_not_the_graph(mixture, dask_client):
    """With ``exchange_bytes`` below what a worker's destinations receive, the unpack tasks
    hold smaller runs of destinations (more packs), and the graph stays the same."""
    nb = 20
    ref, ref_counts = _per_chunk_count(mixture, nb, _graph)
    with elmscale.config_context(exchange_bytes=20_000):
        small, small_counts = _per_chunk_count(mixture, nb, _graph)
    assert (small[0] != ref[0]).nnz == 0
    np.testing.assert_array_equal(small[1], ref[1])
    for stage in ("elmscale-graph-gather", "elmscale-graph-order", "elmscale-graph-reverse"):
        assert small_counts[stage] > ref_counts[stage], stage
    with pytest.raises(ValueError, match="exchange_bytes must be a positive integer"):
        elmscale.set_config(exchange_bytes=0)
