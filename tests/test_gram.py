"""The blockwise reductions equal dense NumPy products, whatever the chunking or cluster."""

import functools

import dask.array as da
import numpy as np
import pytest

from elmscale import config_context
from elmscale.gram import hidden_stats
from elmscale.graph import knn_graph
from elmscale.hidden import HiddenFeatures, RandomHiddenLayer

from ._reference import hidden, knn_laplacian

CHUNKINGS = [(150,), (50, 50, 50), (17, 60, 33, 40)]


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.fixture
def data(rng):
    X = rng.randn(150, 6)
    y = rng.randn(150, 2)
    w = rng.uniform(0, 2, 150)
    labels = rng.randint(-1, 4, 150)
    return X, y, w, labels


def _stats(
    X, y, w, labels, chunks, layer, *, weights="binary", normalized=False, power=1, order=False
):
    Xd = da.from_array(X, chunks=(chunks, 6))
    features = HiddenFeatures(Xd, layer, cache=False)
    graph = knn_graph(
        Xd, 5, backend="exact", weights=weights, normalized=normalized, order=order, random_state=0
    )
    assert (graph.order is not None) == order
    return hidden_stats(
        features,
        ("count", "colsum", "hth", "hty", "htf", "sizes", "htlh"),
        Y=da.from_array(y, chunks=(chunks, 2)),
        sample_weight=da.from_array(w, chunks=chunks),
        labels=da.from_array(labels, chunks=chunks),
        n_labels=4,
        graph=graph,
        laplacian_power=power,
    )


@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize(
    "weights,normalized,power",
    [("binary", False, 1), ("heat", True, 1), ("binary", False, 2), ("fuzzy", True, 1)],
)
def test_chunked_equals_dense(data, chunks, weights, normalized, power):
    X, y, w, labels = data
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    s = _stats(X, y, w, labels, chunks, layer, weights=weights, normalized=normalized, power=power)
    L = knn_laplacian(X, 5, weights=weights, normalized=normalized)
    _assert_terms_equal_dense(s, data, layer, np.linalg.matrix_power(L, power))


@pytest.mark.parametrize("halo_rows", [1, 7])
@pytest.mark.parametrize("power", [1, 2])
def test_halo_rebuilt_in_slices_equals_dense(data, monkeypatch, halo_rows, power):
    """A task builds its own and its halo's hidden rows a few at a time (here 1 and 7,
    slices inside and across the blocks and the halo's pieces): every term still equals
    the dense one."""
    import elmscale.gram

    monkeypatch.setattr(elmscale.gram, "SLICE_ROWS", halo_rows)
    X, y, w, labels = data
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    s = _stats(X, y, w, labels, (17, 60, 33, 40), layer, power=power)
    L = knn_laplacian(X, 5)
    _assert_terms_equal_dense(s, data, layer, np.linalg.matrix_power(L, power))


@pytest.mark.parametrize("step", [1, 4, 5, 64])
def test_rows_built_in_slices_equal_the_layer_on_the_stacked_rows(rng, step):
    """A task's hidden rows built a slice at a time from its blocks as held (float32 read
    as float64) are the layer's rows of the stacked, widened blocks; the blocks are not
    changed, and no rows give the layer's empty block."""
    from elmscale.gram import _built_rows

    layer = RandomHiddenLayer.draw(3, 11, "sigmoid", 0)
    blocks = [rng.randn(n, 3).astype(np.float32) for n in (4, 0, 9, 1, 5)]
    kept = [b.copy() for b in blocks]
    widen = functools.partial(np.asarray, dtype=np.float64)
    H = _built_rows(blocks, layer, step, widen)
    expected = layer(np.concatenate(blocks).astype(np.float64))
    assert H.dtype == np.float64 and H.shape == (19, 11)
    np.testing.assert_allclose(H, expected, rtol=1e-13, atol=1e-15)
    for before, after in zip(kept, blocks, strict=True):
        np.testing.assert_array_equal(before, after)
    empty = _built_rows([np.empty((0, 3))], layer, step)
    assert empty.shape == (0, 11)


@pytest.mark.parametrize("step", [1, 3, 5, 64])
def test_row_slices_cover_the_pieces_in_order(rng, step):
    """The slices are the pieces' rows in order, ``step`` rows each but the last; a slice
    inside one piece is a view of it, and the pieces are not changed."""
    from elmscale.gram import _row_slices

    pieces = [rng.randn(n, 3) for n in (4, 0, 9, 1, 5)]
    kept = [p.copy() for p in pieces]
    slices = list(_row_slices(iter(pieces), step))
    np.testing.assert_array_equal(np.concatenate(slices), np.concatenate(pieces))
    assert all(len(piece) == step for piece in slices[:-1]) and 0 < len(slices[-1]) <= step
    assert list(_row_slices([], step)) == []
    inside = [sl for sl in slices if any(np.shares_memory(sl, p) for p in pieces)]
    assert len(inside) >= (1 if step <= 4 else 0)
    for piece, before in zip(pieces, kept, strict=True):
        np.testing.assert_array_equal(piece, before)


def _assert_terms_equal_dense(s, data, layer, Lp):
    """Every term of ``hidden_stats`` equals its dense NumPy product (``Lp``: L^p)."""
    X, y, w, labels = data
    H = hidden(X, layer)
    F = np.zeros((150, 4))
    F[labels >= 0, labels[labels >= 0]] = 1
    assert s["count"] == pytest.approx(w.sum(), rel=1e-12)
    assert _rel(s["colsum"], w @ H) < 1e-10
    assert _rel(s["hth"], H.T @ (w[:, None] * H)) < 1e-10
    assert _rel(s["hty"], H.T @ (w[:, None] * y)) < 1e-10
    assert _rel(s["htf"], H.T @ F) < 1e-10
    np.testing.assert_array_equal(s["sizes"], F.sum(0))
    assert _rel(s["htlh"], H.T @ Lp @ H) < 1e-10


@pytest.mark.parametrize("order", [False, True])
@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize(
    "power,weights,normalized",
    [
        (3, "binary", False),
        (4, "heat", True),
        (5, "binary", True),
        (5, "heat", False),
        (4, "fuzzy", False),
    ],
)
def test_higher_powers_equal_dense(data, chunks, power, weights, normalized, order):
    """p > 2 goes through L^q H persisted on the cluster and its halo rows (not X's): every
    term of the same pass still equals the dense products, in input or locality order."""
    X, y, w, labels = data
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    s = _stats(
        X,
        y,
        w,
        labels,
        chunks,
        layer,
        weights=weights,
        normalized=normalized,
        power=power,
        order=order,
    )
    H = hidden(X, layer)
    L = knn_laplacian(X, 5, weights=weights, normalized=normalized)
    assert _rel(s["htlh"], H.T @ np.linalg.matrix_power(L, power) @ H) < 1e-10
    assert _rel(s["hth"], H.T @ (w[:, None] * H)) < 1e-10
    assert _rel(s["hty"], H.T @ (w[:, None] * y)) < 1e-10


def test_higher_power_logs_the_bytes_it_ships(data, caplog):
    X = data[0]
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    Xd = da.from_array(X, chunks=((50, 50, 50), 6))
    graph = knn_graph(Xd, 5, backend="exact", order=False)
    with caplog.at_level("INFO", logger="elmscale.gram"):
        hidden_stats(
            HiddenFeatures(Xd, layer, cache=False), ("htlh",), graph=graph, laplacian_power=5
        )
    msg = [r.getMessage() for r in caplog.records if r.name == "elmscale.gram"]
    mb = graph.halo_size() * 40 * 8 / 1e6
    assert any(
        f"2 product(s) ship {graph.halo_size()} halo rows" in m and f"({mb:.1f} MB each)" in m
        for m in msg
    ), msg


def test_laplacian_power_rows_is_aligned_with_the_graph(data):
    """L^q H comes back as a row-chunked dask array in the graph's chunks, equal to dense."""
    from elmscale.gram import laplacian_power_rows

    X = data[0]
    layer = RandomHiddenLayer.draw(6, 20, "tanh", 0)
    Xd = da.from_array(X, chunks=((17, 60, 33, 40), 6))
    graph = knn_graph(Xd, 5, backend="exact", normalized=True, order=False)
    H_blocks = HiddenFeatures(Xd, layer, cache=False).blocks()
    import dask

    Z = laplacian_power_rows(graph, H_blocks, dask.delayed(layer), 3, n_hidden=20, dtype=np.float64)
    assert Z.chunks == ((17, 60, 33, 40), (20,))
    L = knn_laplacian(X, 5, normalized=True)
    ref = np.linalg.matrix_power(L, 3) @ hidden(X, layer)
    assert _rel(Z.compute(), ref) < 1e-10
    with pytest.raises(ValueError, match="array must be chunked like the graph's rows"):
        graph.halo_rows(0, Z.rechunk((50, 20)))


def test_gram_matrices_are_symmetric_psd(data):
    X, y, w, labels = data
    layer = RandomHiddenLayer.draw(6, 40, "tanh", 1)
    s = _stats(X, y, w, labels, (50, 50, 50), layer)
    for key in ("hth", "htlh"):
        np.testing.assert_array_equal(s[key], s[key].T)
        assert np.linalg.eigvalsh(s[key]).min() > -1e-9 * np.abs(s[key]).max()


def test_float32_blocks_accumulate_close_to_float64(data):
    """float32 blocks (summed in float64) agree with float64 to ~1e-6 relative."""
    X, y, w, labels = data
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    with config_context(compute_dtype="float32"):
        Xd = da.from_array(X.astype(np.float32), chunks=(50, 6))
        s32 = hidden_stats(HiddenFeatures(Xd, layer, cache=False), ("hth",))
    H = hidden(X, layer)
    assert s32["hth"].dtype == np.float64
    assert _rel(s32["hth"], H.T @ H) < 1e-5


def test_cached_and_recomputed_hidden_layer_agree(data):
    X = data[0]
    layer = RandomHiddenLayer.draw(6, 30, "relu", 3)
    Xd = da.from_array(X, chunks=(40, 6))
    a = hidden_stats(HiddenFeatures(Xd, layer, cache=False), ("hth", "colsum"))
    b = hidden_stats(HiddenFeatures(Xd, layer, cache=True), ("hth", "colsum"))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize(("memory_per_held", "cached"), [(2.0, True), (1.99, False)])
def test_auto_cache_keeps_h_when_h_and_x_take_half_the_memory(
    data, monkeypatch, memory_per_held, cached
):
    """``cache="auto"`` keeps H exactly when H and X together take at most half of the
    cluster's memory."""
    from elmscale.hidden import _features

    Xd = da.from_array(data[0], chunks=(40, 6))
    layer = RandomHiddenLayer.draw(6, 30, "relu", 3)
    held = Xd.shape[0] * 30 * Xd.dtype.itemsize + Xd.nbytes
    monkeypatch.setattr(_features, "_cluster_memory", lambda: memory_per_held * held)
    assert HiddenFeatures(Xd, layer, cache="auto").cached is cached


def test_bad_terms_are_rejected(data):
    Xd = da.from_array(data[0], chunks=(50, 6))
    features = HiddenFeatures(Xd, RandomHiddenLayer.draw(6, 10, "sigmoid", 0), cache=False)
    with pytest.raises(ValueError, match="unknown terms"):
        hidden_stats(features, ("hht",))
    with pytest.raises(ValueError, match="'htlh' needs a graph"):
        hidden_stats(features, ("htlh",))
    for bad in (0, -1, 2.0, True, "2"):
        with pytest.raises(ValueError, match="laplacian_power must be an integer >= 1"):
            hidden_stats(features, ("hth",), laplacian_power=bad)


@pytest.mark.distributed
@pytest.mark.parametrize("n_workers", [1, 2])
def test_distributed_equals_dense(data, n_workers, dask_client):
    """On a multi-process LocalCluster (1 or 2 workers), three chunkings: same as dense."""
    from distributed import Client, LocalCluster

    X, y, w, labels = data
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    H = hidden(X, layer)
    L = knn_laplacian(X, 5)

    def check():
        for chunks in CHUNKINGS:
            s = _stats(X, y, w, labels, chunks, layer)
            assert _rel(s["hth"], H.T @ (w[:, None] * H)) < 1e-10
            assert _rel(s["htlh"], H.T @ L @ H) < 1e-10
        # p > 2: L^2 H persisted on the workers, its halo rows exchanged between them
        s = _stats(X, y, w, labels, (17, 60, 33, 40), layer, power=5)
        assert _rel(s["htlh"], H.T @ np.linalg.matrix_power(L, 5) @ H) < 1e-10

    if n_workers == 2:
        assert len(dask_client.scheduler_info()["workers"]) == 2
        check()
    else:
        with (
            LocalCluster(
                n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster, set_as_default=False) as c1,
        ):
            with c1.as_current():
                import dask

                with dask.config.set(scheduler=c1.get):
                    check()


def test_locality_ordered_graph_gives_the_same_sums(data):
    """Ordering rows by cell is internal: every reduction, weighted and labelled ones
    included, equals the dense product in the input order."""
    X, y, w, labels = data
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    Xd = da.from_array(X, chunks=((17, 60, 33, 40), 6))
    graph = knn_graph(Xd, 5, backend="exact", order=True, random_state=0)
    assert graph.order is not None
    s = hidden_stats(
        HiddenFeatures(Xd, layer, cache=True),
        ("hth", "hty", "htf", "htlh"),
        Y=da.from_array(y, chunks=((17, 60, 33, 40), 2)),
        sample_weight=da.from_array(w, chunks=((17, 60, 33, 40),)),
        labels=da.from_array(labels, chunks=((17, 60, 33, 40),)),
        n_labels=4,
        graph=graph,
    )
    H = hidden(X, layer)
    F = np.zeros((150, 4))
    F[labels >= 0, labels[labels >= 0]] = 1
    assert _rel(s["hth"], H.T @ (w[:, None] * H)) < 1e-10
    assert _rel(s["hty"], H.T @ (w[:, None] * y)) < 1e-10
    assert _rel(s["htf"], H.T @ F) < 1e-10
    assert _rel(s["htlh"], H.T @ knn_laplacian(X, 5) @ H) < 1e-10


def test_graph_built_on_another_array_is_rejected(data):
    X = data[0]
    layer = RandomHiddenLayer.draw(6, 10, "sigmoid", 0)
    Xd = da.from_array(X, chunks=(50, 6))
    graph = knn_graph(Xd * 2.0, 5, backend="exact")
    with pytest.raises(ValueError, match="graph was built on a different array"):
        hidden_stats(HiddenFeatures(Xd, layer, cache=False), ("htlh",), graph=graph)


def test_task_groups_are_consecutive_and_bounded():
    from elmscale.gram import _task_groups

    chunks = (10,) * 40
    with config_context(plan_workers=1):  # sized for one worker thread of a cluster
        groups = _task_groups(chunks, n_hidden=100, itemsize=8, group_bytes=3 * 10 * 100 * 8)
        assert [b for g in groups for b in g] == list(range(40))
        assert max(len(g) for g in groups) == 3
        # at least 8 tasks whatever the byte budget
        assert len(_task_groups(chunks, 100, 8, 10**12)) >= 8
    assert _task_groups((10, 10), 100, 8, 1) == [[0], [1]]


@pytest.mark.parametrize("power", [1, 2])
@pytest.mark.parametrize("order", [False, True])
def test_grouped_tasks_equal_dense(data, order, power):
    """Several chunks per task (30 chunks of 5 rows, 3 per task): every term, the graph
    term's edges across group borders included (half of them for p = 1, all for the rows of
    L H with p = 2), equals the dense products."""
    X, y, w, labels = data
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    chunks = (5,) * 30
    Xd = da.from_array(X, chunks=(chunks, 6))
    graph = knn_graph(Xd, 5, backend="exact", normalized=True, order=order, random_state=0)
    s = hidden_stats(
        HiddenFeatures(Xd, layer, cache=False),
        ("count", "colsum", "hth", "hty", "htf", "sizes", "htlh"),
        Y=da.from_array(y, chunks=(chunks, 2)),
        sample_weight=da.from_array(w, chunks=chunks),
        labels=da.from_array(labels, chunks=chunks),
        n_labels=4,
        graph=graph,
        laplacian_power=power,
        group_bytes=3 * 5 * 40 * 8,
    )
    L = knn_laplacian(X, 5, normalized=True)
    _assert_terms_equal_dense(s, data, layer, np.linalg.matrix_power(L, power))


def test_task_groups_follow_the_workers_memory():
    """On a cluster a task's rows of H take at most 1/16 of a worker thread's memory_limit;
    below that, 4 x chunk_bytes."""
    from distributed import Client, LocalCluster

    from elmscale.utils._dask import default_group_bytes

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            memory_limit="800MB",
            dashboard_address=None,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
        client.as_current(),
    ):
        assert default_group_bytes() == 800 * 10**6 // 2 // 16
        with config_context(chunk_bytes=2**20):
            assert default_group_bytes() == 4 * 2**20


def test_task_keys_name_their_stage(data):
    """The dashboard groups tasks by key prefix: the Gram pass's tasks say what they are."""
    from dask.utils import key_split

    X = data[0]
    layer = RandomHiddenLayer.draw(6, 10, "sigmoid", 0)
    Xd = da.from_array(X, chunks=(50, 6))
    graph = knn_graph(Xd, 5, backend="exact", order=False)
    total = hidden_stats(
        HiddenFeatures(Xd, layer, cache=False), ("hth", "htlh"), graph=graph, compute=False
    )
    names = {key_split(k) for k in dict(total.__dask_graph__())}
    assert {
        "elmscale-gram-block",
        "elmscale-gram-halo-unpack",  # in one process each task takes its own halo rows
        "elmscale-gram-pattern",
        "elmscale-gram-sum",
        "elmscale-gram-finish",
    } <= names


def test_float32_graph_term_close_to_float64(data):
    """The half-edge graph term in float32 blocks (summed in float64) stays within 1e-5
    relative of the dense float64 H^T L H."""
    X = data[0]
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    with config_context(compute_dtype="float32"):
        Xd = da.from_array(X.astype(np.float32), chunks=(40, 6))
        graph = knn_graph(Xd, 5, backend="exact", normalized=True, order=False)
        s = hidden_stats(HiddenFeatures(Xd, layer, cache=False), ("htlh",), graph=graph)
    H = hidden(X, layer)
    assert _rel(s["htlh"], H.T @ knn_laplacian(X, 5, normalized=True) @ H) < 1e-5


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_weighted_sums_skip_rows_of_weight_zero(data, dtype):
    """SS-ELM's C: weight 0 on the unlabelled rows (here 9 of 10, and every row of one chunk).
    The weighted sums, computed from the rows of non-zero weight only, equal the dense
    products over all rows to rounding."""
    X, y, w, _ = data
    w = np.where(np.arange(len(w)) % 10 == 3, w, 0.0)
    w[60:90] = 0.0
    chunks = (60, 30, 60)
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    Xd = da.from_array(X.astype(dtype), chunks=(chunks, 6))
    s = hidden_stats(
        HiddenFeatures(Xd, layer, cache=False),
        ("count", "hth", "hty"),
        Y=da.from_array(y, chunks=(chunks, 2)),
        sample_weight=da.from_array(w, chunks=chunks),
    )
    H = hidden(X.astype(dtype), layer).astype(np.float64)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    assert s["count"] == pytest.approx(w.sum(), rel=1e-14)
    assert _rel(s["hth"], H.T @ (w[:, None] * H)) < tol
    assert _rel(s["hty"], H.T @ (w[:, None] * y)) < tol


@pytest.mark.parametrize("max_share", [0.5, 0.0])  # corrected from the changed rows; one pass
def test_matched_label_sums_equal_the_dense_sums_of_the_new_labels(data, max_share):
    """``H^T F`` and the sizes of relabelled rows (a renaming of the clusters plus a few moved
    rows) equal the dense sums, whether corrected from the changed rows or summed in one
    pass, with the caller's name match or its own; the match finds the renaming."""
    from elmscale.gram import contingency, matched_label_sums, name_match

    X, _, _, _ = data
    rng = np.random.RandomState(1)
    before = rng.randint(0, 4, 150)
    after = np.array([3, 0, 1, 2])[before]  # renamed ...
    after[:9] = rng.randint(0, 4, 9)  # ... and a few rows moved
    layer = RandomHiddenLayer.draw(6, 40, "sigmoid", 0)
    features = HiddenFeatures(da.from_array(X, chunks=(40, 6)), layer, cache=False)
    H = hidden(X, layer)
    F_before, F_after = np.eye(4)[before], np.eye(4)[after]
    b, a = (da.from_array(v, chunks=40) for v in (before, after))
    table = np.asarray(contingency(b, a, 4).compute()).reshape(4, 4)
    np.testing.assert_array_equal(table, F_before.T @ F_after)
    names, changed = name_match(table)
    np.testing.assert_array_equal(names, [3, 0, 1, 2])
    assert changed == int((np.array([3, 0, 1, 2])[before] != after).sum())
    for match in (None, (names, changed)):
        htf, sizes, n_built = matched_label_sums(
            features, b, H.T @ F_before, a, table, match=match, max_share=max_share
        )
        assert _rel(htf, H.T @ F_after) < 1e-10
        np.testing.assert_array_equal(sizes, F_after.sum(0))
        assert n_built == (changed if max_share else 150)
