from ..algorithms._emmc import EMMC
from ..hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register("emmc", EMMC, description="extreme maximum margin clustering (Zhang et al. 2013)")
