import numpy as np


def draw_seed(random_state, low=0, high=2**31 - 1):
    """An integer seed drawn from a ``RandomState``, for a component needing its own stream."""
    return int(random_state.randint(low, high))


def rng_for_rows(seed, start, stop):
    """A generator keyed by (seed, global row range): the same rows get the same numbers
    however X is chunked, as long as the block boundaries coincide."""
    return np.random.default_rng([seed, start, stop])


def sampled_rows(block, rows, lo, hi):
    """The rows of a block (global rows ``lo:hi``) whose global indices are in the sorted
    sample ``rows``, in its order: a block's part of a sample gathered on the workers."""
    a, b = np.searchsorted(rows, [lo, hi])
    return np.asarray(block)[rows[a:b] - lo]


def _draw_rows(state, n_samples, size, draws, replace, n_seeds):
    """What a ``RandomState`` in ``state`` draws: ``draws`` sorted samples of ``size`` of
    ``range(n_samples)``, then ``n_seeds`` seeds, and the state it is left in."""
    rng = np.random.RandomState()
    rng.set_state(state)
    rows = [np.sort(rng.choice(n_samples, size, replace=replace)) for _ in range(draws)]
    seeds = [rng.randint(2**31 - 1) for _ in range(n_seeds)]
    return rows, seeds, rng.get_state()


def _concatenate(*pieces):
    return np.concatenate(pieces)


def row_samples(X, size, draws, rng, *, replace=False, n_seeds=0, prefix="elmscale-sample"):
    """``draws`` random samples of ``size`` rows of the row-chunked dask array X, each in
    row order, then ``n_seeds`` seeds, as ``rng`` (a ``RandomState``) would draw them with
    ``choice(N, size, replace=replace)`` and ``randint(2**31 - 1)``: ``(samples, seeds,
    state)``, all delayed, ``state`` the one ``rng`` is left in (``rng.set_state`` it once
    computed, in the same ``compute`` as what reads the samples).

    The indices are drawn by a task, and each block of X gives its rows of each sample:
    ``choice`` without replacement shuffles a whole ``arange(N)``, 8 bytes a row that the
    client would otherwise hold; only the samples' rows come back where they are computed.
    Tasks are keyed ``<prefix>-...``."""
    from ._dask import named

    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    rows, seeds, state = named(_draw_rows, f"{prefix}-rows", nout=3)(
        rng.get_state(), X.shape[0], size, draws, replace, n_seeds
    )
    take = named(sampled_rows, f"{prefix}-take")
    gather = named(_concatenate, prefix)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])]).tolist()
    blocks = X.to_delayed(optimize_graph=False).ravel().tolist()
    samples = [
        gather(*[take(blk, rows[i], starts[b], starts[b + 1]) for b, blk in enumerate(blocks)])
        for i in range(draws)
    ]
    return samples, [seeds[i] for i in range(n_seeds)], state
