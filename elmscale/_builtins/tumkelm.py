from ..algorithms._tumkelm import TUMKELM
from ..hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "tumk-elm",
        TUMKELM,
        aliases=("tumkelm",),
        description="unsupervised multiple-kernel ELM clustering (Xiang et al. 2018)",
    )
