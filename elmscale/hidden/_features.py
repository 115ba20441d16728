"""H for a row-chunked X: recomputed in every pass, or cached on the workers."""

import logging

import dask
import numpy as np

logger = logging.getLogger(__name__)

CACHE_OPTIONS = ("auto", True, False)


def _cluster_memory():
    """Total worker memory of the active distributed client, else this machine's RAM."""
    try:
        from distributed import get_client

        info = get_client().scheduler_info(n_workers=-1)
        return sum(w.get("memory_limit", 0) or 0 for w in info["workers"].values())
    except (ImportError, ValueError):
        pass
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class HiddenFeatures:
    """The hidden-layer matrix ``H = layer(X)`` of a row-chunked dask array.

    H is never gathered to the client. With ``cache=False`` every use rebuilds each block from
    X (one ``X_b A`` product and an activation); with ``cache=True`` H's blocks are persisted
    in worker memory after the first use, which iterative algorithms (ELM-JEC, EMMC) pay
    back after one iteration. ``"auto"`` caches when ``N * n_hidden * itemsize`` is at most a
    quarter of the cluster's memory; the choice is logged and exposed as ``cached``.
    """

    def __init__(self, X, layer, cache="auto"):
        if cache not in CACHE_OPTIONS:
            raise ValueError(f"cache must be one of {CACHE_OPTIONS}, got {cache!r}")
        self.X = X
        self.layer = layer
        nbytes = X.shape[0] * layer.n_hidden * X.dtype.itemsize
        if cache == "auto":
            cache = nbytes <= _cluster_memory() / 4
        self.cached = bool(cache)
        self.nbytes = nbytes
        self._H = None
        logger.info(
            "hidden layer: %d x %d %s (%.1f MB), %s",
            X.shape[0],
            layer.n_hidden,
            X.dtype,
            nbytes / 1e6,
            "cached on the workers" if self.cached else "recomputed per pass",
        )

    @property
    def chunks(self):
        return self.X.chunks[0]

    @property
    def H(self):
        """H as a dask array (persisted when cached)."""
        if self._H is None:
            H = self.layer.transform(self.X)
            if self.cached:
                H = H.persist()
            self._H = H
        return self._H

    def blocks(self):
        """One delayed H block per row chunk."""
        return self.H.to_delayed().ravel().tolist()

    @property
    def materialized(self):
        """Whether H's blocks are held on the workers already."""
        return self._H is not None

    def project(self, beta, *, reuse=True):
        """``H @ beta`` (N x n_outputs) as a lazy dask array chunked like X's rows.

        A cached H not built yet is built and kept for later passes; with ``reuse=False``
        (no later pass will read it) each task builds its block of H and projects it instead,
        so H is never held."""
        beta = np.asarray(beta)
        beta_d = dask.delayed(beta.astype(self.X.dtype), pure=True)
        kwargs = dict(
            dtype=self.X.dtype,
            token="elmscale-embed",
            chunks=(self.chunks, (beta.shape[1],)),
            meta=np.empty((0, 0), dtype=self.X.dtype),
        )
        if self.cached and (reuse or self.materialized):
            return self.H.map_blocks(_matmul, beta_d, **kwargs)
        # one task per chunk builds H_b and projects it: the block never leaves the task
        layer = dask.delayed(self.layer, pure=True)
        return self.X.map_blocks(_project, layer, beta_d, **kwargs)

    def release(self):
        """Drop the cached blocks from worker memory."""
        self._H = None


def _matmul(H_block, beta):
    return H_block @ beta


def _project(X_block, layer, beta):
    return layer(X_block) @ beta


__all__ = ["CACHE_OPTIONS", "HiddenFeatures"]
