"""Small steps on an embedding shared by the spectral-type estimators."""

import numpy as np


def resolve_n_components(n_components, default, n_samples, n_hidden):
    """``n_components`` with ``"auto"`` standing for ``default``, checked against the data:
    an embedding has fewer columns than H and than X has rows."""
    n = default if n_components == "auto" else n_components
    if n >= n_hidden:
        raise ValueError(f"n_components={n} must be smaller than n_hidden={n_hidden}")
    if n >= n_samples:
        raise ValueError(f"n_components={n} must be smaller than n_samples={n_samples}")
    return n


def unit_rows(E):
    """Rows of E scaled to unit Euclidean length (zero rows stay zero), for a NumPy or a
    dask array (blockwise)."""
    if isinstance(E, np.ndarray):
        return _unit_rows(E)
    return E.map_blocks(_unit_rows, dtype=E.dtype, meta=np.empty((0, 0), dtype=E.dtype))


def _unit_rows(E):
    norms = np.sqrt(np.einsum("ij,ij->i", E, E))
    norms[norms == 0] = 1.0
    return E / norms[:, None]
