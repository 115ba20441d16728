"""elmscale.sweep and the reduce/solve pair: a grid equals separate fits exactly and costs one
Gram pass per distinct hidden-layer/graph setting."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score

import elmscale
from elmscale import ELMJEC, EMMC, SSELM, USELM, ELMClassifier, Reduction, sweep
from elmscale.algorithms import _elm, _elmjec, _emmc, _sselm, _uselm
from elmscale.algorithms._elmjec import FewerComponentsWarning

# estimator, its module (where hidden_stats is looked up), a grid with two settings of a
# reduction parameter and several of the solve's, and the attributes that must be identical
CASES = {
    "USELM": (
        USELM(3, n_hidden=40, graph="exact", n_neighbors=6, random_state=0),
        _uselm,
        {"n_hidden": [30, 40], "lam": [0.01, 1.0], "n_components": [2, 3]},
        ("output_weights_", "eigenvalues_", "embedding_", "labels_"),
    ),
    "SSELM": (
        SSELM(n_hidden=40, graph="exact", n_neighbors=6, random_state=0),
        _sselm,
        {"n_neighbors": [4, 6], "lam": [0.01, 0.5, 10.0]},
        ("output_weights_", "classes_"),
    ),
    "ELMJEC": (
        ELMJEC(3, n_hidden=40, graph="exact", n_restarts=2, max_iter=4, random_state=0),
        _elmjec,
        {"random_state": [0, 1], "lam": [0.5, 2.0], "gamma": [0.05, 0.2]},
        ("output_weights_", "embedding_", "labels_", "objective_"),
    ),
    "EMMC": (
        EMMC(3, n_hidden=30, n_init=2, max_iter=8, random_state=0),
        _emmc,
        {"n_hidden": [20, 30], "C": [0.1, 1.0, 10.0], "balance": [0.1, 0.5]},
        ("output_weights_", "labels_", "cluster_sizes_"),
    ),
    "ELMClassifier": (
        ELMClassifier(n_hidden=30, random_state=0),
        _elm,
        {"class_weight": [None, "balanced"], "C": [0.1, 10.0]},
        ("output_weights_", "classes_"),
    ),
}


def _targets(name, y):
    if name == "SSELM":  # five labels per class, the rest unlabelled
        y_semi = np.full_like(y, -1)
        for c in np.unique(y):
            y_semi[np.flatnonzero(y == c)[:5]] = c
        return y_semi
    return y if name == "ELMClassifier" else None


def _spy_gram_passes(monkeypatch, module):
    """Count the passes that compute H^T H (each estimator's one Gram pass per reduction)."""
    calls = []
    real = module.hidden_stats

    def spy(features, terms, **kw):
        if "hth" in terms:
            calls.append(tuple(terms))
        return real(features, terms, **kw)

    monkeypatch.setattr(module, "hidden_stats", spy)
    return calls


@pytest.mark.parametrize("name", list(CASES))
def test_sweep_equals_separate_fits_with_one_gram_pass_per_reduction(name, blobs, monkeypatch):
    base, module, grid, attributes = CASES[name]
    X, y = blobs
    y = _targets(name, y)
    calls = _spy_gram_passes(monkeypatch, module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewerComponentsWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        fits = sweep(base, X, grid, y)
        n_reduce_settings = len(next(iter(grid.values())))
        assert len(calls) == n_reduce_settings  # one Gram pass per hidden-layer/graph setting
        calls.clear()
        for setting, fitted in fits:
            alone = clone(base).set_params(**setting).fit(X, y)
            assert fitted.get_params() == alone.get_params()
            for attr in attributes:
                np.testing.assert_array_equal(
                    getattr(fitted, attr), getattr(alone, attr), err_msg=f"{name} {setting} {attr}"
                )
    assert len(calls) == len(fits)  # separate fits: one pass each
    assert len(fits) == np.prod([len(v) for v in grid.values()])


def test_sweep_on_dask_input_returns_lazy_results_equal_to_fits(blobs_dask, monkeypatch):
    Xd, _ = blobs_dask
    calls = _spy_gram_passes(monkeypatch, _uselm)
    base = USELM(3, n_hidden=30, graph="exact", random_state=0)
    fits = sweep(base, Xd, {"lam": [0.1, 10.0]})
    assert len(calls) == 1
    for setting, fitted in fits:
        assert isinstance(fitted.labels_, da.Array)
        alone = clone(base).set_params(**setting).fit(Xd)
        np.testing.assert_array_equal(fitted.labels_.compute(), alone.labels_.compute())
        np.testing.assert_array_equal(fitted.output_weights_, alone.output_weights_)


def test_sweep_scores_and_errors(blobs):
    X, y = blobs
    base = USELM(3, n_hidden=30, graph="exact", random_state=0)
    scores = sweep(base, X, {"lam": [0.1, 1.0]}, scoring=lambda m, X_, y_: m.score(X_))
    for setting, score in scores:
        assert score == clone(base).set_params(**setting).fit(X).score(X)
    jec = ELMJEC(3, n_hidden=30, graph="exact", max_iter=2, n_restarts=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", FewerComponentsWarning)
        out = sweep(jec, X, {"gamma": [0.05, 1e6], "lam": [4.0]}, errors="return")
        assert isinstance(out[0][1], ELMJEC) and isinstance(out[1][1], ValueError)
        with pytest.raises(ValueError, match="no positive eigenvalue"):
            sweep(jec, X, {"gamma": [1e6], "lam": [4.0]})


def test_sweep_rejects_bad_arguments_before_reading_data(blobs):
    X, _ = blobs
    base = USELM(3, n_hidden=30, graph="exact", random_state=0)
    with pytest.raises(ValueError, match="'lam' parameter of USELM"):
        sweep(base, X, {"lam": [0.1, -1.0]})
    with pytest.raises(ValueError, match="Invalid parameter 'C' for estimator USELM"):
        sweep(base, X, {"C": [1.0]})
    with pytest.raises(TypeError, match="estimator must be an elmscale estimator"):
        sweep(object(), X, {"lam": [1.0]})
    with pytest.raises(ValueError, match="errors must be 'raise' or 'return'"):
        sweep(base, X, {"lam": [1.0]}, errors="ignore")
    with pytest.raises(TypeError, match="scoring must be a callable"):
        sweep(base, X, {"lam": [1.0]}, scoring="accuracy")


def test_solve_checks_the_reduction(blobs):
    X, _ = blobs
    model = USELM(3, n_hidden=30, graph="exact", random_state=0)
    reduction = model.reduce(X)
    assert isinstance(reduction, Reduction) and reduction.graph is not None
    assert set(reduction.stats) == {"hth", "htlh"}
    with pytest.raises(ValueError, match=r"n_neighbors \(reduction: 10, estimator: 5\)"):
        clone(model).set_params(n_neighbors=5).solve(reduction)
    with pytest.raises(TypeError, match="reduction must be a Reduction"):
        model.solve({"hth": None})
    fitted = clone(model).set_params(lam=1.0).solve(reduction)
    assert fitted.n_features_in_ == X.shape[1] and fitted.hidden_layer_ is reduction.features.layer
    assert list(fitted.timings_) == ["hidden", "graph", "gram", "solve", "embed_cluster"]
    # solving twice from one reduction draws the same k-means seed both times
    again = clone(model).set_params(lam=1.0).solve(reduction)
    np.testing.assert_array_equal(again.labels_, fitted.labels_)
    assert adjusted_rand_score(fitted.labels_, clone(model).set_params(lam=1.0).fit(X).labels_) == 1


def test_sselm_lam_zero_needs_its_own_reduction(blobs, monkeypatch):
    X, y = blobs
    y = _targets("SSELM", y)
    calls = _spy_gram_passes(monkeypatch, _sselm)
    fits = sweep(SSELM(n_hidden=30, graph="exact", random_state=0), X, {"lam": [0.0, 1.0, 2.0]}, y)
    assert [("htlh" in c) for c in calls] == [False, True]  # lam = 0 skips the graph
    assert [m.lam for _, m in fits] == [0.0, 1.0, 2.0]


def test_old_sweep_names_are_the_generic_sweep(blobs):
    X, _ = blobs
    fits = elmscale.emmc_sweep(X, [0.5, 2.0], n_clusters=3, n_hidden=20, random_state=0)
    ref = sweep(EMMC(3, n_hidden=20, random_state=0), X, {"C": [0.5, 2.0]})
    for (C, model), (setting, other) in zip(fits, ref, strict=True):
        assert C == setting["C"]
        np.testing.assert_array_equal(model.labels_, other.labels_)


@pytest.mark.parametrize("n_solves", [1, 2])
def test_uselm_keeps_h_only_when_another_solve_reads_it(blobs_dask, monkeypatch, n_solves):
    """With a locality-ordered graph the Gram pass builds H from the ordered X, so the
    embedding is the only pass over the cached H: a fit builds and projects each block in one
    task and holds nothing, a sweep keeps H for its next solve. Results are identical."""
    from elmscale.graph import _build

    monkeypatch.setattr(_build, "ORDER_MIN_SAMPLES", 0)
    X, _ = blobs_dask
    est = USELM(3, n_hidden=30, graph="exact", n_neighbors=6, cache=True, random_state=0)
    reduction = est.reduce(X)
    assert reduction.graph.order is not None
    reduction.n_solves = n_solves
    fitted = clone(est).solve(reduction)
    assert reduction.features.materialized == (n_solves > 1)
    ref = clone(est).set_params(cache=False).fit(X)
    np.testing.assert_array_equal(fitted.labels_.compute(), ref.labels_.compute())
    np.testing.assert_array_equal(fitted.embedding_.compute(), ref.embedding_.compute())
