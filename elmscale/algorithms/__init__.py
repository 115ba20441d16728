"""The estimators. Each pairs functions over the reduced matrices (usable on their own, e.g.
for sweeps) with an estimator class that validates, builds H lazily and reduces it."""

from ._elm import ELMClassifier, ELMRegressor, elm_dual_output_weights, elm_output_weights
from ._elmjec import ELMJEC, ELMJECReduced, elmjec_embedding, elmjec_sweep
from ._emmc import EMMC, emmc_sweep, emmc_targets, factor_gram
from ._sselm import SSELM, sselm_dual_output_weights, sselm_output_weights
from ._tumkelm import (
    TUMKELM,
    kspace_gram,
    kspace_target,
    leading_eigenvectors,
    solve_weights,
    tumkelm_loss,
)
from ._uselm import USELM, uselm_embedding

__all__ = [
    "ELMClassifier",
    "ELMJEC",
    "ELMJECReduced",
    "ELMRegressor",
    "EMMC",
    "SSELM",
    "TUMKELM",
    "USELM",
    "elm_dual_output_weights",
    "elm_output_weights",
    "elmjec_embedding",
    "elmjec_sweep",
    "emmc_sweep",
    "emmc_targets",
    "factor_gram",
    "kspace_gram",
    "kspace_target",
    "leading_eigenvectors",
    "solve_weights",
    "sselm_dual_output_weights",
    "sselm_output_weights",
    "tumkelm_loss",
    "uselm_embedding",
]
