"""k-means on a row-chunked dask array, in a few passes over it.

The restarts run where they are cheap: scikit-learn's k-means (``n_init`` k-means++ starts)
on a random sample of at most ``init_sample`` rows of the small embedding, one task on a
worker (the sample is gathered there, not on the client). Its best centres then start
Lloyd's iterations on all rows on the cluster. With ``sample_draws`` > 1, that many samples
are drawn (all rows each time when there are no more than a sample), each with its share of
the starts, its own seed and its own task (the samples' fits run side by side on the
workers), and the best centres of each are refined on all rows together: a start that is
best on one sample can be a weaker optimum on all rows, and the inertia on all rows (or
``choose``) then decides among them.

Each pass of Lloyd's iterations reduces per-cluster sums and counts (n_clusters x
n_features) from every block. What a pass costs is mostly the scheduler's: the rows are
regrouped once into a few large blocks (the N x n_features array is small next to X), held
in memory while the iterations run, and each pass is one task per block plus a short tree
of sums. With so few rows that they make at most two blocks, all passes run in one task on
a worker instead, the same sums added in the same order: a pass over them costs less than
the client's round trip that would submit it. The last pass gives the labels and the
inertia of the final centres together. Several explicit starting points (``init`` of shape
(R, k, d)) are refined together, in one pass per iteration; a restart that comes within
the convergence tolerance of an earlier one (the same optimum) stops there and is not
counted again. On data of more than ``2 * CONVERGE_SAMPLE_FACTOR * init_sample`` rows
several starts first converge together on one sample of ``CONVERGE_SAMPLE_FACTOR *
init_sample`` rows, in one task, and only the distinct optima they reach there go on to the
passes over all rows, each of which costs as much as the restarts it carries.

The blocks depend only on the number of rows, not on the input's chunks, so the result does
not depend on how the input was chunked.
"""

import functools
import logging

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.utils import check_random_state

from ..utils._dask import local_tree_sum, named, tree_sum
from ..utils._random import row_samples
from ..utils._threads import limited_threads

logger = logging.getLogger(__name__)

#: rows of one block of the Lloyd passes: at least this many, and at most ``MAX_BLOCKS`` blocks
MIN_BLOCK_ROWS = 65_536
MAX_BLOCKS = 16
#: with at most this many blocks, all of Lloyd's passes run in one task on a worker: a pass
#: over so few rows costs less than the round trip that submits it from the client, and the
#: blocks leave no parallel work to share out
LOCAL_MAX_BLOCKS = 2
#: rows whose distances to every restart's centres are scored at once: the score matrix
#: (rows x restarts x n_clusters) then stays in the processor's cache
NEAREST_ROWS = 4096
#: several starts first converge together on one sample of this many times ``init_sample``
#: rows, in one task, where the data has more than twice as many rows: the optima they reach
#: there start the passes over all rows, each once (:func:`_converged_on_sample`)
CONVERGE_SAMPLE_FACTOR = 10


def _nearest(block, centers):
    """Index of and squared distance to the nearest centre, per row, for each restart:
    two arrays (R, n), computed :data:`NEAREST_ROWS` rows at a time.

    The argmin needs only ``||c||^2 - 2 x.c``: one product of the rows, with a column of
    ones appended, and the centres scaled by -2 with their squared norms appended;
    ``||x||^2`` is added to the minimum alone."""
    R, k, d = centers.shape
    C = centers.reshape(R * k, d)
    weights = np.empty((d + 1, R * k))
    np.multiply(C.T, -2.0, out=weights[:d])
    weights[d] = np.einsum("ij,ij->i", C, C)
    n = block.shape[0]
    # best is filled row-major and returned transposed: its sums over rows then add in the
    # order they did when it was computed in one piece
    lab, best = np.empty((R, n), dtype=np.intp), np.empty((n, R))
    rows = np.empty((min(n, NEAREST_ROWS), d + 1))
    rows[:, d] = 1.0
    for start in range(0, n, NEAREST_ROWS):
        stop = min(start + NEAREST_ROWS, n)
        part = rows[: stop - start]
        part[:, :d] = block[start:stop]
        score = (part @ weights).reshape(-1, R, k)
        nearest = np.argmin(score, axis=2)  # (rows, R)
        lab[:, start:stop] = nearest.T
        least = np.take_along_axis(score, nearest[:, :, None], axis=2)[:, :, 0]
        least += np.einsum("ij,ij->i", part[:, :d], part[:, :d])[:, None]
        best[start:stop] = np.maximum(least, 0.0)
    return lab, best.T


def _lloyd_partials(block, centers):
    """Per-restart cluster sums (R, k, d), counts (R, k) and inertia (R,) of one block. The
    sums are one sparse product: a (R k, n) matrix with a one where row i belongs to
    cluster j of restart r, times the block."""
    R, k, d = centers.shape
    lab, best = _nearest(block, centers)
    block = block.astype(np.float64, copy=False)
    n = block.shape[0]
    cluster = (lab + (np.arange(R) * k)[:, None]).ravel()
    member = sp.csr_matrix((np.ones(R * n), (cluster, np.tile(np.arange(n), R))), shape=(R * k, n))
    return {
        "sums": (member @ block).reshape(R, k, d),
        "counts": np.bincount(cluster, minlength=R * k).reshape(R, k).astype(np.float64),
        "inertia": best.sum(axis=1),
        "sumsq": np.einsum("ij,ij->", block, block),
    }


def _final_block(block, centers):
    """Labels of one block for the best centres, and its inertia."""
    lab, best = _nearest(block, centers[None])
    return lab[0].astype(np.int64), float(best[0].sum())


def _sample_rows(Eb, size, draws, rng):
    """``draws`` random samples of ``size`` rows of Eb (persisted, row-chunked) and a seed
    for each, as delayed values, and the random state they leave ``rng`` in
    (:func:`~elmscale.utils._random.row_samples`: drawn on a worker, the numbers ``rng``
    would draw here); all rows ``draws`` times, a seed for each and the state as None, when
    Eb has no more than ``size`` rows."""
    if size >= Eb.shape[0]:
        return [Eb] * draws, [rng.randint(2**31 - 1) for _ in range(draws)], None
    return row_samples(Eb, size, draws, rng, n_seeds=draws, prefix="elmscale-kmeans-sample")


def _sample_start(sample, n_clusters, n_init, seed):
    """The centres of scikit-learn's best of ``n_init`` k-means++ starts on one sample.

    It runs as a task on a worker (each sample's fit on its own worker, the client idle), on
    one OpenMP thread wherever it runs: a distributed worker pins OpenMP to its threads,
    and dask's threaded scheduler runs several of these at once; one thread also makes
    the centres the same under any scheduler."""
    with limited_threads(1, "openmp"):
        fit = KMeans(n_clusters, n_init=n_init, random_state=seed)
        return fit.fit(np.asarray(sample, dtype=np.float64)).cluster_centers_


def block_rows(n_samples):
    """Rows per block of the Lloyd passes: at most ``MAX_BLOCKS`` blocks of at least
    ``MIN_BLOCK_ROWS`` rows (fewer, larger tasks; the embedding is narrow)."""
    return max(MIN_BLOCK_ROWS, -(-n_samples // MAX_BLOCKS))


def kmeans(
    E,
    n_clusters,
    *,
    n_init=10,
    max_iter=100,
    tol=1e-4,
    init=None,
    random_state=None,
    init_sample=20000,
    sample_draws=1,
    choose=None,
):
    """Cluster the rows of a dask array with Lloyd's algorithm.

    Parameters
    ----------
    E : dask array (n_samples, n_features), chunked by rows. It is read once to regroup its
        rows into at most 16 blocks, which stay in memory (workers, or the local scheduler's
        process) until the function returns: ``n_samples * n_features * itemsize`` bytes,
        logged; every Lloyd iteration reads them once.
    n_clusters, n_init, max_iter, tol : as in ``sklearn.cluster.KMeans`` (tol is relative to
        the mean feature variance of the data).
    init : ndarray (n_clusters, n_features) or (n_starts, n_clusters, n_features), or None
        Start from these centres (n_init is then ignored; the best start wins); None runs
        scikit-learn's k-means with n_init k-means++ starts on a sample of ``init_sample``
        rows (all rows when there are no more).
    sample_draws : int, default=1
        Samples drawn (all rows each time when they do not outnumber ``init_sample``); they
        share the ``n_init`` starts, and the best centres of each are refined on all rows,
        where the least inertia wins (or ``choose``).
    choose : callable, optional
        Picks the refined start kept instead of the least inertia, where there were several
        starts: ``choose(inertia, labels)`` gets the inertia of every distinct optimum they
        reached (one or more; starts that reached the same optimum count once) and a function
        ``labels(indices)`` giving those starts' labels (their nearest centres) as a dask
        array (n_samples, len(indices)) chunked like E's rows, and returns the index of the
        start to keep.

    Returns
    -------
    centers : ndarray (n_clusters, n_features)
    labels : dask array of int64 (n_samples,), chunked like E's rows
    inertia : float
        Of the returned centres and labels.
    n_iter : int
    """
    restarts = refined_starts(
        E,
        n_clusters,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        init=init,
        random_state=random_state,
        init_sample=init_sample,
        sample_draws=sample_draws,
    )
    return restarts.finish(restarts.best(choose))


def refined_starts(
    E,
    n_clusters,
    *,
    n_init=10,
    max_iter=100,
    tol=1e-4,
    init=None,
    random_state=None,
    init_sample=20000,
    sample_draws=1,
):
    """:func:`kmeans` up to the choice of a start: its starts refined on all rows, as
    :class:`Restarts`, for a caller that weighs the starts of several runs together (one
    pass of a score over all their candidates) before it keeps one of each. Parameters as
    :func:`kmeans`."""
    rng = check_random_state(random_state)
    N = E.shape[0]
    rows = block_rows(N)
    # regrouped and held first: the sample below then reads these blocks instead of
    # computing E (e.g. H beta, with H rebuilt from X) a second time
    Eb = E.rechunk({0: rows}).persist()
    logger.info(
        "k-means: %d rows in %d blocks held in memory (%.1f MB)",
        N,
        len(Eb.chunks[0]),
        Eb.nbytes / 1e6,
    )
    blocks = Eb.to_delayed(optimize_graph=False).ravel().tolist()
    starts = _starts(Eb, n_clusters, n_init, init, (init_sample, sample_draws), rng)
    first = starts
    if len(starts) > 1 and N > 2 * CONVERGE_SAMPLE_FACTOR * init_sample:
        size = CONVERGE_SAMPLE_FACTOR * init_sample
        first = _converged_on_sample(Eb, starts, size, rng, max_iter, tol)
    centers, n_iter, distinct = _lloyd(blocks, first, N, max_iter, tol)
    return Restarts(blocks, centers[distinct], n_iter[distinct], len(starts), Eb, E.chunks[0])


class Restarts:
    """k-means's starts refined on all rows, before one is kept (:func:`refined_starts`).

    ``centers`` (n_optima, n_clusters, n_features) are the distinct optima the ``n_starts``
    starts reached (starts at one optimum count once), ``n_iter`` their passes. The blocks of
    E stay in memory while the object lives."""

    def __init__(self, blocks, centers, n_iter, n_starts, Eb, chunks):
        self.blocks, self.centers, self.n_iter, self.n_starts = blocks, centers, n_iter, n_starts
        self._chunks = (Eb.chunks[0], chunks)
        self._held = Eb  # the persisted blocks the delayed ``blocks`` read
        self._inertia = None

    def inertia(self):
        """Each optimum's inertia on all rows (one pass, kept)."""
        if self._inertia is None:
            self._inertia = _pass(self.blocks, self.centers)["inertia"]
        return self._inertia

    def labels(self, indices):
        """The nearest centres of these optima: a persisted dask array (n_samples,
        len(indices)) of int64 chunked like E's rows."""
        return restart_labels([self], [indices])

    def best(self, choose=None):
        """The optimum of least inertia, or ``choose(inertia, labels)``'s (asked whenever
        there were several starts, also of one distinct optimum; :func:`kmeans`); no pass
        for a single start and no ``choose``."""
        if self.n_starts == 1 or (len(self.centers) == 1 and choose is None):
            return 0
        if choose is None:
            return int(np.argmin(self.inertia()))
        return int(choose(self.inertia(), self.labels))

    def finish(self, index):
        """:func:`kmeans`'s result for the optimum ``index``: ``(centers, labels, inertia,
        n_iter)``, the labels and inertia from one more pass."""
        centers = self.centers[index]
        labels, inertia = _final_labels(self.blocks, centers, *self._chunks)
        logger.info(
            "k-means: best of %d restarts, inertia %.6g after %d iterations",
            len(self.centers),
            inertia,
            self.n_iter[index],
        )
        return centers, labels, inertia, int(self.n_iter[index])


def _starts(Eb, n_clusters, n_init, init, sampling, rng):
    """The starting centres, (n_starts, n_clusters, n_features): ``init``, or the best of
    scikit-learn's k-means++ starts on samples of rows, one row of starts per sample."""
    if init is not None:
        starts = np.asarray(init, dtype=np.float64)
        return starts[None] if starts.ndim == 2 else starts
    init_sample, draws = sampling
    if min(init_sample, Eb.shape[0]) < n_clusters:
        raise ValueError(f"n_clusters={n_clusters} is larger than n_samples={Eb.shape[0]}")
    samples, seeds, state = _sample_rows(Eb, init_sample, max(1, min(draws, n_init)), rng)
    shares = np.array_split(np.arange(n_init), len(samples))  # the starts each sample gets
    start = named(_sample_start, "elmscale-kmeans-start")
    fits = [
        start(sample, n_clusters, len(share), seed)
        for sample, share, seed in zip(samples, shares, seeds, strict=True)
    ]
    *centers, state = dask.compute(*fits, state)
    if state is not None:  # rng continues as if it had drawn the samples here
        rng.set_state(state)
    return np.stack(centers)


def _converged_on_sample(Eb, starts, size, rng, max_iter, tol):
    """The distinct optima that Lloyd's iterations reach from ``starts`` on one random sample
    of ``size`` rows of Eb, all passes in one task on a worker (:func:`_lloyd_local`): the
    starting centres of the passes over all rows. Starts that reach one optimum there are
    refined on all rows once, instead of each until it meets the others there, where every
    pass costs as many restarts as still move."""
    (sample,), _, state = row_samples(Eb, size, 1, rng, prefix="elmscale-kmeans-converge")
    local = named(_lloyd_local, "elmscale-kmeans-converge-lloyd", nout=3)
    centers, _, distinct = local([sample], starts, size, max_iter, tol)
    centers, distinct, state = dask.compute(centers, distinct, state)
    rng.set_state(state)
    logger.info(
        "k-means: %d starts reach %d optima on a sample of %d rows",
        len(starts),
        int(distinct.sum()),
        size,
    )
    return centers[distinct]


def _pass(blocks, centers):
    """One pass of every restart's partial sums over the blocks, reduced."""
    partials = named(_lloyd_partials, "elmscale-kmeans-lloyd")
    c = dask.delayed(centers, pure=True)
    return dask.compute(tree_sum([partials(b, c) for b in blocks], prefix="elmscale-kmeans-sum"))[0]


def _local_pass(blocks, centers):
    """:func:`_pass` on blocks held in this process: the same partial sums, added in the
    same order as :func:`~elmscale.utils._dask.tree_sum`, so the same numbers."""
    return local_tree_sum([_lloyd_partials(b, centers) for b in blocks])


def _lloyd_local(blocks, centers, N, max_iter, tol):
    """:func:`_lloyd_passes` with every pass in this process (one task on a worker)."""
    return _lloyd_passes(functools.partial(_local_pass, blocks), centers, N, max_iter, tol)


def _lloyd(blocks, centers, N, max_iter, tol):
    """Lloyd iterations of all restarts together: ``(centers, n_iter, distinct)``
    (:func:`_lloyd_passes`); one task for all passes with at most :data:`LOCAL_MAX_BLOCKS`
    blocks, else one round trip per pass."""
    if len(blocks) <= LOCAL_MAX_BLOCKS:
        local = named(_lloyd_local, "elmscale-kmeans-lloyd-local", nout=3)
        return tuple(dask.compute(*local(blocks, centers, N, max_iter, tol)))
    return _lloyd_passes(functools.partial(_pass, blocks), centers, N, max_iter, tol)


def _matched_shift(a, b):
    """The squared distance between two sets of centres (k, d) under the pairing of their
    centres that makes it least (cluster numbers are arbitrary)."""
    cost = ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].sum())


def _lloyd_passes(run_pass, centers, N, max_iter, tol):
    """Lloyd iterations of all restarts together, ``run_pass(centers)`` giving the reduced
    partial sums of one pass: ``(centers, n_iter, distinct)``. A pass computes the partial
    sums of the restarts still moving only (a converged restart's centres no longer
    change), so its cost falls as the restarts converge. A restart whose centres come
    within the convergence tolerance of an earlier restart's (paired as
    :func:`_matched_shift` pairs them) has reached the same optimum, as closely as k-means
    tells optima apart: it stops there and ``distinct`` is False for it, so that neither
    its passes nor a choice among the restarts count it twice."""
    active = np.ones(len(centers), dtype=bool)
    distinct = np.ones(len(centers), dtype=bool)
    n_iter = np.zeros(len(centers), dtype=int)
    centers = centers.copy()
    var = None
    for _ in range(max_iter):
        moving = centers[active]
        total = run_pass(moving)
        counts = total["counts"]
        new = np.where(
            counts[:, :, None] > 0, total["sums"] / np.maximum(counts, 1)[:, :, None], moving
        )  # an empty cluster keeps its centre
        if var is None:  # tol is relative to the mean feature variance, as in scikit-learn
            mean = total["sums"][0].sum(axis=0) / N
            var = max((total["sumsq"] / N - mean @ mean) / mean.size, 0.0) or 1.0
        shift = ((new - moving) ** 2).sum(axis=(1, 2))
        n_iter[active] += 1
        centers[active] = new
        active[np.flatnonzero(active)[shift <= tol * var]] = False
        for i in np.flatnonzero(distinct)[1:]:
            earlier = np.flatnonzero(distinct[:i])
            if any(_matched_shift(centers[i], centers[j]) <= tol * var for j in earlier):
                distinct[i] = active[i] = False
        if not active.any():
            break
    return centers, n_iter, distinct


def restart_labels(runs, indices):
    """The nearest centres of the optima ``indices[i]`` of each run ``runs[i]``
    (:class:`Restarts` on the rows of one E, in as many columns as it has: the same blocks),
    side by side: a persisted dask array (n_samples, total indices) of int64 chunked like E's
    rows, one task per block for all runs."""
    nearest = named(_nearest_in_runs, "elmscale-kmeans-restart-labels")
    centers = [
        dask.delayed(run.centers[np.asarray(ix)], pure=True)
        for run, ix in zip(runs, indices, strict=True)
    ]
    block_chunks, chunks = runs[0]._chunks
    parts = dask.persist(
        *[nearest(list(blocks), centers) for blocks in zip(*(r.blocks for r in runs), strict=True)]
    )
    width = sum(len(ix) for ix in indices)
    every = da.concatenate(
        [
            da.from_delayed(p, (n, width), dtype=np.int64)
            for p, n in zip(parts, block_chunks, strict=True)
        ]
    )
    return every.rechunk({0: chunks}).persist()


def _nearest_in_runs(blocks, centers):
    return np.hstack([_nearest_columns(b, c) for b, c in zip(blocks, centers, strict=True)])


def _nearest_columns(block, centers):
    return np.ascontiguousarray(_nearest(block, centers)[0].T, dtype=np.int64)


def _final_labels(blocks, centers, block_chunks, chunks):
    """One pass: the labels (kept in memory, chunked like ``chunks``) and the inertia."""
    final = named(_final_block, "elmscale-kmeans-labels", nout=2)
    c = dask.delayed(centers, pure=True)
    parts = dask.persist(*[final(b, c) for b in blocks])
    inertia = float(sum(dask.compute(*[p[1] for p in parts])))
    labels = da.concatenate(
        [
            da.from_delayed(p[0], (n,), dtype=np.int64)
            for p, n in zip(parts, block_chunks, strict=True)
        ]
    )
    if labels.chunks[0] != chunks:
        labels = labels.rechunk({0: chunks})
    return labels, inertia


__all__ = ["Restarts", "block_rows", "kmeans", "refined_starts", "restart_labels"]
