from ..hidden import GaussianRows
from ..hookspecs import hookimpl


@hookimpl
def register_hidden_layers(register):
    register(
        "gaussian-rows",
        GaussianRows(),
        description="exp(-||x - c||^2 / (w m)^2) on sampled data rows c, m their median distance",
    )
