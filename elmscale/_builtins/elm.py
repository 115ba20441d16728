from ..algorithms._elm import ELMClassifier, ELMRegressor
from ..algorithms._sselm import SSELM
from ..hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "elm-regressor",
        ELMRegressor,
        aliases=("elmregressor",),
        description="supervised ELM regression (Huang et al. 2012)",
    )
    register(
        "elm-classifier",
        ELMClassifier,
        aliases=("elmclassifier", "elm"),
        description="supervised ELM classification, one-hot targets (Huang et al. 2012)",
    )
    register(
        "ss-elm", SSELM, aliases=("sselm",), description="semi-supervised ELM (Huang et al. 2014)"
    )
