"""Built-in activations (US-ELM eqs. 1-2). Each maps a block of pre-activations to a block
of the same shape and dtype, in place, without state."""

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


@activation("additive")
def sigmoid(Z):
    """1 / (1 + exp(-z)) (eq. 1), computed in place as 0.5 tanh(z / 2) + 0.5: faster than
    scipy's expit and free of overflow warnings."""
    Z *= 0.5
    np.tanh(Z, out=Z)
    Z *= 0.5
    Z += 0.5
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
