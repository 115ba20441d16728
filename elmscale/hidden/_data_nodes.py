"""Hidden nodes drawn from the data: Gaussian nodes centred on data rows (the built-in
:class:`~elmscale.hidden.NodeFamily`), and a layer made of several layers side by side (first
used by EMMC, whose Ringnorm case needs nodes that see differences in spread; sigmoid nodes
alone do not)."""

import numpy as np
from scipy.spatial.distance import pdist

from ._activations import activation
from ._families import NodeFamily, fit_node_family
from ._layer import BlockLayer, RandomHiddenLayer, distances_to_centres

_WIDTH_SAMPLE = 1000  # at most this many centres estimate the median pairwise distance


@activation("rbf")
def gaussian_sq(Z):
    """exp(-z^2) with z = b ||x - c||: the Gaussian exp(-||x - c||^2 / s^2) for b = 1/s."""
    Z *= Z
    np.negative(Z, out=Z)
    return np.exp(Z, out=Z)


class GaussianRows(NodeFamily):
    """Gaussian nodes ``exp(-||x' - c||^2 / (width * m)^2)`` on the scaled inputs x', with
    centres c = scaled rows of X drawn at random (one sample row per node) and m the median
    pairwise distance between the centres (at most ``_WIDTH_SAMPLE`` of them): a width that
    follows the data's own scale, drawn without labels. The built-in family of
    ``register_hidden_layers``, registered as ``"gaussian-rows"``.

    Its parameters are ``input_weights`` (the centres, n_features x n_nodes) and ``biases``
    (the inverse widths ``1 / (width * m)``), as for the engine's RBF nodes."""

    node = "rbf"

    def fit(self, sample, n_nodes, rng, *, width):
        """The sample's rows are the centres; ``rng`` is not used."""
        centres = sample
        dist = pdist(centres[:_WIDTH_SAMPLE])
        m = float(np.median(dist)) if dist.size else 0.0
        m = m if m > 0 else 1.0  # all centres equal: any width gives the same (constant) nodes
        return {"input_weights": centres.T, "biases": np.full(n_nodes, 1.0 / (width * m))}

    def transform(self, rows, params):
        """``exp(-(b ||x - c||)^2)``, computed in the rows' dtype."""
        A = params["input_weights"].astype(rows.dtype)
        b = params["biases"].astype(rows.dtype)
        return gaussian_sq(distances_to_centres(rows, A, b))


class MixedHiddenLayer(BlockLayer):
    """Hidden layer made of several layers side by side: ``H = [H_1, H_2, ...]`` (same input
    scaling): the engine's random nodes, then the nodes of a fitted :class:`NodeFamily`.

    Attributes
    ----------
    parts : list of BlockLayer
        The layers, in H's column order.
    offset, scale : ndarray of shape (n_features,) or None
        The input scaling, the first part's.
    activation : callable
        The first part's activation.
    node : str
        ``"mixed"``.
    input_weights, biases : ndarray
        The parts' side by side; AttributeError when a part has none.
    """

    def __init__(self, parts):
        self.parts = list(parts)
        first = self.parts[0]
        self.activation = getattr(first, "activation", None)
        self.offset = first.offset
        self.scale = first.scale
        self.node = "mixed"

    @property
    def n_features(self):
        """Input features."""
        return self.parts[0].n_features

    @property
    def n_hidden(self):
        """Nodes of all the parts."""
        return sum(p.n_hidden for p in self.parts)

    @property
    def input_weights(self):
        """The parts' input weights side by side (n_features x n_hidden)."""
        return np.hstack([p.input_weights for p in self.parts])

    @property
    def biases(self):
        """The parts' biases one after the other (n_hidden,)."""
        return np.concatenate([p.biases for p in self.parts])

    def __call__(self, X):
        return np.hstack([p(X) for p in self.parts])

    def __repr__(self):
        return "MixedHiddenLayer(" + ", ".join(repr(p) for p in self.parts) + ")"


def draw_data_rbf(Xd, n_nodes, width, rng, *, offset=None, scale=None):
    """``n_nodes`` :class:`GaussianRows` nodes fitted on Xd (gathers n_nodes rows)."""
    return fit_node_family(GaussianRows(), Xd, n_nodes, width, rng, offset=offset, scale=scale)


def draw_mixed_layer(
    Xd,
    n_hidden,
    activation,
    rbf_fraction,
    rbf_width,
    rng,
    *,
    offset=None,
    scale=None,
    nodes=None,
):
    """``n_hidden - n_rbf`` nodes of ``activation`` drawn by the engine, then n_rbf =
    round(rbf_fraction * n_hidden) nodes of the family ``nodes`` (a :class:`NodeFamily`;
    None: :class:`GaussianRows`) fitted on a sample of Xd's rows with width ``rbf_width``
    (:func:`fit_node_family`), in this order in H and in this order from ``rng``. Returns a
    plain layer when only one kind is drawn, else a :class:`MixedHiddenLayer`.

    Data-row Gaussian nodes make H's columns kernel functions ``k(x, c)`` of sampled points
    (a Nystrom-style basis), whose span follows the data's density; random additive nodes
    span functions that need not be smooth on the data's manifold."""
    nodes = GaussianRows() if nodes is None else nodes
    n_rbf = int(round(rbf_fraction * n_hidden))
    parts = []
    if n_rbf < n_hidden:
        parts.append(
            RandomHiddenLayer.draw(
                Xd.shape[1], n_hidden - n_rbf, activation, rng, offset=offset, scale=scale
            )
        )
    if n_rbf > 0:
        parts.append(fit_node_family(nodes, Xd, n_rbf, rbf_width, rng, offset=offset, scale=scale))
    return parts[0] if len(parts) == 1 else MixedHiddenLayer(parts)
