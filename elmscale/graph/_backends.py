"""Built-in kNN graph backends. Each maps a row-chunked dask array to ``(indices,
distances)``: dask arrays (n_samples, n_neighbors) chunked like X's rows, global row indices,
the row itself excluded, nearest first."""

import logging

import dask.array as da
import numpy as np

from .._config import get_config
from ._select import BLOCK_VALUES, block_topk, merge_topk
from ._tasks import task

logger = logging.getLogger(__name__)


def check_n_neighbors(X, n_neighbors):
    """The one check of k against the data, shared by the graph and its backends."""
    if not 1 <= n_neighbors < X.shape[0]:
        raise ValueError(
            f"n_neighbors={n_neighbors} must be in [1, n_samples - 1] = [1, {X.shape[0] - 1}]"
        )


def _block_candidates(
    Xq, Xr, q_start, r_start, k, transform=None, values=None, dtype=None, compiled=False
):
    """The k nearest rows of Xr for each row of Xq (at most Xr's rows): (global ids,
    squared distances), and with ``values`` (Xr's rows of them) the nearest rows' values
    (n_query, k, n_values). With ``q_start`` None the queries are other points than the
    reference rows (negative ids: no reference row is excluded as the query itself).
    ``transform`` is applied to both blocks first; ``dtype`` is the proposing product's
    (:func:`~elmscale.graph._select.block_topk`; the result does not depend on it), and
    ``compiled`` whether its selection is compiled (the same result)."""
    if transform is not None:
        Xq, Xr = np.asarray(transform(Xq)), np.asarray(transform(Xr))
    n = Xq.shape[0]
    q_ids = -1 - np.arange(n) if q_start is None else np.arange(q_start, q_start + n)
    k = min(k, Xr.shape[0])
    # fewer queries than rows (a recall sample): the rows in slices whose product with the
    # queries fills one block, each slice's k best merged into those so far by (distance,
    # id), so that the rows are read once rather than once per small block of queries; a
    # slice proposes only rows that may lie within the k-th nearest so far (the same
    # neighbours: a row among the k nearest of all lies within that of every slice before)
    nr = Xr.shape[0]
    step = max(BLOCK_VALUES // max(n, 1), 4 * k) if n < nr else max(nr, 1)
    ids = d2 = None
    for lo in range(0, max(nr, 1), step):
        found = block_topk(
            Xq,
            q_ids,
            Xr[lo : lo + step],
            np.arange(r_start + lo, r_start + min(lo + step, nr)),
            min(k, nr - lo, step),
            dtype=dtype or np.float64,
            compiled=compiled,
            within=None if ids is None or ids.shape[1] < k else d2[:, k - 1],
        )
        if ids is None:
            ids, d2 = found
        else:
            both = zip((ids, d2), found, strict=True)
            ids, d2 = merge_topk(k, *(np.concatenate(p, axis=1) for p in both))
    if values is None:
        return ids, d2
    return ids, d2, np.asarray(values, dtype=np.float64)[np.where(ids >= 0, ids - r_start, 0)]


def _merge_candidates(k, *cands):
    idx, d2 = merge_topk(
        k,
        np.concatenate([c[0] for c in cands], axis=1),
        np.concatenate([c[1] for c in cands], axis=1),
    )
    return idx, np.sqrt(d2)


def blockwise_search(
    stage,
    Xq,
    Xr,
    n_neighbors,
    finish,
    *,
    same=False,
    values=None,
    transform=None,
    nout=None,
    dtype=None,
):
    """Exact kNN of the rows of Xq among the rows of Xr (row-chunked dask arrays), blockwise:
    one task per pair of a query chunk and a reference chunk proposes that chunk's k
    nearest rows (with their rows of ``values``, chunked like Xr's rows, when given), ranked
    by (exact distance, global index), and one task per query chunk calls
    ``finish(k, *candidates)`` on them. No task holds more than two chunks and k candidates
    per query row; nothing N-sized reaches the client. Work is O(n_query N d).

    ``same`` says Xq is Xr, whose rows then exclude themselves; ``transform`` is applied to
    each block of both before distances are taken; ``dtype`` is the precision of the
    proposing product (float64 by default; a float32 product's selection is compiled as
    ``config_context(compiled=...)`` says). Returns the delayed ``finish`` results,
    one per chunk of Xq (tasks named ``<stage>`` and ``<stage>-merge``; ``nout`` as
    :func:`~elmscale.graph._tasks.task`)."""
    q_starts = np.concatenate([[0], np.cumsum(Xq.chunks[0])]).astype(int)
    compiled = get_config()["compiled"]
    r_starts = np.concatenate([[0], np.cumsum(Xr.chunks[0])]).astype(int)
    r_blocks = Xr.to_delayed(optimize_graph=False).ravel()
    v_blocks = [None] * len(r_blocks)
    if values is not None:
        v_blocks = values.to_delayed(optimize_graph=False).ravel()
    out = []
    for b, Xb in enumerate(Xq.to_delayed(optimize_graph=False).ravel()):
        q_start = int(q_starts[b]) if same else None
        cands = [
            task(
                stage,
                _block_candidates,
                Xb,
                Xs,
                q_start,
                int(r_starts[s]),
                n_neighbors,
                transform,
                vs,
                dtype,
                compiled,
            )
            for s, (Xs, vs) in enumerate(zip(r_blocks, v_blocks, strict=True))
        ]
        out.append(task(f"{stage}-merge", finish, n_neighbors, *cands, nout=nout))
    return out


def exact_knn(X, n_neighbors, *, random_state=None):
    """Exact kNN by blocked brute force: one task per pair of row blocks, then a merge per
    query block. O(N^2 d) work: for small data and as the reference for approximate
    backends. Neighbours are ranked by (exact float64 distance, global index), so the result
    does not depend on the chunking (:mod:`elmscale.graph._select`)."""
    check_n_neighbors(X, n_neighbors)
    return exact_kneighbors(X, X, n_neighbors, same=True)


def exact_kneighbors(Xq, Xr, n_neighbors, *, same=False, dtype=None):
    """Exact kNN of the rows of Xq among the rows of Xr (both row-chunked dask arrays), by
    blocked brute force (:func:`blockwise_search`): ``(indices, distances)`` chunked like
    Xq's rows, indices into Xr, nearest first. ``same`` says Xq is Xr, whose rows then
    exclude themselves; otherwise a query row equal to a reference row finds it at
    distance 0. ``dtype`` is the proposing product's (float64 by default; the result is the
    same, a float32 product proposes more candidates in half the time)."""
    merged = blockwise_search(
        "exact", Xq, Xr, n_neighbors, _merge_candidates, same=same, nout=2, dtype=dtype
    )
    k = n_neighbors
    return tuple(
        da.concatenate(
            [
                da.from_delayed(m[i], (n, k), dtype=dt)
                for m, n in zip(merged, Xq.chunks[0], strict=True)
            ]
        )
        for i, dt in enumerate((np.int64, np.float64))
    )


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
