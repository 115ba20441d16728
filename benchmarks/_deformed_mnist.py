"""MNIST-1M: deformed copies of the 70,000 MNIST digits, generated chunk by chunk on the workers.

The infiMNIST / MNIST8M idea (Loosli, Canu and Bottou 2007) that large-scale spectral clustering
papers use for a million realistic rows: every row is a source digit moved by a random elastic
deformation (Simard, Steinkraus and Platt 2003: a field of uniform(-1, 1) displacements smoothed
by a Gaussian of ``sigma`` pixels and scaled by ``alpha``) composed with a small random affine
map (rotation, scale, shift), sampled bilinearly; the row's label is its source digit's.

Row ``r`` depends only on ``(seed, r)``: rows are drawn in blocks of :data:`BLOCK` from the
generator seeded by ``(seed, block)``, and the source digits pass through MNIST in the order of
a permutation seeded by ``(seed, epoch)`` (epoch ``r // 70000``), so every digit is used
``n / 70000`` times (give or take one) and the class proportions are MNIST's. The same rows come
out for any chunking, scheduler or worker. The digits are read from the ``.npz`` once per
process (:func:`mnist_digits`), not shipped inside every task.
"""

import functools
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks._common import DATASETS_DIR
from benchmarks._mixture import generated_dask

SIDE = 28
N_FEATURES = SIDE * SIDE
#: rows drawn from one generator: the unit of determinism
BLOCK = 1000
#: :func:`deform`'s keywords: the smooth end of Simard et al.'s elastic fields (alpha 30-36,
#: sigma 4-6 px), rotation up to 10 degrees, scale 0.9-1.1 and a shift of up to 1 px. Stronger
#: moves (alpha 34, sigma 4-5, 2 px shifts) make the rows much harder to cluster than MNIST's
#: own digits, for k-means on the pixels too: no longer MNIST at a larger size
DEFORMATION = {"alpha": 30.0, "sigma": 6.0, "rotation": 10.0, "scale": 0.1, "shift": 1.0}


def mnist_path(datasets_dir=None):
    """``<datasets_dir>/mnist.npz`` (default ``../shared/datasets``) as a string."""
    return str(Path(datasets_dir or DATASETS_DIR) / "mnist.npz")


@functools.lru_cache(maxsize=2)
def mnist_digits(path):
    """``(images, labels)`` of the MNIST ``.npz`` at ``path``: uint8 (70000, 28, 28) and int64,
    read once per process (each worker keeps its copy, 55 MB)."""
    with np.load(path) as data:
        images = np.ascontiguousarray(data["X"]).reshape(-1, SIDE, SIDE)
        labels = np.asarray(data["y"], dtype=np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def source_rows(start, stop, seed, n_source):
    """Index of the source digit of rows ``[start, stop)``: epoch ``e = r // n_source`` walks
    the digits in the order of the permutation seeded by ``(seed, 0, e)``."""
    epoch, pos = np.divmod(np.arange(start, stop), n_source)
    out = np.empty(stop - start, dtype=np.int64)
    for e in np.unique(epoch):
        perm = np.random.default_rng([seed, 0, int(e)]).permutation(n_source)
        mask = epoch == e
        out[mask] = perm[pos[mask]]
    return out


def bilinear(images, rows, cols):
    """``images[b]`` sampled at ``(rows[b], cols[b])`` (each (B, h, w), in pixels), bilinear,
    zero outside the image: the images get a border of zeros and the coordinates are clipped
    into it, so whatever falls outside reads zeros only."""
    B, h, w = images.shape
    padded = np.zeros((B, h + 2, w + 2), dtype=np.float32)
    padded[:, 1:-1, 1:-1] = images
    flat = padded.reshape(-1)
    u = np.clip(rows + 1, 0, h + 1).astype(np.float32)
    v = np.clip(cols + 1, 0, w + 1).astype(np.float32)
    r0 = np.minimum(np.floor(u), h)
    c0 = np.minimum(np.floor(v), w)
    fu, fv = u - r0, v - c0
    base = np.arange(B)[:, None, None] * ((h + 2) * (w + 2)) + (
        r0.astype(np.intp) * (w + 2) + c0.astype(np.intp)
    )
    top = flat[base] * (1 - fv) + flat[base + 1] * fv
    bottom = flat[base + w + 2] * (1 - fv) + flat[base + w + 3] * fv
    return top * (1 - fu) + bottom * fu


@functools.lru_cache(maxsize=8)
def gaussian_matrix(sigma, size=SIDE, truncate=4.0):
    """``G`` (size x size, float32) with ``G @ v`` = ``scipy.ndimage.gaussian_filter1d(v,
    sigma, mode="constant", truncate=truncate)``: the kernel normalised over its full width,
    cut at the image's border."""
    radius = int(truncate * float(sigma) + 0.5)
    k = np.arange(-radius, radius + 1)
    w = np.exp(-0.5 * (k / float(sigma)) ** 2)
    w /= w.sum()
    lag = np.arange(size)[:, None] - np.arange(size)[None, :]
    G = np.where(np.abs(lag) <= radius, w[np.clip(lag + radius, 0, 2 * radius)], 0.0)
    return G.astype(np.float32)


def smooth(fields, sigma):
    """Each (h, w) image of ``fields`` (..., h, w) filtered by a Gaussian of ``sigma`` px along
    both axes, zero outside (``gaussian_filter(mode="constant")`` on the last two axes), as
    two products with :func:`gaussian_matrix` (one GEMM each)."""
    *lead, h, w = fields.shape
    if h != w:
        raise ValueError(f"smooth expects square images, got {h} x {w}")
    G = gaussian_matrix(sigma, h)
    # on one BLAS thread, as on a dask worker: a multi-threaded product splits its rows
    # otherwise, and rounds some of them differently
    with threadpool_limits(1, user_api="blas"):
        cols = fields.reshape(-1, w) @ G.T  # along the last axis
        rows = np.swapaxes(cols.reshape(-1, h, w), 1, 2).reshape(-1, h) @ G.T
    return np.swapaxes(rows.reshape(-1, w, h), 1, 2).reshape(fields.shape)


def deform(images, draws, *, alpha, sigma, rotation, scale, shift):
    """Images (B, 28, 28) in [0, 1] moved by elastic fields and affine maps: float32 (B, 784).

    ``draws`` holds the random numbers, uniform in [-1, 1): ``field`` (B, 2, 28, 28), ``angle``,
    ``zoom`` (B,) and ``offset`` (B, 2). Output pixel p samples the source (:func:`bilinear`)
    at ``c + R(angle * rotation) (p - c) / (1 + zoom * scale) - offset * shift + field'(p)``,
    c the image centre and field' the field smoothed by a Gaussian of ``sigma`` px (zero
    outside the image) times ``alpha``: rotation in degrees, scale a fraction, shift in px.
    """
    B = images.shape[0]
    field = alpha * smooth(draws["field"], sigma)
    theta = np.deg2rad(rotation * draws["angle"])
    z = 1.0 + scale * draws["zoom"]
    cos = (np.cos(theta) / z).astype(np.float32)[:, None, None]
    sin = (np.sin(theta) / z).astype(np.float32)[:, None, None]
    c = np.float32((SIDE - 1) / 2)
    g = np.arange(SIDE, dtype=np.float32) - c
    rr, cc = g[:, None], g[None, :]
    dr, dc = (shift * draws["offset"]).astype(np.float32).T[:, :, None, None]
    src_r = c + cos * rr - sin * cc - dr + field[:, 0]
    src_c = c + sin * rr + cos * cc - dc + field[:, 1]
    out = bilinear(images, src_r, src_c)
    return np.clip(out, 0.0, 1.0, out=out).reshape(B, N_FEATURES)


def _block_draws(block, seed):
    """The random numbers of block ``block`` (all its :data:`BLOCK` rows)."""
    rng = np.random.default_rng([seed, 1, block])
    return {
        "field": 2 * rng.random((BLOCK, 2, SIDE, SIDE), dtype=np.float32) - 1,
        "angle": rng.uniform(-1.0, 1.0, BLOCK),
        "zoom": rng.uniform(-1.0, 1.0, BLOCK),
        "offset": rng.uniform(-1.0, 1.0, (BLOCK, 2)),
    }


def deformed_rows(start, stop, seed, path, **deformation):
    """``(X, y)`` of rows ``[start, stop)``: float32 (rows, 784) in [0, 1], int64 labels.

    Every block of :data:`BLOCK` rows is deformed whole and then cut: the smoothing's
    products then have the same shapes for any range, and a BLAS kernel may round a row
    differently in a product of another shape."""
    images, labels = mnist_digits(path)
    kw = {**DEFORMATION, **deformation}
    parts, part_labels = [], []
    for block in range(start // BLOCK, (stop - 1) // BLOCK + 1):
        keep = slice(
            max(start, block * BLOCK) - block * BLOCK,
            min(stop, (block + 1) * BLOCK) - block * BLOCK,
        )
        src = source_rows(block * BLOCK, (block + 1) * BLOCK, seed, images.shape[0])
        sources = images[src].astype(np.float32) / 255.0
        parts.append(deform(sources, _block_draws(block, seed), **kw)[keep])
        part_labels.append(labels[src[keep]])
    return np.concatenate(parts), np.concatenate(part_labels)


def deformed_chunk(
    i, n_rows, n_features, n_clusters, seed, dtype=np.float32, *, chunk, path, deformation
):
    """Chunk ``i`` of ``chunk`` rows (``n_rows`` of them) in :func:`generated_dask`'s
    signature; ``n_features`` and ``n_clusters`` are MNIST's (784, 10)."""
    if n_features != N_FEATURES or n_clusters != 10:
        raise ValueError(f"MNIST has 784 features and 10 classes, got {n_features}, {n_clusters}")
    X, y = deformed_rows(i * chunk, i * chunk + n_rows, seed, path, **deformation)
    return X.astype(dtype, copy=False), y


def deformed_mnist_numpy(n, seed=0, datasets_dir=None, **deformation):
    """``(X, y)`` of the first ``n`` rows in this process (tests, small baselines)."""
    return deformed_rows(0, n, seed, mnist_path(datasets_dir), **deformation)


def deformed_mnist_dask(n, seed=0, chunk=None, datasets_dir=None, **deformation):
    """``(X, y)`` as dask arrays whose chunks of ``chunk`` rows (default: elmscale's row
    chunks for NumPy input, one 64 MiB block of H each) are generated on the workers;
    ``deformation`` overrides :data:`DEFORMATION`.

    Raises :class:`benchmarks._common.DatasetMissing` when ``mnist.npz`` is not there.
    """
    from benchmarks._common import DatasetMissing
    from elmscale import get_config

    path = mnist_path(datasets_dir)
    if not Path(path).is_file():
        raise DatasetMissing(f"dataset 'mnist' not found at {path}")
    if chunk is None:  # rows of one block of H at n_hidden 1000, as for NumPy input
        config = get_config()
        chunk = min(n, config["chunk_bytes"] // (1000 * np.dtype(config["compute_dtype"]).itemsize))
    if int(chunk) < 1:
        raise ValueError(f"chunk must be a positive number of rows, got {chunk!r}")
    unknown = set(deformation) - set(DEFORMATION)
    if unknown:
        raise TypeError(f"unknown deformation parameters {sorted(unknown)}; expected {DEFORMATION}")
    fn = functools.partial(deformed_chunk, chunk=int(chunk), path=path, deformation=deformation)
    return generated_dask(fn, n, N_FEATURES, 10, seed, chunk=int(chunk))
