"""H for a row-chunked X: recomputed in every pass, or cached on the workers."""

import logging

import dask
import numpy as np

from ._layer import project_block

logger = logging.getLogger(__name__)

CACHE_OPTIONS = ("auto", True, False)

#: ``cache="auto"`` keeps H when H and X take at most this share of the cluster's memory
CACHE_MEMORY_SHARE = 0.5


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


def fits_in_memory(nbytes):
    """Whether arrays of ``nbytes`` in all may be kept on the workers between passes: at
    most :data:`CACHE_MEMORY_SHARE` of the cluster's memory (the machine's without a
    distributed client)."""
    return nbytes <= CACHE_MEMORY_SHARE * _cluster_memory()


class HiddenFeatures:
    """The hidden-layer matrix ``H = layer(X)`` of a row-chunked dask array.

    H is never gathered to the client. With ``cache=False`` every use rebuilds each block from
    X (one ``X_b A`` product and an activation); with ``cache=True`` H's blocks are persisted
    in worker memory after the first use, which iterative algorithms (ELM-JEC, EMMC) pay
    back after one iteration. ``"auto"`` caches when H (``N * n_hidden * itemsize``) and X
    together take at most :data:`CACHE_MEMORY_SHARE` of the cluster's memory: what is held
    stays below distributed's spilling threshold (60 % of a worker's memory), with the rest
    left to the tasks. The choice is logged and exposed as ``cached``.

    ``output_order`` (anything with an ``apply`` method, e.g. a
    ``RowOrder`` of :mod:`elmscale.graph`) moves every projection ``H beta`` to other rows, for X
    held in a graph's row order whose results belong to the input's rows.
    """

    def __init__(self, X, layer, cache="auto", *, output_order=None):
        if cache not in CACHE_OPTIONS:
            raise ValueError(f"cache must be one of {CACHE_OPTIONS}, got {cache!r}")
        self.X = X
        self.layer = layer
        self.output_order = output_order
        nbytes = X.shape[0] * layer.n_hidden * X.dtype.itemsize
        if cache == "auto":
            cache = fits_in_memory(nbytes + X.nbytes)
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

    def sources(self):
        """``(blocks, layer)``: one delayed block per row chunk to build H's block from, and
        the delayed layer that builds it (None when the blocks are H's own, cached). A task
        that reads a block of X builds its hidden rows itself (:func:`hidden_rows`), so H's
        block never leaves it, and a task that needs a few rows builds only those."""
        if self.cached:
            return self.blocks(), None
        return self.X.to_delayed().ravel().tolist(), dask.delayed(self.layer, pure=True)

    @property
    def materialized(self):
        """Whether H's blocks are held on the workers already."""
        return self._H is not None

    def project(self, beta, *, reuse=True):
        """``H @ beta`` (N x n_outputs) as a lazy dask array chunked like X's rows (in
        ``output_order`` when given).

        A cached H not built yet is built and kept for later passes; with ``reuse=False``
        (no later pass will read it) each task builds its block of H and projects it instead,
        so H is never held."""
        if self.cached and (reuse or self.materialized):
            E = _map_rows(self.H, _matmul, np.asarray(beta), self.X.dtype)
        else:
            E = project_rows(self.X, self.layer, beta)
        return E if self.output_order is None else self.output_order.apply(E)

    def release(self):
        """Drop the cached blocks from worker memory."""
        self._H = None


def hidden_rows(block, layer, rows=None):
    """The hidden rows of a block from :meth:`HiddenFeatures.sources` (all, or those at
    ``rows``): built from X's rows by ``layer``, or taken from H's block when ``layer`` is
    None."""
    if rows is not None:
        block = block[rows]
    return block if layer is None else layer(block)


def project_rows(X, layer, weights):
    """``layer(X) @ weights`` as a lazy dask array chunked like X's rows, in X's dtype.

    One task per row chunk builds its block of ``layer(X)`` and multiplies it, so the block
    never leaves the task. ``layer`` is any callable on a NumPy block of rows (a hidden
    layer, or the input scaling for a linear map of the scaled inputs); it and ``weights``
    enter the task graph once each as pure delayed objects, and the keys
    (``elmscale-embed-<token>``) hash them. Calling it twice with the same arguments gives
    the same keys for the same tasks, which is what a predict or transform computed again and
    again on a distributed cluster needs: an expression such as ``scaled(X) @ beta`` embeds
    the arrays in each task, and can hand the scheduler one key with two different task
    specifications ("Detected different run_spec for key").
    """
    weights = np.asarray(weights)
    return _map_rows(X, _project, weights, X.dtype, dask.delayed(layer, pure=True))


def _map_rows(A, func, weights, dtype, *layer):
    """``func(A_block, *layer, weights)`` per row chunk, keyed ``elmscale-embed-<token>``."""
    weights_d = dask.delayed(weights.astype(dtype), pure=True)
    return A.map_blocks(
        func,
        *layer,
        weights_d,
        dtype=dtype,
        token="elmscale-embed",
        chunks=(A.chunks[0], (weights.shape[1],)),
        meta=np.empty((0, 0), dtype=dtype),
    )


def _matmul(H_block, beta):
    return H_block @ beta


def _project(X_block, layer, beta):
    return project_block(layer, X_block, beta)


__all__ = ["CACHE_OPTIONS", "HiddenFeatures", "project_rows"]
