"""Blockwise reductions of the hidden-layer matrix: every algorithm's only access to the data.

Each function here runs one pass over X's row chunks on the cluster: one task per chunk builds
its block of H (or reads it from the cache), computes the chunk's partial sums, and the
partials are tree-reduced to small float64 NumPy arrays on the client. Nothing with N rows is
gathered. Terms requested together share the pass, so each H block is built once.

Terms of :func:`hidden_stats`:

========== ======================================= ==========================
name        value                                   shape
========== ======================================= ==========================
``count``   sum of the sample weights c_i (or N)     ()
``colsum``  H^T c                                    (n_hidden,)
``hth``     H^T C H                                  (n_hidden, n_hidden)
``hty``     H^T C Y                                  (n_hidden, n_targets)
``htf``     H^T F, F the one-hot matrix of labels    (n_hidden, n_labels)
``sizes``   column sums of F (cluster sizes)         (n_labels,)
``htlh``    H^T L^p H, L the graph Laplacian         (n_hidden, n_hidden)
========== ======================================= ==========================

C = diag(sample_weight) when given, else I. Labels < 0 are left out of ``htf``.
"""

import dask
import numpy as np
import scipy.sparse as sp

from .utils._dask import tree_sum

TERMS = ("count", "colsum", "hth", "hty", "htf", "sizes", "htlh")


def _block_partials(H, terms, *, Y=None, weight=None, labels=None, n_labels=None,
                    graph_block=None, halo_X=None, layer=None, power=1):
    """Partial sums of the requested terms over one row chunk (all float64)."""
    out = {}
    f64 = np.float64
    if "count" in terms:
        out["count"] = f64(H.shape[0] if weight is None else weight.sum(dtype=f64))
    if "colsum" in terms:
        out["colsum"] = (H.sum(axis=0, dtype=f64) if weight is None
                         else (weight.astype(H.dtype) @ H).astype(f64))
    if "hth" in terms:
        if weight is None:
            out["hth"] = (H.T @ H).astype(f64)  # one buffer twice: BLAS syrk
        else:
            Hw = H * np.sqrt(weight).astype(H.dtype)[:, None]
            out["hth"] = (Hw.T @ Hw).astype(f64)
    if "hty" in terms:
        Yc = Y.astype(H.dtype, copy=False)
        if weight is not None:
            Yc = Yc * weight.astype(H.dtype)[:, None]
        out["hty"] = (H.T @ Yc).astype(f64)
    if "htf" in terms or "sizes" in terms:
        lab = np.asarray(labels).ravel()
        keep = lab >= 0
        F = sp.csr_matrix((np.ones(keep.sum(), dtype=H.dtype), (lab[keep], np.flatnonzero(keep))),
                          shape=(n_labels, H.shape[0]))
        if "htf" in terms:
            out["htf"] = np.asarray(F @ H, dtype=f64).T
        if "sizes" in terms:
            out["sizes"] = np.bincount(lab[keep], minlength=n_labels).astype(f64)
    if "htlh" in terms:
        W_local, W_halo = graph_block.split(H.dtype)
        WH = W_local @ H  # L H = diag * H - W [H; H_halo], without stacking H and H_halo
        if halo_X:
            # the halo can hold several times the chunk's rows (high-dimensional data crosses
            # every cut): rebuild its hidden rows one chunk-sized slice at a time
            halo = np.concatenate(halo_X)
            step = max(H.shape[0], 1)
            for lo in range(0, halo.shape[0], step):
                WH += W_halo[:, lo : lo + step] @ layer(halo[lo : lo + step])
        WH *= -1
        WH += graph_block.diagonal.astype(H.dtype)[:, None] * H
        out["htlh"] = (WH.T @ WH if power == 2 else H.T @ WH).astype(f64)
    return out


def _apply_layer(X_block, layer):
    return layer(X_block)


def _finish(total):
    if "htlh" in total:  # symmetric in exact arithmetic; remove the rounding asymmetry
        total["htlh"] = 0.5 * (total["htlh"] + total["htlh"].T)
    return total


def _blocks_of(array, n_chunks, name):
    if array is None:
        return [None] * n_chunks
    blocks = array.to_delayed()
    blocks = blocks.ravel().tolist()
    if len(blocks) != n_chunks:
        raise ValueError(f"{name} must be chunked like X's rows ({n_chunks} chunks), "
                         f"got {len(blocks)}")
    return blocks


def hidden_stats(features, terms, *, Y=None, sample_weight=None, labels=None, n_labels=None,
                 graph=None, laplacian_power=1, fan_in=8, compute=True):
    """Compute several reductions of H in one pass over the data.

    Parameters
    ----------
    features : HiddenFeatures
        X and its hidden layer.
    terms : iterable of str
        Any of ``count, colsum, hth, hty, htf, sizes, htlh`` (see the module docstring).
    Y : dask array (n_samples, n_targets), chunked like X's rows; for ``hty``.
    sample_weight : dask array (n_samples,), chunked like X's rows, non-negative; C's diagonal.
    labels : dask array of int (n_samples,) and n_labels : int; for ``htf`` and ``sizes``.
    graph : KNNGraph built on the same row chunks; for ``htlh``.
    laplacian_power : {1, 2}
        ``htlh`` is H^T L H, or H^T L^2 H = (L H)^T (L H) (the SS-ELM "L^p" option).
    compute : bool
        Return NumPy arrays (True) or one delayed dict, to be computed together with other work.

    Returns
    -------
    dict of str to ndarray (float64)
    """
    terms = tuple(terms)
    unknown = set(terms) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown terms {sorted(unknown)}; choose from {TERMS}")
    if "htlh" in terms and graph is None:
        raise ValueError("term 'htlh' needs a graph")
    if graph is not None and graph.source_name != features.X.name:
        # the graph term rebuilds halo rows from the graph's X with features.layer: a graph
        # built on another array (e.g. pre-scaled X) would silently give a wrong H^T L H
        raise ValueError("graph was built on a different array than features.X; build it "
                         "from the same X, passing any scaling as knn_graph(..., transform=)")
    if "hty" in terms and Y is None:
        raise ValueError("term 'hty' needs Y")
    if ("htf" in terms or "sizes" in terms) and (labels is None or n_labels is None):
        raise ValueError("terms 'htf' and 'sizes' need labels and n_labels")
    if laplacian_power not in (1, 2):
        raise ValueError(f"laplacian_power must be 1 or 2, got {laplacian_power!r}")
    nb = len(features.chunks)
    layer = dask.delayed(features.layer, pure=True)
    if graph is not None and graph.order is not None:
        # the graph was built on locality-ordered rows: move every row-aligned input there
        H_blocks = [dask.delayed(_apply_layer, pure=True)(blk, layer)
                    for blk in graph.X.to_delayed().ravel()]
        Y, sample_weight, labels = (graph.order.apply(a) for a in (Y, sample_weight, labels))
    else:
        H_blocks = features.blocks()
    Y_blocks = _blocks_of(Y, nb, "Y")
    w_blocks = _blocks_of(sample_weight, nb, "sample_weight")
    lab_blocks = _blocks_of(labels, nb, "labels")
    parts = []
    for b in range(nb):
        kwargs = dict(Y=Y_blocks[b], weight=w_blocks[b], labels=lab_blocks[b],
                      n_labels=n_labels, power=laplacian_power)
        if "htlh" in terms:
            kwargs.update(graph_block=graph.blocks[b], halo_X=graph.halo_rows(b), layer=layer)
        parts.append(dask.delayed(_block_partials, pure=True)(H_blocks[b], terms, **kwargs))
    total = dask.delayed(_finish, pure=True)(tree_sum(parts, fan_in=fan_in))
    return dask.compute(total)[0] if compute else total
