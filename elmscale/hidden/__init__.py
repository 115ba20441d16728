"""The random hidden layer, its activations and input scaling."""

from ._activations import (
    BUILTIN_ACTIVATIONS,
    activation,
    gaussian,
    identity,
    relu,
    sigmoid,
    tanh,
)
from ._layer import BlockLayer, RandomHiddenLayer
from ._scaling import apply_scaling, fit_scaling

__all__ = [
    "BUILTIN_ACTIVATIONS",
    "BlockLayer",
    "RandomHiddenLayer",
    "activation",
    "apply_scaling",
    "fit_scaling",
    "gaussian",
    "identity",
    "relu",
    "sigmoid",
    "tanh",
]

from ._data_nodes import MixedHiddenLayer, draw_data_rbf, draw_mixed_layer  # noqa: E402
from ._features import CACHE_OPTIONS, HiddenFeatures, project_rows  # noqa: E402

__all__ += [
    "CACHE_OPTIONS",
    "HiddenFeatures",
    "MixedHiddenLayer",
    "draw_data_rbf",
    "draw_mixed_layer",
    "project_rows",
]
