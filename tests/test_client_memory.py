"""The client holds nothing that grows with the rows: draws of row samples that numpy makes
from a shuffled ``arange(N)`` run on the workers, and give the numbers the client would."""

import tracemalloc

import dask
import dask.array as da
import numpy as np
import pytest

from elmscale.cluster import kmeans
from elmscale.cluster._kmeans import _sample_rows
from elmscale.graph._cells import fit_cells, fit_cells_on_workers, sample_index, sample_size
from elmscale.hidden import sample_rows

N = 2_000_000


def _client_peak(fn):
    """``fn()`` and the peak bytes Python and NumPy allocated in this process meanwhile."""
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def rows_on_workers(dask_client):
    """N x 2 random rows generated and persisted on the cluster's workers."""
    X = da.random.RandomState(0).random_sample((N, 2), chunks=(500_000, 2)).persist()
    dask.compute(X.sum())
    return X


@pytest.mark.distributed
def test_cells_kmeans_and_node_families_draw_their_samples_on_the_workers(rows_on_workers):
    """Each sample is one numpy draws by shuffling all N row numbers (16 MB here, which the
    client held when it drew them): the client's peak stays below half that."""
    X = rows_on_workers
    n_cells = 1_100
    assert sample_size(X.shape, n_cells) > N // 50  # numpy's threshold for the shuffle
    (centers, size), peak = _client_peak(lambda: fit_cells_on_workers(X, n_cells, 3))
    assert size == sample_size(X.shape, n_cells) and peak < 4 * N
    (centers, labels, _, _), peak = _client_peak(
        lambda: kmeans(X, 3, n_init=2, max_iter=2, random_state=0, sample_draws=2)
    )
    assert isinstance(labels, da.Array) and peak < 4 * N
    rows, peak = _client_peak(lambda: sample_rows(X, 1_000, np.random.RandomState(0)))
    assert rows.shape == (1_000, 2) and peak < 4 * N


def test_cells_fitted_from_the_sample_numpy_draws(rng):
    X = rng.rand(30_000, 3)
    n_cells = 100  # a sample of 4,000 rows: more than N / 50, drawn by a shuffle
    idx = sample_index(X.shape, n_cells, 3)
    centers, size = fit_cells_on_workers(da.from_array(X, chunks=(7_000, 3)), n_cells, 3)
    assert size == len(idx)
    np.testing.assert_array_equal(centers, fit_cells(X[idx], len(idx) / n_cells, 3))


def test_kmeans_samples_are_the_client_generators_draws(rng):
    """The samples, their seeds and the generator's state after them are those the
    client's RandomState would have drawn itself."""
    E = rng.rand(50_000, 3)
    Eb = da.from_array(E, chunks=(7_000, 3))
    ours, reference = np.random.RandomState(5), np.random.RandomState(5)
    samples, seeds, state = _sample_rows(Eb, 1_000, 3, ours)
    samples, seeds, state = dask.compute(samples, seeds, state)
    ours.set_state(state)
    rows = [np.sort(reference.choice(50_000, size=1_000, replace=False)) for _ in range(3)]
    for sample, r in zip(samples, rows, strict=True):
        np.testing.assert_array_equal(sample, E[r])
    assert seeds == [reference.randint(2**31 - 1) for _ in range(3)]
    assert ours.randint(2**31 - 1) == reference.randint(2**31 - 1)


def test_kmeans_leaves_a_given_random_state_where_its_draws_would(rng):
    """The starts' samples and seeds, then (30,000 rows: more than 2 x 10 x init_sample) the
    sample the starts converge on first."""
    from elmscale.cluster._kmeans import CONVERGE_SAMPLE_FACTOR

    E = da.from_array(rng.rand(30_000, 2), chunks=(10_000, 2))
    ours, reference = np.random.RandomState(1), np.random.RandomState(1)
    kmeans(E, 3, n_init=2, max_iter=2, random_state=ours, init_sample=500, sample_draws=2)
    for _ in range(2):
        reference.choice(30_000, size=500, replace=False)
    for _ in range(2):
        reference.randint(2**31 - 1)
    reference.choice(30_000, size=CONVERGE_SAMPLE_FACTOR * 500, replace=False)
    assert ours.randint(2**31 - 1) == reference.randint(2**31 - 1)


@pytest.mark.parametrize("size", [1_000, 60_000])  # without replacement, and with (size > N)
def test_node_family_sample_is_the_client_generators_draw(rng, size):
    X = rng.rand(50_000, 3)
    ours, reference = np.random.RandomState(7), np.random.RandomState(7)
    rows = sample_rows(da.from_array(X, chunks=(7_000, 3)), size, ours, offset=0.5, scale=2.0)
    expected = X[np.sort(reference.choice(50_000, size, replace=size > 50_000))]
    np.testing.assert_array_equal(rows, (expected - 0.5) / 2.0)
    assert ours.randint(2**31 - 1) == reference.randint(2**31 - 1)


def test_tumkelm_landmarks_are_the_client_generators_draw(rng):
    from elmscale.algorithms._tumkelm import _landmark_sample

    X = rng.rand(20_000, 3).astype(np.float32)
    ours, reference = np.random.RandomState(2), np.random.RandomState(2)
    sample = _landmark_sample(da.from_array(X, chunks=(3_000, 3)), 1_000, ours)
    np.testing.assert_array_equal(sample, X[np.sort(reference.choice(20_000, 1_000, False))])
    assert ours.randint(2**31 - 1) == reference.randint(2**31 - 1)
