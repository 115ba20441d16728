"""k-means on the cluster equals Lloyd's algorithm done densely, whatever the chunking."""

import dask
import dask.array as da
import distributed
import numpy as np
import pytest
from dask.utils import key_split
from sklearn.cluster import KMeans

from elmscale.cluster import kmeans
from elmscale.cluster._kmeans import MAX_BLOCKS, MIN_BLOCK_ROWS, block_rows


def _dense_lloyd(X, centers, max_iter=100, tol=1e-4):
    """Plain NumPy Lloyd from ``centers`` with the same stopping rule."""
    var = X.var(axis=0).mean()
    for _ in range(max_iter):
        d2 = ((X[:, None, :] - centers[None]) ** 2).sum(2)
        lab = d2.argmin(1)
        new = np.array(
            [X[lab == j].mean(0) if (lab == j).any() else centers[j] for j in range(len(centers))]
        )
        shift = ((new - centers) ** 2).sum()
        centers = new
        if shift <= tol * var:
            break
    d2 = ((X[:, None, :] - centers[None]) ** 2).sum(2)
    return centers, d2.argmin(1), d2.min(1).sum()


@pytest.fixture
def blobs_big(rng):
    """70,000 points in 3-d around 4 centres: more rows than one k-means block holds."""
    C = rng.randn(4, 3) * 10
    y = rng.randint(0, 4, 70_000)
    return C[y] + rng.randn(70_000, 3), y


def test_block_rows():
    assert block_rows(1000) == MIN_BLOCK_ROWS
    assert block_rows(10_000_000) == -(-10_000_000 // MAX_BLOCKS)


def test_equals_dense_lloyd_from_the_same_start(blobs_big):
    X, _ = blobs_big
    start = X[:4].copy()
    centers, labels, inertia, n_iter = kmeans(da.from_array(X, chunks=7000), 4, init=start)
    c_ref, lab_ref, in_ref = _dense_lloyd(X, start)
    np.testing.assert_allclose(centers, c_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(labels.compute(), lab_ref)
    assert inertia == pytest.approx(in_ref, rel=1e-10)
    assert 1 <= n_iter <= 100


@pytest.mark.parametrize("chunks", [(70_000,), (7_000,) * 10, (33_000, 1_000, 36_000)])
def test_independent_of_chunking(blobs_big, chunks):
    X, _ = blobs_big
    ref = kmeans(da.from_array(X, chunks=70_000), 4, random_state=0)
    got = kmeans(da.from_array(X, chunks=(chunks, 3)), 4, random_state=0)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1].compute(), ref[1].compute())
    assert got[2] == ref[2] and got[3] == ref[3]
    assert got[1].chunks[0] == tuple(da.from_array(X, chunks=(chunks, 3)).chunks[0])


def test_inertia_is_that_of_the_returned_labels(blobs_big):
    X, y = blobs_big
    centers, labels, inertia, _ = kmeans(da.from_array(X, chunks=9_000), 4, random_state=1)
    lab = labels.compute()
    assert inertia == pytest.approx(((X - centers[lab]) ** 2).sum(), rel=1e-10)
    # the blobs are far apart: the clustering recovers them
    table = np.zeros((4, 4), dtype=int)
    np.add.at(table, (lab, y), 1)
    assert (table.max(0).sum()) / len(y) > 0.99


def test_best_of_several_starts_wins(rng):
    X = np.concatenate(
        [rng.randn(300, 2) + [8, 0], rng.randn(300, 2) - [8, 0], rng.randn(300, 2) + [0, 8]]
    )
    good = np.array([[8.0, 0], [-8.0, 0], [0, 8.0]])
    bad = np.array([[8.0, 0], [8.5, 0], [0, 0.0]])  # stuck with two centres in one blob
    Xd = da.from_array(X, chunks=250)
    both = kmeans(Xd, 3, init=np.stack([bad, good]))
    alone = kmeans(Xd, 3, init=good)
    np.testing.assert_allclose(both[0], alone[0], rtol=1e-12)
    assert both[2] == pytest.approx(alone[2], rel=1e-12)
    assert both[2] < kmeans(Xd, 3, init=bad)[2]


def test_restarts_refined_together_each_equal_their_own_dense_lloyd(blobs_big):
    """The restarts converge after different numbers of passes; each pass refines only those
    still moving, and every restart ends where its own Lloyd's run ends."""
    from elmscale.cluster._kmeans import _lloyd, _matched_shift

    X, _ = blobs_big
    X = X[:20_000]
    starts = np.stack([X[i : i + 4] for i in (0, 10, 500, 7_000, 13_000)])
    blocks = [dask.delayed(X[i : i + 6_000]) for i in range(0, len(X), 6_000)]
    centers, n_iter, distinct = _lloyd(blocks, starts, len(X), 100, 0.0)
    assert len(set(n_iter[distinct].tolist())) > 1  # the restarts stop at different passes
    for i, start in enumerate(starts):
        ref = _dense_lloyd(X, start, tol=0.0)[0]
        if distinct[i]:
            np.testing.assert_allclose(centers[i], ref, rtol=1e-10, atol=1e-12)
        else:  # tol 0: it reached exactly an earlier restart's optimum (in another order)
            shifts = [_matched_shift(ref, centers[j]) for j in np.flatnonzero(distinct[:i])]
            assert min(shifts) < 1e-20


def test_passes_in_one_task_equal_passes_one_round_trip_each(blobs_big, monkeypatch):
    """All passes in one task (few blocks) and one round trip per pass add the same partial
    sums in the same order: the same centres and iterations, bit for bit."""
    from elmscale.cluster import _kmeans

    X, _ = blobs_big
    X = X[:20_000]
    starts = np.stack([X[i : i + 4] for i in (0, 10, 500, 7_000, 13_000)])
    blocks = [dask.delayed(X[i : i + 6_000]) for i in range(0, len(X), 6_000)]
    got = {}
    for local_max in (0, len(blocks)):
        monkeypatch.setattr(_kmeans, "LOCAL_MAX_BLOCKS", local_max)
        got[local_max] = _kmeans._lloyd(blocks, starts, len(X), 100, 1e-4)
    for a, b in zip(got[0], got[len(blocks)], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.distributed
def test_few_blocks_refine_in_one_task_on_a_worker(blobs_big, dask_client, monkeypatch):
    """70,000 rows make two blocks: every Lloyd pass runs in one task on a worker (one round
    trip instead of one per pass), with the labels of one round trip per pass."""
    from elmscale.cluster import _kmeans

    X, _ = blobs_big
    Xd = da.from_array(X, chunks=10_000).persist()
    with distributed.get_task_stream(client=dask_client) as stream:
        got = kmeans(Xd, 4, random_state=2)
        labels = got[1].compute()
    names = [key_split(t["key"]) for t in stream.data]
    assert names.count("elmscale-kmeans-lloyd-local") == 1
    assert "elmscale-kmeans-lloyd" not in names
    monkeypatch.setattr(_kmeans, "LOCAL_MAX_BLOCKS", 0)
    ref = kmeans(Xd, 4, random_state=2)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(labels, ref[1].compute())
    assert (got[2], got[3]) == (ref[2], ref[3])


def test_restarts_at_the_same_optimum_count_once(rng):
    """Two starts that converge to the same partition (one the other's centres in another
    order, slightly moved) are one optimum: the later stops and is dropped, the result is
    the earlier's, and ``choose`` sees one inertia per distinct optimum only."""
    from elmscale.cluster._kmeans import _lloyd, _matched_shift

    C = np.array([[8.0, 0], [-8.0, 0], [0, 8.0]])
    X = np.concatenate([rng.randn(400, 2) + c for c in C])
    Xd = da.from_array(X, chunks=500)
    good = C + 0.3
    bad = np.array([[8.0, 0], [8.5, 0], [0, 0.0]])  # a worse optimum: two centres in a blob
    starts = np.stack([good, good[::-1] - 0.2, bad])
    assert _matched_shift(good, good[::-1]) == 0.0
    blocks = [dask.delayed(X[i : i + 500]) for i in range(0, len(X), 500)]
    centers, n_iter, distinct = _lloyd(blocks, starts, len(X), 100, 1e-4)
    np.testing.assert_array_equal(distinct, [True, False, True])
    seen = []

    def choose(inertia, labels):
        seen.append(len(inertia))
        return int(np.argmin(inertia))

    both = kmeans(Xd, 3, init=starts, choose=choose)
    alone = kmeans(Xd, 3, init=good)
    assert seen == [2]
    np.testing.assert_array_equal(both[0], alone[0])
    np.testing.assert_array_equal(both[1].compute(), alone[1].compute())


def test_nearest_centres_in_pieces_equal_those_in_one_piece(rng, monkeypatch):
    """Rows scored NEAREST_ROWS at a time give the labels and counts of one product over the
    whole block, and its distances and sums to rounding: a BLAS kernel may order a
    product's additions by the shape of the operands, which moves a float64 distance by an
    ulp or two (relative 1e-12 allows thousands)."""
    from elmscale.cluster import _kmeans

    block = rng.randn(10_001, 7).astype(np.float32)
    centers = rng.randn(4, 6, 7)
    pieces = _kmeans._lloyd_partials(block, centers), _kmeans._nearest(block, centers)
    monkeypatch.setattr(_kmeans, "NEAREST_ROWS", 1_000_000)
    whole = _kmeans._lloyd_partials(block, centers), _kmeans._nearest(block, centers)
    np.testing.assert_array_equal(pieces[0]["counts"], whole[0]["counts"])
    for key in ("sums", "inertia", "sumsq"):
        np.testing.assert_allclose(pieces[0][key], whole[0][key], rtol=1e-12, atol=1e-12)
    for a, b in zip(pieces[1], whole[1], strict=True):
        if np.issubdtype(a.dtype, np.integer):
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_sampled_start_matches_scikit_learn_quality(blobs_big):
    X, _ = blobs_big
    inertia = kmeans(da.from_array(X, chunks=10_000), 4, random_state=0)[2]
    ref = KMeans(4, n_init=10, random_state=0).fit(X).inertia_
    assert inertia == pytest.approx(ref, rel=1e-6)


def test_too_many_clusters_is_an_error():
    with pytest.raises(ValueError, match="n_clusters=5 is larger than n_samples=4"):
        kmeans(da.ones((4, 2), chunks=2), 5)


@pytest.mark.distributed
def test_distributed_equals_local(blobs_big, dask_client):
    """On the 2-worker LocalCluster: the same centres, labels and inertia as in-process."""
    X, _ = blobs_big
    Xd = da.from_array(X, chunks=12_000)
    with dask.config.set(scheduler="sync"):
        ref = kmeans(Xd, 4, random_state=3)
        ref_labels = ref[1].compute()
    got = kmeans(Xd, 4, random_state=3)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1].compute(), ref_labels)
    assert got[2] == ref[2]


def test_input_blocks_are_computed_once(blobs_big):
    """The embedding is an expensive lazy product (H beta, H rebuilt from X): the sample that
    starts the restarts must come from the held blocks, not from a second computation."""
    calls = []

    def counted(block):
        calls.append(len(block))
        return block

    E = da.from_array(blobs_big[0], chunks=(1000, -1)).map_blocks(counted, dtype=float)
    with dask.config.set(scheduler="sync"):
        kmeans(E, 4, random_state=0, init_sample=500)
    assert sum(calls) == len(blobs_big[0])


def test_small_data_starts_are_scikit_learns_on_all_rows(rng):
    """At most init_sample rows, one draw: one start, scikit-learn's best of n_init on every
    row (the same random draws as a single KMeans on one OpenMP thread)."""
    from sklearn.utils import check_random_state
    from threadpoolctl import threadpool_limits

    from elmscale.cluster import _kmeans

    X = rng.randn(3000, 4)
    Eb = da.from_array(X, chunks=1000)
    starts = _kmeans._starts(Eb, 5, 10, None, (20_000, 1), check_random_state(7))
    seed = check_random_state(7).randint(2**31 - 1)
    with threadpool_limits(1, user_api="openmp"):
        ref = KMeans(5, n_init=10, random_state=seed).fit(X).cluster_centers_
    np.testing.assert_array_equal(starts, ref[None])


@pytest.mark.distributed
def test_sample_starts_run_on_the_workers_and_equal_the_threaded_ones(rng, dask_client):
    """Each sample's scikit-learn fit is a task on a worker (the client gathers only the
    centres), and the starts are the same as under dask's threaded scheduler."""
    from sklearn.utils import check_random_state

    from elmscale.cluster import _kmeans

    C = rng.randn(6, 5) * 3
    X = C[rng.randint(0, 6, 8000)] + rng.randn(8000, 5)
    Xd = da.from_array(X, chunks=2000)
    with dask.config.set(scheduler="threads"):
        threaded = _kmeans._starts(Xd, 6, 8, None, (1000, 4), check_random_state(3))
    with distributed.get_task_stream(client=dask_client) as stream:
        on_cluster = _kmeans._starts(Xd.persist(), 6, 8, None, (1000, 4), check_random_state(3))
    fits = [t for t in stream.data if key_split(t["key"]) == "elmscale-kmeans-start"]
    assert len(fits) == 4
    np.testing.assert_array_equal(on_cluster, threaded)


def test_samples_share_the_starts_and_all_rows_choose(rng, monkeypatch):
    """More rows than init_sample and sample_draws=4: four starts, each the best of its
    sample's share of n_init; the result is the refined start of least inertia on all rows.
    The default, one sample, gives the one start of before. (Rows few enough that no
    sample converges the starts first.)"""
    from sklearn.utils import check_random_state

    from elmscale.cluster import _kmeans

    monkeypatch.setattr(_kmeans, "CONVERGE_SAMPLE_FACTOR", 100)

    C = rng.randn(12, 5) * 3
    X = C[rng.randint(0, 12, 20_000)] + rng.randn(20_000, 5)
    Xd = da.from_array(X, chunks=5000)
    with dask.config.set(scheduler="sync"):
        assert _kmeans._starts(Xd, 12, 10, None, (600, 1), check_random_state(1)).shape[0] == 1
        starts = _kmeans._starts(Xd, 12, 10, None, (600, 4), check_random_state(1))
        assert starts.shape == (4, 12, 5)
        assert len({s.tobytes() for s in starts}) == 4
        inertias = [kmeans(Xd, 12, init=s)[2] for s in starts]
        _, _, inertia, _ = kmeans(Xd, 12, random_state=1, init_sample=600, sample_draws=4)
    assert inertia == pytest.approx(min(inertias), rel=1e-12)


def test_draws_on_all_rows_when_they_fit_one_sample(rng):
    """No more rows than init_sample and sample_draws=4: four starts on all the rows, each
    scikit-learn's best of its share of n_init with its own seed, so that ``choose`` can
    weigh them as it does starts from samples of larger data."""
    from sklearn.cluster import KMeans
    from sklearn.utils import check_random_state

    from elmscale.cluster import _kmeans

    C = rng.randn(6, 4) * 3
    X = C[rng.randint(0, 6, 900)] + rng.randn(900, 4)
    Xd = da.from_array(X, chunks=300)
    with dask.config.set(scheduler="sync"):
        starts = _kmeans._starts(Xd, 6, 10, None, (20_000, 4), check_random_state(5))
    seeds = check_random_state(5).randint(2**31 - 1, size=4)
    assert starts.shape == (4, 6, 4)
    for start, share, seed in zip(starts, (3, 3, 2, 2), seeds, strict=True):
        alone = KMeans(6, n_init=share, random_state=seed).fit(X).cluster_centers_
        np.testing.assert_allclose(start, alone, rtol=1e-10, atol=1e-10)
    seen = []

    def choose(inertia, labels):
        seen.append(len(inertia))
        return int(np.argmax(inertia))

    kmeans(Xd, 6, n_init=10, random_state=5, sample_draws=4, choose=choose)
    assert len(seen) == 1 and 1 <= seen[0] <= 4  # the distinct optima of the four starts


def test_choose_keeps_the_start_it_picks_not_the_least_inertia(rng):
    """``choose`` sees every refined start's inertia and, on request, their labels (nearest
    centres, chunked like E); the result is the start it picks, as that start alone gives."""
    C = rng.randn(5, 3) * 4
    X = C[rng.randint(0, 5, 3000)] + rng.randn(3000, 3)
    Xd = da.from_array(X, chunks=700)
    starts = np.stack([X[rng.choice(3000, 5, replace=False)] for _ in range(3)])
    alone = [kmeans(Xd, 5, init=s) for s in starts]
    worst = int(np.argmax([a[2] for a in alone]))
    seen = {}

    def choose(inertia, labels):
        seen["inertia"], seen["labels"] = inertia, labels([worst, 0])
        return worst

    centers, labels, inertia, _ = kmeans(Xd, 5, init=starts, choose=choose)
    np.testing.assert_allclose(seen["inertia"], [a[2] for a in alone], rtol=1e-10)
    assert seen["labels"].shape == (3000, 2) and seen["labels"].chunks[0] == Xd.chunks[0]
    for column, j in enumerate([worst, 0]):
        np.testing.assert_array_equal(seen["labels"][:, column].compute(), alone[j][1].compute())
    np.testing.assert_allclose(centers, alone[worst][0], rtol=1e-12)
    np.testing.assert_array_equal(labels.compute(), alone[worst][1].compute())
    assert inertia == pytest.approx(alone[worst][2], rel=1e-12)


def test_starts_converge_on_a_sample_first_on_many_rows(rng, monkeypatch):
    """On more than 2 * CONVERGE_SAMPLE_FACTOR * init_sample rows the starts first converge on
    one sample in one task, and the passes over all rows carry only the distinct optima
    reached there (here the four starts reach one): the same partition and inertia as every
    start refined on all rows, from fewer restarts; below that size nothing changes."""
    from sklearn.metrics import adjusted_rand_score

    from elmscale.cluster import _kmeans

    C = rng.randn(5, 3) * 8
    X = C[rng.randint(0, 5, 30_000)] + rng.randn(30_000, 3)
    Xd = da.from_array(X, chunks=7000)
    carried, real = [], _kmeans._lloyd
    monkeypatch.setattr(
        _kmeans, "_lloyd", lambda blocks, c, *a: carried.append(len(c)) or real(blocks, c, *a)
    )
    args = dict(n_init=8, random_state=3, init_sample=600, sample_draws=4)
    with dask.config.set(scheduler="sync"):
        centers, labels, inertia, _ = kmeans(Xd, 5, **args)
        monkeypatch.setattr(_kmeans, "CONVERGE_SAMPLE_FACTOR", 100)
        ref_centers, ref_labels, ref_inertia, _ = kmeans(Xd, 5, **args)
    assert carried == [1, 4]
    assert adjusted_rand_score(labels.compute(), ref_labels.compute()) == 1.0
    assert inertia == pytest.approx(ref_inertia, rel=1e-9)
    dense_centers, dense_labels, dense_inertia = _dense_lloyd(X, centers)
    np.testing.assert_array_equal(labels.compute(), dense_labels)
    assert inertia == pytest.approx(dense_inertia, rel=1e-9)
