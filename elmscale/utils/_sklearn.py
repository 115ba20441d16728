"""The private names of scikit-learn that elmscale builds on, imported here and nowhere else, so
that a scikit-learn release that moves or changes one is fixed in this module alone.

- The parameter constraints and their checker (``sklearn.utils._param_validation``):
  :mod:`elmscale.validation` re-exports the constraints for every estimator, built-in or plugin.
- ``fit_context`` (``sklearn.base._fit_context``): the decorator that checks an estimator's
  ``_parameter_constraints`` before ``fit`` runs, re-exported by :mod:`elmscale.validation`.
- ``check_feature_names`` (``sklearn.utils.validation._check_feature_names``): scikit-learn's
  own ``feature_names_in_`` check, a public contract behind a private helper since 1.6, so that
  names are checked with the same semantics, wording and warnings as in every scikit-learn
  estimator.
"""

from sklearn.base import _fit_context as fit_context
from sklearn.utils._param_validation import (
    HasMethods,
    Hidden,
    Interval,
    InvalidParameterError,
    Options,
    RealNotInt,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils.validation import _check_feature_names as check_feature_names

__all__ = [
    "HasMethods",
    "Hidden",
    "Interval",
    "InvalidParameterError",
    "Options",
    "RealNotInt",
    "StrOptions",
    "check_feature_names",
    "fit_context",
    "validate_parameter_constraints",
]
