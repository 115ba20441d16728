"""The synthetic benchmark data: a d-dimensional Gaussian mixture generated chunk by chunk.

Every chunk is a pure function of (seed, chunk index), so the same rows can be built in one
process for a NumPy baseline or on the workers for elmscale, never shipped from a client."""

import numpy as np

CHUNK = 50_000


def centers(n_clusters, n_features, seed, spread=0.4):
    return np.random.RandomState(seed).normal(0.0, spread, size=(n_clusters, n_features))


def mixture_chunk(i, n_rows, n_features, n_clusters, seed, dtype=np.float32):
    """Rows [i * CHUNK, i * CHUNK + n_rows): unit-variance Gaussians around the centres,
    the class of row r being r mod n_clusters (balanced, interleaved)."""
    rng = np.random.default_rng([seed, i])
    C = centers(n_clusters, n_features, seed)
    y = (np.arange(i * CHUNK, i * CHUNK + n_rows) % n_clusters).astype(np.int64)
    X = (C[y] + rng.standard_normal((n_rows, n_features))).astype(dtype)
    return X, y


def mixture_dask(n, n_features=50, n_clusters=10, seed=0, dtype=np.float32):
    """(X, y) as dask arrays whose chunks are generated on the workers."""
    import dask
    import dask.array as da

    Xs, ys = [], []
    for i in range((n + CHUNK - 1) // CHUNK):
        rows = min(CHUNK, n - i * CHUNK)
        part = dask.delayed(mixture_chunk, pure=True, nout=2)(
            i, rows, n_features, n_clusters, seed, dtype
        )
        Xs.append(da.from_delayed(part[0], (rows, n_features), dtype=dtype))
        ys.append(da.from_delayed(part[1], (rows,), dtype=np.int64))
    return da.concatenate(Xs), da.concatenate(ys)


def subspace_chunk(i, n_rows, n_features, n_clusters, seed, dim=6, noise=0.05, dtype=np.float32):
    """Rows [i * CHUNK, i * CHUNK + n_rows) of data of low intrinsic dimension: cluster c
    lies on its own random ``dim``-dimensional affine subspace (unit-variance coordinates,
    centres spread with standard deviation 2), plus isotropic noise of ``noise``."""
    basis_rng = np.random.RandomState(seed)
    C = basis_rng.normal(0.0, 2.0, size=(n_clusters, n_features))
    B = np.stack(
        [np.linalg.qr(basis_rng.standard_normal((n_features, dim)))[0].T for _ in range(n_clusters)]
    )  # (clusters, dim, features)
    rng = np.random.default_rng([seed, i, 1])
    y = (np.arange(i * CHUNK, i * CHUNK + n_rows) % n_clusters).astype(np.int64)
    Z = rng.standard_normal((n_rows, dim))
    X = C[y] + np.einsum("nd,ndf->nf", Z, B[y]) + noise * rng.standard_normal((n_rows, n_features))
    return X.astype(dtype), y


def generated_dask(
    chunk_fn, n, n_features=50, n_clusters=10, seed=0, dtype=np.float32, chunk=CHUNK
):
    """(X, y) as dask arrays whose chunks ``chunk_fn(i, rows, d, clusters, seed, dtype=)``
    of ``chunk`` rows are generated on the workers."""
    import dask
    import dask.array as da

    Xs, ys = [], []
    for i in range((n + chunk - 1) // chunk):
        rows = min(chunk, n - i * chunk)
        part = dask.delayed(chunk_fn, pure=True, nout=2)(
            i, rows, n_features, n_clusters, seed, dtype=dtype
        )
        Xs.append(da.from_delayed(part[0], (rows, n_features), dtype=dtype))
        ys.append(da.from_delayed(part[1], (rows,), dtype=np.int64))
    return da.concatenate(Xs), da.concatenate(ys)
