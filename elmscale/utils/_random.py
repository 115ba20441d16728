import numpy as np


def draw_seed(random_state, low=0, high=2**31 - 1):
    """An integer seed drawn from a ``RandomState``, for a component needing its own stream."""
    return int(random_state.randint(low, high))


def rng_for_rows(seed, start, stop):
    """A generator keyed by (seed, global row range): the same rows get the same numbers
    however X is chunked, as long as the block boundaries coincide."""
    return np.random.default_rng([seed, start, stop])
