"""The estimators. Each pairs a function over the reduced matrices with an estimator class."""

from ._uselm import USELM, uselm_embedding

__all__ = ["USELM", "uselm_embedding"]
