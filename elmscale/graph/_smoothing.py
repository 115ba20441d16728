"""Graph-filtered inputs: each row of X averaged over its kNN-graph neighbourhood.

``smooth_rows`` applies the lazy random walk ``S = (I + P) / 2`` to X ``steps`` times, P the
graph's weights with each row scaled to sum to one. S^t is a low-pass filter on the graph:
its eigenvalues ``1 - mu / 2`` (mu those of the random-walk Laplacian ``I - P``, in [0, 2])
keep the smooth directions and damp the rough ones geometrically. A hidden layer drawn on the
filtered rows spans functions that vary slowly along the graph, which is where the
Rayleigh-Ritz problem of US-ELM (eq. 20) looks for its embedding; on raw rows its span also
holds rough functions whose residuals decide the smallest Rayleigh quotients instead. The
same filter underlies simplified graph convolution (Wu et al., ICML 2019) and attributed
graph clustering by graph filtering (Zhang et al., IJCAI 2019).

Each row of P sums to one, so S commutes with a per-feature affine scaling: filtering raw X
and scaling afterwards equals filtering scaled X. Each step is one blockwise product on the
graph's row chunks that ships the halo rows of the current X (d numbers per row), as the Gram
pass does.
"""

import copy
import functools

import dask
import numpy as np

from ._tasks import row_numbers, task


def _smooth_block(X_block, graph_block, halo_pieces):
    """One lazy random-walk step on chunk b's rows: ``(X_b + P_b [X_b; X_halo]) / 2``.

    The chunk's rows and its halo rows are stacked once, so the step is one sparse product
    over the block's columns. Rows without edges keep their values (P acts as the identity
    on them)."""
    X_block = np.asarray(X_block)
    dtype = X_block.dtype if X_block.dtype in (np.float32, np.float64) else np.float64
    Xb = X_block.astype(dtype, copy=False)
    P, isolated = graph_block.random_walk(dtype)
    n_halo = sum(piece.shape[0] for piece in halo_pieces)
    if P.shape[1] != Xb.shape[0] + n_halo:
        raise ValueError(
            f"halo pieces hold {n_halo} rows, the graph block needs {P.shape[1] - Xb.shape[0]}"
        )
    PX = P @ np.concatenate([Xb, *halo_pieces]).astype(dtype, copy=False)
    PX[isolated] = Xb[isolated]
    PX += Xb
    PX *= 0.5
    return PX


def smooth_rows(graph, steps, X=None):
    """``((I + P) / 2)^steps X`` as a persisted row-chunked dask array aligned with ``graph``.

    Parameters
    ----------
    graph : KNNGraph
        The graph whose weights average the rows (P: its W, each row scaled to sum to one;
        the normalised ``D^-1/2 W D^-1/2`` of a ``normalized`` graph).
    steps : int >= 0
        Number of lazy random-walk steps t.
    X : dask array or None
        Rows in the graph's row order and chunks; default the graph's own ``X``.

    Returns
    -------
    dask array of X's shape, in X's dtype (float64 for integer X). Each step persists its
    result and releases the previous one; nothing is gathered to the client.
    """
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)):
        raise TypeError(f"steps must be an integer >= 0, got {steps!r}")
    if steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    Z = graph.X if X is None else X
    if tuple(Z.chunks[0]) != tuple(graph.chunks):
        raise ValueError(
            f"X must be chunked like the graph's rows {graph.chunks}, got {Z.chunks[0]}"
        )
    if len(Z.chunks[1]) > 1:
        Z = Z.rechunk({1: -1})
    dtype = Z.dtype if Z.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    step = functools.partial(task, "smooth", _smooth_block)
    for _ in range(int(steps)):
        Z = graph.map_rows(
            step, Z.to_delayed(optimize_graph=False).ravel(), Z.shape[1], dtype, halo_of=Z
        )
    return Z


def retained_variance(X, X_filtered, scale=None):
    """Share of X's total variance that the filtered rows keep,
    ``sum_j var(Xf_j) / s_j^2 / sum_j var(X_j) / s_j^2`` (s the per-feature ``scale`` of the
    hidden layer's input scaling, or 1), computed in one pass over both arrays.

    Where neighbours share structure a filtered row stays close to its own, and most of the
    variance remains; where the neighbourhoods are no better than random (noise-like data)
    averaging erases the features and little remains. Returns a float in [0, 1] (1 for
    constant X)."""
    w = 1.0 if scale is None else 1.0 / np.square(np.asarray(scale, dtype=np.float64))
    before, after = dask.compute(
        (X.var(axis=0, dtype=np.float64) * w).sum(),
        (X_filtered.var(axis=0, dtype=np.float64) * w).sum(),
    )
    return float(after / before) if before > 0 else 1.0


def smoothed_graph(graph, steps):
    """The graph with its rows of X filtered ``steps`` times (:func:`smooth_rows`).

    It shares the graph's blocks, halo and row order; its ``X`` holds the filtered rows in
    the graph's order (its ``source_name`` names them), so hidden features built on its ``X``
    pair with it in a Gram pass. The filtered rows stay where the graph put them: what is
    computed from them, e.g. an embedding n_components wide, goes back to the input's rows
    through :func:`input_order`, rather than the N x d filtered rows themselves.
    """
    graph_f = copy.copy(graph)
    graph_f.X = smooth_rows(graph, steps)
    graph_f.source_name = graph_f.X.name
    return graph_f


def input_order(graph):
    """The ``RowOrder`` that moves row-aligned arrays in the graph's row order back to the
    input's rows (None when the graph keeps the input's order)."""
    if graph.order is None:
        return None
    positions = graph.order.apply(row_numbers(graph.order.input_chunks))
    return graph.order.inverse(positions)


__all__ = ["input_order", "retained_variance", "smooth_rows", "smoothed_graph"]
