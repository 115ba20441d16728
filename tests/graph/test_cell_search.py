"""The distributed kNN backend: recall, determinism, bounded tasks, nothing N-sized on the
client; and the chunking-independent tie-breaking every backend relies on."""

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.linalg
from dask.utils import key_split
from sklearn.datasets import load_digits, make_blobs
from sklearn.neighbors import NearestNeighbors

import elmscale
from elmscale import get
from elmscale.graph import CellSearch, knn_graph
from elmscale.graph._cells import BRANCHING, fit_cells
from elmscale.graph._select import block_topk

from ..test_no_large_compute import (  # noqa: F401  (fixture)
    max_rows,
    no_large_compute,
)


def _recall(idx, X, k):
    _, ref = NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X)
    return np.mean([len(set(a) & set(b)) / k for a, b in zip(idx, ref[:, 1:], strict=True)])


@pytest.fixture(scope="module")
def clustered():
    """3,000 points in 5-d, 12 Gaussian blobs: low-dimensional clustered data."""
    X, _ = make_blobs(3000, n_features=5, centers=12, random_state=0)
    return X


@pytest.mark.parametrize("block_values", [None, 64])
def test_the_recall_samples_exact_neighbours_equal_a_dense_search(rng, monkeypatch, block_values):
    """The recall estimate's exact neighbours of the sampled rows are those of a dense
    search, ties by position, each row not its own; also when the few queries meet the rows
    in slices (of 4 k = 40 rows with ``block_values=64``) merged by (distance, index)."""
    from elmscale.graph import _backends
    from elmscale.graph._local_join import exact_sample_neighbours

    if block_values:
        monkeypatch.setattr(_backends, "BLOCK_VALUES", block_values)
    X = np.round(rng.randn(3000, 12), 1).astype(np.float32)  # rounded: many equal distances
    X[1500:1510] = X[7]  # exact duplicates of a sampled row
    rows = np.array([0, 7, 8, 999, 1505, 2999])
    got = exact_sample_neighbours(da.from_array(X, chunks=700), rows, 10)
    X64 = X.astype(np.float64)
    for row, found in zip(rows, got, strict=True):
        d2 = ((X64 - X64[row]) ** 2).sum(axis=1)
        d2[row] = np.inf
        want = np.lexsort((np.arange(len(X)), d2))[:10]
        np.testing.assert_array_equal(found, want)


def test_recall_against_exact_on_clustered_data(clustered):
    backend = CellSearch(rows_per_cell=200, n_probes=4)
    idx, dist = backend(da.from_array(clustered, chunks=(700, 5)), 10, random_state=0)
    idx, dist = idx.compute(), dist.compute()
    assert _recall(idx, clustered, 10) >= 0.99
    assert not (idx == np.arange(len(clustered))[:, None]).any()
    assert (np.diff(dist, axis=1) >= 0).all()
    got = np.sqrt(((clustered[:, None, :] - clustered[idx]) ** 2).sum(-1))
    np.testing.assert_allclose(dist, got, rtol=1e-12)


@pytest.mark.parametrize("n_probes", [1, 3])
def test_one_cell_is_an_exact_search(clustered, n_probes):
    """All rows in one cell: the cell search must equal the exact backend, bit for bit (one
    probe exercises the own-cell-only path)."""
    Xd = da.from_array(clustered, chunks=(700, 5))
    got = dask.compute(*CellSearch(rows_per_cell=5000, n_probes=n_probes)(Xd, 7, random_state=0))
    ref = dask.compute(*get("graph", "exact")(Xd, 7, random_state=0))
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-12)


def _cell_graph(X, chunks, **kw):
    idx, dist = CellSearch(rows_per_cell=150, n_probes=3)(
        da.from_array(X, chunks=(chunks, X.shape[1])), 10, random_state=3, **kw
    )
    return dask.compute(idx, dist)


@pytest.mark.parametrize("chunks", [3000, 1000, 777])
def test_graph_is_the_same_for_any_chunking(clustered, chunks):
    ref = _cell_graph(clustered, 3000)
    got = _cell_graph(clustered, chunks)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


_ONE_WORKER = """
import sys
import dask.array as da, numpy as np
from distributed import Client, LocalCluster
from sklearn.datasets import make_blobs
from elmscale.graph import CellSearch

if __name__ == "__main__":
    X, _ = make_blobs(3000, n_features=5, centers=12, random_state=0)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        idx, dist = CellSearch(rows_per_cell=150, n_probes=3)(
            da.from_array(X, chunks=(600, 5)), 10, random_state=3)
        np.savez(sys.argv[1], idx=idx.compute(), dist=dist.compute())
"""


@pytest.mark.slow
@pytest.mark.distributed
def test_graph_is_the_same_on_one_and_two_worker_processes(clustered, dask_client, tmp_path):
    import subprocess
    import sys

    ref = _cell_graph(clustered, 1000)
    two = _cell_graph(clustered, 777)  # the session's 2-worker cluster
    # one worker process, on a cluster started by a process of its own, so that the two
    # clusters share no client, scheduler or cached collection
    script = tmp_path / "one_worker.py"
    script.write_text(_ONE_WORKER)
    subprocess.run(
        [sys.executable, str(script), str(tmp_path / "one.npz")], check=True, timeout=300
    )
    one = np.load(tmp_path / "one.npz")
    for got in ((one["idx"], one["dist"]), two):
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])


def test_knn_graph_brings_back_no_n_sized_array(no_large_compute):  # noqa: F811
    N = 30_000
    X, _ = make_blobs(N, n_features=3, centers=8, random_state=0)
    g = knn_graph(da.from_array(X, chunks=(5_000, 3)), 5, backend="cells", random_state=0)
    assert g.order is not None and g.halo_size() < N
    assert max_rows(no_large_compute) < N / 4


def test_auto_takes_exact_up_to_ten_thousand_rows_and_cells_above():
    from elmscale.graph import resolve_backend

    assert resolve_backend("auto", 10_000) == "exact"
    assert resolve_backend("auto", 10_001) == "cells"
    assert resolve_backend("pynndescent", 10) == "pynndescent"
    assert isinstance(get("graph", "cells"), CellSearch)


def test_cell_order_shrinks_the_halo():
    X, _ = make_blobs(24_000, n_features=4, centers=20, random_state=0)
    Xd = da.from_array(X, chunks=(3000, 4))
    plain = knn_graph(Xd, 10, backend="cells", order=False, random_state=0)
    ordered = knn_graph(Xd, 10, backend="cells", order=True, random_state=0)
    assert ordered.halo_size() < 0.2 * plain.halo_size()
    # the same directed lists, in the ordered rows
    ids = ordered.order.apply(da.arange(len(X), chunks=3000)).compute()
    idx_plain = plain.indices.compute()
    idx_ordered = ordered.indices.compute()
    np.testing.assert_array_equal(ids[idx_ordered], idx_plain[ids])


def test_cells_are_balanced_and_numbered_depth_first():
    X, _ = make_blobs(8000, n_features=3, centers=5, random_state=0)
    centers = fit_cells(X, 100, seed=0)
    sizes = np.bincount(np.argmin(((X[:, None] - centers[None]) ** 2).sum(-1), axis=1))
    assert 60 <= len(centers) <= 160
    assert sizes.max() <= 4 * 100


@pytest.mark.distributed
def test_cells_fitted_on_the_workers_equal_the_tree_of_the_same_sample(dask_client):
    """The sample is gathered, split and its subtrees fitted by tasks on the workers (one per
    child of the root); the centres equal fit_cells of the same sample, for a root that
    splits and for one that is a leaf."""
    from distributed import get_task_stream

    from elmscale.graph._cells import fit_cells_on_workers, sample_index

    X, _ = make_blobs(12_000, n_features=4, centers=6, random_state=1)
    Xd = da.from_array(X, chunks=(2500, 4)).persist()
    for n_cells in (60, 1):
        idx = sample_index(X.shape, n_cells, 3)
        with get_task_stream(client=dask_client) as stream:
            centers, n_sample = fit_cells_on_workers(Xd, n_cells, 3)
        assert n_sample == len(idx)
        np.testing.assert_array_equal(centers, fit_cells(X[idx], len(idx) / n_cells, 3))
        names = [key_split(t["key"]) for t in stream.data]
        assert names.count("elmscale-graph-cells-subtree") == BRANCHING
    assert len(centers) == 1


def test_the_assignments_tasks_do_not_carry_the_centres(monkeypatch):
    """The centres and the groups of cells reach the assignment's tasks as one key each:
    no task's spec holds a copy of them, however many cells and chunks."""
    import cloudpickle

    import elmscale.graph._cells as cells

    monkeypatch.setattr(cells, "FLAT_MAX_CELLS", 10)
    X, _ = make_blobs(8_000, n_features=50, centers=6, random_state=1)
    centers = X[::4].copy()  # 2,000 cells: 800 kB, their 45 groups' centres 18 kB
    probes = cells.assign_cells(da.from_array(X, chunks=(500, 50)), centers, 3)
    graph = dict(probes.__dask_graph__())
    specs = [len(cloudpickle.dumps(v)) for k, v in graph.items() if "assign" in str(k)]
    assert len(specs) == 16 and max(specs) < 10_000


def test_backend_parameter_errors():
    with pytest.raises(ValueError, match="rows_per_cell must be an int >= 1"):
        CellSearch(rows_per_cell=0)
    with pytest.raises(ValueError, match="n_probes must be an int >= 1"):
        CellSearch(n_probes=1.5)
    with pytest.raises(ValueError, match="n_refine must be an int >= 0"):
        CellSearch(n_refine=True)
    with pytest.raises(ValueError, match="n_refine must be an int >= 0"):
        CellSearch(n_refine="always")
    with pytest.raises(ValueError, match=r"target_recall must be a float in \(0, 1\]"):
        CellSearch(target_recall=1.5)
    with pytest.raises(ValueError, match="recall_sample must be an int >= 0"):
        CellSearch(recall_sample=-1)
    with pytest.raises(ValueError, match="n_refine='auto' needs recall_sample > 0"):
        CellSearch(n_refine="auto", recall_sample=0)
    with pytest.raises(ValueError, match="n_probes must be an int >= 1 or \"auto\", got 'all'"):
        CellSearch(n_probes="all")
    with pytest.raises(ValueError, match="n_probes='auto' needs recall_sample > 0"):
        CellSearch(n_probes="auto", recall_sample=0)
    Xd = da.from_array(np.zeros((5, 2)), chunks=(5, 2))
    with pytest.raises(ValueError, match=r"n_neighbors=\d+ must be in"):
        CellSearch()(Xd, 5)


# -- ties ----------------------------------------------------------------------------------
def test_tied_distances_are_ranked_by_global_index():
    X = np.repeat(np.arange(6.0)[:, None], 4, axis=0)  # every value four times
    ids, d2 = block_topk(X, np.arange(24), X, np.arange(24), 5)
    # row 0 (value 0): the other three zeros first, then the four ones, lowest index first
    np.testing.assert_array_equal(ids[0], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(d2[0], [0, 0, 0, 1, 1])


@pytest.mark.parametrize("backend", ["exact", "cells"])
def test_digits_graph_is_the_same_for_any_chunking(backend):
    """scikit-learn's digits: integer-valued, many exactly tied distances; also the same
    graph with the selection compiled or on the NumPy path."""
    X = load_digits().data
    graphs = []
    for c, compiled in ((250, False), (250, True), (600, True), (1797, False)):
        with elmscale.config_context(compiled=compiled):
            graphs.append(
                knn_graph(
                    da.from_array(X, chunks=(c, 64)),
                    10,
                    backend=backend,
                    order=False,
                    random_state=0,
                )
            )
    ref = graphs[0].laplacian().toarray()
    for g in graphs[1:]:
        np.testing.assert_array_equal(g.laplacian().toarray(), ref)


def test_uselm_on_digits_is_the_same_for_any_chunking():
    X = load_digits().data
    fits = [
        elmscale.USELM(
            n_clusters=10, n_hidden=200, n_components=9, lam=0.1, graph="exact", random_state=0
        ).fit(da.from_array(X, chunks=(c, 64)))
        for c in (250, 600, 1797)
    ]
    emb = [np.asarray(f.embedding_.compute()) for f in fits]
    labels = [np.asarray(f.labels_.compute()) for f in fits]
    for e, lab in zip(emb[1:], labels[1:], strict=True):
        # the graph filter's steps run in float32; its sums follow the chunking
        assert np.sin(scipy.linalg.subspace_angles(emb[0], e)).max() < 1e-6
        np.testing.assert_array_equal(lab, labels[0])


def test_refinement_only_improves_and_stays_chunking_independent():
    """The local join on data of high intrinsic dimension, where cells cut many
    neighbourhoods: recall rises with each round, every distance is the true one, and the
    lists do not depend on the chunking."""
    X = np.random.RandomState(0).randn(3000, 20)
    recalls = []
    for n_refine in (0, 1, 2):
        graphs = [
            CellSearch(rows_per_cell=150, n_probes=2, n_refine=n_refine)(
                da.from_array(X, chunks=(c, 20)), 10, random_state=0
            )
            for c in (3000, 700)
        ]
        (idx, dist), (idx2, dist2) = (dask.compute(*g) for g in graphs)
        np.testing.assert_array_equal(idx, idx2)
        np.testing.assert_array_equal(dist, dist2)
        np.testing.assert_allclose(dist, np.sqrt(((X[:, None] - X[idx]) ** 2).sum(-1)), rtol=1e-12)
        assert not (idx == np.arange(len(X))[:, None]).any()
        assert (np.diff(dist, axis=1) >= 0).all()
        recalls.append(_recall(idx, X, 10))
    assert recalls[1] > recalls[0] + 0.1
    assert recalls[2] > recalls[1]


@pytest.fixture(scope="module")
def hard_mixture():
    """20,000 points of a 30-d iid Gaussian mixture (10 components, unit variance around
    centres of spread 0.4): high intrinsic dimension, where cells alone find few
    neighbours."""
    rng = np.random.RandomState(0)
    centres = rng.normal(0.0, 0.4, size=(10, 30))
    return centres[np.arange(20_000) % 10] + rng.standard_normal((20_000, 30))


@pytest.mark.slow
@pytest.mark.distributed
def test_auto_refinement_restores_recall_the_same_on_any_chunking_and_cluster(
    hard_mixture, dask_client
):
    """The measured rule on a hard set: the cell search alone finds about 0.65 of the true
    neighbours and the measured rule refines until about 0.955 (measured on this set;
    thresholds leave a margin). The lists are the same on two chunkings, one of them built
    on the session's two worker processes, and the estimate tracks the measured recall."""
    X = hard_mixture
    cells_only = CellSearch(n_refine=0)
    base = cells_only(da.from_array(X, chunks=(20_000, 30)), 10, random_state=0)[0].compute()
    graphs, searches = [], []
    for chunks, scheduler in ((20_000, "sync"), (6_000, dask_client)):
        search = CellSearch(n_refine="auto")
        with dask.config.set(scheduler=scheduler):
            graphs.append(dask.compute(*search(da.from_array(X, chunks=(chunks, 30)), 10)))
        searches.append(search)
    np.testing.assert_array_equal(graphs[1][0], graphs[0][0])
    np.testing.assert_array_equal(graphs[1][1], graphs[0][1])
    recall = _recall(graphs[0][0], X, 10)
    assert _recall(base, X, 10) < 0.75
    assert recall > 0.93
    assert searches[0].n_refine_ == searches[1].n_refine_ >= 1
    assert searches[0].recall_estimate_ == searches[1].recall_estimate_
    assert abs(searches[0].recall_estimate_ - recall) < 0.02
    assert abs(cells_only.recall_estimate_ - _recall(base, X, 10)) < 0.03


def test_auto_refinement_stops_at_the_target(clustered):
    """Where the cells already find the neighbours the rule runs no round; a fixed count
    runs exactly that many and a zero sample skips the estimate."""
    Xd = da.from_array(clustered, chunks=(700, 5))
    search = CellSearch(rows_per_cell=200, n_probes=4, n_refine="auto")
    search(Xd, 10, random_state=0)
    assert search.n_refine_ == 0 and search.recall_estimate_ >= 0.95
    strict = CellSearch(rows_per_cell=200, n_probes=1, n_refine="auto", target_recall=1.0)
    strict(Xd, 10, random_state=0)
    assert 1 <= strict.n_refine_ <= 4
    fixed = CellSearch(rows_per_cell=200, n_probes=4, n_refine=1, recall_sample=0)
    fixed(Xd, 10, random_state=0)
    assert fixed.n_refine_ == 1 and fixed.recall_estimate_ is None


def test_two_step_assignment_equals_a_per_row_reference(monkeypatch):
    """Above FLAT_MAX_CELLS, with ``own_groups``, a row's candidate cells are those of its
    own GROUP_NEIGHBOURS nearest groups: the assignment equals the flat one of each row
    against exactly those cells (float64, one row at a time), for any chunking."""
    import elmscale.graph._cells as cells

    rng = np.random.default_rng(3)
    X = rng.standard_normal((3000, 24))  # high-dimensional: nearest groups are not neighbours
    centers = fit_cells(X, 60, seed=0)
    monkeypatch.setattr(cells, "FLAT_MAX_CELLS", 10)
    monkeypatch.setattr(cells, "GROUP_NEIGHBOURS", 3)
    groups = cells.cell_groups(centers)
    n_groups = len(groups.centers)
    assert n_groups >= 8
    got = [
        cells.assign_cells(da.from_array(X, chunks=(c, 24)), centers, 5, own_groups=True).compute()
        for c in (3000, 700)
    ]
    np.testing.assert_array_equal(got[0], got[1])
    for i in range(0, len(X), 7):
        d2 = ((groups.centers - X[i]) ** 2).sum(axis=1)
        near = np.sort(np.lexsort((np.arange(n_groups), d2))[: cells.GROUP_NEIGHBOURS])
        cand = np.concatenate([np.arange(groups.starts[h], groups.starts[h + 1]) for h in near])
        want = cand[cells._nearest_cells(X[i][None], centers[cand], 5, 8, None)[0]]
        np.testing.assert_array_equal(got[0][i], want)


def test_two_step_assignment_agrees_with_the_flat_one(monkeypatch):
    """On clustered data the two-step assignment finds the flat one's nearest cell for
    nearly every row."""
    import elmscale.graph._cells as cells

    X, _ = make_blobs(6000, n_features=5, centers=15, random_state=2)
    centers = fit_cells(X, 40, seed=0)
    Xd = da.from_array(X, chunks=(2000, 5))
    flat = cells.assign_cells(Xd, centers, 3).compute()
    monkeypatch.setattr(cells, "FLAT_MAX_CELLS", 10)
    grouped = cells.assign_cells(Xd, centers, 3).compute()
    assert np.mean(flat[:, 0] == grouped[:, 0]) > 0.99


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(("chunks", "budget"), [(300, 2**30), (70, 2**30), (70, 3000), (300, 1)])
def test_one_join_round_equals_a_dense_reference(chunks, budget, compiled):
    """A round of the local join keeps, per row, the best of its list and of every row that
    shares a hub set with it, one of the two new there: the same as a dense computation of
    those pairs, on any chunking and any memory budget (a small one joins each chunk's hub
    sets in several waves, the smallest one hub set a wave; the float32 product only
    filters), with the compiled kernels and on the NumPy path."""
    from elmscale.graph._local_join import _hub_sets, local_join
    from elmscale.graph._select import exact_sq_distances, topk_exact

    rng = np.random.RandomState(5)
    n, w, mc = 300, 6, 4
    X = rng.randn(n, 8)
    pos = np.array([rng.choice(np.delete(np.arange(n), i), w, replace=False) for i in range(n)])
    rows = np.repeat(np.arange(n), w)
    d2 = exact_sq_distances(X, rows, X, pos.ravel()).reshape(n, w)
    order = np.lexsort((pos, d2), axis=1)
    pos, d2 = np.take_along_axis(pos, order, 1), np.take_along_axis(d2, order, 1)
    new = rng.rand(n, w) < 0.5
    # the reference: hub sets of the whole data, then every pair with a new member, densely
    reverse = [(pos.ravel(), rows, new.ravel())]
    H, H_new, _ = _hub_sets(mc, 7, 0, pos, new, reverse)
    assert ((H >= 0) & H_new).sum(1).max() <= mc and ((H >= 0) & ~H_new).sum(1).max() <= mc
    cand = [set(p) for p in pos]
    for h, h_new in zip(H, H_new, strict=True):
        for a in range(len(h)):
            for b in range(len(h)):
                if a != b and h[a] >= 0 and h[b] >= 0 and (h_new[a] or h_new[b]):
                    cand[h[a]].add(int(h[b]))
    width = max(len(c) for c in cand)
    ids = np.full((n, width), -1)
    for i, c in enumerate(cand):
        ids[i, : len(c)] = sorted(c)
    e = np.full(ids.shape, np.inf)
    r, c = np.nonzero(ids >= 0)
    e[r, c] = exact_sq_distances(X, r, X, ids[r, c])
    ref_ids, ref_d2 = topk_exact(w, ids, e)

    def dask_rows(a):
        return da.from_array(a, chunks=(chunks,) + a.shape[1:])

    starts = np.arange(0, n + chunks, chunks).clip(max=n)
    with elmscale.config_context(compiled=compiled):
        out = local_join(
            np.unique(starts),
            dask_rows(np.arange(n)),
            dask_rows(X),
            (dask_rows(pos), dask_rows(pos), dask_rows(d2)),
            dask_rows(new),
            w,
            max_candidates=mc,
            salt=7,
            memory_budget=budget,
        )
    got_pos, got_ids, got_d2, got_new = dask.compute(*out)
    np.testing.assert_array_equal(got_ids, ref_ids)
    np.testing.assert_array_equal(got_d2, ref_d2)
    # what entered is new; what stayed can only have turned old
    same = got_ids[:, :, None] == pos[:, None, :]
    assert got_new[~same.any(-1)].all()
    was_new = (same & new[:, None, :]).any(-1)
    assert not (got_new & same.any(-1) & ~was_new).any()


@pytest.mark.parametrize(
    ("budget", "pair_bytes"), [(1, 0), (7, 0), (40, 0), (10_000, 0), (200, 1), (900, 3)]
)
def test_join_waves_are_the_longest_runs_within_the_budget(budget, pair_bytes):
    """Each wave of hub rows costs at most the budget (a byte per distinct row it names,
    ``pair_bytes`` per ordered pair of a hub set's members) or is one hub row, and could not
    take the next hub row without passing it; its rows in and outside the chunk are those of
    a direct count."""
    from elmscale.graph._local_join import plan_waves

    rng = np.random.RandomState(budget)
    H = rng.randint(0, 400, (250, 6))
    H[rng.rand(*H.shape) < 0.2] = -1
    lo, hi = 100, 350
    cuts, own, outside = plan_waves((H,), lo, hi, budget, 1, pair_bytes)
    assert cuts[0] == 0 and cuts[-1] == len(H) and np.all(np.diff(cuts) >= 1)

    def named(a, b):
        return np.unique(H[a:b][H[a:b] >= 0])

    def cost(a, b):
        members = (H[a:b] >= 0).sum(axis=1)
        return len(named(a, b)) + int((members**2).sum()) * pair_bytes

    assert len(own) == len(outside) == len(cuts) - 1
    for a, b, inside, out in zip(cuts[:-1], cuts[1:], own, outside, strict=True):
        assert cost(a, b) <= budget or b - a == 1
        if b < len(H):
            assert cost(a, b + 1) > budget
        rows = named(a, b)
        np.testing.assert_array_equal(inside, rows[(rows >= lo) & (rows < hi)])
        np.testing.assert_array_equal(out, rows[(rows < lo) | (rows >= hi)])
    assert (len(cuts) == 2) == (cost(0, len(H)) <= budget)


@pytest.mark.parametrize("span_per_row", [0, 16])
def test_table_rows_are_the_members_places_in_the_table(monkeypatch, span_per_row):
    """Each hub set member's row in a join task's table, through a binary search (a table
    spread thin over the positions) or an array over its span: the same, -1 for padding."""
    from elmscale.graph import _local_join

    monkeypatch.setattr(_local_join, "LOOKUP_SPAN_PER_ROW", span_per_row)
    rng = np.random.RandomState(3)
    t_pos = np.sort(rng.choice(np.arange(500, 5000), 700, replace=False))
    H = rng.choice(t_pos, (90, 7))
    H[rng.rand(*H.shape) < 0.3] = -1
    got = _local_join._table_rows(H, t_pos)
    np.testing.assert_array_equal(got >= 0, H >= 0)
    np.testing.assert_array_equal(t_pos[got[H >= 0]], H[H >= 0])


@pytest.mark.parametrize("values", [[], [4], [3, 3, 3], [9, 2, 9, 2, 5, 0, 5, 7, 2]])
def test_first_occurrences_are_uniques_first_indices(values):
    from elmscale.graph._local_join import _first_occurrences

    values = np.array(values, dtype=np.int64)
    _, first = np.unique(values, return_index=True)
    np.testing.assert_array_equal(np.flatnonzero(_first_occurrences(values)), np.sort(first))


def test_source_chunks_are_the_chunks_holding_the_positions():
    """Sorted distinct chunks, padding (-1) left out, empty chunks never named."""
    from elmscale.graph._local_join import _source_chunks

    starts = np.array([0, 10, 25, 25, 40, 100])
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 300):
        positions = rng.integers(-1, 100, size)
        valid = positions[positions >= 0]
        want = np.unique(np.searchsorted(starts, valid, side="right") - 1)
        np.testing.assert_array_equal(_source_chunks(positions, starts), want)
        assert 2 not in _source_chunks(positions, starts)


def test_probe_recall_counts_the_neighbours_in_probed_cells():
    """Against a direct count: a neighbour is found once its cell is among the row's
    effective probes, which extend past small cells until they hold k + 1 rows."""
    from elmscale.graph._cell_search import effective_probes, probe_recall

    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 9, size=30)
    probes = np.array([rng.permutation(30)[:8] for _ in range(40)])
    cells = rng.integers(0, 30, size=(40, 5))
    got = [probe_recall(probes, sizes, cells, p) for p in range(1, 9)]
    for p in range(1, 9):
        probed = effective_probes(probes, sizes, p, 5)
        want = np.mean([[c in set(row) for c in cs] for row, cs in zip(probed, cells, strict=True)])
        assert got[p - 1] == pytest.approx(want)
    assert (np.diff(got) >= 0).all()


@pytest.mark.parametrize(
    "recalls, target, chosen",
    [
        ([0.5, 0.9, 0.97, 0.99, 1.0], 0.98, 4),  # the fewest reaching the target
        ([0.99, 1.0], 0.98, 1),
        ([0.2, 0.3, 0.35, 0.351, 0.351], 0.98, 3),  # short of it: while a probe adds 0.002
        ([0.2, 0.2, 0.2], 0.98, 1),
    ],
)
def test_chosen_probes(recalls, target, chosen):
    from elmscale.graph._cell_search import chosen_probes

    assert chosen_probes(np.array(recalls), target) == chosen


def test_auto_probes_leave_the_rest_to_the_rounds_that_follow():
    """With refinement rounds to follow, ``n_probes="auto"`` searches at most
    MAX_PROBES_BEFORE_ROUNDS cells and the rounds raise the recall from there; without
    them it adds cells up to MAX_AUTO_PROBES."""
    from elmscale.graph._cell_search import MAX_PROBES_BEFORE_ROUNDS

    X, _ = make_blobs(4000, n_features=32, centers=4, cluster_std=3.0, random_state=1)
    Xd = da.from_array(X, chunks=(1500, 32))
    cells_only = CellSearch(rows_per_cell=100, n_probes="auto", target_recall=0.99)
    cells_only(Xd, 10, random_state=0)
    with_rounds = CellSearch(
        rows_per_cell=100, n_probes="auto", n_refine="auto", target_recall=0.99
    )
    with_rounds(Xd, 10, random_state=0)
    assert cells_only.n_probes_ > MAX_PROBES_BEFORE_ROUNDS == with_rounds.n_probes_
    assert with_rounds.n_refine_ >= 1
    six = CellSearch(rows_per_cell=100, n_probes=MAX_PROBES_BEFORE_ROUNDS)
    six(Xd, 10, random_state=0)
    assert with_rounds.recall_estimate_ > six.recall_estimate_ + 0.02


@pytest.mark.parametrize("target", [0.9, 0.99, 1.0])
def test_auto_probes_reach_the_target_they_predict(target, monkeypatch):
    """``n_probes="auto"`` on 32-d blobs of high intrinsic dimension: the recall it predicts
    for its choice is the estimate the search then reports, the fewest probes that reach
    the target, and the graph is the fixed-probes search's with that many."""
    from elmscale.graph import _cell_search
    from elmscale.graph._cell_search import MAX_AUTO_PROBES

    predicted = []
    real = _cell_search.probe_recall
    monkeypatch.setattr(
        _cell_search, "probe_recall", lambda *a: predicted.append(real(*a)) or predicted[-1]
    )
    X, _ = make_blobs(4000, n_features=32, centers=4, cluster_std=3.0, random_state=1)
    Xd = da.from_array(X, chunks=(1500, 32))
    search = CellSearch(rows_per_cell=100, n_probes="auto", target_recall=target)
    idx, dist = dask.compute(*search(Xd, 10, random_state=0))
    chosen = search.n_probes_
    assert predicted[chosen - 1] == pytest.approx(search.recall_estimate_, abs=1e-12)
    assert 1 < chosen <= MAX_AUTO_PROBES
    assert search.recall_estimate_ >= target or chosen == MAX_AUTO_PROBES
    fewer = CellSearch(rows_per_cell=100, n_probes=chosen - 1)
    fewer(Xd, 10, random_state=0)
    assert fewer.recall_estimate_ < target
    fixed = CellSearch(rows_per_cell=100, n_probes=chosen)
    fixed_idx, fixed_dist = dask.compute(*fixed(Xd, 10, random_state=0))
    np.testing.assert_array_equal(idx, fixed_idx)
    np.testing.assert_array_equal(dist, fixed_dist)
    assert fixed.recall_estimate_ == search.recall_estimate_


def test_auto_probes_with_grouped_cells_predict_their_estimate(monkeypatch):
    """Above FLAT_MAX_CELLS "auto" assigns each row's cells among its own nearest groups:
    the sample's recall it predicts is still the estimate the search reports, and the graph
    is the same for any chunking."""
    import elmscale.graph._cells as cells
    from elmscale.graph import _cell_search

    monkeypatch.setattr(cells, "FLAT_MAX_CELLS", 10)
    predicted = []
    real = _cell_search.probe_recall
    monkeypatch.setattr(
        _cell_search, "probe_recall", lambda *a: predicted.append(real(*a)) or predicted[-1]
    )
    X, _ = make_blobs(4000, n_features=32, centers=4, cluster_std=3.0, random_state=1)
    graphs = []
    for chunks in (1500, 4000):
        predicted.clear()
        search = CellSearch(rows_per_cell=50, n_probes="auto", target_recall=0.95)
        graphs.append(dask.compute(*search(da.from_array(X, chunks=(chunks, 32)), 10)))
        assert predicted[search.n_probes_ - 1] == pytest.approx(search.recall_estimate_, abs=1e-12)
        assert search.recall_estimate_ >= 0.95
    np.testing.assert_array_equal(graphs[0][0], graphs[1][0])
    np.testing.assert_array_equal(graphs[0][1], graphs[1][1])
