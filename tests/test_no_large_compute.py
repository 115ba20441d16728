"""Nothing with N rows reaches the client during a fit on dask input."""

import dask
import dask.array as da
import numpy as np
import pytest

import elmscale


def _shapes(obj, out):
    """Collect the shape of every array in a computed result."""
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (tuple, list)):
        for v in obj:
            _shapes(v, out)
    elif hasattr(obj, "shape"):
        out.append(tuple(obj.shape))
    return out


def max_rows(shapes):
    """The most rows of any array among ``shapes`` (failing when there is none: the spy saw
    no array come back at all)."""
    rows = [shape[0] for shape in shapes if shape]
    assert rows, "the spy saw no array computed at all"
    return max(rows)


@pytest.fixture
def no_large_compute(monkeypatch):
    """Records the shape of every array a ``dask.compute`` returned to the client."""
    seen = []
    real = dask.base.compute

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.extend(_shapes(result, []))
        return result

    monkeypatch.setattr(dask.base, "compute", spy)
    monkeypatch.setattr(dask, "compute", spy)
    return seen


@pytest.mark.slow
def test_uselm_fit_on_dask_input_brings_back_no_n_sized_array(no_large_compute, monkeypatch):
    """Bounded samples (k-means++ and cell seeds: 20,000 rows) are allowed, N-sized data
    not; the training reference ``predict`` searches is bounded by its byte budgets (here
    made smaller than N rows and N keys), not by N."""
    from elmscale.graph import _reference

    monkeypatch.setattr(_reference, "REFERENCE_BYTES", 2**18)
    monkeypatch.setattr(_reference, "LOOKUP_BYTES", 2**17)
    N = 21_000
    X = np.random.RandomState(0).randn(N, 3)
    Xd = da.from_array(X, chunks=(5_250, 3))
    model = elmscale.USELM(
        n_clusters=3, n_hidden=20, graph="exact", n_neighbors=5, random_state=0
    ).fit(Xd)
    assert isinstance(model.labels_, da.Array)
    assert max_rows(no_large_compute) <= 20_000 < N
    assert model.reference_.keys is None
    assert model.reference_.nbytes <= _reference.REFERENCE_BYTES


@pytest.mark.slow
def test_sselm_primal_higher_power_brings_back_no_n_sized_array(no_large_compute):
    """p = 5 in the primal: L^2 H (N x n_hidden) is persisted on the cluster, never computed
    to the client; only the n_hidden x n_hidden sums come back."""
    N = 21_000
    rng = np.random.RandomState(0)
    X = rng.randn(N, 3)
    y = np.where(rng.rand(N) < 0.01, (X[:, 0] > 0).astype(int), -1)
    Xd = da.from_array(X, chunks=(5_250, 3))
    model = elmscale.SSELM(
        n_hidden=20, graph="exact", n_neighbors=5, laplacian_power=5, lam=0.1, random_state=0
    ).fit(Xd, da.from_array(y, chunks=5_250))
    assert model._solver == "primal"
    assert max_rows(no_large_compute) <= 20_000 < N


def test_uselm_keeps_numpy_training_rows_without_gathering_them(no_large_compute):
    """A filtered NumPy fit keeps its training rows for ``predict`` (``reference_``) from
    the array this process already holds, never the N x d rows computed back from the dask
    copy (on a cluster, every row of X in the compute dtype gathered from the workers)."""
    X = np.random.RandomState(0).rand(2_000, 6).astype(np.float32)
    model = elmscale.USELM(n_clusters=3, n_hidden=20, random_state=0).fit(X)
    assert model.smoothing_steps_ > 0 and model.reference_.rows.shape == X.shape
    assert X.shape not in no_large_compute


def test_tumkelm_fit_and_score_on_dask_input_bring_back_no_n_sized_array(no_large_compute):
    """``score`` needs the mean training embedding of each cluster (``cluster_centers_``,
    reduced by the fit): per-block sums reduced on the workers, n_clusters rows to the
    client, never the training embedding and labels."""
    N = 6_000
    X = np.random.RandomState(0).randn(N, 3)
    Xd = da.from_array(X, chunks=(1_500, 3))
    model = elmscale.TUMKELM(
        n_clusters=3,
        kernels=["linear", ("rbf", {"width": 1.0})],
        n_landmarks=20,
        max_iter=2,
        random_state=0,
    ).fit(Xd)
    assert model.mode_ == "scalable" and isinstance(model.embedding_, da.Array)
    assert model.cluster_centers_.shape == (3, 3)
    score = model.score(Xd)
    assert max_rows(no_large_compute) < N
    # the same score as from the gathered arrays
    E, labels = dask.compute(model.embedding_, model.labels_)
    centers = np.array([E[labels == c].mean(axis=0) for c in range(3)])
    U, pred = dask.compute(model.transform(Xd), model.predict(Xd))
    assert score == pytest.approx(-((U - centers[pred]) ** 2).sum(), rel=1e-10)
