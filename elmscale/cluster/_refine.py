"""A partition sharpened on the kNN graph: rounds of neighbour-majority votes.

k-means on an embedding draws straight borders between clusters; the graph knows where the
data's own borders run. A round gives every row the label most common among its graph
neighbours and itself (each neighbour one vote, the row's own label one and a half, so a tie
keeps it), all rows at once from the previous round's labels: the synchronous label
propagation of Raghavan, Albert and Kumara (2007), started from the k-means partition instead
of one label per row and stopped after a few rounds, so that it cleans the borders without
merging clusters. Rows deep inside a cluster keep their label; rows on a border move to the
side most of their neighbours are on, which lowers the edge weight the partition cuts.

A round is one blockwise pass on the graph: each chunk reads its rows' edges and the labels of
its halo rows (one integer per row, from the chunks that hold them; one exchange per round),
and writes its rows' new labels. Nothing N-sized reaches the client, and the result depends
on the labels and the graph only, not on the chunking.
"""

import functools

import dask
import dask.array as da
import numpy as np

from ..graph import input_order
from ..utils._dask import named, task, tree_sum

#: the weight of a row's own label in its vote: more than a neighbour's, less than two
OWN_VOTE = 1.5


def _vote_block(labels, block, halo_pieces, *, n_clusters):
    """One round on a chunk's rows: the label of most votes among each row's neighbours
    (``block.W``'s pattern, columns local: the chunk's rows, then its halo) and itself, for
    each column (partition) of ``labels``."""
    own = np.asarray(labels, dtype=np.int64).reshape(len(labels), -1)
    width = own.shape[1]
    halo = [np.asarray(p, dtype=np.int64).reshape(-1, width) for p in halo_pieces]
    every = np.concatenate([own, *halo])
    W = block.W.tocoo()
    edge = W.data != 0
    rows, cols = W.row[edge], W.col[edge]
    n = own.shape[0]
    out = np.empty_like(own)
    for j in range(own.shape[1]):
        votes = np.bincount(rows * n_clusters + every[cols, j], minlength=n * n_clusters)
        out[:, j] = majority_vote(votes.reshape(n, n_clusters), own[:, j])
    return out


def majority_vote(votes, own):
    """Each row's label of most votes: ``votes`` (n, n_clusters) counts its neighbours'
    labels, and its own label ``own`` weighs :data:`OWN_VOTE` (so a tie keeps it)."""
    votes = np.array(votes, dtype=np.float64)
    own = np.asarray(own, dtype=np.int64).ravel()
    votes[np.arange(own.size), own] += OWN_VOTE
    return np.argmax(votes, axis=1).astype(np.int64)


def refine_labels(graph, labels, n_clusters, rounds=3):
    """Rounds of neighbour-majority votes on the graph, from ``labels``.

    Parameters
    ----------
    graph : KNNGraph
        The graph whose edges vote (each one vote, whatever its weight).
    labels : dask array of int (n_samples,) or (n_samples, n_partitions)
        Labels in ``[0, n_clusters)`` in the input's row order, chunked like the input; the
        columns of a 2-D array are partitions voted on independently, in the same passes.
    n_clusters : int
    rounds : int >= 0, default=3

    Returns
    -------
    dask array of int64 shaped like ``labels``, persisted, in the input's row order and
    chunks.
    """
    if rounds < 0:
        raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
    if not rounds:
        return labels
    chunks = labels.chunks[0]
    current = graph.in_graph_order(labels.astype(np.int64))
    current = current.reshape(labels.shape[0], -1).rechunk({0: graph.chunks, 1: -1})
    width = current.shape[1]
    vote = functools.partial(_vote_block, n_clusters=int(n_clusters))

    def block_task(rows, block, halo):
        return task("elmscale-refine-vote", vote, rows, block, halo)

    for _ in range(int(rounds)):
        sources = current.to_delayed(optimize_graph=False).ravel()
        current = graph.map_rows(
            block_task, sources, width, np.int64, halo_of=current, prefix="elmscale-refine"
        )
    back = input_order(graph)
    out = current[:, 0] if labels.ndim == 1 else current
    if back is not None:
        out = back.apply(out)
    return out.rechunk({0: chunks}).persist()


def _means_partials(block, labels, n_clusters):
    """Per-cluster sums of a block's rows, their counts and their squared norms."""
    block = np.asarray(block, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    d = block.shape[1]
    sums = np.empty((n_clusters, d))
    for j in range(d):
        sums[:, j] = np.bincount(labels, weights=block[:, j], minlength=n_clusters)
    norms = np.einsum("ij,ij->i", block, block)
    return {
        "sums": sums,
        "counts": np.bincount(labels, minlength=n_clusters).astype(np.float64),
        "sumsq": np.bincount(labels, weights=norms, minlength=n_clusters),
    }


def cluster_means(E, labels, n_clusters):
    """The means of the clusters ``labels`` gives the rows of E and the inertia of the rows
    around them: ``(centers, inertia)``. For dask input (row-chunked) from one pass of
    per-block sums tree-reduced on the workers: only ``n_clusters`` rows reach the client.
    An empty cluster's centre is zero."""
    if not isinstance(E, da.Array) and not isinstance(labels, da.Array):
        return _centers_and_inertia(_means_partials(E, labels, int(n_clusters)))
    E, labels = da.asarray(E), da.asarray(labels)
    labels = labels.rechunk({0: E.chunks[0]})
    if len(E.chunks[1]) > 1:
        E = E.rechunk({1: -1})
    partial = named(_means_partials, "elmscale-refine-means")
    # optimised, as a persist of E or of the labels would be: their keys, here and in the
    # caller's other graphs (k-means persisted E's blocks), then stand for the same tasks
    # (dask/dask#9888; the scheduler warns of a "different run_spec" otherwise)
    parts = [
        partial(b, lab, int(n_clusters))
        for b, lab in zip(E.to_delayed().ravel(), labels.to_delayed().ravel(), strict=True)
    ]
    (total,) = dask.compute(tree_sum(parts, prefix="elmscale-refine-means-sum"))
    return _centers_and_inertia(total)


def _centers_and_inertia(total):
    counts = total["counts"]
    centers = total["sums"] / np.maximum(counts, 1.0)[:, None]
    # per cluster, sum ||x - c||^2 = sum ||x||^2 - n_c ||c||^2 for c the cluster's mean
    inertia = np.sum(total["sumsq"] - counts * np.einsum("ij,ij->i", centers, centers))
    return centers, max(float(inertia), 0.0)


__all__ = ["cluster_means", "majority_vote", "refine_labels"]
