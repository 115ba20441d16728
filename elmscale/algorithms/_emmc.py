"""EMMC: extreme maximum margin clustering (Zhang, Xia, Liu and Zhang 2013, Algorithm 1).

The data are touched only through the engine's blockwise reductions and a few cheap passes
over the N x n_outputs scores:

- one pass for H^T H (with the initial labels' H^T F in the same pass); ``H^T H + I/C`` is
  Cholesky-factored once per solve (``elmscale.sweep`` over C shares the hidden layer, the
  initial labels and the pass);
- per iteration, one pass over H for the scores ``F = H beta`` (persisted: N x n_outputs),
  the labels they pick and those labels' ``H^T F`` (the per-cluster column sums of H, from
  which ``H^T t = (H^T F) T`` for any target coding T); the balance step's moves then correct
  ``H^T F`` with the hidden rows of the moved points alone;
- the balance step selects, among the members of the largest cluster, the m points that
  prefer the smallest cluster most, exactly, by a distributed radix selection over the scores
  (16 bits of the order-preserving integer image of each float64 key per pass, counts summed
  over the chunks, then the few remaining candidates gathered); ties are broken by global row
  order. No pass gathers the N scores.
"""

import logging
import math
import time
from functools import partial
from numbers import Integral, Real

import dask
import dask.array as da
import numpy as np
import scipy.linalg as sla
from sklearn.base import ClusterMixin
from sklearn.utils.validation import check_is_fitted

from ..base import BaseELM
from ..cluster import block_rows, kmeans, negative_sse, rename_labels
from ..gram import hidden_stats, label_sums
from ..hidden import hidden_rows
from ..mixins import DataNodesMixin
from ..solvers import sign_flip
from ..sweep import sweep
from ..utils._dask import named, tree_sum
from ..utils._random import draw_seed, splitmix64
from ..validation import Interval, StrOptions

logger = logging.getLogger(__name__)

OUTPUTS = ("auto", "single", "multi")
INITS = ("elm-kmeans", "kmeans", "random")
AUTO_BALANCE = 0.15  # balance="auto": l as a share of twice the mean cluster size
_DIGIT = 16  # bits of the selection key fixed per pass (65536 counters per chunk)
#: candidate keys a balance step gathers to the client at once (with their rows, 16 MiB)
MAX_GATHER = 1 << 20
_SIGN = np.uint64(1 << 63)


# -- the function half: everything over small matrices or one block ---------------------------
def emmc_targets(n_clusters, output="single"):
    """Target coding T (n_clusters x n_outputs): row c is the ELM target of cluster c.

    ``"single"`` with two clusters: -1 and +1 (relabel by the sign, Prop. 1). ``"single"`` with
    more: the ordinal codes c + 1/2, the centres of the intervals (c, c + 1] that the
    relabelling "i - 1 < H beta <= i" (i = c + 1) assigns, so relabelling is rounding to the
    nearest target. ``"multi"``: one-hot rows (relabel by argmax = nearest target).
    """
    if output == "multi":
        return np.eye(n_clusters)
    if n_clusters == 2:
        return np.array([[-1.0], [1.0]])
    return (np.arange(n_clusters, dtype=np.float64) + 0.5)[:, None]


def emmc_relabel(F, n_clusters, output="single"):
    """Cluster of each row of the scores F = H beta (one block or a whole NumPy array)."""
    F = np.asarray(F)
    if output == "multi":
        return np.argmax(F, axis=1).astype(np.int64)
    f = F[:, 0]
    if n_clusters == 2:
        return (f > 0).astype(np.int64)  # t = -1 where H beta <= 0, else +1
    return np.clip(np.ceil(f) - 1, 0, n_clusters - 1).astype(np.int64)


def emmc_move_keys(F, p, q, output="single"):
    """How strongly each row prefers to stay in cluster p rather than go to q (float64; the
    balance step moves the members of p with the smallest keys first).

    Multi-output: ``F[:, p] - F[:, q]``. Single output (two clusters or ordinal): the score
    itself when q lies below p, its negative when q lies above, so the points nearest q's side
    of the threshold move first (for two clusters, "the lowest-scoring points of the largest
    class", Section 4.2). ``+ 0.0`` maps -0.0 to +0.0 so that equal floats are equal keys.
    """
    F = np.asarray(F)
    if output == "multi":
        key = F[:, p].astype(np.float64) - F[:, q].astype(np.float64)
    else:
        key = F[:, 0].astype(np.float64)
        if q > p:
            key = -key
    return key + 0.0


def balance_tolerance(balance, n_samples, n_clusters):
    """l = balance * n, raised to 1 when n is not a multiple of n_clusters (then no labelling
    has all clusters of equal size, and the greedy moves could not reach l < 1)."""
    tol = float(balance) * n_samples
    if n_samples % n_clusters:
        tol = max(tol, 1.0)
    return tol


def auto_tolerance(n_samples, n_clusters):
    """l of ``balance="auto"``: ``AUTO_BALANCE * 2 n / k``, the paper's 0.15 n for two
    clusters and the same share of twice the mean cluster size for more (a fraction of n
    alone lets many clusters empty while the gap stays below it)."""
    return balance_tolerance(AUTO_BALANCE * 2 / n_clusters, n_samples, n_clusters)


def balance_moves(sizes, tol):
    """The next move of the balance step, ``(p, q, m)``: m points from the largest cluster p
    to the smallest q (first index on ties), or None when ``max - min <= tol`` holds.

    m = ceil((d - l) / 2) for a gap d = N_p - N_q, so that after the move N_p - N_q <= l; it
    is below d, so each move strictly lowers sum(N_c^2) and the sequence of moves ends.
    """
    sizes = np.asarray(sizes)
    p, q = int(np.argmax(sizes)), int(np.argmin(sizes))
    d = int(sizes[p] - sizes[q])
    if d <= tol:
        return None
    m = min(int(math.ceil((d - tol) / 2)), d - 1)
    return p, q, max(m, 1)


def emmc_objective(htf, beta, sizes, T):
    """Per-point value of the ELM's ridge fit to the labels, the label-free objective of
    Algorithm 1: ``min_beta (||H beta - t||^2 + ||beta||^2 / C) / N`` with ``t`` the target
    codes of the labels, ``= (sum_c n_c ||T_c||^2 - (H^T t) . beta) / N`` for the minimiser
    ``beta`` (from ``H^T t = (H^T F) T``, no pass over the data). Lower: the ELM separates the
    clusters with less error."""
    sizes = np.asarray(sizes, dtype=np.float64)
    total = float(sizes @ (T**2).sum(axis=1)) - float(np.sum((htf @ T) * beta))
    return max(total, 0.0) / sizes.sum()


def factor_gram(hth, C):
    """Cholesky factor of ``H^T H + I/C`` (float64), computed once per fit."""
    M = np.asarray(hth, dtype=np.float64) + np.eye(hth.shape[0]) / C
    M = 0.5 * (M + M.T)
    try:
        return sla.cho_factor(M, lower=True, check_finite=False)
    except sla.LinAlgError:
        # rounding made M indefinite (only when 1/C is tiny next to H^T H): lift the diagonal
        jitter = 1e-12 * max(float(np.trace(M)) / M.shape[0], 1.0)
        return sla.cho_factor(M + jitter * np.eye(M.shape[0]), lower=True, check_finite=False)


# -- per-block kernels (run on the workers) -------------------------------------------------
def _ordered_uint(key):
    """Order-preserving map float64 -> uint64 (exact: a < b iff f(a) < f(b), for non-NaN)."""
    b = np.ascontiguousarray(key, dtype=np.float64).view(np.uint64)
    return np.where((b & _SIGN) != 0, ~b, b | _SIGN)


def _block_keys(F, labels, p, q, output):
    member = labels == p
    return _ordered_uint(emmc_move_keys(F[member], p, q, output)), member


def _prefix_mask(u, prefix, n_fixed):
    if n_fixed == 0:
        return np.ones(u.shape, dtype=bool)
    return (u >> np.uint64(64 - n_fixed)) == np.uint64(prefix)


def _digit_counts(F, labels, p, q, output, prefix, n_fixed):
    u, _ = _block_keys(F, labels, p, q, output)
    u = u[_prefix_mask(u, prefix, n_fixed)]
    digit = (u >> np.uint64(64 - n_fixed - _DIGIT)) & np.uint64((1 << _DIGIT) - 1)
    return np.bincount(digit.astype(np.int64), minlength=1 << _DIGIT)


def _candidates(F, labels, p, q, output, prefix, n_fixed):
    u, _ = _block_keys(F, labels, p, q, output)
    return u[_prefix_mask(u, prefix, n_fixed)]


def _smallest_candidates(F, labels, p, q, output, m):
    """The block's m smallest keys (all of them where it has fewer), in row order among
    equal keys: the m smallest of all blocks are among theirs."""
    u, _ = _block_keys(F, labels, p, q, output)
    if len(u) <= m:
        return u
    return u[np.sort(np.argpartition(u, m - 1)[:m])]


def _tie_count(F, labels, p, q, output, u_star):
    u, _ = _block_keys(F, labels, p, q, output)
    return np.int64(np.count_nonzero(u == np.uint64(u_star)))


def _apply_move(F, labels, p, q, output, u_star, quota):
    u, member = _block_keys(F, labels, p, q, output)
    move = u < np.uint64(u_star)
    if quota:
        ties = np.flatnonzero(u == np.uint64(u_star))[:quota]  # the first rows of the block
        move[ties] = True
    out = labels.copy()
    out[np.flatnonzero(member)[move]] = q
    return out


def _relabel_block(F, n_clusters, output):
    return emmc_relabel(F, n_clusters, output)


def _bincount(labels, n):
    return np.bincount(labels, minlength=n).astype(np.int64)


def _n_changed(a, b):
    return np.int64(np.count_nonzero(a != b))


def _labels_key(labels, start):
    """A 64-bit key of a block of labels starting at global row ``start``: summed over the
    blocks, equal partitions (labels row by row) have equal keys however the rows are
    chunked, and different ones collide with probability about 2^-64."""
    with np.errstate(over="ignore"):
        z = np.arange(start, start + len(labels), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z += labels.astype(np.uint64)
        return np.uint64(splitmix64(z).sum(dtype=np.uint64))


def _sum_keys(*keys):
    with np.errstate(over="ignore"):
        return np.uint64(np.sum(np.array(keys, dtype=np.uint64), dtype=np.uint64))


def _partition_key(labels):
    """:func:`_labels_key` of a dask array of labels, summed over its blocks (delayed)."""
    starts = np.concatenate([[0], np.cumsum(labels.chunks[0])[:-1]]).astype(int)
    key = dask.delayed(_labels_key, pure=True)
    return dask.delayed(_sum_keys, pure=True)(
        *(key(b, int(s)) for b, s in zip(_delayed_blocks(labels), starts, strict=True))
    )


def _hash_labels(index, seed, n_clusters):
    """Random labels keyed by global row index (splitmix64), so independent of chunking."""
    with np.errstate(over="ignore"):
        z = splitmix64(index.astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15))
    return ((z >> np.uint64(11)).astype(np.float64) * 2.0**-53 * n_clusters).astype(np.int64)


def random_labels(n_samples, n_clusters, seed):
    """Initial labels of ``init="random"`` for rows 0..n_samples-1 (NumPy; the same numbers
    the chunked fit draws)."""
    return _hash_labels(np.arange(n_samples), seed, n_clusters)


def _from_blocks(blocks, chunks, dtype=np.int64, width=None):
    """Delayed row blocks of ``chunks`` rows (and ``width`` columns) as one dask array."""
    shape = (lambda n: (n,)) if width is None else (lambda n: (n, width))
    pieces = zip(blocks, chunks, strict=True)
    return da.concatenate([da.from_delayed(b, shape=shape(n), dtype=dtype) for b, n in pieces])


def _delayed_blocks(x):
    return x.to_delayed().ravel().tolist()


# -- distributed exact selection ------------------------------------------------------------
def select_smallest(F_blocks, label_blocks, p, q, m, output, *, max_gather=65536):
    """The m members of cluster p with the smallest move keys, chosen on the cluster.

    Radix selection on the order-preserving uint64 image u of the float64 keys: each pass
    sums, over the chunks, the counts of the next 16 bits among the candidates that share the
    prefix fixed so far, and fixes the digit holding the m-th smallest. When at most
    ``max_gather`` candidates remain (usually after two passes), only those are gathered and
    sorted on the client; where the m smallest of every block number at most ``max_gather``
    (a small move), those are gathered at once, in one pass. Returns ``(u_star, quotas)``:
    a member moves when its key is below u_star, or equal to it and among the first
    ``quotas[b]`` such rows of chunk b; ties are thus broken by global row order, whatever
    the chunking.
    """
    nb = len(F_blocks)
    if int(m) * nb <= max_gather:  # each block's m smallest hold the m smallest: one pass
        fn = dask.delayed(_smallest_candidates, pure=True)
        blocks = [fn(F_blocks[b], label_blocks[b], p, q, output, int(m)) for b in range(nb)]
        return _select_among(dask.compute(blocks)[0], int(m))
    fn = dask.delayed(_digit_counts, pure=True)
    prefix, n_fixed, need = 0, 0, int(m)
    while True:
        counts = dask.compute(
            tree_sum(
                [fn(F_blocks[b], label_blocks[b], p, q, output, prefix, n_fixed) for b in range(nb)]
            )
        )[0]
        cum = np.cumsum(counts)
        j = int(np.searchsorted(cum, need))  # first digit whose cumulative count >= need
        need -= int(cum[j - 1]) if j else 0
        prefix, n_fixed = (prefix << _DIGIT) | j, n_fixed + _DIGIT
        if n_fixed == 64:  # all bits fixed: every candidate left is a tie at u_star
            ties = dask.compute(
                [
                    dask.delayed(_tie_count, pure=True)(
                        F_blocks[b], label_blocks[b], p, q, output, prefix
                    )
                    for b in range(nb)
                ]
            )[0]
            return prefix, _fill_quotas(ties, need)
        if counts[j] <= max_gather:
            cand = dask.compute(
                [
                    dask.delayed(_candidates, pure=True)(
                        F_blocks[b], label_blocks[b], p, q, output, prefix, n_fixed
                    )
                    for b in range(nb)
                ]
            )[0]
            return _select_among(cand, need)


def _select_among(cand, need):
    """``(u_star, quotas)`` of the ``need`` smallest of the blocks' candidate keys ``cand``
    (a list per block, in row order): each block's quota of keys equal to u_star is filled
    in block order, so ties go to earlier rows. A block's candidates may stop at its own
    ``need`` smallest: its ties at u_star are then at least what it can be asked for."""
    allu = np.concatenate(cand) if cand else np.empty(0, np.uint64)
    order = np.argsort(allu, kind="stable")  # stable: earlier rows first among ties
    u_star = int(allu[order[need - 1]])
    ties = [int(np.count_nonzero(c == np.uint64(u_star))) for c in cand]
    n_less = int(np.count_nonzero(allu[order[:need]] < np.uint64(u_star)))
    return u_star, _fill_quotas(ties, need - n_less)


def _fill_quotas(ties, need):
    quotas = []
    for t in ties:
        take = min(int(t), need)
        quotas.append(take)
        need -= take
    return quotas


def plan_moves(sizes, tol):
    """Every move of a balance step, ``[(p, q, m), ...]``, from the cluster sizes alone: each
    move (:func:`balance_moves`) follows from the sizes the moves before it leave."""
    sizes = np.array(sizes, dtype=np.int64)
    moves = []
    while (move := balance_moves(sizes, tol)) is not None:
        p, q, m = move
        moves.append(move)
        sizes[p] -= m
        sizes[q] += m
    return moves


def _gathered_moves(moves, n_blocks, max_gather):
    """How many of the first ``moves`` one gather settles: while no move takes from a
    cluster an earlier one filled (its members are then among the ones it had) and the
    blocks' candidates, each block's ``m`` smallest keys per move plus those earlier moves
    from the same cluster may have taken, number at most ``max_gather``."""
    filled, taken, total = set(), {}, 0
    for i, (p, q, m) in enumerate(moves):
        taken[p] = taken.get(p, 0) + m
        total += n_blocks * taken[p]
        if p in filled or total > max_gather:
            return i
        filled.add(q)
    return len(moves)


def _move_candidates(F, labels, moves, output):
    """For each move ``(p, q, m)``: ``(keys, rows)`` of the block's members of p with the
    smallest keys (smallest first, earlier rows first among equal keys), as many as that
    move and the earlier ones from p may take."""
    out, taken = [], {}
    for p, q, m in moves:
        taken[p] = taken.get(p, 0) + m
        rows = np.flatnonzero(labels == p)
        u = _ordered_uint(emmc_move_keys(F[rows], p, q, output))
        first = smallest_first(u, taken[p])
        out.append((u[first], rows[first]))
    return out


def smallest_first(u, m):
    """Positions of the m smallest entries of u, smallest first and earlier positions first
    among equal entries: ``np.argsort(u, kind="stable")[:m]``, by a partition and a sort of
    the m chosen (a move takes a few of a cluster's members)."""
    if m >= len(u):
        return np.argsort(u, kind="stable")
    if m <= 0:
        return np.empty(0, dtype=np.intp)
    bound = u[np.argpartition(u, m - 1)[m - 1]]  # the m-th smallest value
    below = np.flatnonzero(u < bound)
    ties = np.flatnonzero(u == bound)[: m - len(below)]  # the earliest positions
    chosen = np.concatenate([below, ties])
    return chosen[np.argsort(u[chosen], kind="stable")]


def _chosen_rows(candidates, moves, starts):
    """The rows each move takes, ``[(rows, q), ...]`` in global row numbers: the m smallest
    keys among the members its cluster still has, ties to earlier rows, as the moves one
    at a time would choose them."""
    chosen, gone = [], {}
    for i, (p, q, m) in enumerate(moves):
        u = np.concatenate([c[i][0] for c in candidates])
        rows = np.concatenate([c[i][1] + starts[b] for b, c in enumerate(candidates)])
        if p in gone:
            left = ~np.isin(rows, gone[p])
            u, rows = u[left], rows[left]
        take = rows[np.lexsort((rows, u))[:m]]
        gone[p] = np.concatenate([gone.get(p, take[:0]), take])
        chosen.append((take, q))
    return chosen


def _assign(labels, rows, values):
    out = labels.copy()
    out[rows] = values
    return out


def _assignments(chosen, starts):
    """Per block: the local rows the moves take and their new labels."""
    rows = np.concatenate([r for r, _ in chosen])
    values = np.concatenate([np.full(len(r), q, dtype=np.int64) for r, q in chosen])
    block = np.searchsorted(starts, rows, side="right") - 1
    return [(rows[block == b] - starts[b], values[block == b]) for b in range(len(starts) - 1)]


def _gathered_step(F_blocks, label_blocks, moves, output, starts):
    """The label blocks after ``moves``, chosen on the client from one gather of the
    blocks' candidates."""
    gather = dask.delayed(_move_candidates, pure=True)
    candidates = dask.compute(
        [gather(f, b, moves, output) for f, b in zip(F_blocks, label_blocks, strict=True)]
    )[0]
    per_block = _assignments(_chosen_rows(candidates, moves, starts), starts)
    assign = dask.delayed(_assign, pure=True)
    return [assign(b, *rows) for b, rows in zip(label_blocks, per_block, strict=True)]


def _selected_step(F_blocks, label_blocks, p, q, m, output, max_gather):
    """The label blocks after the move ``(p, q, m)``, chosen by a distributed selection."""
    u_star, quotas = select_smallest(F_blocks, label_blocks, p, q, m, output, max_gather=max_gather)
    fn = dask.delayed(_apply_move, pure=True)
    return [
        fn(F_blocks[b], label_blocks[b], p, q, output, u_star, quotas[b])
        for b in range(len(F_blocks))
    ]


def balance_labels(F, labels, sizes, tol, output, *, max_gather=MAX_GATHER):
    """Move points from the largest to the smallest cluster until ``max - min <= tol``.

    ``F`` (N x n_outputs) and ``labels`` (N,) are dask arrays with the same row chunks,
    best persisted. Returns ``(labels, sizes, n_moved)``; the labels are persisted after each
    gather. The moves follow from the sizes alone (:func:`plan_moves`); each move takes the
    members of its cluster with the smallest keys, ties to earlier rows. Consecutive moves
    whose candidates (each block's smallest keys) number at most ``max_gather`` are chosen
    together from one gather; a move with more candidates is one exact distributed
    selection (:func:`select_smallest`).
    """
    sizes = np.array(sizes, dtype=np.int64)
    F_blocks, chunks = _delayed_blocks(F), F.chunks[0]
    starts = np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)
    moves, n_moved = plan_moves(sizes, tol), 0
    while moves:
        label_blocks = _delayed_blocks(labels)
        n = _gathered_moves(moves, len(F_blocks), max_gather)
        if n:
            batch = moves[:n]
            new = _gathered_step(F_blocks, label_blocks, batch, output, starts)
        else:
            batch = moves[:1]
            new = _selected_step(F_blocks, label_blocks, *batch[0], output, max_gather)
        labels = _from_blocks(new, chunks).persist()  # the array holds the persisted blocks
        for p, q, m in batch:
            sizes[p] -= m
            sizes[q] += m
            n_moved += m
            logger.debug("balance: moved %d points from cluster %d to %d", m, p, q)
        moves = moves[len(batch) :]
    return labels, sizes, n_moved


# -- the estimator ------------------------------------------------------------------------
class EMMC(DataNodesMixin, ClusterMixin, BaseELM):
    """Extreme maximum margin clustering: alternate an ELM fit to the current labels and a
    relabelling by the ELM's outputs, under a class-balance constraint (Zhang et al. 2013,
    Algorithm 1).

    Starting from initial labels t (k-means on the standardised X by default), each
    iteration (a) trains an ELM, ``beta = (H^T H + I/C)^-1 H^T t``,
    (b) relabels every point from its outputs ``H beta`` and (c) enforces
    ``-l <= N_p - N_q <= l`` for every pair of clusters by moving the points of the largest
    cluster that prefer the smallest one most, until the labels stop changing (at most
    ``tol * n_samples`` of them change in an iteration) or ``max_iter`` is reached.

    Parameters
    ----------
    n_clusters : int, default=2
        Number of clusters k (at least 2).
    n_hidden : int, default=200
        Hidden nodes L.
    C : float, default=1.0
        ELM trade-off; the ridge penalty is 1/C, added to H^T H (whose scale grows with N).
    balance : float in [0, 1] or "auto", default="auto"
        l as a fraction of n_samples (the paper: 0.03 for balanced data, 0.15 for
        imbalanced). 1 switches the constraint off (a gap above n is impossible). "auto":
        l = 0.15 * 2 n / k (:func:`auto_tolerance`), the same as 0.15 for two clusters and
        the same share of the mean cluster size for more, where a fraction of n lets clusters
        empty.
    output : {"auto", "single", "multi"}, default="auto"
        One ELM output (two clusters: targets -1/+1 and relabel by the sign; more clusters:
        ordinal targets c + 1/2 and the thresholds ``i - 1 < H beta <= i``, the variant of the
        paper's multi-class tables), or one output per cluster (one-hot targets, relabel by
        argmax). "auto" is "single" for two clusters and "multi" for more (see Notes).
    init : {"elm-kmeans", "kmeans", "random"} or array-like of shape (n_samples,), \
default="kmeans"
        k-means on H (the ELM feature space, the paper's best scheme), k-means on the scaled
        (standardised) X, random labels keyed by row index, or given initial labels in
        0..k-1. For the ordinal single-output coding,
        k-means clusters are numbered along the first principal axis of their centres, so
        that neighbouring codes are neighbouring clusters.
    activation : str or callable, default="sigmoid"
        Activation of the ``n_hidden - n_rbf`` nodes drawn by the engine: a registered
        activation (``elmscale.available("activation")``), e.g. "sigmoid" or "gaussian" (RBF
        nodes with random centres in (-1, 1)^d), or a callable.
    rbf_fraction : float in [0, 1], default=0.25
        Share of the hidden nodes that are Gaussian nodes centred on data rows:
        n_rbf = round(rbf_fraction * n_hidden) nodes ``exp(-||x' - c||^2 / (rbf_width m)^2)``,
        c a random row of the scaled X, m the median distance between the centres. 0 gives a
        plain engine layer of ``activation`` nodes. See Notes for why a quarter.
    rbf_width : float > 0, default=1.0
        Width of those nodes in units of the median pairwise distance m.
    data_nodes : str or NodeFamily, default="gaussian-rows"
        Family of the n_rbf nodes fitted on a sample of rows: a name registered through
        ``register_hidden_layers`` (``elmscale.available("hidden")``) or an object with the
        methods of :class:`elmscale.hidden.NodeFamily`. "gaussian-rows" gives the Gaussian
        nodes above; another family takes ``rbf_width`` as its own width.
    scaling : {"standard", "minmax"} or None, default="standard"
        Per-feature scaling of X before the hidden layer (fitted in one pass). On the
        paper's nine benchmark sets "minmax" scores higher on eight (+0.8 points of mean
        accuracy) but 3 points lower on Digits 1279 (20 seeds), so it is not the default.
    n_init : int, default=10
        Restarts of the k-means initialisation.
    max_iter : int, default=50
        Maximum EMMC iterations.
    tol : float in [0, 1), default=1e-4
        The iterations stop once an iteration changes at most ``tol * n_samples`` labels
        (0: only when none change). On a large set the last iterations each move a few
        points for a pass over H while the objective no longer moves; below ``1 / tol``
        samples the rule is the paper's (no label changes). With ``select="lowest_loss"``
        they also stop once the labels differ from those two iterations before in at most
        ``tol * n_samples`` (a cycle of two within tol, where the balance step moves the
        same points out of a cluster that the relabelling moved in: the exact cycles
        ``cycle_`` records end the iterations the same way).
    n_iter_no_change : int or None, default=None
        With ``select="lowest_loss"``, stop after this many iterations without a new lowest
        objective (None: never). Where the balance step keeps moving points between two
        clusters the labels never settle, and the iterations run to ``max_iter`` with
        objectives above one they found early; the fit is the one a run capped at the
        stopping iteration gives, which can miss a lower objective found later.
    select : {"last", "lowest_loss"}, default="lowest_loss"
        The labels returned: the last iteration's (Algorithm 1), or the first with the
        lowest objective (``objectives_``) among the start and every iteration, a label-free
        choice by the ELM's own fit: the balance step can raise the objective, so the
        iterations may end above their start, which is then returned.
    cache : "auto" or bool, default="auto"
        Keep H's blocks in worker memory between passes ("auto": when they and X take at
        most half of the cluster's memory; see ``HiddenFeatures``). Recomputing instead costs
        one ``X_b A`` product and an activation per block and pass.
    random_state : int, RandomState or None
        Seeds the hidden layer and the initialisation.

    Attributes
    ----------
    labels_ : ndarray or dask array of shape (n_samples,)
        Final clusters (NumPy for NumPy input, dask for dask input).
    output_weights_ : ndarray of shape (n_hidden, n_outputs)
        beta of the last iteration (``select="last"``), or the ELM fitted to the returned
        labels (``select="lowest_loss"``).
    targets_ : ndarray of shape (n_clusters, n_outputs)
        The target code of each cluster.
    cluster_sizes_ : ndarray of shape (n_clusters,)
    n_iter_ : int
    converged_ : bool
        Whether the labels stopped changing (at most ``tol * n_samples`` changed, or with
        ``select="lowest_loss"`` differed from those two iterations before) before
        ``max_iter``.
    cycle_ : (int, int) or None
        ``(start, period)`` where the iterations returned to the labels of iteration
        ``start`` (the initial labels are iteration 0) after ``period`` more: every later
        iteration would repeat the cycle, so with ``select="lowest_loss"`` they stop there
        with the labels a run to ``max_iter`` returns (partitions compared by 64-bit keys).
    history_ : list of dict
        Per iteration: ``sizes`` (after the balance step), ``n_changed``, ``n_returned``
        (labels that differ from those two iterations before; -1 in the first iteration),
        ``n_moved`` (by the balance step) and ``seconds``.
    objectives_ : ndarray of shape ``(n_iter_ + 1,)``
        The objective of the initial labels and of each iteration's labels: the ELM's ridge
        fit to their target codes per point, ``min_beta (||H beta - t||^2 + ||beta||^2 / C)
        / n`` (:func:`emmc_objective`).
    objective_ : float
        The objective of the returned labels.
    hidden_layer_ : RandomHiddenLayer
    n_features_in_ : int

    Notes
    -----
    Cost: one pass over X for the scaling, one for H^T H (plus k-means passes over H for the
    default initialisation), then per iteration one pass over H for the scores, the labels
    they pick and those labels' ``H^T F``, a few passes over the N x n_outputs scores for
    each balance move, and the hidden rows of the points the balance step moved. With
    ``cache`` the passes over H read its persisted blocks; without, they rebuild them from X.
    Client memory is O(n_hidden^2 + n_hidden n_clusters); nothing with N rows is gathered.

    Defaults are chosen to work without labels to tune on (the accuracy of each choice on
    the paper's nine data sets is in benchmarks/RESULTS.md, EMMC). Hidden nodes: three
    quarters sigmoid nodes (A, b uniform in (-1, 1) on standardised inputs), one quarter
    Gaussian nodes centred on random data rows with the median distance between the centres
    as width: the paper uses Gaussian nodes without saying how it draws them, sigmoid nodes
    alone fail where clusters differ in spread rather than location, Gaussian nodes alone
    lose accuracy on digit sets, and centres on rows with a median-distance width need no
    labels and follow the data's scale (``rbf_fraction=0`` gives a pure sigmoid layer).
    L = 200 is far below N for all but tiny sets, so the ELM cannot interpolate its own
    labels (with L ~ N and large C it does, and EMMC never leaves its start); C = 1 is then a
    mild ridge next to H^T H, which grows with N. ``output="auto"`` takes one output per
    cluster beyond two clusters, because the ordinal single-output code imposes an order on
    the clusters that the data rarely has. The start and the balance step matter most, and
    were chosen leaving one dataset out over the shared sets of at least 1,000 rows: EMMC
    refines its start rather than escaping it, hence k-means on the input, and the
    iterations' labels are kept only when the ELM fits them better than that start
    (``select="lowest_loss"``): where the balance step fights the data's imbalance the
    objective rises and the start is returned. The ELM fits a partition with fewer, larger
    clusters more easily, so with many clusters a tolerance that is a fraction of n lets
    clusters empty while the objective falls; ``balance="auto"`` keeps the paper's 0.15 n
    for two clusters and scales it to the mean cluster size for more.

    References
    ----------
    Q. Zhang, X. Xia, H. Liu and J. Zhang, "Extreme maximum margin clustering", IEICE
    Transactions on Information and Systems E96-D(8), 2013.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from elmscale import EMMC
    >>> X, y = make_blobs(300, centers=[[-4, 0], [4, 0]], random_state=0)
    >>> model = EMMC(n_clusters=2, n_hidden=50, random_state=0).fit(X)
    >>> model.cluster_sizes_.tolist()
    [150, 150]
    """

    _parameter_constraints = {
        **BaseELM._parameter_constraints,
        "n_clusters": [Interval(Integral, 2, None, closed="left")],
        "C": [Interval(Real, 0, None, closed="neither")],
        "balance": [Interval(Real, 0, 1, closed="both"), StrOptions({"auto"})],
        "output": [StrOptions(set(OUTPUTS))],
        "init": [StrOptions(set(INITS)), "array-like"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, 1, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left"), None],
        "select": [StrOptions({"last", "lowest_loss"})],
        **DataNodesMixin._data_node_constraints,
    }

    #: scikit-learn estimator checks that cannot pass, and why
    _expected_failed_checks = {
        check: "sets n_clusters=1, which EMMC refuses (a margin needs two clusters)"
        for check in (
            "check_dont_overwrite_parameters",
            "check_methods_subset_invariance",
            "check_fit2d_1sample",
            "check_fit2d_1feature",
            "check_fit2d_predict1d",
        )
    }

    def __init__(
        self,
        n_clusters=2,
        *,
        n_hidden=200,
        C=1.0,
        balance="auto",
        output="auto",
        init="kmeans",
        activation="sigmoid",
        rbf_fraction=0.25,
        rbf_width=1.0,
        data_nodes="gaussian-rows",
        scaling="standard",
        n_init=10,
        max_iter=50,
        tol=1e-4,
        n_iter_no_change=None,
        select="lowest_loss",
        cache="auto",
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.n_hidden = n_hidden
        self.C = C
        self.balance = balance
        self.output = output
        self.init = init
        self.activation = activation
        self.rbf_fraction = rbf_fraction
        self.rbf_width = rbf_width
        self.data_nodes = data_nodes
        self.scaling = scaling
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.select = select
        self.cache = cache
        self.random_state = random_state

    reduce_params = (
        "n_clusters",
        "n_hidden",
        "output",
        "init",
        "activation",
        "rbf_fraction",
        "rbf_width",
        "data_nodes",
        "scaling",
        "n_init",
        "cache",
        "random_state",
    )

    def check_params_vs_input(self, Xd):
        super().check_params_vs_input(Xd)
        N = Xd.shape[0]
        self._tol = (
            auto_tolerance(N, self.n_clusters)
            if self.balance == "auto"
            else balance_tolerance(self.balance, N, self.n_clusters)
        )
        self._output = (
            self.output
            if self.output != "auto"
            else ("single" if self.n_clusters == 2 else "multi")
        )

    supports_checkpoint = True

    def _initial_labels(self, Xd, features, rng):
        k = self.n_clusters
        if not isinstance(self.init, str):
            init = np.asarray(self.init)
            if (
                init.shape != (Xd.shape[0],)
                or init.dtype.kind not in "iu"
                or (init.size and (init.min() < 0 or init.max() >= k))
            ):
                raise ValueError(
                    f"init as an array must hold n_samples={Xd.shape[0]} integer "
                    f"labels in [0, {k - 1}], got shape {init.shape} and dtype "
                    f"{init.dtype}"
                )
            return da.from_array(init.astype(np.int64), chunks=(Xd.chunks[0],))
        seed = draw_seed(rng)
        if self.init == "random":
            index = da.arange(Xd.shape[0], chunks=(Xd.chunks[0],), dtype=np.int64)
            return index.map_blocks(
                _hash_labels, seed, k, dtype=np.int64, meta=np.empty((0,), dtype=np.int64)
            )
        if self.init == "elm-kmeans":
            E = features.H
        else:
            E = self.scaled(Xd)
            E = E.persist() if features.cached else E
        centers, labels, _, _ = kmeans(E, k, n_init=self.n_init, random_state=seed)
        if self._output == "single" and k > 2:
            # ordinal codes: number the clusters along the first principal axis of the centres
            Cc = centers - centers.mean(axis=0)
            axis = sign_flip(np.linalg.svd(Cc, full_matrices=False)[2][:1].T)[:, 0]
            rank = np.empty(k, dtype=np.int64)
            rank[np.argsort(Cc @ axis, kind="stable")] = np.arange(k)
            labels = rename_labels(labels, rank)
        return labels

    def reduce_hidden(self, reduction, y):
        """Everything that does not depend on C: the initial labels, then H^T H and their
        H^T F in one pass."""
        features = reduction.features
        labels = reduction.stage(
            "init", lambda: self._initial_labels(reduction.X, features, reduction.rng).persist()
        )
        stats = reduction.stage(
            "gram",
            lambda: hidden_stats(
                features,
                ("hth", "htf"),
                labels=labels,
                n_labels=self.n_clusters,
                partial_sums=reduction.partial_sums(),
            ),
        )
        reduction.stats = {"labels": labels, "hth": stats["hth"], "htf": stats["htf"]}

    def solve_reduced(self, reduction, rng):
        """Algorithm 1's iterations from the reduction's initial labels, with
        ``(H^T H + I/C)^-1`` from one Cholesky factorization; then the labels ``select``
        names (the last, or those of the lowest objective)."""
        solve = partial(
            sla.cho_solve, factor_gram(reduction.stats["hth"], self.C), check_finite=False
        )
        k, output, features = self.n_clusters, self._output, reduction.features
        T = emmc_targets(k, output)
        htf = reduction.stats["htf"]
        # the iterations' passes and the balance selections run on runs of X's chunks (few,
        # large tasks on the narrow N x n_outputs scores); the corrections of H^T F read the
        # labels back in X's chunks
        runs = runs_of_chunks(features.chunks, reduction.n_samples)
        labels = reduction.stats["labels"].rechunk({0: _run_rows(features.chunks, runs)})
        sizes = _sizes(labels, k)
        history, objectives, converged = [], [], False
        best = None
        # the iterations are a map from labels to labels: where a partition repeats an
        # earlier one, every later iteration repeats the cycle between them, whose objectives
        # are all known; the lowest objective is then among those seen
        seen = {int(dask.compute(_partition_key(labels))[0]): 0}
        self.cycle_ = None
        earlier = None  # the labels one iteration before ``labels``
        for it in range(self.max_iter):
            t0 = time.perf_counter()
            beta = solve(htf @ T)  # H^T t = (H^T F) T
            objectives.append(emmc_objective(htf, beta, sizes, T))
            if best is None or objectives[-1] < best[0]:
                best = (objectives[-1], labels, beta, sizes)
                best_at = it
            new, sizes, n_changed, n_returned, n_moved, key, htf = self._iteration(
                features, beta, labels, earlier, runs
            )
            earlier, labels = labels, new
            history.append(
                {
                    "sizes": sizes.copy(),
                    "n_changed": n_changed,
                    "n_returned": n_returned,
                    "n_moved": n_moved,
                    "seconds": time.perf_counter() - t0,
                }
            )
            logger.info(
                "EMMC iteration %d: %d labels changed, %d moved by the balance step, sizes %s",
                it + 1,
                n_changed,
                n_moved,
                sizes.tolist(),
            )
            stop = self._stop(it + 1, history[-1], key, seen, objectives, reduction.n_samples)
            if stop:
                converged = stop == "converged"
                break
            seen[key] = it + 1
            if self._no_change(it + 1 - best_at):
                break
        if n_changed and self.cycle_ is None:
            # the objective of the last labels, whose ELM was not fitted
            last = solve(htf @ T)
            objectives.append(emmc_objective(htf, last, sizes, T))
            if objectives[-1] < best[0]:
                best = (objectives[-1], labels, last, sizes)
        if self.select == "lowest_loss":
            _, labels, beta, sizes = best
        self.objectives_ = np.array(objectives)
        self.objective_ = float(objectives[-1] if self.select == "last" else best[0])
        self.output_weights_ = beta
        self.targets_ = T
        self.cluster_sizes_ = sizes
        self.n_iter_ = len(history)
        self.converged_ = converged
        self.history_ = history
        self.labels_ = self.as_output(labels.rechunk({0: features.chunks}), reduction.was_dask)

    def _stop(self, it, step, key, seen, objectives, n_samples):
        """Why iteration ``it`` (``step``, its entry of ``history_``; ``key``, its
        partition's) ends the iterations: "converged" where at most ``tol * n_samples``
        labels changed or, with ``select="lowest_loss"``, differ from those two iterations
        before (a cycle of two within tol: the balance step moves the same points back and
        forth); "cycle" where the partition repeats an earlier one; else None."""
        limit = self.tol * n_samples
        if step["n_changed"] <= limit:
            return "converged"
        if self.select != "lowest_loss":
            return None
        if self._closes_cycle(seen, key, it, objectives):
            return "cycle"
        if 0 <= step["n_returned"] <= limit:
            logger.info("EMMC iteration %d: within tol of iteration %d's labels", it, it - 2)
            return "converged"
        return None

    def _no_change(self, since_best):
        """Whether ``n_iter_no_change`` iterations ran without a new lowest objective."""
        patience = self.n_iter_no_change
        return self.select == "lowest_loss" and patience is not None and since_best >= patience

    def _closes_cycle(self, seen, key, it, objectives):
        """Whether iteration ``it``'s partition (``key``) repeats an earlier one (``seen``:
        key -> iteration); if so, ``cycle_`` and the repeated partition's objective are
        recorded."""
        if key not in seen:
            return False
        start = seen[key]
        self.cycle_ = (start, it - start)
        objectives.append(objectives[start])  # the same labels, the same fit
        logger.info(
            "EMMC iteration %d repeats the labels of iteration %d: a cycle of %d",
            it,
            start,
            it - start,
        )
        return True

    def _iteration(self, features, beta, labels, earlier, runs):
        """One iteration's relabelling and balance step from the ELM's weights ``beta``:
        ``(new labels, their sizes, labels changed from ``labels``, labels that differ from
        ``earlier``'s (the iteration before; -1 where None), points moved by the balance
        step, the new partition's key, H^T F of the new labels)``.

        One pass over H (:func:`scores_and_label_sums`), one task per run of X's chunks
        (``runs``), gives the scores ``F = H beta``, the labels they pick and H^T F of those
        labels; the balance step then moves a few points, and H^T F of the balanced labels
        is that sum corrected by the hidden rows of the moved points only. The scores and
        labels are held in the runs: each selection of the balance step is one task per run
        (a fit's tasks per pass do not grow with N)."""
        k, output = self.n_clusters, self._output
        F, picked, picked_sums = dask.persist(
            *scores_and_label_sums(features, beta, k, output, runs)
        )
        new, sizes, n_moved = balance_labels(F, picked, _sizes(picked, k), self._tol, output)
        n_changed, n_returned, key, moved_sums = settle_iteration(
            features, runs, labels, earlier, picked, new, k
        )
        if n_moved:  # the balanced labels' sums: the picked ones' and the moved points' change
            picked_sums = tree_sum([picked_sums, moved_sums], prefix="elmscale-embed-sum")
        n_changed, n_returned, key, htf = dask.compute(n_changed, n_returned, key, picked_sums)
        return new, sizes, int(n_changed), int(n_returned), n_moved, int(key), htf

    def decision_function(self, X):
        """The ELM outputs ``h(x) beta`` (n_samples x n_outputs)."""
        check_is_fitted(self, "output_weights_")
        Xd, was_dask = self.validate_X(X, reset=False)
        return self.as_output(self.project(Xd, self.output_weights_), was_dask)

    def predict(self, X):
        """Clusters of X from the ELM outputs (the relabelling rule, without balancing)."""
        check_is_fitted(self, "output_weights_")
        Xd, was_dask = self.validate_X(X, reset=False)
        F = self.project(Xd, self.output_weights_)
        labels = F.map_blocks(
            _relabel_block,
            self.n_clusters,
            self._output,
            drop_axis=1,
            dtype=np.int64,
            meta=np.empty((0,), dtype=np.int64),
        )
        return self.as_output(labels, was_dask)

    def score(self, X, y=None):
        """Opposite of the ELM's squared error on X against its own clusters:
        ``-sum ||h(x) beta - t_c||^2``, t_c the target code (``targets_``) of the cluster
        ``predict`` gives x (the data term of Algorithm 1's ELM fit; higher is better).
        ``y`` is ignored."""
        check_is_fitted(self, "output_weights_")
        return negative_sse(self.decision_function(X), self.targets_, self.predict(X))


def scores_and_label_sums(features, beta, n_clusters, output, runs=None):
    """One pass over H for Algorithm 1's iteration: ``(F, labels, sums)``, the scores
    ``F = H beta`` and the labels the relabelling rule picks from them (dask arrays chunked
    by ``runs`` of X's chunks, lists of chunk numbers; default one chunk each), and
    ``H^T F_labels`` of those labels (delayed, n_hidden x n_clusters). Each task builds each
    of its blocks of H once for all three, so the scores and the next iteration's sums cost
    one pass where a pass for each would read H twice."""
    blocks, layer = features.sources()
    runs = runs or [[b] for b in range(len(blocks))]
    beta = np.asarray(beta).astype(features.X.dtype)
    score = named(_score_run, "elmscale-embed-scores", nout=3)
    beta_d = dask.delayed(beta, pure=True)
    parts = [score([blocks[b] for b in run], layer, beta_d, n_clusters, output) for run in runs]
    rows = _run_rows(features.chunks, runs)
    F = _from_blocks([p[0] for p in parts], rows, features.X.dtype, beta.shape[1])
    labels = _from_blocks([p[1] for p in parts], rows)
    return F, labels, tree_sum([p[2] for p in parts], prefix="elmscale-embed-sum")


def settle_iteration(features, runs, before, earlier, picked, after, n_clusters):
    """The end of an iteration in one task per run of X's chunks (``runs``; the label
    arrays are chunked by them), delayed: ``(labels changed from before to after, labels
    that differ between earlier and after (-1 where earlier is None), the partition key of
    after, H^T F_after - H^T F_picked)``. The last is built from the hidden rows of the
    points the balance step moved alone (those whose ``picked`` label differs from
    ``after``'s)."""
    blocks, layer = features.sources()
    settle = named(_settle_run, "elmscale-embed-settle", nout=4)
    starts = np.concatenate([[0], np.cumsum(features.chunks)]).astype(int)
    parts = [
        settle(
            [blocks[b] for b in run],
            layer,
            [features.chunks[b] for b in run],
            *labels,
            n_clusters,
            int(starts[run[0]]),
        )
        for run, *labels in zip(
            runs,
            [None] * len(runs) if earlier is None else _delayed_blocks(earlier),
            *(_delayed_blocks(x) for x in (before, picked, after)),
            strict=True,
        )
    ]
    n_changed = tree_sum([part[0] for part in parts])
    n_returned = -1 if earlier is None else tree_sum([part[1] for part in parts])
    key = dask.delayed(_sum_keys, pure=True)(*(part[2] for part in parts))
    sums = tree_sum([part[3] for part in parts], prefix="elmscale-embed-sum")
    return n_changed, n_returned, key, sums


def _settle_run(blocks, layer, rows, earlier, before, picked, after, n_clusters, start):
    """:func:`settle_iteration`'s share of one run: its blocks of H (or of X with ``layer``)
    hold ``rows`` rows each, the run's first row is global row ``start``."""
    sums, offset = 0.0, 0
    for block, n in zip(blocks, rows, strict=True):
        p, a = picked[offset : offset + n], after[offset : offset + n]
        moved = np.flatnonzero(p != a)
        if moved.size:
            H = hidden_rows(block, layer, moved)
            sums = sums + label_sums(H, a[moved], n_clusters) - label_sums(H, p[moved], n_clusters)
        offset += n
    returned = np.int64(0) if earlier is None else _n_changed(earlier, after)
    return _n_changed(before, after), returned, _labels_key(after, start), sums


def runs_of_chunks(chunks, n_samples):
    """X's row chunks joined into runs of whole chunks of at least k-means's block rows
    (:func:`~elmscale.cluster.block_rows`) each, the last run taking what is left: lists of
    chunk numbers. A run never splits a chunk, so no pass moves rows between runs and
    chunks."""
    target, runs, rows = block_rows(n_samples), [[]], 0
    for b, n in enumerate(chunks):
        if rows >= target:
            runs.append([])
            rows = 0
        runs[-1].append(b)
        rows += n
    return runs


def _run_rows(chunks, runs):
    return tuple(int(sum(chunks[b] for b in run)) for run in runs)


def _score_run(blocks, layer, beta, n_clusters, output):
    """A run's scores, the labels they pick and those labels' H^T F, a block of H at a time."""
    scores, labels, sums = [], [], 0.0
    for block in blocks:
        H = hidden_rows(block, layer)
        F = H @ beta
        picked = _relabel_block(F, n_clusters, output)
        scores.append(F)
        labels.append(picked)
        sums = sums + label_sums(H, picked, n_clusters)
    return np.concatenate(scores), np.concatenate(labels), sums


def _sizes(labels, n_clusters):
    """Cluster sizes of a dask array of labels (one pass)."""
    count = dask.delayed(_bincount, pure=True)
    return dask.compute(tree_sum([count(b, n_clusters) for b in _delayed_blocks(labels)]))[0]


def emmc_sweep(X, Cs, estimator=None, **params):
    """EMMC for every C in ``Cs`` from one hidden layer, initialisation and Gram pass:
    :func:`elmscale.sweep` over ``{"C": Cs}`` on ``estimator`` (or ``EMMC(**params)``).

    Returns a list of ``(C, fitted EMMC)`` in the order of ``Cs``; each equals
    ``clone(estimator).set_params(C=C).fit(X)``.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from elmscale import emmc_sweep
    >>> X, y = make_blobs(300, centers=[[-4, 0], [4, 0]], random_state=0)
    >>> fits = emmc_sweep(X, [0.25, 1.0, 4.0], n_clusters=2, n_hidden=50, random_state=0)
    >>> [(C, model.cluster_sizes_.tolist()) for C, model in fits]
    [(0.25, [150, 150]), (1.0, [150, 150]), (4.0, [150, 150])]
    """
    if estimator is None:
        estimator = EMMC(**params)
    elif params:
        raise TypeError("pass either an estimator or keyword parameters, not both")
    Cs = [float(C) for C in Cs]
    fits = sweep(estimator, X, [{"C": [C]} for C in Cs])
    return [(setting["C"], model) for setting, model in fits]


__all__ = [
    "EMMC",
    "balance_labels",
    "balance_moves",
    "auto_tolerance",
    "balance_tolerance",
    "emmc_move_keys",
    "emmc_objective",
    "emmc_relabel",
    "emmc_sweep",
    "emmc_targets",
    "factor_gram",
    "random_labels",
    "select_smallest",
]
