"""A second hook, to show one plugin may register several kinds: the softplus activation."""

import numpy as np
from elmscale.hidden import activation


@activation("additive")  # pre-activations are X A + b, as for sigmoid
def softplus(Z):
    """log(1 + exp(z)), in place, without overflow (``np.logaddexp(0, z)``).

    The activation protocol: a NumPy block in, a block of the same shape and dtype out, no
    state (the same input always gives the same output, on any worker).
    """
    return np.logaddexp(0.0, Z, out=Z)
