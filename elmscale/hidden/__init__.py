"""The random hidden layer, its activations and input scaling, and the hidden-node families
fitted on a sample of the data (:class:`NodeFamily`, the protocol of
``register_hidden_layers``)."""

import warnings

from ._activations import (
    activation,
    gaussian,
    identity,
    relu,
    sigmoid,
    tanh,
)
from ._layer import BlockLayer, ProjectedLayer, RandomHiddenLayer
from ._scaling import apply_scaling, fit_scaling

__all__ = [
    "BlockLayer",
    "ProjectedLayer",
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

from ._data_nodes import (  # noqa: E402
    GaussianRows,
    MixedHiddenLayer,
    draw_data_rbf,
    draw_mixed_layer,
)
from ._families import NodeFamily, NodeFamilyLayer, fit_node_family, sample_rows  # noqa: E402
from ._features import (  # noqa: E402
    CACHE_OPTIONS,
    HiddenFeatures,
    fits_in_memory,
    hidden_rows,
    project_rows,
)

__all__ += [
    "CACHE_OPTIONS",
    "GaussianRows",
    "HiddenFeatures",
    "MixedHiddenLayer",
    "NodeFamily",
    "NodeFamilyLayer",
    "draw_data_rbf",
    "draw_mixed_layer",
    "fit_node_family",
    "fits_in_memory",
    "hidden_rows",
    "project_rows",
    "sample_rows",
]


def __getattr__(name):
    # the built-in activations were once a table of their own here; the registry holds them
    # now, with their aliases and any plugin's
    if name == "BUILTIN_ACTIVATIONS":
        from .. import registry

        warnings.warn(
            "elmscale.hidden.BUILTIN_ACTIVATIONS is deprecated: the plugin registry holds every "
            "activation (elmscale.available('activation'), elmscale.get('activation', name))",
            FutureWarning,
            stacklevel=2,
        )
        names = ("sigmoid", "tanh", "relu", "identity", "linear", "gaussian", "rbf")
        return {n: registry.get("activation", n) for n in names}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
