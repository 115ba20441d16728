"""Hidden nodes drawn from the data: Gaussian nodes centred on data rows, and a layer made of
several layers side by side (first used by EMMC, whose Ringnorm case needs nodes that see
differences in spread; sigmoid nodes alone do not)."""

import numpy as np
from scipy.spatial.distance import pdist

from ._activations import activation
from ._layer import RandomHiddenLayer
from ._scaling import apply_scaling

_WIDTH_SAMPLE = 1000  # at most this many centres estimate the median pairwise distance


@activation("rbf")
def gaussian_sq(Z):
    """exp(-z^2) with z = b ||x - c||: the Gaussian exp(-||x - c||^2 / s^2) for b = 1/s."""
    Z *= Z
    np.negative(Z, out=Z)
    return np.exp(Z, out=Z)


class MixedHiddenLayer(RandomHiddenLayer):
    """Hidden layer made of several layers side by side: ``H = [H_1, H_2, ...]`` (same input
    scaling). A RandomHiddenLayer itself, so that everything taking a layer (HiddenFeatures,
    ``transform``, ``input_weights_``) takes this one."""

    def __init__(self, parts):
        self.parts = list(parts)
        first = self.parts[0]
        super().__init__(
            np.hstack([p.input_weights for p in self.parts]),
            np.concatenate([p.biases for p in self.parts]),
            first.activation,
            offset=first.offset,
            scale=first.scale,
        )
        self.node = "mixed"

    def __call__(self, X):
        return np.hstack([p(X) for p in self.parts])

    def __repr__(self):
        return "MixedHiddenLayer(" + ", ".join(repr(p) for p in self.parts) + ")"


def draw_data_rbf(Xd, n_nodes, width, rng, *, offset=None, scale=None):
    """Gaussian nodes ``exp(-||x' - c||^2 / (width * m)^2)`` on the scaled inputs x', with
    centres c = scaled rows of X drawn at random (without replacement when n_nodes <= N) and
    m the median pairwise distance between the centres (at most ``_WIDTH_SAMPLE`` of them):
    a width that follows the data's own scale, drawn without labels. Gathers n_nodes rows."""
    N = Xd.shape[0]
    idx = np.sort(rng.choice(N, n_nodes, replace=n_nodes > N))
    rows = Xd[idx].compute()
    centres = apply_scaling(np.asarray(rows, dtype=np.float64), offset, scale)
    dist = pdist(centres[:_WIDTH_SAMPLE])
    m = float(np.median(dist)) if dist.size else 0.0
    m = m if m > 0 else 1.0  # all centres equal: any width gives the same (constant) nodes
    b = np.full(n_nodes, 1.0 / (width * m))
    return RandomHiddenLayer(centres.T, b, gaussian_sq, offset=offset, scale=scale)


def draw_mixed_layer(
    Xd, n_hidden, activation, rbf_fraction, rbf_width, rng, *, offset=None, scale=None
):
    """``n_hidden - n_rbf`` nodes of ``activation`` drawn by the engine, then n_rbf =
    round(rbf_fraction * n_hidden) Gaussian nodes centred on data rows (:func:`draw_data_rbf`),
    in this order in H and in this order from ``rng``. Returns a plain RandomHiddenLayer when
    only one kind is drawn, else a :class:`MixedHiddenLayer`.

    Data-row Gaussian nodes make H's columns kernel functions ``k(x, c)`` of sampled points
    (a Nystrom-style basis), whose span follows the data's density; random additive nodes
    span functions that need not be smooth on the data's manifold."""
    n_rbf = int(round(rbf_fraction * n_hidden))
    parts = []
    if n_rbf < n_hidden:
        parts.append(
            RandomHiddenLayer.draw(
                Xd.shape[1], n_hidden - n_rbf, activation, rng, offset=offset, scale=scale
            )
        )
    if n_rbf > 0:
        parts.append(draw_data_rbf(Xd, n_rbf, rbf_width, rng, offset=offset, scale=scale))
    return parts[0] if len(parts) == 1 else MixedHiddenLayer(parts)
