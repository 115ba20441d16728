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
