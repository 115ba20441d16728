"""The bounded training reference a filtered US-ELM fit keeps for ``transform`` and
``predict`` (:mod:`elmscale.graph._reference`): row keys, the 8-bit sample beyond the byte
budget, the lookup of training rows, and the same answers after a pickle round trip."""

import pickle

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.neighbors import NearestNeighbors

from elmscale import USELM
from elmscale.graph import _reference
from elmscale.graph._reference import ScalarQuantizer, row_keys


def test_row_keys_equal_for_equal_values_and_distinct_otherwise():
    """Equal values give equal keys whatever the dtype (and -0.0 is 0.0); rows one step apart
    in one column never collide, nor do the rows of an integer grid (whose floats have
    all-zero low mantissa bits)."""
    rng = np.random.RandomState(0)
    X = rng.rand(500, 7).astype(np.float32)
    np.testing.assert_array_equal(row_keys(X), row_keys(X.astype(np.float64)))
    Z = np.zeros((2, 3))
    Z[1, 1] = -0.0
    assert row_keys(Z)[0] == row_keys(Z)[1]
    grid = np.stack(np.meshgrid(*[np.arange(17.0)] * 3), axis=-1).reshape(-1, 3)
    assert len(np.unique(row_keys(grid))) == len(grid)
    moved = X.astype(np.float64)
    moved[:, 3] = np.nextafter(moved[:, 3], 2.0)
    assert not np.isin(row_keys(moved), row_keys(X)).any()


def test_quantizer_decodes_within_half_a_step():
    rows = np.random.RandomState(1).randn(1000, 5).astype(np.float32) * [1, 10, 0.1, 3, 0]
    q = ScalarQuantizer(rows)
    codes = q.encode(rows)
    assert codes.dtype == np.uint8
    assert (np.abs(q.decode(codes) - rows) <= q.step / 2 * (1 + 1e-5)).all()


@pytest.fixture(scope="module")
def digits():
    return load_digits(return_X_y=True)[0]


def _fit(X, **budget):
    with pytest.MonkeyPatch.context() as mp:
        for name, value in budget.items():
            mp.setattr(_reference, name, value)
        with dask.config.set(scheduler="threads"):
            return USELM(n_clusters=10, random_state=0).fit(X)


def test_sampled_reference_is_bounded_and_answers_as_a_dense_vote(digits):
    """Beyond the byte budget the reference holds an 8-bit sample of the training rows; a
    new row's label is the vote of its nearest decoded sample rows and its own nearest
    centre (a dense NumPy reference with scikit-learn's exact neighbours), training rows
    still get ``labels_`` (by key), and a pickle round trip answers alike."""
    from elmscale.algorithms._embedding import unit_rows
    from elmscale.cluster._refine import OWN_VOTE
    from elmscale.hidden import apply_scaling

    X = digits
    m = _fit(X, REFERENCE_BYTES=300 * (64 + 8 * 12 + 8))
    ref = m.reference_
    assert ref.quantizer is not None and ref.rows.dtype == np.uint8
    assert len(ref.rows) < len(X) and ref.keys is not None
    assert ref.nbytes <= _reference.REFERENCE_BYTES + _reference.LOOKUP_BYTES
    np.testing.assert_array_equal(m.predict(X), m.labels_)

    Xq = X[::5] + 0.3
    layer = m.hidden_layer_
    decoded = ref.quantizer.decode(ref.rows)
    Zq = apply_scaling(Xq, layer.offset, layer.scale).astype(np.float32)
    idx = NearestNeighbors(n_neighbors=m.n_neighbors).fit(decoded).kneighbors(Zq)[1]
    votes = np.stack([np.bincount(ref.labels[i], minlength=10) for i in idx]).astype(float)
    E = unit_rows(m.transform(Xq))
    own = ((E[:, None, :] - m.cluster_centers_[None]) ** 2).sum(-1).argmin(1)
    votes[np.arange(len(Xq)), own] += OWN_VOTE
    expected = m.predict(Xq)
    np.testing.assert_array_equal(expected, votes.argmax(1))

    saved = pickle.loads(pickle.dumps(m))
    del saved.labels_, saved.embedding_
    np.testing.assert_array_equal(saved.predict(Xq), expected)
    np.testing.assert_array_equal(saved.predict(X), m.labels_)


def test_without_keys_the_sampled_training_rows_keep_their_labels(digits):
    """Where the keys do not fit their budget no lookup is kept: a sampled training row
    still finds itself (distance 0 to its decoded copy is not guaranteed, so its own label
    comes from its neighbourhood) and most training rows get ``labels_`` back."""
    m = _fit(digits, REFERENCE_BYTES=600 * (64 + 8 * 12 + 8), LOOKUP_BYTES=0)
    assert m.reference_.keys is None
    assert (m.predict(digits) == m.labels_).mean() >= 0.95


def test_numpy_and_dask_fits_keep_the_same_reference(digits):
    """The reference is a function of the data and the seed: NumPy and dask input (any
    chunks) give the same rows, labels and keys, and the embedding to the rounding that
    the chunks' sums allow."""
    budget = {"REFERENCE_BYTES": 400 * (64 + 8 * 12 + 8)}
    a = _fit(digits, **budget).reference_
    b = _fit(da.from_array(digits, chunks=(500, 64)), **budget).reference_
    for name in ("rows", "labels", "keys", "key_labels"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_allclose(a.values, b.values, rtol=1e-5, atol=1e-7)


def test_the_reference_recognises_the_training_data(digits):
    """The training rows in the fit's order (NumPy or dask, any dtype) are recognised by a
    few rows' keys; the rows reordered, moved or fewer are not."""
    ref = _fit(digits).reference_
    assert ref.is_training_data(digits)
    assert ref.is_training_data(da.from_array(digits.astype(np.float32), chunks=(700, 64)))
    assert not ref.is_training_data(digits[::-1])
    assert not ref.is_training_data(digits + 1e-9)
    assert not ref.is_training_data(digits[:-1])


@pytest.mark.distributed
def test_on_a_cluster_the_reference_is_sent_once_and_answers_alike(digits, dask_client):
    """On a multi-process LocalCluster the reference is scattered to the workers once (the
    same future for a second call, none of its arrays in the task graph) and predict and
    transform give the in-process answers."""
    with dask.config.set(scheduler="threads"):
        m = USELM(n_clusters=10, random_state=0).fit(digits)
        Xq = digits[::3] + 0.5
        expected_labels, expected_embedding = m.predict(Xq), m.transform(Xq)
    Xd = da.from_array(Xq, chunks=(150, 64))
    labels = m.predict(Xd)
    assert max(len(pickle.dumps(task)) for task in dict(labels.__dask_graph__()).values()) < 1e5
    np.testing.assert_array_equal(labels.compute(), expected_labels)
    first = m.reference_._scattered[1]
    np.testing.assert_allclose(m.transform(Xd).compute(), expected_embedding, rtol=1e-12)
    assert m.reference_._scattered[1] is first
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(m)).predict(Xq), expected_labels)
