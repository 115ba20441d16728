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
from scipy.optimize import linear_sum_assignment

from ._config import get_config
from .cluster import rename_labels
from .hidden import hidden_rows
from .utils._compiled import laplacian_rows
from .utils._dask import (
    default_group_bytes,
    held_rows,
    named,
    read_rows,
    row_groups,
    tree_sum,
)

logger = logging.getLogger(__name__)

TERMS = ("count", "colsum", "hth", "hty", "htf", "sizes", "htlh")
#: the prefix of the Gram pass's task keys
PREFIX = "elmscale-gram"


def _laplacian_rows(graph_block, Z, halo_pieces, compiled):
    """Chunk b's rows of ``L Z = diag * Z - W [Z; Z_halo]``, without stacking Z_b and its halo.

    ``halo_pieces`` yields consecutive slices of the halo rows of Z, in halo order: rows of
    Z_j shipped from other chunks, or hidden rows rebuilt from X (:func:`_rebuilt_halo`).
    """
    W_local, W_halo = graph_block.split(Z.dtype)
    return laplacian_rows(graph_block.diagonal, Z, W_local, W_halo, halo_pieces, compiled=compiled)


#: a task builds hidden rows this many at a time. Its halo can hold several times its own
#: rows (high-dimensional data crosses every cut): each slice's hidden rows are added into
#: the product and freed before the next is built. Its own rows are written slice by slice
#: into H, so no widened, scaled or pre-activation copy of the task's rows is held whole.
SLICE_ROWS = 8192


def _row_slices(pieces, step):
    """The rows of consecutive ``pieces`` in slices of ``step`` rows (the last one shorter):
    a slice inside one piece is a view of it, only a slice across pieces is stacked."""
    pending, n = [], 0
    for piece in pieces:
        lo = 0
        while lo < piece.shape[0]:
            take = min(step - n, piece.shape[0] - lo)
            pending.append(piece[lo : lo + take])
            n, lo = n + take, lo + take
            if n == step:
                yield pending[0] if len(pending) == 1 else np.concatenate(pending)
                pending, n = [], 0
    if n:
        yield pending[0] if len(pending) == 1 else np.concatenate(pending)


def _rebuilt_halo(halo_X, layer, step, read=None):
    """Hidden rows of a task's halo, rebuilt from its rows of X ``step`` rows at a time
    (:data:`SLICE_ROWS`), each slice read (``read``: the rows as held, e.g. float32,
    widened slice by slice) then built; the halo's pieces of X are never stacked whole."""
    for rows in _row_slices(halo_X or (), step):
        yield layer(read_rows(rows, read))


def _built_rows(blocks, layer, step, read=None):
    """The hidden rows of consecutive ``blocks`` of X (as held: ``read`` turns rows of them
    into X's rows), built ``step`` rows at a time into one array, as a halo's are
    (:func:`_rebuilt_halo`): the rows of X are never stacked, widened or scaled whole."""
    n_rows = sum(block.shape[0] for block in blocks)
    H, lo = None, 0
    for hidden in _rebuilt_halo(blocks, layer, step, read):
        if H is None:
            H = np.empty((n_rows, hidden.shape[1]), dtype=hidden.dtype)
        H[lo : lo + hidden.shape[0]] = hidden
        lo += hidden.shape[0]
    if H is None:  # no rows: the layer gives the empty block its width
        rows = np.concatenate(blocks)
        H = layer(read_rows(rows, read))
    return H


def _pattern_rows(H, pattern, halo_X, layer, compiled, read=None):
    """``D_g H_g - V_g [H_g; H_halo]`` for one task's rows g and a pattern of
    :meth:`KNNGraph.group_pattern <elmscale.graph.KNNGraph.group_pattern>`; the halo's hidden
    rows are rebuilt from X a slice at a time (:func:`_rebuilt_halo`). With the whole pattern
    (``half=False``) these are the rows of ``L H``; with the half pattern, ``H_g^T`` times
    them is the task's share of ``H^T L H`` before the symmetrisation."""
    V_local, V_halo, diagonal = pattern
    halo = _rebuilt_halo(halo_X, layer, SLICE_ROWS, read)
    return laplacian_rows(diagonal, H, V_local, V_halo, halo, compiled=compiled)


def _task_groups(chunks, n_hidden, itemsize, group_bytes):
    """Consecutive row chunks summed by one task: as many as fit in ``group_bytes`` of H
    (:func:`~elmscale.utils._dask.row_groups`: at least 8 tasks, and 2 per planned worker
    thread, when there are that many chunks)."""
    return row_groups(chunks, n_hidden * itemsize, group_bytes)


def _first_power_block(H, graph_block, layer, compiled, halo_X):
    """Z_1 = L H on one chunk, from H_b and the X halo."""
    halo = _rebuilt_halo(halo_X, layer, SLICE_ROWS)
    return _laplacian_rows(graph_block, H, halo, compiled)


def _next_power_block(Z, graph_block, compiled, halo_Z):
    """Z_{j+1} = L Z_j on one chunk, from Z_j's block and the halo rows of Z_j."""
    return _laplacian_rows(graph_block, Z, halo_Z, compiled)


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
    first = named(_first_power_block, f"{PREFIX}-power")
    following = named(_next_power_block, f"{PREFIX}-power")
    compiled = get_config()["compiled"]
    Z = graph.map_rows(first, H_blocks, n_hidden, dtype, args=(layer, compiled), prefix=PREFIX)
    for _ in range(2, q + 1):
        Z = graph.map_rows(
            following,
            Z.to_delayed().ravel(),
            n_hidden,
            dtype,
            halo_of=Z,
            args=(compiled,),
            prefix=PREFIX,
        )
    return Z


def _stack(parts):
    if parts is None or parts[0] is None:
        return None
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


# -- the terms of one task's rows: term(H, rows) -> float64 partial sum ------------------------
def _count(H, rows):
    w = rows["weight"]
    return np.float64(H.shape[0] if w is None else w.sum(dtype=np.float64))


def _colsum(H, rows):
    w = rows["weight"]
    if w is None:
        return H.sum(axis=0, dtype=np.float64)
    return (w.astype(H.dtype) @ H).astype(np.float64)


def _weighted(H, w, *others):
    """H's rows of non-zero weight, their weights and the same rows of ``others``: a row of
    weight 0 adds nothing to a weighted sum, and in SS-ELM all unlabelled rows (most of
    them) have weight 0, so the products skip them instead of multiplying by zeros."""
    keep = w != 0
    if keep.all():
        return (H, w, *others)
    return (H[keep], w[keep], *(o[keep] for o in others))


def _hth(H, rows):
    w = rows["weight"]
    if w is None:
        return (H.T @ H).astype(np.float64)  # one buffer twice: BLAS syrk
    H, w = _weighted(H, w)
    Hw = H * np.sqrt(w).astype(H.dtype)[:, None]
    return (Hw.T @ Hw).astype(np.float64)


def _hty(H, rows):
    Yc = rows["Y"].astype(H.dtype, copy=False)
    if rows["weight"] is not None:
        H, w, Yc = _weighted(H, rows["weight"], Yc)
        Yc = Yc * w.astype(H.dtype)[:, None]
    return (H.T @ Yc).astype(np.float64)


def _labelled(rows):
    lab = np.asarray(rows["labels"]).ravel()
    keep = lab >= 0
    return lab, keep


def _htf(H, rows):
    return label_sums(H, rows["labels"], rows["n_labels"])


def label_sums(H, labels, n_labels):
    """``H^T F`` (n_hidden x n_labels, float64), F the one-hot matrix of ``labels``: the sum
    of H's rows of each label. Labels < 0 are left out."""
    lab = np.asarray(labels).ravel()
    keep = lab >= 0
    F = sp.csr_matrix(
        (np.ones(keep.sum(), dtype=H.dtype), (lab[keep], np.flatnonzero(keep))),
        shape=(n_labels, H.shape[0]),
    )
    return np.asarray(F @ H, dtype=np.float64).T


def changed_label_sums(features, before, after, n_labels, sums):
    """``H^T F_after`` (delayed) from ``sums``, the delayed ``H^T F_before`` of other labels
    of the same rows (dask arrays of int, n_samples): each chunk's task builds the hidden rows
    of only the points whose label differs and moves their share from one label's sum to the
    other's. Where few labels change, as between the iterations of a clustering, this costs
    a small part of a pass over H. Labels < 0 are left out, as in ``htf``."""
    blocks, layer = features.sources()
    move = named(_changed_sums, f"{PREFIX}-changed")
    pairs = zip(
        before.rechunk({0: features.chunks}).to_delayed().ravel(),
        after.rechunk({0: features.chunks}).to_delayed().ravel(),
        strict=True,
    )
    parts = [move(blk, layer, a, b, n_labels) for blk, (a, b) in zip(blocks, pairs, strict=True)]
    change = tree_sum(parts, prefix=f"{PREFIX}-sum")
    return named(_add_change, f"{PREFIX}-sum")(sums, change)


#: :func:`matched_label_sums` corrects the sums of other labels where at most this share of
#: the rows change cluster; above it, one pass over H costs less
CORRECTED_SHARE = 0.5


def contingency(before, after, n_labels):
    """The lazy ``n_labels x n_labels`` contingency table of two labellings of the same rows
    (dask arrays of int, chunked alike; flat, ``before * n_labels + after``): one small
    reduction."""
    return da.bincount(before * n_labels + after, minlength=n_labels * n_labels)


def name_match(table):
    """``(names, changed)`` for two labellings of the same rows and their square contingency
    ``table``: cluster j of the first takes the name ``names[j]`` of the cluster of the
    second it matches best (the one-to-one matching that keeps the most rows, Hungarian
    method), and ``changed`` rows change cluster even so, up to that renaming."""
    table = np.asarray(table)
    rows, cols = linear_sum_assignment(table, maximize=True)
    names = np.empty(table.shape[0], dtype=np.int64)
    names[rows] = cols
    return names, int(table.sum() - table[rows, cols].sum())


def matched_label_sums(features, before, sums, after, table, *, match=None, max_share=None):
    """``(H^T F, sizes, n_built)`` of the labels ``after``, from ``sums`` (``H^T F`` of
    ``before``, NumPy) and the two labellings' contingency ``table`` (NumPy, n_labels x
    n_labels); ``n_built`` counts the hidden rows built.

    Clusterings from fresh k-means starts name their clusters anew, so the clusters of
    ``before`` first take the names of the clusters of ``after`` they match best (the
    one-to-one matching that keeps the most rows, Hungarian method); where at most
    ``max_share`` (None: :data:`CORRECTED_SHARE`) of the rows then change name, the rows
    that changed correct the renamed ``sums`` (:func:`changed_label_sums`, a part of a pass
    over H as small as the change), else it is one pass over H. ``match``: the table's
    :func:`name_match`, when the caller has it. The result is a function of ``before``,
    ``sums`` and ``after`` alone: the same labels give the same sums, bit for bit."""
    table = np.asarray(table)
    c, n = table.shape[0], int(table.sum())
    names, changed = name_match(table) if match is None else match
    if changed > (CORRECTED_SHARE if max_share is None else max_share) * n:
        stats = hidden_stats(features, ("htf", "sizes"), labels=after, n_labels=c)
        return stats["htf"], stats["sizes"], n
    renamed = np.empty_like(sums)
    renamed[:, names] = sums
    htf = changed_label_sums(features, rename_labels(before, names), after, c, renamed)
    return htf.compute(), table.sum(axis=0).astype(np.float64), changed


def _changed_sums(block, layer, before, after, n_labels):
    changed = np.flatnonzero(before != after)
    if not changed.size:
        return np.float64(0.0)
    H = hidden_rows(block, layer, changed)
    return label_sums(H, after[changed], n_labels) - label_sums(H, before[changed], n_labels)


def _add_change(total, change):
    return total + change


def _sizes(H, rows):
    lab, keep = _labelled(rows)
    return np.bincount(lab[keep], minlength=rows["n_labels"]).astype(np.float64)


def _htlh(H, rows):
    """p = 1: the task's half of the graph term; p = 2: its rows of L H from the whole
    pattern; p > 2: from its block of ``Z_q = L^q H`` (and, odd p, Z_q's halo rows)."""
    g, layer = rows["graph"], rows["layer"]
    power, compiled = g["power"], g["compiled"]
    if power <= 2:
        VH = _pattern_rows(H, g["pattern"], g["halo_X"], layer, compiled, g["read"])
        return ((H if power == 1 else VH).T @ VH).astype(np.float64)
    Z = g["Z"]
    if power % 2 == 0:  # H^T L^2q H = Z_q^T Z_q
        return (Z.T @ Z).astype(np.float64)
    LZ = _laplacian_rows(g["graph_block"], Z, g["halo_Z"], compiled)
    return (Z.T @ LZ).astype(np.float64)


_TERM_SUMS = {
    "count": _count,
    "colsum": _colsum,
    "hth": _hth,
    "hty": _hty,
    "htf": _htf,
    "sizes": _sizes,
    "htlh": _htlh,
}


def _block_partials(H, terms, inputs, layer, build, read=None):
    """Partial sums of the requested terms over one task's rows (all float64).

    ``H`` and ``inputs``' ``Y``, ``weight`` and ``labels`` are lists of the blocks of
    consecutive row chunks, stacked here; ``inputs`` also holds ``n_labels`` and, for
    ``htlh``, ``graph`` (the power and what :func:`_htlh` multiplies by). ``build``: ``H``
    holds blocks of X as held (``read`` turns their rows into X's rows, e.g. widens float32
    to the compute dtype, here rather than block by block before the task) and the task
    builds their hidden rows with ``layer`` a slice at a time (:func:`_built_rows`; H never
    leaves the task)."""
    H = _built_rows(H, layer, SLICE_ROWS, read) if build else _stack(H)
    rows = {name: _stack(inputs.get(name)) for name in ("Y", "weight", "labels")}
    rows.update(n_labels=inputs.get("n_labels"), graph=inputs.get("graph"), layer=layer)
    return {term: _TERM_SUMS[term](H, rows) for term in TERMS if term in terms}


def _apply_layer(X_block, layer, read=None):
    return layer(read_rows(X_block, read))


def _finish(total):
    if "htlh" in total:  # symmetric in exact arithmetic; remove the rounding asymmetry
        total["htlh"] = 0.5 * (total["htlh"] + total["htlh"].T)
    return total


def _pick(blocks, group):
    return None if blocks is None else [blocks[b] for b in group]


def _blocks_of(array, n_chunks, name):
    if array is None:
        return None
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
    partial_sums=None,
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
        (default: 4 x the ``chunk_bytes`` setting, at most 1/16 of a worker thread's
        ``memory_limit`` on a distributed cluster), keeping at least 8 tasks: fewer, larger
        tasks cost less scheduling, fewer partial sums to reduce, and, with p <= 2, a halo
        only across the group's border. p > 2 keeps one chunk per task.
    compute : bool
        Return NumPy arrays (True) or one delayed dict, to be computed together with other work.
    partial_sums : object or None
        ``wrap(group, part)`` gives each task's delayed partial over row chunks ``group``:
        read from an earlier pass, or ``part`` kept (:meth:`elmscale.Reduction.partial_sums`).

    Returns
    -------
    dict of str to ndarray (float64)
    """
    terms, power = _check_request(features, terms, Y, labels, n_labels, graph, laplacian_power)
    if group_bytes is None:
        group_bytes = default_group_bytes()
    nb = len(features.chunks)
    layer = dask.delayed(features.layer, pure=True)
    sources, build, read = _sources(features, graph)
    if graph is not None:  # a locality-ordered graph: every row-aligned input goes there too
        Y, sample_weight, labels = (graph.in_graph_order(a) for a in (Y, sample_weight, labels))
    inputs = _row_inputs(nb, Y=Y, weight=sample_weight, labels=labels)
    Z = None
    if "htlh" in terms and power > 2:
        sources, Z = _power_rows(features, graph, sources, build, layer, power, read)
        build = False
        groups = [[b] for b in range(nb)]  # one block of the persisted Z_q per task
    else:
        itemsize = np.dtype(features.X.dtype).itemsize
        groups = _task_groups(features.chunks, features.layer.n_hidden, itemsize, group_bytes)
    graph_inputs = _graph_inputs(graph, groups, power, Z) if "htlh" in terms else None
    parts = _group_parts(
        groups, sources, inputs, graph_inputs, (terms, layer, build, n_labels, read), partial_sums
    )
    total = named(_finish, f"{PREFIX}-finish")(
        tree_sum(parts, fan_in=fan_in, prefix=f"{PREFIX}-sum")
    )
    return dask.compute(total)[0] if compute else total


def _row_inputs(n_chunks, **arrays):
    """The blocks of the row-aligned inputs (None where absent), checked against X's."""
    names = {"weight": "sample_weight"}
    return {k: _blocks_of(a, n_chunks, names.get(k, k)) for k, a in arrays.items()}


def _group_parts(groups, sources, inputs, graph_inputs, how, partial_sums):
    """One delayed partial sum per group of row chunks, ``_block_partials`` of its sources
    and inputs (``how``: terms, layer, build, n_labels, read), kept or read back through
    ``partial_sums``."""
    block_task = named(_block_partials, f"{PREFIX}-block")
    terms, layer, build, n_labels, read = how
    parts = []
    for i, group in enumerate(groups):
        task_inputs = {name: _pick(blocks, group) for name, blocks in inputs.items()}
        task_inputs["n_labels"] = n_labels
        if graph_inputs is not None:
            task_inputs["graph"] = graph_inputs[i]
        part = block_task(_pick(sources, group), terms, task_inputs, layer, build, read)
        parts.append(part if partial_sums is None else partial_sums.wrap(group, part))
    return parts


def _check_request(features, terms, Y, labels, n_labels, graph, laplacian_power):
    """The terms as a tuple and the power as an int, or a ValueError naming what is wrong."""
    terms = tuple(terms)
    unknown = set(terms) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown terms {sorted(unknown)}; choose from {TERMS}")
    if "htlh" in terms and graph is None:
        raise ValueError("term 'htlh' needs a graph")
    if graph is not None and not graph.built_on(features.X):
        # the graph term rebuilds halo rows from the graph's X with features.layer: a graph
        # built on another array (e.g. pre-scaled X) would silently give a wrong H^T L H
        raise ValueError(
            "graph was built on a different array than features.X; build it "
            "from the same X, passing any scaling as knn_graph(..., scaling=(offset, scale))"
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
    return terms, int(laplacian_power)


def _sources(features, graph):
    """What each task reads: ``(blocks, build, read)``, X's blocks in the graph's row order or
    their own with ``build`` true (the task reads them with ``read`` and builds H from them),
    or the cached blocks of H (``build`` false)."""
    if graph is not None and graph.order is not None:
        blocks, read = _source_blocks(graph.X)
        return blocks, True, read
    if features.cached:
        return features.sources()[0], False, None
    blocks, read = _source_blocks(features.X)
    return blocks, True, read


def _source_blocks(X):
    """``(blocks, read)``: a rows view's blocks as held in memory and the ``read`` that turns
    a task's stacked rows of them into X's (the held float32 input widened once, in the
    task, not block by block ahead of it), else X's own blocks and None."""
    held, read = held_rows(X)
    if read is None:
        return X.to_delayed().ravel().tolist(), None
    return held.to_delayed(optimize_graph=False).ravel().tolist(), read


def _power_rows(features, graph, sources, build, layer, power, read):
    """For p > 2: the blocks of H each task reads and ``Z_q = L^q H``, q = floor(p / 2),
    persisted on the cluster (what it ships is logged)."""
    q = power // 2
    n_h = features.layer.n_hidden
    itemsize = np.dtype(features.X.dtype).itemsize
    logger.info(
        "H^T L^%d H: building L^%d H (%d x %d, %.1f MB) on the cluster; %d "
        "product(s) ship %d halo rows of it, n_hidden=%d wide (%.1f MB each)",
        power,
        q,
        graph.n_samples,
        n_h,
        graph.n_samples * n_h * itemsize / 1e6,
        (power - 1) // 2,
        graph.halo_size(),
        n_h,
        graph.halo_size() * n_h * itemsize / 1e6,
    )
    hidden = named(_apply_layer, "elmscale-hidden")
    H_blocks = [hidden(blk, layer, read) for blk in sources] if build else sources
    Z = laplacian_power_rows(graph, H_blocks, layer, q, n_hidden=n_h, dtype=features.X.dtype)
    return H_blocks, Z


def _graph_inputs(graph, groups, power, Z):
    """Per task, what its graph term multiplies by: for p <= 2 the pattern of its rows of W
    (half of the edges for p = 1, as H^T W H is symmetric; all of them for L H) and the X
    rows of its halo; for p > 2 its block of Z_q and, odd p, Z_q's halo rows. The halo rows
    of all tasks move in one exchange. ``compiled``: the product with W runs the compiled
    kernel (the ``compiled`` setting, read here on the client)."""
    compiled = get_config()["compiled"]
    if power <= 2:
        patterns = [graph.group_pattern(group, half=power == 1, prefix=PREFIX) for group in groups]
        halo, read = graph.groups_halo(
            groups, [need for _, need in patterns], prefix=PREFIX, held=True, deferred=True
        )
        return [
            {"power": power, "pattern": pattern, "halo_X": rows, "read": read, "compiled": compiled}
            for (pattern, _), rows in zip(patterns, halo, strict=True)
        ]
    halo_Z = graph.halo_pieces(Z, prefix=PREFIX) if power % 2 else [None] * len(groups)
    Z_blocks = Z.to_delayed().ravel()
    return [
        {
            "power": power,
            "graph_block": graph.blocks[b],
            "Z": Z_blocks[b],
            "halo_Z": halo_Z[b],
            "compiled": compiled,
        }
        for (b,) in groups
    ]
