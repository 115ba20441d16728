"""The normalised cut and the modularity of row partitions on the kNN graph, computed
blockwise on the cluster.

``Ncut(A_1, ..., A_k) = sum_j cut(A_j, not A_j) / vol(A_j)`` (Shi and Malik 2000): the share of
each cluster's edge weight that leaves it, summed over the clusters. Spectral clustering
minimises its relaxation; evaluated on partitions found by k-means in different embeddings
of the same graph, it tells without labels which one cuts the graph where it is thin.

``Q = sum_j [w(A_j, A_j) / vol(V) - (vol(A_j) / vol(V))^2]`` (Newman and Girvan 2004): the share
of the edge weight inside the clusters minus the share a random graph with the same degrees
would put there. Both come from the same per-cluster sums. Unlike the cut, which each
cluster's share of leaving edges enters alike, the modularity weighs a cluster by its volume:
a partition that merges two large clusters and splits a third in two pays for the merge
(``(vol(A) + vol(B))^2`` in the null term), where the normalised cut of the merged pair can
be lower than that of the two separate ones.

Each run of consecutive graph chunks sums, per cluster, the weight of its rows' edges that stay
inside the cluster and its rows' degrees; the labels and degrees of its halo rows (a few
numbers per row) come from the chunks that hold them, as in every blockwise product on the
graph.
"""

import functools

import dask
import dask.array as da
import numpy as np

from ..utils._dask import tree_sum
from ._patterns import group_edges
from ._tasks import task


def _columns(block, *labels):
    """One chunk's labels (one column per partition) and, last, its rows' degrees."""
    return np.column_stack([*(np.asarray(v, dtype=np.float64) for v in labels), block.degree])


def _cut_sums(edges, halo_pieces, *column_blocks, n_clusters, normalized):
    """Per partition (a column of labels) and cluster: the edge weight inside the cluster
    from a run of chunks' rows, and the rows' degree in the cluster, stacked as an array
    (2, n_partitions, n_clusters). ``edges``: the run's rows of W
    (:func:`~elmscale.graph._patterns.group_edges`); the column blocks hold the labels, then
    the degree, of the run's chunks, the halo pieces those of the rows its halo columns name."""
    row, col, weights = edges
    n = sum(len(c) for c in column_blocks)
    everything = np.concatenate([*column_blocks, *halo_pieces])
    labels = everything[:, :-1].astype(np.int64)
    degree = everything[:, -1]
    if normalized:  # W holds D^-1/2 W D^-1/2: back to the graph's own weights
        weights = weights * np.sqrt(degree[row] * degree[col])
    m = labels.shape[1]
    within = np.zeros((m, n_clusters))
    volume = np.zeros((m, n_clusters))
    for j in range(m):
        rows, cols = labels[row, j], labels[col, j]
        same = rows == cols
        within[j] = np.bincount(rows[same], weights=weights[same], minlength=n_clusters)
        volume[j] = np.bincount(labels[:n, j], weights=degree[:n], minlength=n_clusters)
    return np.stack([within, volume])


def _ncut(sums):
    within, volume = sums
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(volume > 0, (volume - within) / volume, 0.0)
    return share.sum(axis=1)


def _modularity(sums):
    within, volume = sums
    total = volume.sum(axis=1)
    total = np.where(total > 0, total, 1.0)
    return within.sum(axis=1) / total - np.square(volume / total[:, None]).sum(axis=1)


def normalized_cut(graph, labels, n_clusters):
    """The normalised cut of each partition of the graph's rows.

    Parameters
    ----------
    graph : KNNGraph
    labels : dask array of int (n_samples,), or a list of them
        Cluster labels in ``[0, n_clusters)`` in the input's row order (the order of the
        data the graph was built from), chunked like the input; a list holds several
        partitions, scored in one pass.
    n_clusters : int

    Returns
    -------
    float, or ndarray (n_partitions,) for a list: lower cuts fewer edges, relative to the
    clusters' volumes. Only per-cluster sums reach the client.
    """
    single = not isinstance(labels, (list, tuple))
    cut = _ncut(_partition_sums(graph, labels, n_clusters))
    return float(cut[0]) if single else cut


def modularity(graph, labels, n_clusters):
    """The modularity of each partition of the graph's rows (Newman and Girvan 2004; with
    the graph's own weights, ``D^-1/2 W D^-1/2`` undone for a normalised graph).

    Parameters
    ----------
    graph : KNNGraph
    labels : dask array of int (n_samples,), or a list of them
        As for :func:`normalized_cut`; a list is scored in one pass.
    n_clusters : int

    Returns
    -------
    float, or ndarray (n_partitions,) for a list: higher keeps more of the edge weight
    inside the clusters than their degrees alone would, in [-1/2, 1). Only per-cluster sums
    reach the client.
    """
    single = not isinstance(labels, (list, tuple))
    q = _modularity(_partition_sums(graph, labels, n_clusters))
    return float(q[0]) if single else q


def cut_and_modularity(graph, labels, n_clusters):
    """Both scores of each partition from one pass: ``(normalized_cut, modularity)``, two
    arrays (n_partitions,) for a list of partitions, two floats for one."""
    sums = _partition_sums(graph, labels, n_clusters)
    cut, q = _ncut(sums), _modularity(sums)
    if isinstance(labels, (list, tuple)):
        return cut, q
    return float(cut[0]), float(q[0])


def _partition_sums(graph, labels, n_clusters):
    """Per partition and cluster, the edge weight inside the cluster and its volume:
    (2, n_partitions, n_clusters), from one blockwise pass on the graph."""
    partitions = list(labels) if isinstance(labels, (list, tuple)) else [labels]
    label_blocks = [
        graph.in_graph_order(p).to_delayed(optimize_graph=False).ravel() for p in partitions
    ]
    width = len(partitions) + 1
    columns = da.concatenate(
        [
            da.from_delayed(
                task("cut-columns", _columns, blk, *(lb[b] for lb in label_blocks)),
                shape=(n, width),
                dtype=np.float64,
            )
            for b, (blk, n) in enumerate(zip(graph.blocks, graph.chunks, strict=True))
        ]
    )  # read by the runs' tasks and their halo exchange, all in the one graph computed below
    # optimised as a persist of the labels would be: the labels' keys, in this graph and in
    # the caller's later graphs, then stand for the same tasks (dask/dask#9888)
    blocks = columns.to_delayed().ravel()
    groups = graph.row_groups(width * 8)
    edges = [
        task("cut-edges", group_edges, *[graph.blocks[b] for b in group], nout=2)
        for group in groups
    ]
    halo = graph.groups_halo(groups, [need for _, need in edges], columns)
    sums = functools.partial(_cut_sums, n_clusters=int(n_clusters), normalized=graph.normalized)
    parts = [
        task("cut", sums, run_edges, rows, *[blocks[b] for b in group])
        for group, (run_edges, _), rows in zip(groups, edges, halo, strict=True)
    ]
    (sums,) = dask.compute(tree_sum(parts, prefix="elmscale-graph-cut-sum"))
    return sums
