"""Coarse cells: the partition that the distributed kNN search and the locality order share.

Cells are the leaves of a k-means tree fitted on a sample of rows, on the workers (the root's
children's subtrees side by side). A node with
more than ``leaf_size`` sample rows is split by k-means into at most :data:`BRANCHING`
children, ordered along a Ward dendrogram of their centres, so that leaves numbered depth
first put nearby cells next to each other. Leaves smaller than a quarter of ``leaf_size`` are
folded into their nearest sibling, so cells are balanced to within a small factor.

Every row is then assigned on the cluster to its nearest cell centres, ranked by exact
distance and then by cell number (:func:`~elmscale.graph._select.block_topk`): the
assignment of a row depends on that row and the centres only, never on the chunking.
"""

import functools
import math
import warnings

import dask
import dask.array as da
import numpy as np
from scipy.cluster.hierarchy import leaves_list, linkage
from sklearn.cluster import KMeans

from .._config import get_config
from ..utils._dask import one_key
from ..utils._random import gathered_rows, sampled_rows
from ..utils._threads import limited_threads
from ._select import (
    Operands,
    block_topk,
    decide,
    exact_sq_distances,
    proposal_bound,
    proposals,
    within_limits,
)
from ._tasks import task, task_name

#: children per split of the k-means tree
BRANCHING = 16
#: sampled rows per cell the tree is fitted on (at least MIN_SAMPLE rows in all)
SAMPLE_PER_CELL = 40
MIN_SAMPLE = 4_000
#: the sample the tree is fitted on is kept under this many bytes
MAX_SAMPLE_BYTES = 2**27


def sample_size(shape, n_cells):
    """Rows of :func:`sample_index`: ``SAMPLE_PER_CELL`` per cell (at least ``MIN_SAMPLE``),
    at most ``MAX_SAMPLE_BYTES`` in float64, at most all."""
    N, d = shape
    return min(N, max(SAMPLE_PER_CELL * n_cells, MIN_SAMPLE), max(MAX_SAMPLE_BYTES // (8 * d), 1))


def sample_index(shape, n_cells, seed):
    """A sorted sample of :func:`sample_size` row indices (global, drawn from ``seed``
    alone) of an array of ``shape``."""
    size = sample_size(shape, n_cells)
    return np.sort(np.random.default_rng(seed).choice(shape[0], size=size, replace=False))


def _kmeans(points, n_clusters, seed):
    """Labels and centres of a k-means of ``points`` (run under one thread:
    OpenMP's reduction order would otherwise make the centres depend on the core count)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate points: fewer distinct clusters than asked
        km = KMeans(n_clusters, n_init=1, max_iter=15, random_state=seed).fit(points)
    return km.labels_, km.cluster_centers_


def _fold_small(labels, centers, min_size):
    """Move the points of children smaller than ``min_size`` to the nearest larger child."""
    sizes = np.bincount(labels, minlength=len(centers))
    big = np.flatnonzero(sizes >= min_size)
    if len(big) == 0 or len(big) == len(centers):
        return labels
    d2 = ((centers[:, None, :] - centers[None, big, :]) ** 2).sum(-1)
    target = np.arange(len(centers))
    small = np.flatnonzero(sizes < min_size)
    target[small] = big[np.argmin(d2[small], axis=1)]
    return target[labels]


def _children(sample, rows, depth, leaf_size, seed):
    """The sample rows of a node's children, in the order of a Ward dendrogram of their
    centres (nearby children next to each other), or None when the node is a leaf."""
    points = sample[rows]
    n_children = min(BRANCHING, -(-len(rows) // leaf_size))
    if n_children < 2:
        return None
    with limited_threads(1, None):
        labels, centers = _kmeans(points, n_children, seed + depth)
    labels = _fold_small(labels, centers, max(leaf_size // 4, 1))
    kept = np.unique(labels)
    if len(kept) < 2:  # identical points: nothing to split
        return None
    centers = np.array([points[labels == c].mean(axis=0) for c in kept])
    if len(kept) > 2:
        kept = kept[leaves_list(linkage(centers, method="ward"))]
    return [rows[labels == c] for c in kept]


def _leaves(sample, rows, depth, leaf_size, seed):
    """Centres of the leaves under a node, depth first."""
    children = _children(sample, rows, depth, leaf_size, seed)
    if children is None:
        return [sample[rows].mean(axis=0)]
    return [
        leaf for child in children for leaf in _leaves(sample, child, depth + 1, leaf_size, seed)
    ]


def fit_cells(sample, leaf_size, seed):
    """Centres of the leaves of a balanced k-means tree on ``sample``, numbered depth first:
    a node with more than ``leaf_size`` rows is split by k-means into at most
    :data:`BRANCHING` children; children under a quarter of ``leaf_size`` rows are folded
    into their nearest sibling.

    Returns ``(P, d)`` float64 centres, each the mean of its leaf's sample rows.
    """
    sample = np.asarray(sample, dtype=np.float64)
    return np.array(_leaves(sample, np.arange(len(sample)), 0, max(int(leaf_size), 1), seed))


def _subtree(sample, root_children, i, leaf_size, seed):
    """The leaves under the root's child ``i`` (none past the last child; the root itself
    when it is a leaf, as child 0)."""
    if root_children is None:
        return [sample.mean(axis=0)] if i == 0 else []
    if i >= len(root_children):
        return []
    return _leaves(sample, root_children[i], 1, leaf_size, seed)


def fit_cells_on_workers(X, n_cells, seed):
    """:func:`fit_cells` on a sample of X's rows (:func:`sample_index`), fitted where the
    rows are: the sample is gathered by one task, the root split by another, and each of
    the root's children's subtrees is fitted by its own task, side by side on the workers.
    Only the (P, d) centres reach the client, in one computation; they equal
    :func:`fit_cells` of the same sample. Returns ``(centers, sample_size)``.

    The sample's indices are drawn by a task too: numpy draws them from a shuffled
    ``arange(N)`` (8 bytes a row), which the client would otherwise hold for a moment."""
    size = sample_size(X.shape, n_cells)
    leaf_size = max(int(size / n_cells), 1)
    idx = task("cells-index", sample_index, X.shape, n_cells, seed)
    sample = gathered_rows(
        X,
        idx,
        functools.partial(task, "cells-take", sampled_rows),
        functools.partial(task, "cells-sample", _float64_rows),
    )
    root = task("cells-root", _children, sample, np.arange(size), 0, leaf_size, seed)
    subtrees = [
        task("cells-subtree", _subtree, sample, root, i, leaf_size, seed) for i in range(BRANCHING)
    ]
    leaves = [leaf for part in dask.compute(*subtrees) for leaf in part]
    return np.array(leaves), size


def _float64_rows(*pieces):
    """The sample's rows from its pieces, in order, as float64."""
    return np.concatenate(pieces).astype(np.float64, copy=False)


#: above this many cells rows are assigned in two steps (group of cells, then cells)
FLAT_MAX_CELLS = 256
#: groups of cells whose cells are candidates for a row: its nearest group's nearest groups
#: (or its own nearest groups)
GROUP_NEIGHBOURS = 8


class CellGroups:
    """Consecutive (hence nearby) cells in groups of about sqrt(P), for a two-step
    assignment: a row's nearest group, then the cells of that group's nearest groups. The
    cost per row drops from P centres to about (1 + GROUP_NEIGHBOURS) sqrt(P)."""

    def __init__(self, centers):
        P = len(centers)
        size = math.ceil(math.sqrt(P))
        self.starts = np.arange(0, P + size, size).clip(max=P)
        self.starts = np.unique(self.starts)
        self.centers = np.array(
            [
                centers[a:b].mean(axis=0)
                for a, b in zip(self.starts[:-1], self.starts[1:], strict=True)
            ]
        )
        n_groups = len(self.centers)
        near, _ = block_topk(
            self.centers,
            np.full(n_groups, -1),
            self.centers,
            np.arange(n_groups),
            min(GROUP_NEIGHBOURS, n_groups),
        )
        self.near = near

    def candidate_cells(self, group):
        return np.concatenate(
            [np.arange(self.starts[g], self.starts[g + 1]) for g in self.near[group] if g >= 0]
        )


def _nearest_in_groups(block, centers, groups, n_candidates, compiled=False):
    """:func:`block_topk` of the rows against the cells of their nearest group's nearest
    groups (rows grouped by that group, each group's rows in one product)."""
    top, _ = block_topk(
        block,
        np.full(block.shape[0], -1),
        groups.centers,
        np.arange(len(groups.centers)),
        1,
        compiled=compiled,
    )
    ids = np.full((block.shape[0], n_candidates), -1, dtype=np.int64)
    d2 = np.full((block.shape[0], n_candidates), np.inf)
    for g in np.unique(top[:, 0]):
        rows = np.flatnonzero(top[:, 0] == g)
        cells = groups.candidate_cells(g)
        i, dd = block_topk(
            block[rows],
            np.full(len(rows), -1),
            centers[cells],
            cells,
            min(n_candidates, len(cells)),
            compiled=compiled,
        )
        ids[rows, : i.shape[1]] = i
        d2[rows, : i.shape[1]] = dd
    return ids, d2


def _nearest_in_own_groups(block, centers, groups, n_candidates, compiled=False):
    """:func:`block_topk` of the rows against the cells of their own ``GROUP_NEIGHBOURS``
    nearest groups (by exact distance to the groups' mean centres, ties to the lower group).

    Each group's cells propose their ``n_candidates + 1`` nearest to the rows that have it
    among theirs, one product per group; exact distances then decide once per row over the
    pooled proposals (:func:`~elmscale.graph._select.decide`), so a row's cells depend on
    the row alone. In high dimension the cells a row must probe lie in groups near the row
    that are not near its nearest group (:func:`_nearest_in_groups`'s candidates), at about
    twice that assignment's cost.
    """
    n, m = block.shape[0], n_candidates
    n_groups = len(groups.centers)
    top, _ = block_topk(
        block,
        np.full(n, -1),
        groups.centers,
        np.arange(n_groups),
        min(GROUP_NEIGHBOURS, n_groups),
        compiled=compiled,
    )
    center = centers.mean(axis=0)
    Q, R = Operands(block, center, np.float32), Operands(centers, center, np.float32)
    tau = Q.error_bound(ref_sq_max=float(R.sq.max()))
    ids = np.full(top.shape + (m + 1,), -1, dtype=np.int64)
    g = np.full(top.shape + (m + 1,), np.inf)

    def propose_from(first, last, bound):
        """The groups in slots [first, last) propose to their rows, at most ``bound``."""
        table = top[:, first:last]
        for h in np.unique(table):
            rows, slot = np.nonzero(table == h)
            a, b = int(groups.starts[h]), int(groups.starts[h + 1])
            cols, gg = proposals(
                Q.query[rows],
                R.reference[a:b],
                np.full(len(rows), -1),
                np.arange(a, b),
                m + 1,
                None if bound is None else bound[rows],
                compiled,
            )
            slot = slot + first
            ids[rows, slot, : cols.shape[1]] = np.where(cols >= 0, cols + a, -1)
            g[rows, slot, : cols.shape[1]] = gg

    # the nearest group's (m + 1)-th proposal (+ 2 tau) bounds what another group can add
    propose_from(0, 1, None)
    propose_from(1, top.shape[1], proposal_bound(g[:, 0].max(axis=1), tau))
    flat_ids = ids.reshape(n, -1)

    def exact(rows, pos):
        return exact_sq_distances(block, rows, centers, flat_ids[rows, pos])

    def fallback(rows, slots, limits):
        found = []
        for h in np.unique(top[rows, slots]):
            j = np.flatnonzero(top[rows, slots] == h)
            a, b = int(groups.starts[h]), int(groups.starts[h + 1])
            qi, ci = within_limits(
                Q.query[rows[j]], R.reference[a:b], np.full(len(j), -1), np.arange(a, b), limits[j]
            )
            found.append((rows[j][qi], ci + a))
        queries, cells = (np.concatenate(f) for f in zip(*found, strict=True))
        return queries, cells, exact_sq_distances(block, queries, centers, cells)

    tau = np.broadcast_to(tau[:, None], top.shape)
    return decide(m, g, ids, tau, exact, fallback, compiled)


def _nearest_cells(
    block, centers, n_nearest, n_candidates, groups=None, own_groups=False, compiled=False
):
    """Each row's cell (nearest centre) followed by the cells whose boundary with it is
    nearest to the row.

    A neighbour at distance r from x can lie in cell j only if x is within r of the
    bisecting hyperplane between its own centre c_1 and c_j, at distance
    ``(|x - c_j|^2 - |x - c_1|^2) / (2 |c_j - c_1|)``: ranking cells by that distance, not by
    ``|x - c_j|``, probes the cells where neighbours can be. Candidates are the
    ``n_candidates`` nearest centres (among the candidate groups' cells when ``groups`` is
    given: those of the row's nearest group's neighbour groups, or with ``own_groups`` of
    the row's own nearest groups); all distances are exact, ties go to the lower cell.
    ``compiled``: the proposals are selected by the compiled kernel (the same cells).
    """
    if groups is None:
        ids, d2 = block_topk(
            block,
            np.full(block.shape[0], -1),
            centers,
            np.arange(len(centers)),
            n_candidates,
            compiled=compiled,
        )
    elif own_groups:
        ids, d2 = _nearest_in_own_groups(block, centers, groups, n_candidates, compiled)
    else:
        ids, d2 = _nearest_in_groups(block, centers, groups, n_candidates, compiled)
    if n_nearest == 1 or n_candidates == 1:
        return ids[:, :n_nearest].astype(np.int32)
    # centre-to-centre distances, once per distinct pair (rows share their few cells)
    P = len(centers)
    pairs = np.repeat(ids[:, :1], ids.shape[1] - 1, axis=1) * P + np.maximum(ids[:, 1:], 0)
    distinct, inverse = np.unique(pairs, return_inverse=True)
    gap = np.sqrt(exact_sq_distances(centers, distinct // P, centers, distinct % P))
    gap = gap[inverse.reshape(pairs.shape)]
    with np.errstate(divide="ignore", invalid="ignore"):
        boundary = (d2[:, 1:] - d2[:, :1]) / (2 * gap)
    boundary[~np.isfinite(boundary)] = np.inf  # padding, or a centre equal to the row's own
    order = np.lexsort((ids[:, 1:], boundary), axis=1)[:, : n_nearest - 1]
    rest = np.take_along_axis(ids[:, 1:], order, axis=1)
    return np.concatenate([ids[:, :1], rest], axis=1).astype(np.int32)


def cell_groups(centers):
    """The :class:`CellGroups` the assignment takes its candidate cells from (None: all)."""
    return CellGroups(centers) if len(centers) > FLAT_MAX_CELLS else None


def _widths(centers, n_nearest, n_candidates=None):
    n_nearest = min(n_nearest, len(centers))
    return n_nearest, min(max(n_candidates or n_nearest + 3, n_nearest), len(centers))


def nearest_cells(rows, centers, n_nearest, groups, own_groups=False):
    """What :func:`assign_cells` gives these rows (an array), with ``groups`` from
    :func:`cell_groups`."""
    widths = _widths(centers, n_nearest)
    return _nearest_cells(rows, centers, *widths, groups, own_groups, get_config()["compiled"])


def assign_cells(X, centers, n_nearest, n_candidates=None, own_groups=False):
    """Each row's cell, then the ``n_nearest - 1`` cells whose boundary is nearest
    (:func:`_nearest_cells`; ``own_groups`` as there): an (N, n_nearest) int32 dask array
    chunked like X's rows."""
    n_nearest, n_candidates = _widths(centers, n_nearest, n_candidates)
    return da.map_blocks(
        _nearest_cells,
        X,
        one_key(centers),
        n_nearest,
        n_candidates,
        one_key(cell_groups(centers)),
        own_groups,
        get_config()["compiled"],
        dtype=np.int32,
        chunks=(X.chunks[0], (n_nearest,)),
        name=task_name("assign"),
    )
