import numpy as np


def splitmix64(h):
    """splitmix64's finaliser of a uint64 array, in place (and returned): a bijection that
    spreads every input bit over all output bits (callers silence NumPy's overflow)."""
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


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


def gathered_rows(X, rows, take, gather):
    """The rows ``rows`` (a sorted global index, delayed or not) of the row-chunked dask
    array X, gathered on the workers: ``take(block, rows, lo, hi)`` gives each block's part
    (:func:`sampled_rows`), ``gather(*parts)`` joins them; both delayed callables that name
    their tasks."""
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64).tolist()
    blocks = X.to_delayed(optimize_graph=False).ravel().tolist()
    return gather(*[take(blk, rows, starts[b], starts[b + 1]) for b, blk in enumerate(blocks)])


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

    rows, seeds, state = named(_draw_rows, f"{prefix}-rows", nout=3)(
        rng.get_state(), X.shape[0], size, draws, replace, n_seeds
    )
    take, gather = named(sampled_rows, f"{prefix}-take"), named(_concatenate, prefix)
    samples = [gathered_rows(X, rows[i], take, gather) for i in range(draws)]
    return samples, [seeds[i] for i in range(n_seeds)], state


def drawn_rows(X, size, rng, *, replace=False, prefix="elmscale-sample"):
    """``size`` rows of X (a dask or NumPy array) as ``X[sort(rng.choice(N, size,
    replace))]`` gives them, computed. For dask X and a ``RandomState`` the draw runs on a
    worker (:func:`row_samples`, the state handed over and set back on ``rng``): the client
    never holds the shuffled ``arange(N)`` numpy draws from."""
    import dask
    import dask.array as da

    if isinstance(X, da.Array) and isinstance(rng, np.random.RandomState):
        (sample,), _, state = row_samples(X, size, 1, rng, replace=replace, prefix=prefix)
        rows, state = dask.compute(sample, state)
        rng.set_state(state)
        return rows
    rows = X[np.sort(rng.choice(X.shape[0], size, replace=replace))]
    return rows.compute() if isinstance(rows, da.Array) else rows
