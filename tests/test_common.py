"""scikit-learn's estimator checks where the algorithm files do not run them (TUMK-ELM), and
the pandas-dependent checks that ``parametrize_with_checks`` does not yield, for every
estimator: feature names recorded in fit and checked by every method."""

import pytest
from sklearn.utils.estimator_checks import (
    check_dataframe_column_names_consistency,
    check_n_features_in_after_fitting,
    parametrize_with_checks,
)

from elmscale import TUMKELM

from ._estimators import NAMES, make

pytest.importorskip("pandas")  # the test extra installs it: these checks must run in CI


@parametrize_with_checks([TUMKELM(n_clusters=3, n_landmarks=10, max_iter=3, random_state=0)])
def test_tumkelm_sklearn_contract(estimator, check):
    """Every scikit-learn check passes for TUMK-ELM; none is expected to fail."""
    check(estimator)


@pytest.mark.parametrize(
    "check",
    [check_dataframe_column_names_consistency, check_n_features_in_after_fitting],
    ids=lambda c: c.__name__,
)
@pytest.mark.parametrize("name", NAMES)
def test_feature_names_and_counts(name, check):
    """Reordered, renamed or missing DataFrame columns raise in predict, transform,
    decision_function, predict_proba and score, as in scikit-learn."""
    check(name, make(name))
