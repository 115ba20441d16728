from ..algorithms._elmjec import ELMJEC
from ..hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "elm-jec",
        ELMJEC,
        aliases=("elmjec",),
        description="ELM for joint embedding and clustering (Liu et al. 2017)",
    )
