"""The random hidden layer: H is a pure function of X and a few small drawn arrays."""

import logging

import dask
import dask.array as da
import numpy as np
from sklearn.utils import check_random_state

from .. import registry
from ._scaling import apply_scaling

logger = logging.getLogger(__name__)


class BlockLayer:
    """A hidden layer as elmscale uses it: a small picklable callable mapping a NumPy block of
    X's rows to its rows of H (``n_hidden`` columns), so that any worker builds any block of
    H from the matching block of X. Subclasses give ``__call__``, ``n_hidden`` and, when H's
    dtype is not X's, ``output_dtype``."""

    def output_dtype(self, dtype):
        """The dtype of H for X of ``dtype``: X's own."""
        return np.dtype(dtype)

    def transform(self, X):
        """H for a whole dask array (lazy, chunked like X's rows) or a NumPy array."""
        if not isinstance(X, da.Array):
            return self(X)
        dtype = self.output_dtype(X.dtype)
        layer = dask.delayed(self, pure=True)  # ship the layer once, not once per block
        return X.map_blocks(
            _apply_layer,
            layer,
            dtype=dtype,
            token="elmscale-hidden",
            chunks=(X.chunks[0], (self.n_hidden,)),
            meta=np.empty((0, 0), dtype=dtype),
        )


class RandomHiddenLayer(BlockLayer):
    """The ELM hidden layer ``H = g(Z)`` on (optionally scaled) inputs.

    Additive nodes: ``Z = X' A + b`` (US-ELM eq. 1); RBF nodes: ``Z_ij = b_j ||x'_i - a_j||``
    (eq. 2), where ``X' = (X - offset) / scale``. The object is small (A is n_features x
    n_hidden) and picklable: it travels inside dask task graphs so that any worker can build
    any row block of H from the matching block of X. Blocks are computed in the dtype of the
    X block they come from.

    Parameters
    ----------
    input_weights : ndarray of shape (n_features, n_hidden)
    biases : ndarray of shape (n_hidden,)
    activation : callable
        An activation as registered through ``register_activations``.
    offset, scale : ndarray of shape (n_features,) or None
        Input scaling applied before the layer.

    Attributes
    ----------
    input_weights : ndarray of shape (n_features, n_hidden), float64
        A: one column per node, in the scaled input space. For RBF nodes, the centres a_j.
    biases : ndarray of shape (n_hidden,), float64
        b: the additive nodes' offsets, or the RBF nodes' inverse widths.
    activation : callable
        g, applied in place to a block of pre-activations; its ``node`` attribute
        (``"additive"`` or ``"rbf"``) says how Z is formed.
    offset, scale : ndarray of shape (n_features,) or None
        The input scaling ``X' = (X - offset) / scale`` (None: X is used as it is); an
        estimator's ``scaled(X)`` applies the same.
    node : str
        ``"additive"``, ``"rbf"``, or ``"mixed"`` for a :class:`MixedHiddenLayer`.
    n_features, n_hidden : int
        The shape of A.
    """

    def __init__(self, input_weights, biases, activation, *, offset=None, scale=None):
        self.input_weights = np.asarray(input_weights, dtype=np.float64)
        self.biases = np.asarray(biases, dtype=np.float64)
        self.activation = activation
        self.offset = offset
        self.scale = scale
        self.node = getattr(activation, "node", "additive")
        self._cast = {}

    @classmethod
    def draw(
        cls,
        n_features,
        n_hidden,
        activation="sigmoid",
        random_state=None,
        *,
        offset=None,
        scale=None,
    ):
        """Draw A and b uniformly from (-1, 1) (RBF widths b from (0, 1) / sqrt(n_features)).

        ``activation`` is an activation callable or a name registered in the plugin
        registry, a built-in's or a plugin's (``elmscale.available("activation")``).
        """
        func = registry.resolve("activation", activation, "activation")
        if not callable(func):
            raise TypeError(f"activation must be a registered name or a callable, got {func!r}")
        rng = check_random_state(random_state)
        A = rng.uniform(-1.0, 1.0, size=(n_features, n_hidden))
        if getattr(func, "node", "additive") == "rbf":
            b = rng.uniform(0.0, 1.0, size=n_hidden) / np.sqrt(n_features)
        else:
            b = rng.uniform(-1.0, 1.0, size=n_hidden)
        return cls(A, b, func, offset=offset, scale=scale)

    @property
    def n_features(self):
        return self.input_weights.shape[0]

    @property
    def n_hidden(self):
        return self.input_weights.shape[1]

    def _weights(self, dtype):
        # cast once per dtype and process; the float64 originals are what is pickled
        if dtype not in self._cast:
            self._cast[dtype] = (self.input_weights.astype(dtype), self.biases.astype(dtype))
        return self._cast[dtype]

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_cast"] = {}
        return state

    def __call__(self, X):
        """H for one NumPy block of X (rows x n_features) -> (rows x n_hidden)."""
        Xs = scaled_block(X, self.offset, self.scale)
        dtype = Xs.dtype
        A, b = self._weights(dtype)
        if self.node == "rbf":
            Z = distances_to_centres(Xs, A, b)
        else:
            Z = Xs @ A
            Z += b
        H = self.activation(Z)
        if H.dtype != dtype:
            H = H.astype(dtype)
        return H

    def __repr__(self):
        name = getattr(self.activation, "__name__", repr(self.activation))
        return (
            f"RandomHiddenLayer(n_features={self.n_features}, n_hidden={self.n_hidden}, "
            f"activation={name})"
        )


#: a projection of hidden rows builds this many of them at a time: the slice of H
#: (rows x n_hidden) is taken from the heap again and again, never a chunk's whole H mapped
#: and faulted in anew
PROJECT_ROWS = 2048


def project_block(layer, X, weights):
    """``layer(X) @ weights`` for one NumPy block of rows, the hidden rows built
    :data:`PROJECT_ROWS` at a time (row by row the same numbers as the whole block's)."""
    X = np.asarray(X)
    parts = [
        layer(X[lo : lo + PROJECT_ROWS]) @ weights
        for lo in range(0, max(X.shape[0], 1), PROJECT_ROWS)
    ]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class ProjectedLayer(BlockLayer):
    """A hidden layer followed by a fixed centring and projection: the rows
    ``(layer(x) - mean) @ basis`` (``basis.shape[1]`` columns).

    What an iterative solver reads when its unknowns live in a small subspace of the hidden
    space (ELM-JEC's beta restricted to ``n_basis`` directions): its passes then hold or
    rebuild an N x ``basis.shape[1]`` array instead of H, and the label sums of these rows
    are ``basis^T H~^T F`` directly. Computed in the dtype of H's block; the float64
    ``mean`` and ``basis`` are what is pickled.

    Parameters
    ----------
    layer : BlockLayer
    mean : ndarray of shape (layer.n_hidden,)
    basis : ndarray of shape (layer.n_hidden, n_basis)
    """

    def __init__(self, layer, mean, basis):
        self.layer = layer
        self.basis = np.asarray(basis, dtype=np.float64)
        self.shift = np.asarray(mean, dtype=np.float64) @ self.basis
        self._cast = {}

    @property
    def n_hidden(self):
        return self.basis.shape[1]

    def output_dtype(self, dtype):
        return self.layer.output_dtype(dtype)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_cast"] = {}
        return state

    def __call__(self, X):
        """The projected rows of one NumPy block of X (:func:`project_block`)."""
        dtype = self.layer.output_dtype(_float_dtype(np.asarray(X).dtype))
        if dtype not in self._cast:
            self._cast[dtype] = (self.basis.astype(dtype), self.shift.astype(dtype))
        basis, shift = self._cast[dtype]
        P = project_block(self.layer, X, basis)
        P -= shift
        return P

    def __repr__(self):
        return f"ProjectedLayer({self.layer!r}, n_basis={self.n_hidden})"


def _float_dtype(dtype):
    """The dtype a layer computes in for input of ``dtype``: float32 and float64 as they are,
    anything else float64."""
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)


def scaled_block(X, offset, scale):
    """A NumPy block of X's rows in the scaled input space, in X's dtype (float64 for
    anything but float32 and float64): what a layer's nodes are computed from."""
    X = np.asarray(X)
    return apply_scaling(X.astype(_float_dtype(X.dtype), copy=False), offset, scale)


def distances_to_centres(X, A, b):
    """RBF pre-activations ``Z_ij = b_j ||x_i - a_j||`` of the rows x_i of X and the columns
    a_j of A (all three in one dtype), from one product ``X A``: the squared distance
    ``||x||^2 - 2 x . a + ||a||^2`` clipped at 0 against rounding."""
    Z = X @ A
    Z *= -2.0
    Z += np.einsum("ij,ij->i", X, X)[:, None]
    Z += np.einsum("ij,ij->j", A, A)[None, :]
    np.maximum(Z, 0, out=Z)
    np.sqrt(Z, out=Z)
    Z *= b
    return Z


def _apply_layer(X_block, layer):
    return layer(X_block)
