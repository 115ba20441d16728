"""Input under a distributed client: the keys elmscale creates for X are unique per fit (or
identical in content), so repeated fits on one dask array never hand the scheduler a key it
knows with another task."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest

from elmscale import ELMJEC, USELM
from elmscale.cluster import _kmeans
from elmscale.graph import _build

RUN_SPEC = "Detected different `run_spec`"


def _run_spec_warnings(client):
    return sum(RUN_SPEC in msg for _, msg in client.get_scheduler_logs(n=10_000))


@pytest.mark.distributed
@pytest.mark.parametrize("persisted", [False, True])
def test_repeated_fits_on_one_dask_array_reuse_no_key(dask_client, blobs, monkeypatch, persisted):
    """Two fits of US-ELM and one of ELM-JEC on the same dask array: the scheduler never sees
    one key with two different tasks, nothing warns, and the repeated fit gives the same
    labels. The locality order (which persists X's rows, keeping X's tasks known to the
    scheduler while the model lives) starts at 20,000 rows; lowered here to keep the data
    small."""
    monkeypatch.setattr(_build, "ORDER_MIN_SAMPLES", 100)
    X, _ = blobs
    Xd = da.from_array(X, chunks=((70, 90, 80), (X.shape[1],)))
    if persisted:
        Xd = Xd.persist()
    before = _run_spec_warnings(dask_client)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = USELM(n_clusters=3, n_hidden=40, random_state=0).fit(Xd)
        second = USELM(n_clusters=3, n_hidden=40, random_state=0).fit(Xd)
        ELMJEC(n_clusters=3, n_hidden=40, random_state=0).fit(Xd)
        labels = dask_client.compute([first.labels_, second.labels_], sync=True)
    assert _run_spec_warnings(dask_client) == before
    np.testing.assert_array_equal(labels[0], labels[1])


@pytest.mark.distributed
def test_numpy_input_is_sent_once_outside_the_graphs(dask_client, global_seed, monkeypatch):
    """NumPy X under a client goes to the workers once (scattered), never inside a task
    graph: with dask's large-graph threshold far below X's size, no graph is large enough to
    warn, no key comes back with another task, and the labels are those of the threaded
    fit."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=6000, n_features=60, centers=4, random_state=global_seed)
    assert X.nbytes > 2_500_000
    model = USELM(n_clusters=4, n_hidden=40, random_state=0)
    # k-means regroups the embedding's rows into several blocks, as from 65,536 rows on
    monkeypatch.setattr(_kmeans, "MIN_BLOCK_ROWS", 1000)
    before = _run_spec_warnings(dask_client)
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1MB"}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            labels = model.fit(X).labels_
            predicted = model.predict(X)
    assert isinstance(labels, np.ndarray)
    # a filtered fit, its labels refined by votes: every step of the fit met the scheduler
    # with keys it either did not know or knew with the same task
    assert model.smoothing_steps_ > 0 and model.refine_rounds_ > 0
    assert _run_spec_warnings(dask_client) == before
    with dask.config.set(scheduler="threads"):
        threaded = USELM(n_clusters=4, n_hidden=40, random_state=0).fit(X).labels_
    np.testing.assert_array_equal(labels, threaded)
    np.testing.assert_array_equal(predicted, labels)


@pytest.mark.distributed
def test_numpy_input_travels_in_its_own_dtype(dask_client, monkeypatch, global_seed):
    """Integer pixels are scattered as they are (one byte each for uint8, not the eight of
    the compute dtype) and cast on the workers; the fit equals the threaded one."""
    from distributed import Client

    rng = np.random.RandomState(global_seed)
    X = (rng.rand(1500, 30) * 255).astype(np.uint8)
    sent = []
    real = Client.scatter

    def spy(self, data, *args, **kwargs):
        sent.extend(np.asarray(v).dtype for v in data.values())
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Client, "scatter", spy)
    labels = USELM(n_clusters=3, n_hidden=30, random_state=0).fit(X).labels_
    assert sent and set(sent) == {np.dtype(np.uint8)}
    with dask.config.set(scheduler="threads"):
        threaded = USELM(n_clusters=3, n_hidden=30, random_state=0).fit(X).labels_
    np.testing.assert_array_equal(labels, threaded)


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["TUMKELM", "ELMClassifier"])
def test_numpy_input_under_a_client_fits_as_threaded(dask_client, blobs, name):
    """Estimators that fit NumPy input in this process (TUMK-ELM's exact mode) and those that
    scatter it give, under a client, what the threaded scheduler gives."""
    import elmscale

    X, y = blobs
    make = lambda: getattr(elmscale, name)(random_state=0)  # noqa: E731
    fitted = make().fit(X, y) if name == "ELMClassifier" else make().fit(X)
    with dask.config.set(scheduler="threads"):
        threaded = make().fit(X, y) if name == "ELMClassifier" else make().fit(X)
    np.testing.assert_array_equal(fitted.predict(X), threaded.predict(X))
