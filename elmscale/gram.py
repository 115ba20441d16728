"""Blockwise reductions of the hidden-layer matrix: every algorithm's only access to the data.

Each function here runs one pass over X's row chunks on the cluster: one task per group of
consecutive chunks builds its rows of H (or reads them from the cache), computes their partial
sums, and the partials are tree-reduced to small float64 NumPy arrays on the client. Nothing
with N rows is gathered. Terms requested together share the pass, so each H block is built once.

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

The graph term. Chunk b's rows of ``L H`` need the hidden rows of b's neighbours in other
chunks (its "halo"): the task rebuilds them from the halo rows of X (d numbers per row), so for
p = 1 (``H^T L H``) and p = 2 (``(L H)^T (L H)``) no row of H crosses the network. For p = 1
each undirected edge is visited once, not twice: W is symmetric, so ``H^T W H`` is the
symmetric part of ``H^T V H`` with ``V`` holding each off-diagonal edge {i, j} once, in one of
its two rows, with twice its weight (row i when ``(i < j) xor (i + j odd)``, which splits a
chunk's cross edges evenly between earlier and later chunks). Each task then multiplies about
half the nonzeros and rebuilds about half the halo rows; the sum is symmetrised at the end, so
the result equals ``H^T L H`` up to float rounding. A higher
power cannot be rebuilt from X: ``H^T L^p H`` is ``Z_q^T Z_q`` (p = 2q) or ``Z_q^T (L Z_q)``
(p = 2q + 1) with ``Z_j = L Z_{j-1}``, ``Z_0 = H``, and each product ``L Z_j`` (j >= 1) needs
the halo rows of Z_j itself, **n_hidden numbers per row**. Those are built block by block on the
cluster as a row-chunked dask array aligned with the graph, persisted while the next product
needs it: ``floor((p - 1) / 2)`` rounds, each moving ``graph.halo_size() * n_hidden * itemsize``
bytes between chunks (logged at INFO), and one extra pass over X (Z_1 is built from H and the X
halo before the Gram pass). A locality-ordered graph keeps the halo, and these bytes, small.
"""

import logging

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from ._config import get_config
from .utils._dask import named, tree_sum

logger = logging.getLogger(__name__)

TERMS = ("count", "colsum", "hth", "hty", "htf", "sizes", "htlh")


def _laplacian_rows(graph_block, Z, halo_pieces):
    """Chunk b's rows of ``L Z = diag * Z - W [Z; Z_halo]``, without stacking Z_b and its halo.

    ``halo_pieces`` yields consecutive slices of the halo rows of Z, in halo order: rows of
    Z_j shipped from other chunks, or hidden rows rebuilt from X (:func:`_rebuilt_halo`).
    """
    W_local, W_halo = graph_block.split(Z.dtype)
    LZ = W_local @ Z
    lo = 0
    for piece in halo_pieces:
        hi = lo + piece.shape[0]
        LZ += W_halo[:, lo:hi] @ piece
        lo = hi
    if lo != W_halo.shape[1]:
        raise ValueError(f"halo pieces hold {lo} rows, the graph block needs {W_halo.shape[1]}")
    LZ *= -1
    LZ += graph_block.diagonal.astype(Z.dtype)[:, None] * Z
    return LZ


def _rebuilt_halo(halo_X, layer, step):
    """Hidden rows of a chunk's halo, rebuilt from its rows of X. The halo can hold several
    times the chunk's rows (high-dimensional data crosses every cut), so one chunk-sized
    slice at a time."""
    if not halo_X:
        return
    halo = np.concatenate(halo_X)
    for lo in range(0, halo.shape[0], step):
        yield layer(halo[lo : lo + step])


def _half_pattern(*blocks, half=True):
    """The half graph of consecutive graph blocks (one task's rows), float64:
    ``((V_local, V_halo, diagonal), need)``.

    V holds each off-diagonal edge {i, j} of W once, in row i when ``(i < j) xor (i + j odd)``
    (else in row j), with twice its weight, and the diagonal as it is: ``V + V^T = 2 W`` off
    the diagonal, so ``H^T W H = sym(H^T V H)``. Columns inside the blocks' rows go to
    ``V_local``; the others to ``V_halo``, whose columns are ``need``, the sorted global
    indices of the halo rows V uses (about half of the blocks' halo). ``half=False``: V is
    the blocks' rows of W itself (every edge, its own weight), for products that need whole
    rows of ``W H`` (``L H`` with p = 2)."""
    start, stop = blocks[0].start, blocks[-1].stop
    rows, cols, data = [], [], []
    for blk in blocks:
        n = blk.stop - blk.start
        W = blk.W.tocoo()
        c = W.col.astype(np.int64)
        inside = c < n
        gj = np.empty_like(c)
        gj[inside] = c[inside] + blk.start
        gj[~inside] = blk.halo[c[~inside] - n]
        rows.append(W.row.astype(np.int64) + (blk.start - start))
        cols.append(gj)
        data.append(W.data.astype(np.float64))
    r, gj, w = np.concatenate(rows), np.concatenate(cols), np.concatenate(data)
    gi = r + start
    if half:
        off = gi != gj
        keep = ~off | ((gi < gj) ^ ((gi + gj) % 2 == 1))
        w = np.where(off, 2.0, 1.0)[keep] * w[keep]
        r, gj = r[keep], gj[keep]
    n = stop - start
    local = (gj >= start) & (gj < stop)
    V_local = sp.csr_matrix((w[local], (r[local], gj[local] - start)), shape=(n, n))
    need, col = np.unique(gj[~local], return_inverse=True)
    V_halo = sp.csr_matrix((w[~local], (r[~local], col.ravel())), shape=(n, len(need)))
    diagonal = np.concatenate([blk.diagonal for blk in blocks])
    return (V_local, V_halo, diagonal), need


def _take_needed(X_block, need, s_start, s_stop):
    """Rows of source chunk [s_start, s_stop) among the global indices ``need`` (sorted)."""
    lo, hi = np.searchsorted(need, [s_start, s_stop])
    return X_block[need[lo:hi] - s_start]


def _pattern_rows(H, pattern, halo_X, layer):
    """``D_g H_g - V_g [H_g; H_halo]`` for one task's rows g and a pattern of
    :func:`_half_pattern`; the halo's hidden rows are rebuilt from X one slice of ``len(H)``
    rows at a time. With the whole pattern (``half=False``) these are the rows of ``L H``."""
    V_local, V_halo, diagonal = pattern
    V_local, V_halo = V_local.astype(H.dtype), V_halo.astype(H.dtype)
    VH = V_local @ H
    lo = 0
    for piece in _rebuilt_halo(halo_X, layer, max(H.shape[0], 1)):
        hi = lo + piece.shape[0]
        VH += V_halo[:, lo:hi] @ piece
        lo = hi
    if lo != V_halo.shape[1]:
        raise ValueError(f"halo pieces hold {lo} rows, the graph block needs {V_halo.shape[1]}")
    np.subtract(diagonal.astype(H.dtype)[:, None] * H, VH, out=VH)
    return VH


def _half_graph_term(H, half, halo_X, layer):
    """``H_g^T (D_g H_g - V_g [H_g; H_halo])``: one task's share of ``H^T L H`` before the
    symmetrisation (see :func:`_half_pattern`)."""
    return H.T @ _pattern_rows(H, half, halo_X, layer)


def _task_groups(chunks, n_hidden, itemsize, group_bytes):
    """Consecutive row chunks summed by one task: as many as fit in ``group_bytes`` of H
    (at least one), while keeping at least 8 tasks when there are that many chunks."""
    nb = len(chunks)
    most = max(1, nb // 8)
    groups, cur, rows = [], [], 0
    for b, n in enumerate(chunks):
        if cur and (len(cur) >= most or (rows + n) * n_hidden * itemsize > group_bytes):
            groups.append(cur)
            cur, rows = [], 0
        cur.append(b)
        rows += n
    groups.append(cur)
    return groups


def _group_halo(graph, group, need):
    """Delayed pieces of X's rows that a group's half graph uses, one per source chunk."""
    X_blocks = graph.X.to_delayed().ravel()
    starts = graph.starts
    sources = sorted(set().union(*(graph.halo_sources[b] for b in group)) - set(group))
    take = named(_take_needed, "elmscale-gram-halo")
    return [take(X_blocks[s], need, int(starts[s]), int(starts[s + 1])) for s in sources]


def _first_power_block(H, graph_block, layer, *halo_X):
    """Z_1 = L H on one chunk, from H_b and the X halo."""
    return _laplacian_rows(graph_block, H, _rebuilt_halo(halo_X, layer, max(H.shape[0], 1)))


def _next_power_block(Z, graph_block, *halo_Z):
    """Z_{j+1} = L Z_j on one chunk, from Z_j's block and the halo rows of Z_j."""
    return _laplacian_rows(graph_block, Z, halo_Z)


def laplacian_power_rows(graph, H_blocks, layer, q, *, n_hidden, dtype):
    """``Z_q = L^q H`` (q >= 1) as a persisted row-chunked dask array aligned with ``graph``.

    Z_1 comes from H's blocks and the X halo (nothing of H is shipped); every further
    product ``L Z_j`` takes the halo rows of the persisted Z_j from the other chunks:
    ``graph.halo_size() * n_hidden * itemsize`` bytes per product. Each Z_j is released once
    Z_{j+1} is persisted. The array stays on the cluster (workers, or the local scheduler's
    memory); nothing of it is gathered to the client.
    """
    if q < 1:
        raise ValueError(f"q must be >= 1, got {q!r}")
    nb = len(graph.chunks)
    n_h = int(n_hidden)
    Z = None
    for j in range(1, q + 1):
        if j == 1:
            blocks = [
                dask.delayed(_first_power_block, pure=True)(
                    H_blocks[b], graph.blocks[b], layer, *graph.halo_rows(b)
                )
                for b in range(nb)
            ]
        else:
            Z_blocks = Z.to_delayed().ravel()
            blocks = [
                dask.delayed(_next_power_block, pure=True)(
                    Z_blocks[b], graph.blocks[b], *graph.halo_rows(b, Z)
                )
                for b in range(nb)
            ]
        Z = da.concatenate(
            [
                da.from_delayed(blk, shape=(n, n_h), dtype=dtype)
                for blk, n in zip(blocks, graph.chunks, strict=True)
            ]
        ).persist()
    return Z


def _stack(parts):
    if parts is None or parts[0] is None:
        return None
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _block_partials(
    H,
    terms,
    *,
    Y=None,
    weight=None,
    labels=None,
    n_labels=None,
    graph_block=None,
    half=None,
    halo_X=None,
    layer=None,
    power=1,
    Z=None,
    halo_Z=None,
    build=False,
):
    """Partial sums of the requested terms over one task's rows (all float64).

    ``H``, ``Y``, ``weight`` and ``labels`` are lists of the blocks of consecutive row
    chunks, stacked here. ``build``: ``H`` holds blocks of X and the task builds their
    hidden rows with ``layer`` (H never leaves the task). For ``htlh`` with p = 1 the task
    sums its half of the graph term (``half`` from :func:`_half_pattern`,
    :func:`_half_graph_term`), with p = 2 it builds its rows of L H from H, the whole pattern
    (``half`` with ``half=False``) and the X halo; for p > 2 it gets the block of
    ``Z_q = L^q H`` (p = 2q or 2q + 1) and, for odd p, the halo rows of Z_q."""
    H, Y, weight, labels = (_stack(a) for a in (H, Y, weight, labels))
    if build:
        H = layer(H)
    out = {}
    f64 = np.float64
    if "count" in terms:
        out["count"] = f64(H.shape[0] if weight is None else weight.sum(dtype=f64))
    if "colsum" in terms:
        out["colsum"] = (
            H.sum(axis=0, dtype=f64) if weight is None else (weight.astype(H.dtype) @ H).astype(f64)
        )
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
        F = sp.csr_matrix(
            (np.ones(keep.sum(), dtype=H.dtype), (lab[keep], np.flatnonzero(keep))),
            shape=(n_labels, H.shape[0]),
        )
        if "htf" in terms:
            out["htf"] = np.asarray(F @ H, dtype=f64).T
        if "sizes" in terms:
            out["sizes"] = np.bincount(lab[keep], minlength=n_labels).astype(f64)
    if "htlh" in terms:
        if power == 1:
            out["htlh"] = _half_graph_term(H, half, halo_X, layer).astype(f64)
        elif power == 2:  # the task's rows of L H, from the whole pattern of its rows of W
            LH = _pattern_rows(H, half, halo_X, layer)
            out["htlh"] = (LH.T @ LH).astype(f64)
        elif power % 2 == 0:  # H^T L^2q H = Z_q^T Z_q
            out["htlh"] = (Z.T @ Z).astype(f64)
        else:  # H^T L^(2q+1) H = Z_q^T (L Z_q)
            out["htlh"] = (Z.T @ _laplacian_rows(graph_block, Z, halo_Z)).astype(f64)
    return out


def _apply_layer(X_block, layer):
    return layer(X_block)


def _finish(total):
    if "htlh" in total:  # symmetric in exact arithmetic; remove the rounding asymmetry
        total["htlh"] = 0.5 * (total["htlh"] + total["htlh"].T)
    return total


def _pick(blocks, group):
    return [blocks[b] for b in group]


def _blocks_of(array, n_chunks, name):
    if array is None:
        return [None] * n_chunks
    blocks = array.to_delayed()
    blocks = blocks.ravel().tolist()
    if len(blocks) != n_chunks:
        raise ValueError(
            f"{name} must be chunked like X's rows ({n_chunks} chunks), got {len(blocks)}"
        )
    return blocks


def hidden_stats(
    features,
    terms,
    *,
    Y=None,
    sample_weight=None,
    labels=None,
    n_labels=None,
    graph=None,
    laplacian_power=1,
    fan_in=8,
    group_bytes=None,
    compute=True,
):
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
    laplacian_power : int >= 1
        p in ``htlh = H^T L^p H`` (the SS-ELM "L^p" option). p = 1 and 2 (``(L H)^T (L H)``)
        take one pass and ship only halo rows of X. p > 2 first builds ``Z_q = L^q H``,
        q = floor(p / 2), as a persisted row-chunked array on the cluster (N x n_hidden, in
        the compute dtype), then sums ``Z_q^T Z_q`` or ``Z_q^T (L Z_q)``: the products after
        the first ship halo rows of Z, **n_hidden wide** (``floor((p - 1) / 2)`` times
        ``graph.halo_size() * n_hidden * itemsize`` bytes, logged), and the cluster holds up
        to two such N x n_hidden arrays at once. See the module docstring.
    group_bytes : int or None
        One task sums consecutive row chunks whose H takes at most this many bytes
        (default: 4 x the ``chunk_bytes`` setting), keeping at least 8 tasks: fewer, larger
        tasks cost less scheduling, fewer partial sums to reduce, and, with p <= 2, a halo
        only across the group's border. p > 2 keeps one chunk per task.
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
        raise ValueError(
            "graph was built on a different array than features.X; build it "
            "from the same X, passing any scaling as knn_graph(..., transform=)"
        )
    if "hty" in terms and Y is None:
        raise ValueError("term 'hty' needs Y")
    if ("htf" in terms or "sizes" in terms) and (labels is None or n_labels is None):
        raise ValueError("terms 'htf' and 'sizes' need labels and n_labels")
    if (
        isinstance(laplacian_power, (bool, np.bool_))
        or not isinstance(laplacian_power, (int, np.integer))
        or laplacian_power < 1
    ):
        raise ValueError(f"laplacian_power must be an integer >= 1, got {laplacian_power!r}")
    laplacian_power = int(laplacian_power)
    if group_bytes is None:
        group_bytes = 4 * get_config()["chunk_bytes"]
    nb = len(features.chunks)
    layer = dask.delayed(features.layer, pure=True)
    if graph is not None and graph.order is not None:
        # the graph was built on locality-ordered rows: move every row-aligned input there
        sources, build = graph.X.to_delayed().ravel().tolist(), True
        Y, sample_weight, labels = (graph.order.apply(a) for a in (Y, sample_weight, labels))
    elif features.cached:
        sources, build = features.blocks(), False
    else:  # each task builds its own H block: H_b is never stored or moved
        sources, build = features.X.to_delayed().ravel().tolist(), True
    Y_blocks = _blocks_of(Y, nb, "Y")
    w_blocks = _blocks_of(sample_weight, nb, "sample_weight")
    lab_blocks = _blocks_of(labels, nb, "labels")
    Z = Z_blocks = None
    if "htlh" in terms and laplacian_power > 2:
        q = laplacian_power // 2
        n_h = features.layer.n_hidden
        itemsize = np.dtype(features.X.dtype).itemsize
        shipped = (laplacian_power - 1) // 2
        logger.info(
            "H^T L^%d H: building L^%d H (%d x %d, %.1f MB) on the cluster; %d "
            "product(s) ship %d halo rows of it, n_hidden=%d wide (%.1f MB each)",
            laplacian_power,
            q,
            graph.n_samples,
            n_h,
            graph.n_samples * n_h * itemsize / 1e6,
            shipped,
            graph.halo_size(),
            n_h,
            graph.halo_size() * n_h * itemsize / 1e6,
        )
        hidden = named(_apply_layer, "elmscale-hidden")
        H_blocks = [hidden(blk, layer) for blk in sources] if build else sources
        Z = laplacian_power_rows(graph, H_blocks, layer, q, n_hidden=n_h, dtype=features.X.dtype)
        Z_blocks = Z.to_delayed().ravel()
        sources, build = H_blocks, False
    block_task = named(_block_partials, "elmscale-gram-block")
    if "htlh" in terms and laplacian_power > 2:
        groups = [[b] for b in range(nb)]  # one block of the persisted Z_q per task
    else:
        itemsize = np.dtype(features.X.dtype).itemsize
        groups = _task_groups(features.chunks, features.layer.n_hidden, itemsize, group_bytes)
    pattern = named(_half_pattern, "elmscale-gram-pattern", nout=2)
    parts = []
    for group in groups:
        kwargs = dict(
            Y=_pick(Y_blocks, group),
            weight=_pick(w_blocks, group),
            labels=_pick(lab_blocks, group),
            n_labels=n_labels,
            power=laplacian_power,
            layer=layer,
            build=build,
        )
        if "htlh" in terms and laplacian_power <= 2:
            # p = 1 sums half of the edges (H^T W H is symmetric); L H (p = 2) needs them all
            half, need = pattern(*[graph.blocks[b] for b in group], half=laplacian_power == 1)
            kwargs.update(half=half, halo_X=_group_halo(graph, group, need))
        elif "htlh" in terms:
            b = group[0]
            kwargs.update(
                graph_block=graph.blocks[b],
                Z=Z_blocks[b],
                halo_Z=graph.halo_rows(b, Z) if laplacian_power % 2 else None,
            )
        parts.append(block_task(_pick(sources, group), terms, **kwargs))
    total = named(_finish, "elmscale-gram-finish")(
        tree_sum(parts, fan_in=fan_in, prefix="elmscale-gram-sum")
    )
    return dask.compute(total)[0] if compute else total
