"""Built-in activations (US-ELM eqs. 1-2). Each maps a block of pre-activations to a block
of the same shape and dtype, in place, without state. Their names are the plugin registry's
(``elmscale._builtins.activations`` registers them, as a plugin registers its own), the one
table of activation names."""

import numpy as np


def activation(node="additive"):
    """Mark a function as an activation whose pre-activations are formed by ``node``:
    ``"additive"`` (``Z = X A + b``) or ``"rbf"`` (``Z = b * ||x - a||``)."""
    if node not in ("additive", "rbf"):
        raise ValueError(f"node must be 'additive' or 'rbf', got {node!r}")

    def mark(func):
        func.node = node
        return func

    return mark


#: elements per slab of an in-place elementwise chain: the slab stays in cache between steps
SLAB = 1 << 15


def _slabs(Z):
    """Consecutive pieces of Z's memory (Z itself when it is not contiguous)."""
    if not Z.flags.c_contiguous:
        return [Z]
    flat = Z.reshape(-1)
    return [flat[i : i + SLAB] for i in range(0, flat.size, SLAB)]


@activation("additive")
def sigmoid(Z):
    """1 / (1 + exp(-z)) (eq. 1), in place, slab by slab so that the four steps read the
    data from cache: faster than scipy's expit, and than 0.5 tanh(z / 2) + 0.5, which also
    loses the relative precision of small values to cancellation. exp(-z) overflows to inf
    for very negative z, giving the correct 0."""
    with np.errstate(over="ignore"):
        for s in _slabs(Z):
            np.negative(s, out=s)
            np.exp(s, out=s)
            s += 1.0
            np.reciprocal(s, out=s)
    return Z


@activation("additive")
def tanh(Z):
    """Hyperbolic tangent."""
    return np.tanh(Z, out=Z)


@activation("additive")
def relu(Z):
    """max(z, 0)."""
    return np.maximum(Z, 0, out=Z)


@activation("additive")
def identity(Z):
    """No non-linearity (a random projection); useful as a baseline."""
    return Z


@activation("rbf")
def gaussian(Z):
    """exp(-z) with z = b ||x - a||: US-ELM's eq. 2 as the paper writes it, ``exp(-b ||x - a||)``.

    The distance is not squared, so the node is Laplacian-shaped in ``||x - a||`` rather than
    a Gaussian ``exp(-b ||x - a||^2)``; the name follows the ELM literature's usage."""
    np.negative(Z, out=Z)
    return np.exp(Z, out=Z)
