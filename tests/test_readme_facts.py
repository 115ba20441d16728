"""Facts the README states about the code, checked against the code: the types skops asks to
trust when loading each estimator, and the command line's scheduler choice."""

import argparse
import io
import re
from pathlib import Path

import numpy as np
import pytest

import elmscale
from elmscale import cli

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _skops_paragraph():
    start = README.index("skops trusts NumPy, SciPy and scikit-learn types by itself")
    return README[start : README.index("trust it only if you trust the plugin", start)]


def _untrusted(model):
    import skops.io as sio

    return set(sio.get_untrusted_types(data=sio.dumps(model)))


def _qualname(model):
    return f"{type(model).__module__}.{type(model).__name__}"


@pytest.fixture(scope="module")
def fitted(blobs_module):
    """Every estimator fitted small, TUMK-ELM in each mode and approximation."""
    X, y = blobs_module
    y_semi = np.where(np.arange(len(y)) % 8 == 0, y, -1)
    small = {"n_hidden": 30, "random_state": 0}
    tumk = {"n_clusters": 3, "random_state": 0}
    return {
        "tumk-elm": [
            elmscale.TUMKELM(**tumk, mode="exact").fit(X),
            elmscale.TUMKELM(**tumk, mode="scalable").fit(X),
            elmscale.TUMKELM(**tumk, mode="scalable", approximation="rff").fit(X),
        ],
        "others": [
            elmscale.USELM(n_clusters=3, **small).fit(X),
            elmscale.ELMJEC(n_clusters=3, **small).fit(X),
            elmscale.EMMC(n_clusters=2, **small).fit(X),
            elmscale.SSELM(**small).fit(X, y_semi),
            elmscale.ELMClassifier(**small).fit(X, y),
            elmscale.ELMRegressor(**small).fit(X, y.astype(float)),
        ],
    }


@pytest.fixture(scope="module")
def blobs_module():
    from sklearn.datasets import make_blobs

    return make_blobs(n_samples=200, n_features=4, centers=3, random_state=0)


def test_readme_names_exactly_the_types_skops_asks_to_trust_for_tumk_elm(fitted):
    """The README's list for TUMK-ELM equals what skops.io.get_untrusted_types reports for
    fitted TUMK-ELMs (exact, scalable with Nystrom and with random Fourier features),
    besides the estimator class itself."""
    pytest.importorskip("skops")
    text = _skops_paragraph()
    named = set(re.findall(r"`(elmscale\.[\w.]+)`", text[text.index("for\nTUMK-ELM") :]))
    reported = set().union(*map(_untrusted, fitted["tumk-elm"]))
    assert named == reported - {_qualname(fitted["tumk-elm"][0])}


def test_readme_names_exactly_the_types_skops_asks_to_trust_for_every_estimator(fitted):
    """Over all estimators, the README names every type skops reports, and no other; of the
    estimator classes it names one as the example."""
    pytest.importorskip("skops")
    models = fitted["tumk-elm"] + fitted["others"]
    named = set(re.findall(r"`(elmscale\.[\w.]+)`", _skops_paragraph()))
    reported = set().union(*map(_untrusted, models))
    classes = {_qualname(m) for m in models}
    assert named - classes == reported - classes
    assert named & classes == {"elmscale.algorithms._uselm.USELM"}


def test_the_cli_uses_dask_local_scheduler_without_scheduler_or_workers():
    """The README: without --scheduler or --workers, dask's local scheduler runs the command
    (no client is made)."""
    assert "without either, dask's local threaded\nscheduler runs the command" in README
    args = argparse.Namespace(scheduler=None, workers=None, debug=False)
    err = io.StringIO()
    with cli._dask(args, err) as client:
        assert client is None
    assert err.getvalue() == ""
