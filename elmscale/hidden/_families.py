"""Hidden-node families fitted on a sample of the data: the protocol of the
``register_hidden_layers`` hook, the layer a fitted family makes, and the draw of its sample.

A family sees a small random sample of X's scaled rows once, on the client, and returns small
picklable parameters; from then on its nodes are a pure function of a block of rows, so H
stays a pure function of X and the seed, rebuilt block by block on the workers like the
engine's random nodes."""

from numbers import Integral

import numpy as np

from ..utils._random import drawn_rows
from ._layer import BlockLayer, scaled_block
from ._scaling import apply_scaling

#: key prefix of the tasks that draw and gather the rows a node family is fitted on
SAMPLE = "elmscale-hidden-sample"


class NodeFamily:
    """A family of hidden nodes fitted on a sample of rows: the protocol of
    ``register_hidden_layers``. Subclass it, or give the same methods on any object.

    ``fit(sample, n_nodes, rng, *, width)``
        ``sample`` is a float64 array (``sample_size`` rows x n_features) of rows of X drawn
        at random, in the layer's scaled input space; ``n_nodes`` the number of nodes to make;
        ``rng`` the estimator's ``numpy.random.RandomState``, to draw any randomness from (the
        fit then stays a function of ``random_state``); ``width`` the estimator's
        ``rbf_width``, a width in units of the data's own scale, for families that have one.
        Returns the parameters: a dict of NumPy arrays and numbers, small and picklable (they
        travel to the workers in the task graph and are saved with the model). The keys
        ``"input_weights"`` (n_features x n_nodes) and ``"biases"`` (n_nodes,), when present,
        are what an estimator reports as ``input_weights_`` and ``biases_``.
    ``transform(rows, params)``
        The nodes' outputs for a block of scaled rows (float32 or float64): an array of shape
        ``(len(rows), n_nodes)`` in the rows' dtype. It must be row-wise (a block cut in two
        gives the two halves of the whole result): elmscale chunks X by rows.

    Optional: ``sample_size(n_nodes, n_samples)``, the number of rows ``fit`` sees (here
    ``n_nodes``; drawn without replacement when it is at most ``n_samples``), and ``node``,
    the label of the layer's ``node`` attribute (here ``"data"``). Families compare equal
    when of one type with equal attributes, so that the clones of an estimator that
    :func:`elmscale.sweep` makes share one reduction.
    """

    node = "data"

    def sample_size(self, n_nodes, n_samples):
        """Rows of X that :meth:`fit` sees: one per node."""
        return n_nodes

    def fit(self, sample, n_nodes, rng, *, width):
        """Parameters of ``n_nodes`` nodes fitted on ``sample``: a dict."""
        raise NotImplementedError(f"{type(self).__name__} must implement fit")

    def transform(self, rows, params):
        """The nodes' outputs for a block of scaled rows."""
        raise NotImplementedError(f"{type(self).__name__} must implement transform")

    def __eq__(self, other):
        # by value, as estimator parameters are compared: a sweep's clones hold deep copies
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return f"{type(self).__name__}()"


class NodeFamilyLayer(BlockLayer):
    """The hidden nodes of a fitted :class:`NodeFamily`: ``H = family.transform(X', params)``
    on the scaled inputs ``X' = (X - offset) / scale``, block by block, in X's dtype.

    Parameters
    ----------
    family : NodeFamily
        The family (an object registered through ``register_hidden_layers``, or any object
        with its methods).
    params : dict
        What ``family.fit`` returned.
    n_nodes, n_features : int
        The number of nodes (columns of H) and of input features.
    offset, scale : ndarray of shape (n_features,) or None
        Input scaling applied before the nodes.

    Attributes
    ----------
    family, params, offset, scale
        As given.
    n_hidden, n_features : int
        The number of nodes and of input features.
    node : str
        The family's ``node`` label (``"data"`` unless it sets one).
    input_weights, biases : ndarray
        ``params["input_weights"]`` and ``params["biases"]``; AttributeError when the family
        has no such parameters.
    """

    def __init__(self, family, params, n_nodes, n_features, *, offset=None, scale=None):
        self.family = family
        self.params = params
        self.n_hidden = int(n_nodes)
        self.n_features = int(n_features)
        self.offset = offset
        self.scale = scale
        self.node = getattr(family, "node", NodeFamily.node)

    @property
    def input_weights(self):
        """``params["input_weights"]`` (n_features x n_hidden), when the family has it."""
        return self._param("input_weights")

    @property
    def biases(self):
        """``params["biases"]`` (n_hidden,), when the family has it."""
        return self._param("biases")

    def _param(self, key):
        if key not in self.params:
            raise AttributeError(
                f"the nodes of {self.family!r} have no {key!r} parameter "
                f"(they have {sorted(self.params)})"
            )
        return self.params[key]

    def __call__(self, X):
        """H for one NumPy block of X (rows x n_features) -> (rows x n_hidden)."""
        Xs = scaled_block(X, self.offset, self.scale)
        H = np.asarray(self.family.transform(Xs, self.params))
        if H.shape != (Xs.shape[0], self.n_hidden):
            raise ValueError(
                f"{self.family!r}.transform returned shape {H.shape} for {Xs.shape[0]} rows; "
                f"expected {(Xs.shape[0], self.n_hidden)}"
            )
        return H if H.dtype == Xs.dtype else H.astype(Xs.dtype)

    def __repr__(self):
        return (
            f"NodeFamilyLayer({self.family!r}, n_features={self.n_features}, "
            f"n_hidden={self.n_hidden})"
        )


def sample_rows(Xd, size, rng, *, offset=None, scale=None):
    """``size`` rows of the dask array Xd drawn at random from ``rng`` (without replacement
    when ``size <= N``), in row order, scaled, as float64: only these rows reach the
    client. A ``RandomState``'s draw runs on a worker (its state handed over and set back:
    :func:`~elmscale.utils._random.row_samples`), which spares the client the shuffled
    ``arange(N)`` numpy draws the indices from."""
    rows = drawn_rows(Xd, size, rng, replace=size > Xd.shape[0], prefix=SAMPLE)
    return apply_scaling(np.asarray(rows, dtype=np.float64), offset, scale)


def fit_node_family(family, Xd, n_nodes, width, rng, *, offset=None, scale=None):
    """Fit ``n_nodes`` nodes of ``family`` on a random sample of Xd's scaled rows
    (:func:`sample_rows`; its size from ``family.sample_size``, else ``n_nodes``), drawing
    from ``rng`` first the sample, then whatever ``family.fit`` draws. Returns a
    :class:`NodeFamilyLayer`."""
    size_of = getattr(family, "sample_size", None)
    size = n_nodes if size_of is None else size_of(n_nodes, Xd.shape[0])
    if not isinstance(size, Integral) or size < 1:
        raise ValueError(f"{family!r}.sample_size must return an int >= 1, got {size!r}")
    sample = sample_rows(Xd, int(size), rng, offset=offset, scale=scale)
    params = family.fit(sample, n_nodes, rng, width=width)
    if not isinstance(params, dict):
        raise TypeError(
            f"{family!r}.fit must return a dict of parameters, got {type(params).__name__}"
        )
    return NodeFamilyLayer(family, params, n_nodes, Xd.shape[1], offset=offset, scale=scale)
