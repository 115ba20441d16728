"""The tests every registered estimator gets, found through ``elmscale.all_estimators`` as
scikit-learn's ``test_common.py`` finds its own: scikit-learn's estimator checks, the
pandas-dependent checks that ``parametrize_with_checks`` does not yield (feature names
recorded in fit and checked by every method), elmscale's algorithm contract with its sweep
check (re-solving one reduction equals a fresh fit), and checkpoints (a fit resumed from its
checkpoint equals one without). The other common tests (pickling, determinism, NumPy/dask
agreement, DataFrame input, bad inputs, faults) take their estimators from the same list,
``tests._estimators.NAMES``: registering an estimator is all it takes to be tested."""

import pytest
from sklearn.datasets import make_blobs
from sklearn.utils.estimator_checks import (
    check_dataframe_column_names_consistency,
    check_n_features_in_after_fitting,
    parametrize_with_checks,
)

from elmscale.testing import check_algorithm

from ._estimators import NAMES, assert_same_results, fit, make, outputs, targets

pytest.importorskip("pandas")  # the test extra installs it: these checks must run in CI

pytestmark = pytest.mark.filterwarnings(
    # few iterations on the checks' tiny data sets: not converging is expected there
    "ignore::sklearn.exceptions.ConvergenceWarning",
    "ignore::elmscale.algorithms._elmjec.FewerComponentsWarning",
)


def _expected_failed_checks(estimator):
    """The checks an estimator declares it cannot pass, with the reason
    (``_expected_failed_checks``, a class attribute of check names and reasons)."""
    return dict(getattr(estimator, "_expected_failed_checks", {}))


@parametrize_with_checks(
    [make(name) for name in NAMES], expected_failed_checks=_expected_failed_checks
)
def test_sklearn_contract(estimator, check):
    """Every scikit-learn check passes but those the estimator names, with the reason."""
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


@pytest.fixture(scope="module")
def blobs3():
    """(X, y): 90 points in 4-D around 3 centres."""
    return make_blobs(90, n_features=4, centers=3, random_state=0)


@pytest.mark.parametrize("name", NAMES)
def test_algorithm_contract_and_sweep(name, blobs3):
    """``elmscale.testing.check_algorithm`` without scikit-learn's checks (run above): the
    construction and fit contract, output following input, and for each parameter not in
    ``reduce_params`` a re-solve of one reduction equal to a fresh fit with that value."""
    X, y = blobs3
    model = make(name)
    check_algorithm(
        type(model), params=model.get_params(), X=X, y=targets(name, y), sklearn_checks=False
    )


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_resumes_to_the_same_fit(name, blobs3, tmp_path):
    """With ``supports_checkpoint``, a fit that keeps its stages and a second fit that loads
    them give the fit without a checkpoint; without it, ``checkpoint=`` is refused."""
    X, y = blobs3
    model = make(name)
    if not model.supports_checkpoint:
        with pytest.raises(ValueError, match="does not support checkpoint="):
            fit_with(model, name, X, y, tmp_path)
        return
    expected = outputs(fit(make(name), name, X, y), X)
    first = outputs(fit_with(make(name), name, X, y, tmp_path), X)
    resumed = outputs(fit_with(make(name), name, X, y, tmp_path), X)
    assert_same_results(expected, first, f"{name}: first fit with a checkpoint")
    assert_same_results(expected, resumed, f"{name}: fit resumed from the checkpoint")
    assert any(tmp_path.iterdir()), "the checkpoint folder is empty"


def fit_with(model, name, X, y, checkpoint):
    t = targets(name, y)
    if t is None:
        return model.fit(X, checkpoint=checkpoint)
    return model.fit(X, t, checkpoint=checkpoint)


def test_every_registered_estimator_is_tested_and_every_builtin_exported():
    """The list the common tests run on is the public listing, and the built-ins among it
    are in the ``elmscale`` namespace and its ``__all__`` (hence in the API reference)."""
    import elmscale
    from elmscale.registry import builtin_algorithms

    assert set(NAMES) == {cls.__name__ for _, cls in elmscale.all_estimators()}
    assert set(builtin_algorithms()) <= set(NAMES) & set(elmscale.__all__)
    for name, cls in builtin_algorithms().items():
        assert getattr(elmscale, name) is cls
