"""Same-run floors of a US-ELM fit's stages: the arithmetic each stage cannot avoid, timed on the
fit's own cluster and rows right after the fit, so that a stage's time over its floor says how far
the stage is from the hardware whatever the machine and its load at the time.

=============== ==========================================================================
stage           floor (one pass over the rows, each task one chunk, reduced to a scalar)
=============== ==========================================================================
hidden          the columns' minima and maxima (the scaling the layer is drawn for): one read
                of X
graph           each row's products with ``n_probes * rows_per_cell`` rows: the multiply-adds
                of the estimators' fixed cell search, without selecting or exchanging
smoothing       ``steps`` products of a chunk-local sparse matrix of ``n_neighbors`` entries a
                row with the chunk's rows: the filter without its halo exchange
gram            ``H^T H`` plus ``H^T (W H)``: each chunk's hidden rows, syrk and a GEMM with
                a buffer of H's shape; the sparse ``W H`` (a multiply-add per stored edge,
                about 2 ``n_neighbors`` a row, per hidden node: ~2 % of the GEMM's) and the
                halo's hidden rows (built again from X, or sent) are the pass's own work
hth             one streamed ``H^T H`` (``hidden_stats(features, ("hth",))``): the floor of
                the whole fit
embed_cluster   ``E = H beta`` (H rebuilt, times the fitted output weights) summed; k-means's
                passes over E come on top
=============== ==========================================================================
"""

import time

import numpy as np

#: queries multiplied at once in the graph's floor (the search's own block of queries)
QUERY_BLOCK = 4096


def _probe_products(block, width, seed):
    """Sum of the row minima of ``block @ R^T`` for a fixed random R of ``width`` rows."""
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((width, block.shape[1])).astype(block.dtype)
    total = 0.0
    for start in range(0, block.shape[0], QUERY_BLOCK):
        total += float((block[start : start + QUERY_BLOCK] @ R.T).min(axis=1).sum())
    return np.array([total])


def _local_filter(block, n_neighbors, steps, seed):
    """``steps`` products of a sparse matrix with ``n_neighbors`` entries a row, among the
    block's own rows, with the block's rows."""
    import scipy.sparse as sp

    n = block.shape[0]
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, n, size=n * n_neighbors)
    rows = np.repeat(np.arange(n), n_neighbors)
    W = sp.csr_matrix((np.full(cols.size, 1.0 / n_neighbors, block.dtype), (rows, cols)), (n, n))
    out = block
    for _ in range(steps):
        out = W @ out
    return np.array([float(out.sum())])


def _gram_products(block, layer):
    """The Gram pass's dense arithmetic on one chunk, reduced to a scalar: its hidden rows
    H, ``H^T H`` (one buffer twice: syrk) and the GEMM ``H^T G`` of a second buffer of H's
    shape, as ``H^T (W H)`` multiplies."""
    H = layer(block)
    G = np.roll(H, 1, axis=0)  # W H's stand-in: another buffer, so that BLAS runs a GEMM
    return np.array([float((H.T @ H).sum() + (H.T @ G).sum())])


def blockwise(X, fn, *args):
    """A callable computing ``fn(block, *args)`` (a length-1 array) on every row chunk of
    the dask array X, summed: one pass, each task one chunk."""
    import dask.array as da

    parts = X.map_blocks(fn, *args, drop_axis=1, chunks=((1,) * X.numblocks[0],), dtype=float)
    return lambda: da.sum(parts).compute()


def gram_floor(features):
    """A callable computing the Gram floor (the module docstring) of ``features``
    (:class:`elmscale.hidden.HiddenFeatures`, H rebuilt from X's row chunks)."""
    import dask

    return blockwise(features.X, _gram_products, dask.delayed(features.layer, pure=True))


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def stage_floors(model, X, *, smoothing_steps):
    """``{stage: seconds}`` of the floors in the module docstring for the fitted US-ELM
    ``model`` on its training rows ``X`` (as given to ``fit``), computed on the current client.

    The graph's floor takes ``n_probes`` and ``rows_per_cell`` from the fixed search the
    estimators run (:class:`elmscale.graph.CellSearch`'s defaults); ``smoothing_steps`` is
    the filter's step count (the fit's ``smoothing_steps_``, or the steps it tried before
    deciding not to filter; 0: no smoothing floor)."""
    import dask

    from elmscale.gram import hidden_stats
    from elmscale.graph import CellSearch
    from elmscale.utils import as_row_chunked

    search = CellSearch()
    Xd, _ = as_row_chunked(X, n_hidden=model.n_hidden)
    Xd = Xd.persist()
    dask.compute(Xd.sum())
    features = model.hidden_features(Xd, cache=False)
    width = search.n_probes * search.rows_per_cell

    floors = {
        "hidden": _timed(lambda: dask.compute(Xd.min(axis=0), Xd.max(axis=0))),
        "graph": _timed(blockwise(Xd, _probe_products, width, 0)),
        "gram": _timed(gram_floor(features)),
        "hth": _timed(lambda: hidden_stats(features, ("hth",))),
        "embed_cluster": _timed(
            lambda: features.project(model.output_weights_, reuse=False).sum(axis=0).compute()
        ),
    }
    if smoothing_steps:
        filtered = blockwise(Xd, _local_filter, model.n_neighbors, smoothing_steps, 0)
        floors["smoothing"] = _timed(filtered)
    return {k: round(v, 3) for k, v in floors.items()}
