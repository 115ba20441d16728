"""kNN backends and the chunked graph/Laplacian."""

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.neighbors import NearestNeighbors

from elmscale import available, get
from elmscale.exceptions import UnknownPluginError
from elmscale.graph import KNNGraph, knn_graph

from .._reference import knn_laplacian


def _brute(X, k):
    return NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X)


@pytest.mark.parametrize("chunks", [(200,), (64, 64, 72), (13, 100, 87)])
def test_exact_backend_equals_brute_force(rng, chunks):
    X = rng.randn(200, 4)
    idx, dist = get("graph", "exact")(da.from_array(X, chunks=(chunks, 4)), 7)
    assert idx.chunks[0] == chunks
    d_ref, i_ref = _brute(X, 7)
    np.testing.assert_allclose(dist.compute(), d_ref[:, 1:], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(idx.compute(), i_ref[:, 1:])


def test_exact_backend_never_returns_self_even_with_duplicates():
    X = np.repeat(np.arange(10.0)[:, None], 3, axis=0)  # every point three times
    idx, _ = get("graph", "exact")(da.from_array(X, chunks=(7, 1)), 4)
    idx = idx.compute()
    assert not (idx == np.arange(30)[:, None]).any()


@pytest.mark.slow
@pytest.mark.xdist_group("numba")  # one process compiles pynndescent and umap-learn once
def test_nndescent_recall_on_clustered_data(rng):
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(2000, n_features=10, centers=10, random_state=0)
    idx, _ = get("graph", "pynndescent")(da.from_array(X, chunks=(500, 10)), 10, random_state=0)
    idx = idx.compute()
    _, ref = _brute(X, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(idx, ref[:, 1:], strict=True)])
    assert recall >= 0.9
    assert not (idx == np.arange(2000)[:, None]).any()


@pytest.mark.parametrize("weights", ["binary", "heat", "fuzzy"])
@pytest.mark.parametrize("normalized", [False, True])
def test_laplacian_equals_dense(rng, weights, normalized):
    X = rng.randn(120, 3)
    g = knn_graph(
        da.from_array(X, chunks=(35, 3)), 6, backend="exact", weights=weights, normalized=normalized
    )
    L = g.laplacian().toarray()
    np.testing.assert_allclose(
        L, knn_laplacian(X, 6, weights=weights, normalized=normalized), atol=1e-12
    )
    np.testing.assert_allclose(L, L.T, atol=1e-14)
    if not normalized:
        np.testing.assert_allclose(L.sum(axis=1), 0, atol=1e-12)  # rows of D - W sum to zero


@pytest.mark.xdist_group("numba")  # one process compiles umap-learn once
def test_fuzzy_memberships_are_umap_learns(rng):
    """Each row's memberships are those of umap-learn's ``smooth_knn_dist`` for the same
    lists with the row itself first (its k counts the row): the nearest neighbour at a
    positive distance weighs 1, each row's weights sum to log2(k + 1), and a row's
    duplicates (distance 0) weigh 1."""
    from umap.umap_ import smooth_knn_dist

    from elmscale.graph._laplacian import fuzzy_memberships

    dist = np.sort(rng.rand(300, 10) * rng.rand(300, 1) * 10, axis=1)
    dist[:5, :2] = 0.0  # duplicates of the row
    with_self = np.hstack([np.zeros((300, 1)), dist]).astype(np.float32)
    sigma, rho = smooth_knn_dist(with_self, 11.0)
    expected = np.exp(-np.maximum(with_self[:, 1:] - rho[:, None], 0) / sigma[:, None])
    w = fuzzy_memberships(dist)
    np.testing.assert_allclose(w, expected, atol=1e-5)
    np.testing.assert_allclose(w.sum(axis=1), np.log2(11), atol=1e-4)
    assert (w[:5, :3] == 1).all() and (w[5:, 0] == 1).all()
    np.testing.assert_array_equal(w, fuzzy_memberships(dist[::-1])[::-1])  # row by row


def test_fuzzy_memberships_of_unfilled_lists_weigh_nothing():
    """Missing neighbours (infinite distances, as new rows with few candidates get) weigh 0
    and leave the others' weights as if the list were shorter by them."""
    from elmscale.graph._laplacian import fuzzy_memberships

    d = np.array([[0.5, 1.0, 2.0, np.inf], [0.0, 0.0, 0.0, 0.0]])
    w = fuzzy_memberships(d)
    assert w[0, 3] == 0 and w[0, 0] == 1 and 0 < w[0, 2] < w[0, 1] < 1
    np.testing.assert_array_equal(w[1], 1.0)


def test_halo_counts_only_cross_chunk_neighbours(rng):
    X = np.sort(rng.rand(100, 1), axis=0)  # sorted 1-d: neighbours are mostly in the chunk
    g = knn_graph(da.from_array(X, chunks=(50, 1)), 3, backend="exact")
    assert 0 < g.halo_size() <= 12
    assert g.halo_sources == [[1], [0]]


@pytest.mark.distributed
def test_halo_rows_cut_from_whole_chunks_equal_the_pieces_sent(rng, dask_client, monkeypatch):
    """Where a chunk's halo holds more than WHOLE_CHUNK_SHARE of a source chunk's rows, its
    exchange reads that whole chunk on the destination's worker and cuts the rows there:
    the same halo rows in the same order as the pieces each source cuts out, for every
    chunk (random 6-d data: every chunk's neighbours lie in every other chunk)."""
    from elmscale.graph import _exchange

    X = rng.randn(600, 6)
    g = knn_graph(da.from_array(X, chunks=(100, 6)), 8, backend="exact")
    monkeypatch.setattr(_exchange, "WHOLE_CHUNK_SHARE", np.inf)
    pieces = dask.compute(*g.halo_pieces())
    asked = [{s: int(n) for s, n in enumerate(row) if n} for row in g.halo_counts]

    def read_whole(share):
        return sum(len(w) for w in _exchange.whole_sources(asked, g.chunks, share))

    # a share at which some sources are read whole and some sent in pieces
    cut = next(x for x in np.linspace(0, 1, 41) if 0 < read_whole(x) < (g.halo_counts > 0).sum())
    monkeypatch.setattr(_exchange, "WHOLE_CHUNK_SHARE", cut)
    mixed = dask.compute(*g.halo_pieces())
    assert len(pieces) == len(mixed) == 6
    for a, b in zip(pieces, mixed, strict=True):
        assert len(a) == len(b) > 0
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    rows = np.concatenate([np.concatenate(p) for p in mixed])
    assert rows.shape == (int(g.halo_counts.sum()), 6)


def test_deferred_halo_pieces_are_taken_when_read_and_equal_the_pieces(rng, monkeypatch):
    """In one process a deferred exchange costs nothing until a task reads its pieces: the
    unpack tasks take no rows when the scheduler runs them, and the pieces read, as often as
    read, are those of the tuple exchange, in the same order."""
    from elmscale.graph import _container, _exchange

    X = rng.randn(400, 5)
    g = knn_graph(da.from_array(X, chunks=(100, 5)), 6, backend="exact")
    groups = [[0], [1, 2], [3]]
    needs = [g.group_pattern(group)[1] for group in groups]
    taken = []

    take_rows = _container._take_rows

    def counting(block, wanted, start, stop):
        taken.append((start, stop))
        return take_rows(block, wanted, start, stop)

    monkeypatch.setattr(_container, "_take_rows", counting)
    expected = dask.compute(*g.groups_halo(groups, needs))
    taken.clear()
    deferred = dask.compute(*g.groups_halo(groups, needs, deferred=True))
    assert taken == []
    assert all(isinstance(p, _exchange.PiecesOnRead) for p in deferred)
    for _ in range(2):
        for tuple_pieces, read_pieces in zip(expected, deferred, strict=True):
            read_pieces = list(read_pieces)
            assert len(read_pieces) == len(tuple_pieces) > 0
            for a, b in zip(tuple_pieces, read_pieces, strict=True):
                np.testing.assert_array_equal(a, b)
    assert len(taken) == 2 * sum(len(p) for p in expected)


@pytest.mark.distributed
def test_deferred_halo_pieces_travel_as_tuples_on_a_cluster(rng, dask_client):
    """On a cluster a deferred exchange gives the tuples it always gives: an object holding
    its sources would be moved or spilled with them."""
    X = rng.randn(400, 5)
    g = knn_graph(da.from_array(X, chunks=(100, 5)), 6, backend="exact")
    groups = [[0, 1], [2, 3]]
    needs = [g.group_pattern(group)[1] for group in groups]
    expected = dask.compute(*g.groups_halo(groups, needs))
    deferred = dask.compute(*g.groups_halo(groups, needs, deferred=True))
    for a, b in zip(expected, deferred, strict=True):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("backend", ["exact", "cells"])
def test_numpy_input_gives_the_graph_of_the_dask_array(rng, backend):
    """knn_graph takes what the estimators take: a NumPy array (or a DataFrame) gives the
    same KNNGraph, Laplacian and neighbour lists as the dask array of its rows."""
    X = rng.randn(300, 4)
    kwargs = dict(backend=backend, random_state=0, weights="heat")
    from_numpy = knn_graph(X, 6, **kwargs)
    from_dask = knn_graph(da.from_array(X, chunks=(100, 4)), 6, **kwargs)
    assert isinstance(from_numpy, KNNGraph) and from_numpy.X.shape == X.shape
    np.testing.assert_array_equal(from_numpy.indices.compute(), from_dask.indices.compute())
    np.testing.assert_allclose(from_numpy.distances.compute(), from_dask.distances.compute())
    np.testing.assert_allclose(
        from_numpy.laplacian().toarray(), from_dask.laplacian().toarray(), atol=1e-12
    )


def test_input_that_is_not_an_array_is_a_named_type_error(rng):
    with pytest.raises(TypeError, match="X must be array-like .* got str"):
        knn_graph("data.csv", 3)
    with pytest.raises(TypeError, match="X is a sparse matrix"):
        knn_graph(sp.csr_matrix(rng.randn(20, 2)), 3)


def test_graph_parameter_errors(rng):
    Xd = da.from_array(rng.randn(20, 2), chunks=(10, 2))
    with pytest.raises(ValueError, match=r"n_neighbors=\d+ must be in"):
        knn_graph(Xd, 20, backend="exact")
    with pytest.raises(ValueError, match="weights must be one of"):
        knn_graph(Xd, 3, backend="exact", weights="gauss")
    with pytest.raises(UnknownPluginError, match="available: cells, exact, pynndescent"):
        knn_graph(Xd, 3, backend="annoy")
    assert {"cells", "exact", "pynndescent"} <= set(available("graph"))


@pytest.mark.slow
def test_the_default_graph_searches_for_the_target_recall():
    """Above 10,000 rows knn_graph's default is the cell search for ``target_recall`` (0.98):
    the graph of ``CellSearch(n_probes="auto", n_refine="auto")`` with that target, its
    estimate reported and reached, and its recall against brute force close to it, higher
    than the fixed search's (``target_recall=None``, the estimators' ``backend="cells"``)
    on data whose cells cut many neighbourhoods."""
    from elmscale.graph import CellSearch

    X = np.random.default_rng(0).normal(size=(12_000, 30))  # cells cut most neighbourhoods
    Xd = da.from_array(X, chunks=(4_000, 30))
    _, ref = _brute(X, 10)
    sample = np.random.default_rng(1).choice(len(X), 1_000, replace=False)

    def recall(graph):
        idx = graph.indices.compute()[sample]
        pairs = zip(idx, ref[sample, 1:], strict=True)
        return np.mean([len(set(a) & set(b)) / 10 for a, b in pairs])

    default = knn_graph(Xd, 10, random_state=0)
    explicit = CellSearch(n_probes="auto", n_refine="auto", target_recall=0.98)
    same = knn_graph(Xd, 10, backend=explicit, random_state=0)
    np.testing.assert_array_equal(default.indices.compute(), same.indices.compute())
    fixed = knn_graph(Xd, 10, random_state=0, target_recall=None)
    cells = knn_graph(Xd, 10, backend="cells", random_state=0)
    np.testing.assert_array_equal(fixed.indices.compute(), cells.indices.compute())
    assert default.recall_estimate_ >= 0.98
    assert recall(default) >= 0.96
    assert recall(default) > recall(fixed) + 0.2
    lower = knn_graph(Xd, 10, random_state=0, target_recall=0.8)
    assert 0.8 <= lower.recall_estimate_ < default.recall_estimate_


@pytest.mark.parametrize("bad", [0, 1.5, -0.1, "high", True])
def test_target_recall_must_be_in_0_1(rng, bad):
    Xd = da.from_array(rng.randn(20, 2), chunks=(10, 2))
    with pytest.raises(ValueError, match=r"target_recall must be a float in \(0, 1\] or None"):
        knn_graph(Xd, 3, target_recall=bad)


def test_locality_order_is_a_permutation_that_shrinks_the_halo():
    from sklearn.datasets import make_blobs

    from elmscale.graph._ordering import locality_order

    X, _ = make_blobs(3000, n_features=3, centers=6, random_state=0)
    Xd = da.from_array(X, chunks=(500, 3))
    order = locality_order(Xd, random_state=0)
    Xo = order.apply(Xd).compute()
    assert Xo.shape == X.shape
    np.testing.assert_array_equal(np.sort(Xo, axis=0), np.sort(X, axis=0))
    ids = order.apply(da.from_array(np.arange(3000), chunks=500)).compute()
    np.testing.assert_array_equal(np.sort(ids), np.arange(3000))  # each row exactly once
    np.testing.assert_array_equal(Xo, X[ids])
    plain = knn_graph(Xd, 10, backend="exact", order=False)
    ordered = knn_graph(Xd, 10, backend="exact", order=True)
    assert ordered.halo_size() < 0.25 * plain.halo_size()


@pytest.mark.parametrize("n_cells, chunks", [(1, 700), (37, 500), (300, (1, 999, 3000, 3000))])
def test_order_by_cells_is_a_stable_sort_by_cell_for_any_chunking(n_cells, chunks):
    """Rows land where a stable NumPy sort by cell puts them, each destination chunk lists
    exactly the source chunks that send to it, and the inverse order brings rows back."""
    from elmscale.graph._ordering import order_by_cells

    cells = np.random.default_rng(1).integers(0, n_cells, 7000)
    cells_d = da.from_array(cells, chunks=chunks)
    order, sizes = order_by_cells(cells_d, n_cells)
    np.testing.assert_array_equal(sizes, np.bincount(cells, minlength=n_cells))
    ids = order.apply(da.arange(7000, chunks=chunks)).compute()
    np.testing.assert_array_equal(ids, np.argsort(cells, kind="stable"))
    starts = np.concatenate([[0], np.cumsum(cells_d.chunks[0])])
    source_of = np.searchsorted(starts, ids, side="right") - 1  # each ordered row's source
    for b in range(len(starts) - 1):
        expected = np.unique(source_of[starts[b] : starts[b + 1]]).tolist()
        assert order.pairs[b] == expected
    back = order.inverse(order.apply(da.arange(7000, chunks=chunks)))
    np.testing.assert_array_equal(back.apply(da.from_array(ids, chunks=chunks)), np.arange(7000))


def test_graph_chunks_join_consecutive_chunks_within_bounds():
    from elmscale.graph._chunking import GRAPH_CHUNK_ROWS, MIN_GRAPH_CHUNKS, graph_chunks
    from elmscale.graph._ordering import _refines

    for chunks in [(1000,) * 40, (16_667,) * 60, (7000,) * 10, (70_000, 5, 3), (1,) * 9]:
        merged = graph_chunks(chunks)
        assert sum(merged) == sum(chunks) and _refines(chunks, merged)
        n = sum(chunks)
        target = min(max(GRAPH_CHUNK_ROWS, -(-n // 64)), max(1, n // MIN_GRAPH_CHUNKS))
        assert all(m >= target for m in merged[:-1])
        assert len(merged) >= min(len(chunks), MIN_GRAPH_CHUNKS) // 2  # still parallel
    assert graph_chunks((16_667,) * 60) == (66_668,) * 15  # 1M rows: four chunks per run


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("order", [False, True])
def test_graph_built_on_joined_chunks_is_split_back_to_x_chunks(rng, order, normalized):
    """Small chunks are joined for the build and the blocks split back afterwards: the graph
    keeps X's chunks, each block's halo is the rows outside its own chunk, and the Laplacian
    equals the one built on a single chunk, in any chunking."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(2400, n_features=4, centers=5, random_state=1)
    ref = knn_graph(
        da.from_array(X, chunks=(2400, 4)),
        8,
        backend="cells",
        order=order,
        normalized=normalized,
        random_state=0,
    )
    for rows in (100, 150, 700):
        Xd = da.from_array(X, chunks=(rows, 4))
        g = knn_graph(Xd, 8, backend="cells", order=order, normalized=normalized, random_state=0)
        assert g.chunks == Xd.chunks[0] == g.X.chunks[0] == g.indices.chunks[0]
        assert abs(g.laplacian() - ref.laplacian()).max() == 0.0
        starts = g.starts
        for b, blk in enumerate(dask.compute(*g.blocks)):
            assert (blk.start, blk.stop) == (starts[b], starts[b + 1])
            assert ((blk.halo < blk.start) | (blk.halo >= blk.stop)).all()
            assert blk.W.shape == (blk.stop - blk.start, blk.stop - blk.start + len(blk.halo))
        if order:  # the order takes and returns arrays in X's chunks
            ids = g.order.apply(da.arange(2400, chunks=rows))
            assert ids.chunks == Xd.chunks[:1]
            np.testing.assert_array_equal(g.X.compute(), X[ids.compute()])
            back = g.order.inverse(ids).apply(ids)
            np.testing.assert_array_equal(back.compute(), np.arange(2400))


@pytest.mark.parametrize("normalized", [False, True])
def test_graph_blocks_are_persisted_under_unique_graph_keys(rng, normalized):
    """Every persisted block is keyed ``elmscale-graph-<stage>-...`` (progress files it under
    the graph), and a second build of the same graph gets keys of its own. Chunks of 20 rows
    are merged for the build and split back, so every stage runs."""
    Xd = da.from_array(rng.randn(300, 3), chunks=(20, 3))
    first = knn_graph(Xd, 5, backend="exact", normalized=normalized)
    second = knn_graph(Xd, 5, backend="exact", normalized=normalized)
    keys = [blk.key for blk in first.blocks]
    assert len(keys) == len(Xd.chunks[0]) and len(set(keys)) == len(keys)
    assert all(k.startswith("elmscale-graph-split-") for k in keys)
    assert not set(keys) & {blk.key for blk in second.blocks}
    np.testing.assert_array_equal(first.laplacian().toarray(), second.laplacian().toarray())


def test_the_constructor_makes_a_complete_graph(rng):
    Xd = da.from_array(rng.randn(200, 3), chunks=(50, 3))
    built = knn_graph(Xd, 5, backend="exact", weights="heat")
    again = KNNGraph(
        built.blocks,
        built.X,
        n_neighbors=5,
        weights="heat",
        normalized=False,
        sigma=built.sigma,
    )
    np.testing.assert_array_equal(again.halo_counts, built.halo_counts)
    assert again.halo_sources == built.halo_sources and again.chunks == built.chunks
    assert again.built_on(built.X) and not again.built_on(Xd + 1)
    assert again.order is None and again.in_graph_order(Xd) is Xd
    np.testing.assert_array_equal(again.laplacian().toarray(), built.laplacian().toarray())


def test_builtin_backends_table_is_deprecated_for_the_registry():
    import elmscale
    import elmscale.graph

    with pytest.warns(FutureWarning, match="BUILTIN_BACKENDS is deprecated"):
        table = elmscale.graph.BUILTIN_BACKENDS
    assert table == {name: elmscale.get("graph", name) for name in table}
    assert set(table) == {"cells", "exact", "pynndescent"}


def test_scaling_is_passed_as_data_and_searches_the_scaled_rows(rng):
    """``scaling=(offset, scale)`` searches ``(X - offset) / scale`` as the estimators' input
    scaling does, and gives the graph a ``transform`` doing the same would; X stays raw."""
    X = rng.randn(150, 3) * [1.0, 10.0, 100.0]
    offset, scale = X.min(axis=0), X.max(axis=0) - X.min(axis=0)
    Xd = da.from_array(X, chunks=(50, 3))
    g = knn_graph(Xd, 5, backend="exact", scaling=(offset, scale))
    np.testing.assert_allclose(
        g.laplacian().toarray(), knn_laplacian((X - offset) / scale, 5), atol=1e-12
    )
    by_transform = knn_graph(Xd, 5, backend="exact", transform=lambda A: (A - offset) / scale)
    assert (g.laplacian() != by_transform.laplacian()).nnz == 0
    np.testing.assert_array_equal(g.X.compute(), X)
    with pytest.raises(ValueError, match="transform or scaling, not both"):
        knn_graph(Xd, 5, backend="exact", scaling=(offset, scale), transform=lambda A: A)


def test_a_graph_blocks_size_is_what_it_holds(rng):
    """dask's sizeof of a block counts its CSR arrays, halo, degrees and the split copies it
    keeps, so a worker's managed memory includes the graph."""
    from dask.sizeof import sizeof

    g = knn_graph(da.from_array(rng.randn(300, 4), chunks=(100, 4)), 6, backend="exact")
    block = dask.compute(g.blocks[1])[0]
    arrays = [block.W.data, block.W.indices, block.W.indptr, block.halo, block.degree]
    held = sum(a.nbytes for a in arrays) + block.diagonal.nbytes
    assert sizeof(block) == held
    local, halo = block.split(np.float32)
    split = sum(a.nbytes for m in (local, halo) for a in (m.data, m.indices, m.indptr))
    assert sizeof(block) == held + split


@pytest.mark.distributed
def test_an_estimators_graph_holds_no_lists_on_the_workers(rng, dask_client, monkeypatch):
    """The estimators read the weighted blocks only: when the Gram pass starts, the directed
    lists the graph was assembled from hold no key on the cluster (with the lists kept, as
    ``knn_graph`` gives them, they do), and the fit is the same."""
    import time

    import elmscale.algorithms._uselm as uselm
    import elmscale.mixins
    from elmscale import USELM
    from elmscale.graph import KNNGraph

    lists, held = [], []

    def recording_graph(*args, **kwargs):
        graph = knn_graph(*args, **kwargs)
        lists.append({graph.indices.name, graph.distances.name})
        return graph

    def held_names():
        keys = [k for ks in dask_client.has_what().values() for k in ks]
        return {k[0] if isinstance(k, tuple) else k for k in keys}

    def recording_gram(*args, **kwargs):
        # the client releases keys asynchronously: wait for it, in the fit that releases them
        deadline = time.monotonic() + (10 if len(lists) == 1 else 0)
        while lists[-1] & held_names() and time.monotonic() < deadline:
            time.sleep(0.05)
        held.append(held_names())
        return hidden_stats(*args, **kwargs)

    hidden_stats = uselm.hidden_stats
    monkeypatch.setattr(elmscale.mixins, "knn_graph", recording_graph)
    monkeypatch.setattr(uselm, "hidden_stats", recording_gram)
    X = da.from_array(rng.randn(3000, 5), chunks=(1000, 5))
    params = dict(n_clusters=3, n_hidden=40, smoothing=0, random_state=0)
    released = USELM(**params).fit(X)
    assert lists[0] and not lists[0] & held[0]
    monkeypatch.setattr(KNNGraph, "release_lists", lambda graph: graph)
    kept = USELM(**params).fit(X)
    assert lists[1] <= held[1]
    np.testing.assert_array_equal(released.labels_.compute(), kept.labels_.compute())
