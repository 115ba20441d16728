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
graph's rows that ships the halo rows of the current X (d numbers per row), as the Gram
pass does, on groups of consecutive chunks: a group receives only the neighbours outside it,
and rows of X are small, so a few large groups ship a fraction of what one task per chunk
would.
"""

import copy
import functools

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from .._config import get_config
from ..utils._compiled import add_rows_product
from ..utils._dask import held_blocks, persist_compact, read_rows, tree_reduce
from ._exchange import destination_workers, near
from ._tasks import PREFIX, row_numbers, task


def _group_walk(pattern, dtype):
    """The random walk P over one group's rows (W's rows scaled to sum to one), split like
    its pattern (:meth:`KNNGraph.group_pattern`, whole rows): ``(P_local, P_halo,
    isolated)`` in ``dtype``, ``isolated`` the rows without edges."""
    V_local, V_halo, _ = pattern
    sums = np.asarray(V_local.sum(axis=1)).ravel() + np.asarray(V_halo.sum(axis=1)).ravel()
    isolated = sums <= 0
    scale = sp.diags(np.where(isolated, 0.0, 1.0 / np.where(isolated, 1.0, sums)))
    return (
        (scale @ V_local).tocsr().astype(dtype),
        (scale @ V_halo).tocsr().astype(dtype),
        isolated,
    )


def _as_rows(block, read, dtype):
    """Rows as held, read (None: they are the rows) and cast to the steps' dtype."""
    return np.asarray(read_rows(block, read)).astype(dtype, copy=False)


def _smooth_group(
    walk, halo_pieces, blocks, go=True, *, dtype, read=None, halo_read=None, compiled=True
):
    """One lazy random-walk step on a run of consecutive chunks' rows, ``blocks`` (the run's
    block, or the blocks of its graph chunks as held, each turned into rows by ``read`` and
    cast one at a time, then stacked): ``(Z_g + P_local Z_g + P_halo Z_halo) / 2``. The halo
    pieces (read by ``halo_read``) are added into the product one by one
    (:func:`add_rows_product`, which checks that they cover P_halo's columns), never stacked.
    Rows without edges keep their values (P acts as the identity on them). With ``go`` false
    (an earlier step ended the filter) the rows pass through unchanged, at no cost."""
    P_local, P_halo, isolated = walk
    blocks = [_as_rows(block, read, dtype) for block in blocks]
    Z = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    del blocks
    if not go:
        return Z
    halo = (_as_rows(piece, halo_read, dtype) for piece in halo_pieces)
    PZ = add_rows_product(P_local @ Z, P_halo, halo, compiled=compiled)
    PZ[isolated] = Z[isolated]
    PZ += Z
    PZ *= 0.5
    return PZ


class _RandomWalk:
    """The lazy random walk ``(I + P) / 2`` on a graph, as tasks over runs of consecutive
    graph chunks (:meth:`KNNGraph.row_groups`, rows of ``width`` numbers in ``dtype``). Each
    run's rows of P are built once and persisted. A step is one task per run plus its halo
    exchange between runs, whatever the number of graph chunks: the first step reads the rows
    chunked like the graph (each run's task stacks its chunks; no rechunked copy of the input
    is held while it runs), and returns them chunked by the runs, as every later step reads
    and returns them (:meth:`step`). A run's tasks prefer the worker its halo is delivered
    to, so on a cluster a run's rows stay on one worker from step to step and only halo rows
    cross between workers."""

    def __init__(self, graph, width, dtype):
        self.graph, self.dtype = graph, dtype
        self.compiled = get_config()["compiled"]
        self.groups = graph.row_groups(width * dtype.itemsize)
        starts = graph.starts
        self.run_chunks = tuple(int(starts[g[-1] + 1] - starts[g[0]]) for g in self.groups)
        patterns = [graph.group_pattern(group, half=False) for group in self.groups]
        self.workers = destination_workers(len(self.groups))
        walks = []
        for (pattern, _), worker in zip(patterns, self.workers, strict=True):
            with near(worker):
                walks.append(task("smooth-walk", _group_walk, pattern, dtype))
        state = dask.persist(*walks, *[need for _, need in patterns])
        self.walks, self.needs = state[: len(walks)], state[len(walks) :]

    def by_graph_chunks(self, Z):
        """Z, chunked by the runs, chunked like the graph's rows again."""
        return Z.rechunk({0: self.graph.chunks})

    def _by_runs(self, Z):
        """``(by_runs, runs, read)``: whether Z is chunked by the runs (else like the graph's
        rows), per run the list of blocks that hold its rows, and how a task turns them into
        Z's rows. Z chunked like the graph is read from its blocks as held
        (:func:`~elmscale.utils._dask.held_blocks`: e.g. the input's float32 rows of a
        float64 view), each widened only inside the task of its run, not held widened while
        every run's halo is taken from it."""
        if tuple(Z.chunks[0]) == self.run_chunks:
            return True, [[block] for block in Z.to_delayed(optimize_graph=False).ravel()], None
        if tuple(Z.chunks[0]) != tuple(self.graph.chunks):
            raise ValueError(
                f"Z must be chunked like the graph's rows or by the walk's runs, got {Z.chunks[0]}"
            )
        blocks, read = held_blocks(Z)
        return False, [[blocks[b] for b in group] for group in self.groups], read

    def step(self, Z, go=True):
        """``(Z + P Z) / 2`` in the steps' dtype, chunked by the runs, lazily, for Z chunked
        by the runs or like the graph's rows; Z itself where ``go`` (a bool or a delayed one,
        computed with the step) is false. The halo exchange then moves rows of no columns
        (:func:`_gated`)."""
        by_runs, runs, read = self._by_runs(Z)
        source = Z if go is True else _gated(Z, go)
        if by_runs:
            halo = self.graph.runs_halo(self.groups, self.needs, source, deferred=True)
            halo_read = None
        else:  # rows as held, each piece read in the task, as the run's own rows
            halo, halo_read = self.graph.groups_halo(
                self.groups, self.needs, source, held=True, deferred=True
            )
        step = functools.partial(
            _smooth_group,
            dtype=self.dtype,
            read=read,
            halo_read=halo_read,
            compiled=self.compiled,
        )
        out = []
        for walk, rows, blocks, n, worker in zip(
            self.walks, halo, runs, self.run_chunks, self.workers, strict=True
        ):
            with near(worker):
                smoothed = task("smooth", step, walk, rows, blocks, go)
            out.append(da.from_delayed(smoothed, (n, Z.shape[1]), self.dtype))
        return da.concatenate(out)


def _gate(block, go):
    return block if go else block[:, :0]


def _gated(Z, go):
    """Z's blocks, or where the delayed ``go`` is false the same rows with no columns: what a
    step that passes its rows through reads of its halo (the array's declared shape is Z's
    either way; only the halo exchange, which selects rows, reads it)."""
    return da.concatenate(
        [
            da.from_delayed(task("smooth-gate", _gate, block, go), (n, Z.shape[1]), Z.dtype)
            for block, n in zip(
                Z.to_delayed(optimize_graph=False).ravel(), Z.chunks[0], strict=True
            )
        ]
    )


def _walk_input(graph, X, dtype):
    """``(Z, dtype)``: the rows a walk starts from (X, default the graph's, checked to be
    chunked like the graph's rows, one column chunk) and the dtype its steps compute in
    (default X's; float64 for integer X)."""
    Z = graph.X if X is None else X
    if tuple(Z.chunks[0]) != tuple(graph.chunks):
        raise ValueError(
            f"X must be chunked like the graph's rows {graph.chunks}, got {Z.chunks[0]}"
        )
    if len(Z.chunks[1]) > 1:
        Z = Z.rechunk({1: -1})
    if dtype is None:
        dtype = Z.dtype if Z.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    return Z, dtype


def smooth_rows(graph, steps, X=None, *, dtype=None):
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
    dtype : float32, float64 or None
        Dtype the steps compute and return in; default X's (float64 for integer X).

    Returns
    -------
    dask array of X's shape in ``dtype``, persisted. Each step is persisted as it is built,
    without waiting for it (its rows are released once the next step has read them);
    nothing is gathered to the client.
    """
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)):
        raise TypeError(f"steps must be an integer >= 0, got {steps!r}")
    if steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    Z, dtype = _walk_input(graph, X, dtype)
    if not steps:
        return Z
    walk = _RandomWalk(graph, Z.shape[1], dtype)
    for _ in range(steps):
        (Z,) = _persist_steps(walk.step(Z))
    return walk.by_graph_chunks(Z).persist()


def _persist_steps(*collections):
    """``dask.persist`` of a walk's step, unoptimised: fusing a step's tasks with their
    blocks' aliases drops the worker each run's task prefers (:class:`_RandomWalk`)."""
    return dask.persist(*collections, optimize_graph=False)


def _total_variance(X, weights):
    """``sum_j var(X_j) * weights_j``, lazily, in float64."""
    return (X.var(axis=0, dtype=np.float64) * weights).sum()


def _feature_weights(scale):
    return 1.0 if scale is None else 1.0 / np.square(np.asarray(scale, dtype=np.float64))


def _share(after, before):
    return float(after / before) if before > 0 else 1.0


def retained_variance(X, X_filtered, scale=None):
    """Share of X's total variance that the filtered rows keep,
    ``sum_j var(Xf_j) / s_j^2 / sum_j var(X_j) / s_j^2`` (s the per-feature ``scale`` of the
    hidden layer's input scaling, or 1), computed in one pass over both arrays.

    Where neighbours share structure a filtered row stays close to its own, and most of the
    variance remains; where the neighbourhoods are no better than random (noise-like data)
    averaging erases the features and little remains. Returns a float in [0, 1] (1 for
    constant X)."""
    w = _feature_weights(scale)
    before, after = dask.compute(_total_variance(X, w), _total_variance(X_filtered, w))
    return _share(after, before)


#: :func:`smoothed_graph_if_kept` estimates the share on every s-th row, s chosen so that at
#: least this many rows are read
SHARE_SAMPLE_ROWS = 10_000


def _sample_moments(block, start, every):
    """``(n, mean, m2)`` in float64 over the rows of ``block`` whose global index (``start``
    + row) is a multiple of ``every``: their count, column means and column sums of squared
    deviations from the means."""
    rows = np.asarray(block)[(-int(start)) % every :: every].astype(np.float64)
    n = rows.shape[0]
    mean = rows.mean(axis=0) if n else np.zeros(rows.shape[1])
    return n, mean, np.square(rows - mean).sum(axis=0)


def _merge_moments(*parts):
    """The moments of the union of disjoint row sets from each one's (Chan et al.'s
    pairwise update)."""
    n, mean, m2 = parts[0]
    for n_b, mean_b, m2_b in parts[1:]:
        total = n + n_b
        if n_b:
            delta = mean_b - mean
            mean = mean + delta * (n_b / total)
            m2 = m2 + m2_b + np.square(delta) * (n * n_b / total)
        n = total
    return n, mean, m2


def _sampled_moments(Z, every):
    """A delayed ``(n, mean, m2)`` of Z's every ``every``-th row (:func:`_sample_moments`),
    one task per row chunk, merged by a tree."""
    starts = np.cumsum((0, *Z.chunks[0]))
    parts = [
        task("smooth-moments", _sample_moments, block, int(start), every)
        for block, start in zip(
            Z.to_delayed(optimize_graph=False).ravel(), starts[:-1], strict=True
        )
    ]
    return tree_reduce(parts, functools.partial(task, "smooth-moments-merge", _merge_moments))


def _kept_share(before, after, weights):
    """The share of ``sum_j var_j * weights_j`` that the ``after`` moments keep of the
    ``before`` ones (1 when there is none before)."""
    total = lambda moments: float((moments[2] / max(moments[0], 1) * weights).sum())  # noqa: E731
    return _share(total(after), total(before))


def _keep_going(go, share, min_variance):
    """Whether the next step runs: every step so far kept at least ``min_variance``."""
    return bool(go) and share >= min_variance


def smoothed_graph_if_kept(graph, steps, min_variance, scale=None, *, dtype=None):
    """The graph filtered ``steps`` times (:func:`smoothed_graph`), unless a step's rows keep
    less than ``min_variance`` of X's variance (the share of :func:`retained_variance`).

    The share is estimated after each step, on every s-th row of X and of the filtered rows
    (the same rows; at least :data:`SHARE_SAMPLE_ROWS` of them, all rows of smaller data),
    and the first step below ``min_variance`` ends the filter: each step averages the rows
    once more, so the share falls step by step on the data the filter is for, and on
    noise-like data, where the rule says no, the first few steps already erase most of the
    variance. The checks run on the workers with the steps: each step's tasks also reduce
    the sampled rows' moments, and the steps after the first one below pass their rows
    through without computing. The client submits the steps without waiting for any and
    gathers all shares at the end: one round trip.
    Returns ``(graph_f, kept, steps_taken)``: ``graph_f`` None when a step fell below
    ``min_variance``, else the graph of :func:`smoothed_graph` (equal to it), ``kept`` the
    share after the last step taken. While the steps after the first run, ``graph`` holds no
    copy of the input's rows (:meth:`KNNGraph.release_rows`): only the filtered rows are
    read, and the two latest steps' rows are what the filter holds; when the filter is not
    kept, ``graph`` holds its rows again, as before the call. ``dtype``: the steps' dtype
    (:func:`smooth_rows`); ``graph_f.X`` has X's.
    """
    w = _feature_weights(scale)
    every = max(1, graph.X.shape[0] // SHARE_SAMPLE_ROWS)
    X, dtype = _walk_input(graph, None, dtype)
    if not steps:
        return _with_rows(graph, X.astype(graph.X.dtype, copy=False)), 1.0, 0
    walk = _RandomWalk(graph, X.shape[1], dtype)
    (before,) = dask.persist(_sampled_moments(graph.X, every))  # read by every step's share
    Z, go, shares = X, True, []
    del X  # the first step is the last reader of the graph's rows (released below)
    for _ in range(int(steps)):
        # each step is submitted as soon as it is built and the client builds the next one
        # while the workers compute: persists, which the client does not wait for
        Z = walk.step(Z, go)
        share = task("smooth-share", _kept_share, before, _sampled_moments(Z, every), w)
        if min_variance > 0:
            go = task("smooth-go", _keep_going, go, share, min_variance)
        Z, share, go = _persist_steps(Z, share, go)
        shares.append(share)
        # the steps after the first read filtered rows only: the graph's held copy of the
        # input's rows goes while they run (held again below if the filter is not kept)
        graph.release_rows()
    Z = persist_compact(walk.by_graph_chunks(Z), f"{PREFIX}-smoothed", dtype=graph.X.dtype)
    shares = dask.compute(*shares)
    for t, kept in enumerate(shares, start=1):
        if kept < min_variance:
            graph.hold_rows()
            return None, kept, t
    return _with_rows(graph, Z), kept, int(steps)


def smoothed_graph(graph, steps):
    """The graph with its rows of X filtered ``steps`` times (:func:`smooth_rows`).

    It shares the graph's blocks, halo and row order; its ``X`` holds the filtered rows in
    the graph's order (its ``source_name`` names them), so hidden features built on its ``X``
    pair with it in a Gram pass. The filtered rows stay where the graph put them: what is
    computed from them, e.g. an embedding n_components wide, goes back to the input's rows
    through :func:`input_order`, rather than the N x d filtered rows themselves.
    """
    return _with_rows(graph, smooth_rows(graph, steps))


def _with_rows(graph, X_filtered):
    """A shallow copy of the graph whose ``X`` (and ``source_name``) are the filtered rows."""
    graph_f = copy.copy(graph)
    graph_f.X = X_filtered
    graph_f.rows_source = None
    graph_f.source_name = X_filtered.name
    return graph_f


def input_order(graph):
    """The ``RowOrder`` that moves row-aligned arrays in the graph's row order back to the
    input's rows (None when the graph keeps the input's order)."""
    if graph.order is None:
        return None
    positions = graph.order.apply(row_numbers(graph.order.input_chunks))
    return graph.order.inverse(positions)


__all__ = ["input_order", "retained_variance", "smooth_rows", "smoothed_graph"]
