"""Built-in kNN graph backends. Each maps a row-chunked dask array to ``(indices,
distances)``: dask arrays (n_samples, n_neighbors) chunked like X's rows, global row indices,
the row itself excluded, nearest first."""

import logging

import dask.array as da
import numpy as np

from ._select import block_topk, merge_topk
from ._tasks import task

logger = logging.getLogger(__name__)


def check_n_neighbors(X, n_neighbors):
    """The one check of k against the data, shared by the graph and its backends."""
    if not 1 <= n_neighbors < X.shape[0]:
        raise ValueError(
            f"n_neighbors={n_neighbors} must be in [1, n_samples - 1] = [1, {X.shape[0] - 1}]"
        )


def _block_candidates(Xq, Xr, q_start, r_start, k):
    """The k nearest rows of Xr for each row of Xq: (global ids, squared distances). With
    ``q_start`` None the queries are other points than the reference rows (negative ids: no
    reference row is excluded as the query itself)."""
    n = Xq.shape[0]
    return block_topk(
        Xq,
        -1 - np.arange(n) if q_start is None else np.arange(q_start, q_start + n),
        Xr,
        np.arange(r_start, r_start + Xr.shape[0]),
        k,
        dtype=np.float64,
    )


def _merge_candidates(k, *cands):
    idx, d2 = merge_topk(
        k,
        np.concatenate([c[0] for c in cands], axis=1),
        np.concatenate([c[1] for c in cands], axis=1),
    )
    return idx, np.sqrt(d2)


def exact_knn(X, n_neighbors, *, random_state=None):
    """Exact kNN by blocked brute force: one task per pair of row blocks, then a merge per
    query block. O(N^2 d) work: for small data and as the reference for approximate
    backends. Neighbours are ranked by (exact float64 distance, global index), so the result
    does not depend on the chunking (:mod:`elmscale.graph._select`)."""
    check_n_neighbors(X, n_neighbors)
    return exact_kneighbors(X, X, n_neighbors, same=True)


def exact_kneighbors(Xq, Xr, n_neighbors, *, same=False):
    """Exact kNN of the rows of Xq among the rows of Xr (both row-chunked dask arrays), by
    blocked brute force as :func:`exact_knn`: ``(indices, distances)`` chunked like Xq's rows,
    indices into Xr, nearest first. ``same`` says Xq is Xr, whose rows then exclude
    themselves; otherwise a query row equal to a reference row finds it at distance 0."""
    q_starts = np.concatenate([[0], np.cumsum(Xq.chunks[0])])
    r_starts = np.concatenate([[0], np.cumsum(Xr.chunks[0])])
    r_blocks = Xr.to_delayed(optimize_graph=False).ravel()
    idx_blocks, dist_blocks = [], []
    for b, Xb in enumerate(Xq.to_delayed(optimize_graph=False).ravel()):
        q_start = int(q_starts[b]) if same else None
        cands = [
            task(
                "exact",
                _block_candidates,
                Xb,
                Xs,
                q_start,
                int(r_starts[s]),
                n_neighbors,
                nout=2,
            )
            for s, Xs in enumerate(r_blocks)
        ]
        merged = task("exact-merge", _merge_candidates, n_neighbors, *cands, nout=2)
        n = Xq.chunks[0][b]
        idx_blocks.append(da.from_delayed(merged[0], (n, n_neighbors), dtype=np.int64))
        dist_blocks.append(da.from_delayed(merged[1], (n, n_neighbors), dtype=np.float64))
    return da.concatenate(idx_blocks), da.concatenate(dist_blocks)


def _nndescent_graph(X_blocks, n_neighbors, n_build, seed):
    import pynndescent

    X = np.concatenate(X_blocks).astype(np.float32, copy=False)
    index = pynndescent.NNDescent(
        X,
        n_neighbors=n_build + 1,
        random_state=seed,
        low_memory=True,
        n_jobs=-1,
        compressed=False,
        verbose=False,
    )
    idx, dist = index.neighbor_graph
    # drop the row itself (normally first); rows whose self entry is missing lose their last
    n = X.shape[0]
    own = idx == np.arange(n)[:, None]
    keep = ~own
    missing = keep.all(axis=1)
    keep[missing, -1] = False
    idx = idx[keep].reshape(n, n_build)[:, :n_neighbors]
    dist = dist[keep].reshape(n, n_build)[:, :n_neighbors]
    return idx.astype(np.int64), dist.astype(np.float64)


def nndescent_knn(X, n_neighbors, *, random_state=None):
    """Approximate kNN with pynndescent's NN-descent.

    How the work is split: the whole of X (N x d, small next to H) is gathered on ONE worker,
    which builds the index and reads its ``neighbor_graph``; the lists are then sliced back
    into X's row chunks. The build is the serial part: it runs NN-descent with all of the
    worker machine's cores (``n_jobs=-1``), since every other task waits for the graph.
    numba compiles its kernels in each fresh process the first time. To reach recall@k >= 0.9
    the index is built with
    ``max(2 k, 30)`` neighbours and the k best are kept: recall of NN-descent grows quickly
    with the size of its lists.
    """
    check_n_neighbors(X, n_neighbors)
    n_build = min(max(2 * n_neighbors, 30), X.shape[0] - 2)
    n_build = max(n_build, n_neighbors)
    seed = None if random_state is None else int(random_state)
    blocks = X.to_delayed(optimize_graph=False).ravel().tolist()
    graph = task("nndescent", _nndescent_graph, blocks, n_neighbors, n_build, seed, nout=2)
    N = X.shape[0]
    idx = da.from_delayed(graph[0], (N, n_neighbors), dtype=np.int64)
    dist = da.from_delayed(graph[1], (N, n_neighbors), dtype=np.float64)
    return idx.rechunk((X.chunks[0], n_neighbors)), dist.rechunk((X.chunks[0], n_neighbors))
