"""BaseELM: the parameters, validation and fit steps every ELM estimator shares."""

import logging
from numbers import Integral, Real

import dask.array as da
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .graph import WEIGHTS, knn_graph
from .hidden import HiddenFeatures, RandomHiddenLayer, apply_scaling, fit_scaling
from .utils._constraints import Registered
from .utils._persistence import DaskStateMixin
from .utils._random import draw_seed
from .utils._threads import blas_for_dask
from .utils._validation import validate_data

logger = logging.getLogger(__name__)

class BaseELM(DaskStateMixin, BaseEstimator):
    """Shared machinery of elmscale's estimators (not an estimator by itself).

    Subclasses call, in ``fit``: ``_validate_X`` (input to a row-chunked dask array, records
    ``n_features_in_``), ``_draw_hidden_layer`` (scaling fitted in one pass, then A and b
    drawn on the client), ``_hidden_features`` (H, lazily) and, when they need a graph,
    ``_build_graph``. ``_return`` gives NumPy back for NumPy input and dask for dask input.
    Pickling computes fitted dask attributes to NumPy and loading restores them as dask
    arrays with the same chunks (:class:`~elmscale.utils._persistence.DaskStateMixin`).
    """

    _parameter_constraints = {
        "n_hidden": [Interval(Integral, 1, None, closed="left")],
        "activation": [Registered("activation"), callable],
        "scaling": [StrOptions({"standard", "minmax"}), None],
        "cache": [StrOptions({"auto"}), "boolean"],
        "random_state": ["random_state"],
    }
    _graph_constraints = {
        "graph": [StrOptions({"auto"}), Registered("graph"), callable],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "weights": [StrOptions(set(WEIGHTS))],
        "sigma": [Interval(Real, 0, None, closed="neither"), None],
        "normalized": ["boolean"],
    }

    # -- fit steps -------------------------------------------------------------------------
    def _validate_X(self, X, *, reset):
        """X through :func:`~elmscale.utils.validate_data`: a row-chunked dask array, with
        ``n_features_in_`` and ``feature_names_in_`` recorded (``reset``) or checked."""
        return validate_data(self, X, reset=reset, n_hidden=self.n_hidden)

    def _draw_hidden_layer(self, Xd, rng):
        offset, scale = fit_scaling(Xd, self.scaling)
        layer = RandomHiddenLayer.draw(Xd.shape[1], self.n_hidden, self.activation, rng,
                                       offset=offset, scale=scale)
        self.hidden_layer_ = layer
        return layer

    def _hidden_features(self, Xd):
        return HiddenFeatures(Xd, self.hidden_layer_, cache=self.cache)

    def _build_graph(self, Xd, rng, *, n_neighbors=None, order="auto"):
        """The kNN graph of the scaled rows of Xd (``graph="auto"``: exact search up to
        10,000 rows, the distributed cell search above)."""
        n_neighbors = self.n_neighbors if n_neighbors is None else n_neighbors
        if n_neighbors >= Xd.shape[0]:
            raise ValueError(f"n_neighbors={n_neighbors} must be smaller than "
                             f"n_samples={Xd.shape[0]}")
        layer = self.hidden_layer_
        return knn_graph(Xd, n_neighbors, backend=self.graph, weights=self.weights,
                         sigma=self.sigma, normalized=self.normalized,
                         random_state=draw_seed(rng), order=order,
                         transform=lambda A: apply_scaling(A, layer.offset, layer.scale))

    @staticmethod
    def _return(result, was_dask):
        """NumPy for NumPy input, lazy dask for dask input."""
        if was_dask or not isinstance(result, da.Array):
            return result
        with blas_for_dask(result):
            return result.compute()

    # -- fitted attributes shared by all ---------------------------------------------------
    @property
    def input_weights_(self):
        """A (n_features, n_hidden), in the scaled input space."""
        check_is_fitted(self, "hidden_layer_")
        return self.hidden_layer_.input_weights

    @property
    def biases_(self):
        """b (n_hidden,)."""
        check_is_fitted(self, "hidden_layer_")
        return self.hidden_layer_.biases

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags

