"""The MNIST-1M generator (benchmarks/_deformed_mnist.py): rows are a function of (seed, row)
only, whatever the chunking or the worker; they are MNIST digits moved a little, labelled as
their source; its two kernels equal scipy.ndimage's. Skips without mnist.npz (conftest's
``missing_dataset`` says where it looks)."""

import importlib

import dask
import numpy as np
import pytest

from .conftest import missing_dataset

gen = importlib.import_module("benchmarks._deformed_mnist")

needs_mnist = pytest.mark.skipif(
    missing_dataset("mnist") is not None, reason=str(missing_dataset("mnist"))
)


@pytest.fixture(scope="module")
def rows():
    """The first 2,500 rows of seed 3, generated in this process."""
    if missing_dataset("mnist"):
        pytest.skip(missing_dataset("mnist"))
    return gen.deformed_mnist_numpy(2500, seed=3)


@needs_mnist
def test_shape_dtype_range(rows):
    X, y = rows
    assert X.shape == (2500, 784) and X.dtype == np.float32
    assert y.shape == (2500,) and y.dtype == np.int64
    assert X.min() >= 0.0 and X.max() <= 1.0
    assert X.max() > 0.99  # strokes keep their full intensity somewhere


@needs_mnist
@pytest.mark.parametrize("chunk", [700, 1000, 2500])
def test_rows_do_not_depend_on_chunking(rows, chunk):
    Xd, yd = gen.deformed_mnist_dask(2500, seed=3, chunk=chunk)
    assert Xd.chunks[0][0] == chunk
    X, y = dask.compute(Xd, yd)
    np.testing.assert_array_equal(X, rows[0])
    np.testing.assert_array_equal(y, rows[1])
    # any range alone, across block boundaries, is the same rows again
    Xs, ys = gen.deformed_rows(950, 2050, 3, gen.mnist_path())
    np.testing.assert_array_equal(Xs, rows[0][950:2050])
    np.testing.assert_array_equal(ys, rows[1][950:2050])


@needs_mnist
@pytest.mark.distributed
def test_rows_on_the_workers_equal_rows_in_process(rows, dask_client):
    """Chunks computed on two worker processes, last chunk first, equal the in-process rows."""
    Xd, yd = gen.deformed_mnist_dask(2500, seed=3, chunk=600)
    blocks = Xd.to_delayed().ravel()[::-1]
    got = dask_client.compute(list(blocks) + [yd], sync=True)
    np.testing.assert_array_equal(np.concatenate(got[:-1][::-1]), rows[0])
    np.testing.assert_array_equal(got[-1], rows[1])


@needs_mnist
def test_seeds_differ(rows):
    X, _ = gen.deformed_mnist_numpy(500, seed=4)
    assert not np.array_equal(X, rows[0][:500])


@needs_mnist
def test_labels_are_the_source_digits_and_every_digit_is_used_once_per_epoch(rows):
    images, labels = gen.mnist_digits(gen.mnist_path())
    src = gen.source_rows(0, 2500, 3, images.shape[0])
    np.testing.assert_array_equal(rows[1], labels[src])
    first = gen.source_rows(0, 70_000, 3, 70_000)
    np.testing.assert_array_equal(np.sort(first), np.arange(70_000))
    second = gen.source_rows(70_000, 140_000, 3, 70_000)
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(np.sort(second), np.arange(70_000))


@needs_mnist
def test_deformation_is_small_but_real(rows):
    """Each row is its source moved, not copied: correlated with the source, never equal;
    and still a digit of its class: its nearest MNIST digit (the source excluded) mostly
    has its label."""
    X, y = rows
    images, labels = gen.mnist_digits(gen.mnist_path())
    src = gen.source_rows(0, 2500, 3, images.shape[0])
    S = images[src].reshape(-1, 784).astype(np.float32) / 255
    Xc, Sc = X - X.mean(1, keepdims=True), S - S.mean(1, keepdims=True)
    corr = (Xc * Sc).sum(1) / np.sqrt((Xc**2).sum(1) * (Sc**2).sum(1))
    assert corr.max() < 0.995
    assert 0.6 < np.median(corr) < 0.9
    # a random pair of different digits correlates far less
    other = images[(src + 1) % images.shape[0]].reshape(-1, 784).astype(np.float32) / 255
    Oc = other - other.mean(1, keepdims=True)
    pair = (Xc * Oc).sum(1) / np.sqrt((Xc**2).sum(1) * (Oc**2).sum(1))
    assert np.median(corr) > np.median(pair) + 0.2
    pool = images[:20_000].reshape(-1, 784).astype(np.float32) / 255
    d2 = (pool**2).sum(1)[None] - 2 * X[:500] @ pool.T
    d2[src[:500, None] == np.arange(20_000)[None]] = np.inf
    assert (labels[:20_000][d2.argmin(1)] == y[:500]).mean() > 0.75


@needs_mnist
def test_no_deformation_gives_the_source_digits():
    images, _ = gen.mnist_digits(gen.mnist_path())
    X, _ = gen.deformed_mnist_numpy(300, seed=1, alpha=0.0, rotation=0.0, scale=0.0, shift=0.0)
    src = gen.source_rows(0, 300, 1, images.shape[0])
    np.testing.assert_allclose(X, images[src].reshape(-1, 784) / 255, atol=1e-6)


def test_smooth_equals_scipy_gaussian_filter():
    from scipy.ndimage import gaussian_filter

    F = np.random.default_rng(0).uniform(-1, 1, (7, 2, 28, 28)).astype(np.float32)
    for sigma in (4.0, 5.0, 6.0):
        ref = gaussian_filter(F, sigma=(0, 0, sigma, sigma), mode="constant")
        np.testing.assert_allclose(gen.smooth(F, sigma), ref, atol=1e-6)


def test_bilinear_equals_scipy_map_coordinates():
    from scipy.ndimage import map_coordinates

    rng = np.random.default_rng(1)
    images = rng.random((5, 28, 28), dtype=np.float32)
    r = rng.uniform(-3, 31, (5, 28, 28)).astype(np.float32)
    c = rng.uniform(-3, 31, (5, 28, 28)).astype(np.float32)
    b = np.broadcast_to(np.arange(5.0)[:, None, None], r.shape)
    ref = map_coordinates(images, [b, r, c], order=1, mode="grid-constant", cval=0.0)
    np.testing.assert_allclose(gen.bilinear(images, r, c), ref, atol=1e-5)


@needs_mnist
def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="unknown deformation parameters.*'alfa'"):
        gen.deformed_mnist_dask(100, alfa=3.0)
    with pytest.raises(ValueError, match="chunk must be a positive"):
        gen.deformed_mnist_dask(100, chunk=0)


def test_missing_dataset_raises_dataset_missing(tmp_path):
    from benchmarks._common import DatasetMissing

    with pytest.raises(DatasetMissing, match="mnist"):
        gen.deformed_mnist_dask(100, datasets_dir=tmp_path)
