"""Per-feature input scaling, fitted in one blockwise pass and applied inside each task."""

import dask
import dask.array as da
import numpy as np

from ..utils._dask import task_name

SCALINGS = ("standard", "minmax", None)


def fit_scaling(X, method):
    """Return ``(offset, scale)`` (float64 vectors) so that ``(X - offset) / scale`` is
    standardised (``"standard"``: zero mean, unit variance) or mapped to [-1, 1]
    (``"minmax"``, the ELM-JEC protocol); ``None`` gives ``(None, None)``.

    Constant features get scale 1, so they map to 0 instead of NaN.
    """
    if method is None:
        return None, None
    if method == "standard":
        offset, var = dask.compute(
            X.mean(axis=0, dtype=np.float64), X.var(axis=0, dtype=np.float64)
        )
        scale = np.sqrt(var)
    elif method == "minmax":
        lo, hi = dask.compute(X.min(axis=0), X.max(axis=0))
        lo, hi = lo.astype(np.float64), hi.astype(np.float64)
        offset, scale = (hi + lo) / 2, (hi - lo) / 2
    else:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {method!r}")
    scale = np.where(scale > 1e-12 * max(1.0, float(np.abs(offset).max(initial=0))), scale, 1.0)
    return np.asarray(offset, dtype=np.float64), np.asarray(scale, dtype=np.float64)


def apply_scaling(X, offset, scale):
    """``(X - offset) / scale`` for a NumPy block or a dask array (identity when None).

    A dask array gets one task per block named uniquely per call: the scaled rows are
    read by several computations of a fit, and a name hashed from X would stand for
    differently fused tasks in their graphs (dask/dask#9888)."""
    if offset is None:
        return X
    if isinstance(X, da.Array):
        return X.map_blocks(
            apply_scaling, offset, scale, dtype=X.dtype, name=task_name("elmscale-scale")
        )
    scaled = np.subtract(X, offset, dtype=np.result_type(X, offset))
    scaled /= scale  # in place: one temporary of the block's size, not two
    return scaled.astype(X.dtype, copy=False)
