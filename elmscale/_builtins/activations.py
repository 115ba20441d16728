from ..hidden import _activations as act
from ..hookspecs import hookimpl


@hookimpl
def register_activations(register):
    register("sigmoid", act.sigmoid, description="1 / (1 + exp(-z)) (US-ELM eq. 1)")
    register("tanh", act.tanh, description="hyperbolic tangent")
    register("relu", act.relu, description="max(z, 0)")
    register("identity", act.identity, aliases=("linear",), description="no non-linearity")
    register(
        "gaussian", act.gaussian, aliases=("rbf",), description="exp(-b ||x - a||) (US-ELM eq. 2)"
    )
