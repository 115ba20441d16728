"""Library-wide settings: how large a row block is, which float type the blocks use."""

import contextlib
import threading

import numpy as np

_DEFAULTS = {
    # Bytes of one block of H (rows x n_hidden x itemsize) when elmscale chunks NumPy input.
    "chunk_bytes": 64 * 2**20,
    # Float type of the hidden layer and the block products. Partial sums are always
    # accumulated, and every solve is done, in float64. float32 is 2-2.6x faster on the
    # Gram blocks; the reduced matrices then agree with float64 to about 1e-6 relative.
    "compute_dtype": "float64",
}
_local = threading.local()


def get_config():
    """Return a copy of the current settings (a dict)."""
    return dict(getattr(_local, "config", _DEFAULTS))


def set_config(*, chunk_bytes=None, compute_dtype=None):
    """Change settings for this thread. ``None`` leaves a setting as it is."""
    config = get_config()
    if chunk_bytes is not None:
        if int(chunk_bytes) <= 0:
            raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
        config["chunk_bytes"] = int(chunk_bytes)
    if compute_dtype is not None:
        if np.dtype(compute_dtype) not in (np.float32, np.float64):
            raise ValueError(f"compute_dtype must be 'float32' or 'float64', got {compute_dtype!r}")
        config["compute_dtype"] = np.dtype(compute_dtype).name
    _local.config = config


@contextlib.contextmanager
def config_context(**settings):
    """Temporarily change settings, e.g. ``with config_context(compute_dtype="float32"):``."""
    old = get_config()
    set_config(**settings)
    try:
        yield
    finally:
        _local.config = old
