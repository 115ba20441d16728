from .. import algorithms
from ..hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "us-elm",
        algorithms.USELM,
        aliases=("uselm",),
        description="unsupervised ELM (Huang et al. 2014)",
    )
