"""TUMK-ELM: dense NumPy reference, exact vs scalable, reductions, loss history, inputs,
distributed, errors."""

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.utils._param_validation import InvalidParameterError

import elmscale
from elmscale.algorithms._tumkelm import AUTO_EXACT_MAX, TUMKELM, project_weights
from elmscale.algorithms._tumkelm_exact import (
    exact_combined,
    exact_kspace_gram,
    exact_leading_eigenvectors,
    exact_pass,
)
from elmscale.algorithms._tumkelm_scalable import (
    LabelSums,
    even_chunks,
    factor_stats,
    kspace_gram,
    kspace_target,
    leading_eigenvectors,
    tumkelm_loss,
)
from elmscale.exceptions import UnknownPluginError
from elmscale.hidden import HiddenFeatures
from elmscale.kernels import FactorLayer, LinearKernel, PolynomialKernel, RBFKernel
from elmscale.utils._dask import local_threads

# kernels whose scalable factors are exact (explicit features and closed forms), so the
# chunked scalable mode must equal the dense reference to rounding
EXACT_FACTOR_KERNELS = [LinearKernel(), PolynomialKernel(2), RBFKernel(1e-10), RBFKernel(1e10)]


def dense_tumkelm(X, kernels, n_clusters, *, C=1.0, delta=1e-4, max_iter=20, form="distance"):
    """Algorithm 1 written literally with dense N x N kernels and the N^2 x p matrix Z."""
    p = len(kernels)
    Ks = [k(X, X) for k in kernels]
    if form == "distance":
        Ks_z = [np.diag(K)[:, None] + np.diag(K)[None, :] - 2 * K for K in Ks]
    else:
        Ks_z = Ks
    Z = np.stack([z.ravel() for z in Ks_z], axis=1)
    mu = np.full(p, 1.0 / p)
    losses, weights = [], []
    for it in range(max_iter):
        Kh = sum(m * K for m, K in zip(mu, Ks, strict=True))
        s, U = np.linalg.eigh(Kh)
        U = U[:, ::-1][:, :n_clusters]
        U = U * np.where(U.sum(0) >= 0, 1.0, -1.0)
        labels = np.argmax(U, axis=1)
        Fm = np.eye(n_clusters)[labels]
        n = Fm.sum(0)
        Lh = np.diag(np.where(n > 0, 1 / np.sqrt(np.maximum(n, 1)), 0))
        loss = np.trace(Kh) - np.trace(Lh @ Fm.T @ Kh @ Fm @ Lh)
        losses.append(loss)
        weights.append(mu)
        if it > 0 and abs(losses[-1] - losses[-2]) <= delta * abs(losses[-2]):
            break
        if it == max_iter - 1:
            break
        T = (labels[:, None] != labels[None, :]).astype(float).ravel()
        raw = np.linalg.solve(np.eye(p) / C + Z.T @ Z, Z.T @ T)
        mu = np.maximum(raw, 0) / np.maximum(raw, 0).sum()
    return labels, np.array(losses), np.array(weights)


@pytest.fixture
def small(global_seed):
    """60 points in 3-d, 3 blobs (NumPy), no duplicate rows."""
    return make_blobs(
        n_samples=60, n_features=3, centers=3, cluster_std=1.5, random_state=global_seed
    )


@pytest.mark.parametrize("form", ["distance", "value"])
@pytest.mark.parametrize("mode", ["exact", "scalable"])
def test_chunked_equals_dense_reference(small, form, mode):
    X, _ = small
    # the value form with the all-ones kernel drifts to K^ = 11^T, whose eigenvectors past
    # the first are arbitrary (see test_value_form_degenerates): leave that kernel out there
    kernels = EXACT_FACTOR_KERNELS if form == "distance" else EXACT_FACTOR_KERNELS[:3]
    labels, losses, weights = dense_tumkelm(X, kernels, 3, form=form, max_iter=6)
    Xd = da.from_array(X, chunks=((25, 15, 20), (3,)))
    model = TUMKELM(
        3,
        assignment="argmax",
        kernels=kernels,
        mode=mode,
        feature_form=form,
        max_iter=6,
        scaling=None,
    ).fit(Xd)
    np.testing.assert_array_equal(model.labels_.compute(), labels)
    np.testing.assert_allclose(model.history_, losses, rtol=1e-10)
    np.testing.assert_allclose(model.weights_history_, weights, rtol=1e-8, atol=1e-12)


def test_scalable_reductions_equal_exact_with_exact_factors(small, rng):
    """m = N landmarks: the Nystrom factors are exact, and every reduction of the scalable
    mode (Z^T Z, Z^T T, loss, leading eigenvectors) equals the dense one to rounding."""
    X, _ = small
    kernels = [
        LinearKernel(),
        PolynomialKernel(3),
        RBFKernel(1.0),
        RBFKernel(30.0),
        RBFKernel(1e-10),
        RBFKernel(1e10),
    ]
    factors = [k.factor(X, n_samples=60, n_components=60, random_state=rng) for k in kernels]
    assert [f.kind for f in factors] == [
        "explicit",
        "explicit",
        "nystrom",
        "nystrom",
        "identity",
        "constant",
    ]
    Xd = da.from_array(X, chunks=((20, 40), (3,)))
    stats, _ = factor_stats(HiddenFeatures(Xd, FactorLayer(factors), cache=False))
    A = FactorLayer(factors).diagonals(X)
    mu = rng.uniform(size=len(kernels))
    mu /= mu.sum()
    U_ex, s_ex = exact_leading_eigenvectors(exact_combined(kernels, X, mu), 3)
    P, s = leading_eigenvectors(stats, mu, 3)
    U = np.hstack([f.features(X) for f in factors]) @ P
    np.testing.assert_allclose(s, s_ex, rtol=1e-8)
    np.testing.assert_allclose(U, U_ex, atol=1e-7)
    labels = np.argmax(U_ex, axis=1)
    F = np.eye(3)[labels]
    Phi = np.hstack([f.features(X) for f in factors])
    cs = {"E": Phi.T @ F, "sizes": F.sum(0), "SA": A.T @ F}
    for form in ("distance", "value"):
        ZtZ = exact_kspace_gram(kernels, X, form)
        ZtT, loss = exact_pass(kernels, X, labels, mu, form, 3)
        tol = dict(rtol=1e-7, atol=1e-9 * np.abs(ZtZ).max())
        np.testing.assert_allclose(kspace_gram(stats, form), ZtZ, **tol)
        np.testing.assert_allclose(
            kspace_target(stats, cs, form), ZtT, rtol=1e-7, atol=1e-9 * np.abs(ZtT).max()
        )
        np.testing.assert_allclose(tumkelm_loss(stats, cs, mu), loss, rtol=1e-7)


def test_factor_layer_gram_holds_every_separate_product(small, rng):
    """H^T H of the factor layer H = [Phi | A | 1] gives each label-independent sum of the
    separate products, and the pass over uneven dask chunks gives the same reductions."""
    X, _ = small
    kernels = [
        LinearKernel(),
        PolynomialKernel(3),
        RBFKernel(1.0),
        RBFKernel(1e-10),
        RBFKernel(1e10),
    ]
    factors = [k.factor(X, n_samples=60, n_components=20, random_state=rng) for k in kernels]
    assert [f.kind for f in factors] == ["explicit", "explicit", "nystrom", "identity", "constant"]
    layer = FactorLayer(factors)
    H = layer(X)
    Phi = np.hstack([f.features(X) for f in factors])
    A = np.column_stack([f.diagonal(X) for f in factors])  # of the factors, not kernels
    np.testing.assert_array_equal(H[:, : layer.n_features_out], Phi)
    np.testing.assert_allclose(H[:, layer.n_features_out : -1], A, rtol=1e-12)
    np.testing.assert_array_equal(layer.diagonals(X), H[:, layer.n_features_out : -1])
    ref = {
        "n": len(X),
        "G": Phi.T @ Phi,
        "u": Phi.sum(0),
        "AA": A.T @ A,
        "S": A.sum(0),
        "PA": Phi.T @ A,
    }
    for keep in (False, True):
        Xd = da.from_array(X, chunks=((25, 15, 20), (3,)))
        out = factor_stats(HiddenFeatures(Xd, FactorLayer(factors), cache=keep))
        for key, value in ref.items():
            np.testing.assert_allclose(
                out[0][key], value, rtol=1e-12, atol=1e-12 * np.abs(value).max()
            )
        if keep:
            np.testing.assert_allclose(out[1].compute(), Phi, rtol=1e-12, atol=1e-14)
        else:
            assert out[1] is None


@pytest.mark.parametrize("keep", [False, True])
def test_label_sums_of_each_partition_equal_the_dense_sums(small, rng, keep):
    """Each partition's sums, taken from the first partition's and the points that change
    cluster, equal the dense ``H^T F``; a partition that recurs under other cluster names
    builds no hidden row and gives the same sums, bit for bit, up to the names."""
    X, _ = small
    factors = [
        k.factor(X, n_samples=60, n_components=20, random_state=rng)
        for k in (LinearKernel(), RBFKernel(1.0), RBFKernel(30.0))
    ]
    layer = FactorLayer(factors)
    H, M, p = layer(X), layer.n_features_out, layer.n_kernels
    chunks = ((25, 15, 20), (X.shape[1],))
    features = HiddenFeatures(da.from_array(X, chunks=chunks), layer, cache=keep)
    factor_stats(features)  # the pass that persists H when it is kept
    sums = LabelSums(features, 3)
    first = rng.randint(0, 3, len(X))
    moved = first.copy()
    moved[:7] = (moved[:7] + 1) % 3
    renamed = np.array([2, 0, 1])[first]  # the first partition under other names
    seen = []
    for labels in (first, moved, renamed, moved):
        cs = sums(da.from_array(labels, chunks=(chunks[0],)))
        F = np.eye(3)[labels]
        ref = H.T @ F
        np.testing.assert_allclose(cs["E"], ref[:M], rtol=1e-12, atol=1e-12 * np.abs(ref).max())
        np.testing.assert_allclose(cs["SA"], ref[M : M + p], rtol=1e-12)
        np.testing.assert_array_equal(cs["sizes"], F.sum(0))
        seen.append(cs)
    assert sums.n_changed_ == [len(X), 7, 0, 7]
    np.testing.assert_array_equal(seen[2]["E"], seen[0]["E"][:, [1, 2, 0]])
    np.testing.assert_array_equal(seen[3]["E"], seen[1]["E"])


def test_factor_layer_takes_a_plugin_factor_without_out(small):
    """A third-party factor that overrides ``features(X)`` (no ``out``) still fills its
    columns of the layer's buffer."""
    from elmscale.kernels import KernelFactor

    class Squares(KernelFactor):
        kind = "plugin"
        n_basis = 3

        def features(self, X):
            return np.asarray(X) ** 2

    X, _ = small
    layer = FactorLayer([Squares(), LinearKernel().factor(X, n_samples=60, n_components=60)])
    np.testing.assert_array_equal(layer(X)[:, :6], np.hstack([X**2, X]))


def _exact_vs_scalable(n, landmarks, seed):
    X, y = make_blobs(n_samples=n, n_features=5, centers=4, cluster_std=1.5, random_state=seed)
    exact = TUMKELM(4, assignment="argmax", mode="exact", max_iter=8, random_state=0).fit(X)
    scal = TUMKELM(
        4, assignment="argmax", mode="scalable", n_landmarks=landmarks, max_iter=8, random_state=0
    ).fit(X)
    return y, exact, scal


def test_exact_and_scalable_agree(global_seed):
    """Fast version of the 2,000-point test: 500 points, 100 landmarks."""
    _, exact, scal = _exact_vs_scalable(500, 100, global_seed)
    assert adjusted_rand_score(exact.labels_, scal.labels_) > 0.97


@pytest.mark.slow
def test_exact_and_scalable_agree_on_2000_points(global_seed):
    """The paper's 15 kernels on 2,000 points; scalable mode with 200 Nystrom landmarks
    gives the same clusters (up to permutation) as the exact mode."""
    y, exact, scal = _exact_vs_scalable(2000, 200, global_seed)
    assert exact.mode_ == "exact" and scal.mode_ == "scalable"
    assert adjusted_rand_score(exact.labels_, scal.labels_) > 0.99
    assert adjusted_rand_score(y, scal.labels_) > 0.85


def test_loss_reported_per_iteration(small):
    X, _ = small
    model = TUMKELM(
        3,
        assignment="argmax",
        kernels=EXACT_FACTOR_KERNELS + [RBFKernel(1.0)],
        mode="exact",
        max_iter=5,
        delta=0.0,
        scaling="standard",
    ).fit(X)
    assert model.history_.shape == (model.n_iter_,)
    assert model.weights_history_.shape == (model.n_iter_, 5)
    np.testing.assert_allclose(model.weights_history_.sum(1), 1.0)
    assert np.all(model.weights_history_ >= 0)
    assert model.loss_ == model.history_[-1]
    assert np.all(np.isfinite(model.history_))
    # the last entry is eq. 10 for the final labels under the final weights
    Xs = (X - X.mean(0)) / X.std(0)
    _, loss = exact_pass(model.kernels_, Xs, model.labels_, model.kernel_weights_, "distance", 3)
    np.testing.assert_allclose(model.loss_, loss, rtol=1e-10)


def _full_loop(self, stage1, stage2, p, first=None):
    """Algorithm 1's loop computed to the end, without cycle detection: the reference for
    TUMKELM._iterate (same stages, same stopping rule, same selection)."""
    mu = np.full(p, 1.0 / p)
    losses, weights, raws, states = [], [], [], []
    for it in range(self.max_iter):
        state = first(mu) if it == 0 and first is not None else stage1(mu)
        losses.append(state["loss"])
        weights.append(mu)
        states.append(state)
        if it and abs(losses[-1] - losses[-2]) <= self.delta * abs(losses[-2]):
            break
        if it == self.max_iter - 1:
            break
        raws.append(stage2(state))
        mu = project_weights(raws[-1])
    self.history_, self.weights_history_ = np.array(losses), np.array(weights)
    self.cycle_, self.n_computed_, self.n_iter_ = None, len(losses), len(losses)
    t = len(losses) - 1 if self.select == "last" else int(np.argmin(self.history_))
    self.selected_iter_, self.loss_ = t, float(self.history_[t])
    self.kernel_weights_ = weights[t]
    self.kernel_weights_raw_ = raws[t - 1] if t > 0 else weights[0].copy()
    return states[t]


@pytest.mark.parametrize("mode", ["exact", "scalable"])
@pytest.mark.parametrize("max_iter", [20, 19, 12])
def test_detected_cycle_gives_the_full_loop(monkeypatch, mode, max_iter):
    """Iris (paper kernels, argmax) enters a 3-cycle of the weights at iteration 8 that the
    relative stopping rule never ends: the fit stops computing there and returns exactly what
    the full loop (computed to max_iter) returns, whatever the phase of the cycle."""
    from sklearn.datasets import load_iris

    X, _ = load_iris(return_X_y=True)
    params = dict(
        mode=mode, assignment="argmax", n_landmarks=150, max_iter=max_iter, random_state=0
    )
    fast = TUMKELM(3, **params).fit(X)
    assert fast.cycle_ == (7, 3)
    assert fast.n_computed_ == 10 < fast.n_iter_ == max_iter
    monkeypatch.setattr(TUMKELM, "_iterate", _full_loop)
    full = TUMKELM(3, **params).fit(X)
    assert full.cycle_ is None and full.n_computed_ == full.n_iter_ == max_iter
    np.testing.assert_array_equal(fast.labels_, full.labels_)
    np.testing.assert_array_equal(fast.embedding_, full.embedding_)
    for attr in (
        "history_",
        "weights_history_",
        "kernel_weights_",
        "kernel_weights_raw_",
        "eigenvalues_",
    ):
        np.testing.assert_array_equal(getattr(fast, attr), getattr(full, attr))
    assert fast.loss_ == full.loss_ == fast.history_[-1]


def test_cycle_play_applies_the_stopping_rule():
    """Along a detected cycle the full loop may still stop by the loss rule: the played
    iterations stop where it would."""
    model = TUMKELM(2, assignment="argmax", delta=1e-3, max_iter=20)
    # iterations 0..3 computed, the weights of iteration 4 equal those of iteration 2, so
    # the losses alternate 4.0, 4.1 (relative change 2.5e-2 > delta): the loop runs to
    # max_iter
    assert model._play_cycle(2, 2, [10.0, 5.0, 4.0, 4.1]) == (2, 2, 20)
    # a fixed point (period 1): the next loss equals the last one and the rule stops there
    assert model._play_cycle(3, 1, [10.0, 5.0, 4.0, 4.1]) == (3, 1, 5)
    # a 2-cycle whose wrap pair is within delta: (L3 -> L2) = (4.002 -> 4.0) stops at t = 4
    assert model._play_cycle(2, 2, [10.0, 5.0, 4.0, 4.002]) == (2, 2, 5)


@pytest.mark.parametrize("mode", ["exact", "scalable"])
@pytest.mark.parametrize(
    "assignment, init",
    [("argmax", "spectral"), ("kmeans", "spectral"), ("kmeans-unit", "spectral")]
    + [("kmeans-unit", "kmeans")],
)
def test_numpy_and_dask_input_agree(blobs, blobs_dask, mode, assignment, init):
    X, y = blobs
    Xd, _ = blobs_dask
    params = dict(
        kernels=["linear", ("poly", {"degree": 2}), ("rbf", {"width": 1.0})],
        mode=mode,
        assignment=assignment,
        init=init,
        n_landmarks=50,
        random_state=0,
        max_iter=5,
    )
    a = TUMKELM(3, **params).fit(X)
    b = TUMKELM(3, **params).fit(Xd)
    assert isinstance(a.labels_, np.ndarray) and isinstance(b.labels_, da.Array)
    np.testing.assert_array_equal(a.labels_, b.labels_.compute())
    np.testing.assert_allclose(a.history_, b.history_, rtol=1e-10)
    assert adjusted_rand_score(y, a.labels_) > 0.8


@pytest.mark.parametrize("assignment", ["argmax", "kmeans", "kmeans-unit"])
def test_kept_features_equal_recomputed_bases(blobs_dask, monkeypatch, assignment):
    """The scalable mode's two per-iteration passes (Phi kept in memory vs every kernel's
    basis re-evaluated from X) give the same fit."""
    import elmscale.algorithms._tumkelm as mod

    Xd, _ = blobs_dask
    params = dict(
        kernels=[
            "linear",
            ("poly", {"degree": 3}),
            ("rbf", {"width": 1.0}),
            ("rbf", {"width": 1e-10}),
            ("rbf", {"width": 1e10}),
        ],
        mode="scalable",
        assignment=assignment,
        n_landmarks=40,
        random_state=0,
        max_iter=5,
    )
    kept = TUMKELM(3, **params).fit(Xd)
    monkeypatch.setattr(mod, "fits_in_memory", lambda nbytes: False)
    recomputed = TUMKELM(3, **params).fit(Xd)
    np.testing.assert_array_equal(kept.labels_.compute(), recomputed.labels_.compute())
    np.testing.assert_allclose(kept.history_, recomputed.history_, rtol=1e-10)
    np.testing.assert_allclose(
        kept.weights_history_, recomputed.weights_history_, rtol=1e-8, atol=1e-12
    )
    np.testing.assert_allclose(
        kept.embedding_.compute(), recomputed.embedding_.compute(), atol=1e-10
    )


@pytest.mark.parametrize("assignment", ["argmax", "kmeans", "kmeans-unit"])
def test_numpy_input_equals_dask_input_in_the_same_chunks(blobs, assignment):
    """NumPy input is cut into equal row chunks (a multiple of the local threads); dask
    input in those chunks gives every fitted array equal bit for bit (> 8 chunks: a
    two-level tree sum)."""
    from elmscale.utils._validation import as_row_chunked

    X, y = blobs
    kernels = [
        "linear",
        ("poly", {"degree": 3}),
        ("rbf", {"width": 1.0}),
        ("rbf", {"width": 1e-10}),
        ("rbf", {"width": 1e10}),
    ]
    params = dict(
        kernels=kernels,
        mode="scalable",
        assignment=assignment,
        n_landmarks=40,
        random_state=0,
        max_iter=5,
    )
    with elmscale.config_context(chunk_bytes=len(kernels) * 40 * 8 * 28):
        Xd, _ = as_row_chunked(X, n_hidden=len(kernels) * 40)
        chunks = even_chunks(X.shape[0], Xd.numblocks[0], local_threads())
        assert len(chunks) > 8 and len(set(chunks)) <= 2 and sum(chunks) == X.shape[0]
        local = TUMKELM(3, **params).fit(X)
        graph = TUMKELM(3, **params).fit(Xd.rechunk({0: chunks}))
    assert isinstance(local.labels_, np.ndarray) and isinstance(local.embedding_, np.ndarray)
    np.testing.assert_array_equal(local.labels_, graph.labels_.compute())
    np.testing.assert_array_equal(local.embedding_, graph.embedding_.compute())
    np.testing.assert_array_equal(local.history_, graph.history_)
    np.testing.assert_array_equal(local.weights_history_, graph.weights_history_)
    for key in ("G", "u", "AA", "S", "PA"):
        np.testing.assert_array_equal(local.reductions_[key], graph.reductions_[key])
    if assignment == "kmeans":
        assert adjusted_rand_score(y, local.labels_) > 0.8


@pytest.mark.distributed
def test_distributed_matches_sync(dask_client, blobs_dask):
    Xd, y = blobs_dask
    params = dict(
        kernels=["linear", ("rbf", {"width": 0.5}), ("rbf", {"width": 1e-10})],
        mode="scalable",
        n_landmarks=60,
        random_state=1,
        max_iter=4,
    )
    dist = TUMKELM(3, **params).fit(Xd)
    labels = dist.labels_.compute()
    import dask

    with dask.config.set(scheduler="sync"):
        sync = TUMKELM(3, **params).fit(Xd)
        np.testing.assert_array_equal(labels, sync.labels_.compute())
    np.testing.assert_allclose(dist.history_, sync.history_, rtol=1e-10)


def test_auto_mode_and_registry(small):
    X, _ = small
    model = elmscale.make("tumk-elm", n_clusters=3, kernels=EXACT_FACTOR_KERNELS)
    assert isinstance(model, TUMKELM)
    assert model.fit(X).mode_ == "exact"
    assert AUTO_EXACT_MAX == 1_000
    assert model.fit_predict(X).shape == (60,)


def test_negative_weights_are_projected(small):
    assert project_weights(np.array([-1.0, 2.0, 1.0])).tolist() == [0.0, 2 / 3, 1 / 3]
    assert project_weights(np.array([-1.0, -2.0])) is None
    X, _ = small
    # the value form regresses "different cluster" on kernel values: informative kernels
    # get negative raw weights
    model = TUMKELM(
        3,
        assignment="argmax",
        kernels=EXACT_FACTOR_KERNELS + [RBFKernel(1.0)],
        feature_form="value",
        max_iter=3,
    ).fit(X)
    assert np.all(model.kernel_weights_ >= 0)
    np.testing.assert_allclose(model.kernel_weights_.sum(), 1.0)


@pytest.mark.parametrize(
    "params, error, match",
    [
        (dict(kernels=[]), ValueError, "kernels is empty"),
        (
            dict(kernels=["linear", "nope"]),
            UnknownPluginError,
            r"kernels: kernel 'nope' is not registered; available: linear, poly, rbf",
        ),
        (dict(kernels=[("rbf", 1.0)]), ValueError, r"must be \(name, params_dict\)"),
        (
            dict(C=0.0),
            InvalidParameterError,
            r"The 'C' parameter of TUMKELM must be a float in "
            r"the range \(0.0, inf\)",
        ),
        (dict(C=-1.0), InvalidParameterError, r"'C' parameter"),
        (
            dict(delta=-1e-3),
            InvalidParameterError,
            r"The 'delta' parameter of TUMKELM must be a "
            r"float in the range \[0.0, inf\)",
        ),
        (dict(mode="fast"), InvalidParameterError, r"'mode' parameter"),
        (dict(feature_form="kernel"), InvalidParameterError, r"'feature_form' parameter"),
        (
            dict(select="best"),
            InvalidParameterError,
            r"'select' parameter of TUMKELM must be a "
            r"str among",
        ),
        (dict(n_clusters=100), ValueError, r"n_clusters=100 must be <= n_samples=60"),
    ],
)
def test_bad_parameters(small, params, error, match):
    X, _ = small
    params = {"n_clusters": 3, **params}
    with pytest.raises(error, match=match):
        TUMKELM(**params).fit(X)


def test_value_form_degenerates(small):
    """Documented behaviour: with kernel VALUES as features and targets t = 1 for different
    clusters, the all-ones kernel (constant feature 1) takes all the weight."""
    X, _ = small
    model = TUMKELM(
        3, assignment="argmax", kernels=EXACT_FACTOR_KERNELS, feature_form="value", max_iter=3
    ).fit(X)
    assert model.weights_history_[1, 3] > 0.99


@pytest.mark.parametrize("mode", ["exact", "scalable"])
@pytest.mark.parametrize("assignment", ["argmax", "kmeans", "kmeans-unit"])
def test_select_lowest_loss_returns_that_iteration(blobs, mode, assignment):
    """select="lowest_loss" returns the state of the first iteration with the lowest loss:
    the same labels, weights and embedding as a fit stopped there by max_iter, with the
    full loop's history."""
    X, _ = blobs
    params = dict(mode=mode, assignment=assignment, n_landmarks=40, random_state=0)
    last = TUMKELM(3, **params).fit(X)
    best = TUMKELM(3, select="lowest_loss", **params).fit(X)
    np.testing.assert_array_equal(best.history_, last.history_)
    t = int(np.argmin(last.history_))
    assert best.selected_iter_ == t and last.selected_iter_ == last.n_iter_ - 1
    assert best.loss_ == last.history_[t] == best.history_.min()
    cut = TUMKELM(3, max_iter=t + 1, **params).fit(X)
    np.testing.assert_array_equal(np.asarray(best.labels_), np.asarray(cut.labels_))
    np.testing.assert_array_equal(best.kernel_weights_, cut.kernel_weights_)
    np.testing.assert_array_equal(best.kernel_weights_raw_, cut.kernel_weights_raw_)
    np.testing.assert_allclose(np.asarray(best.embedding_), np.asarray(cut.embedding_), atol=1e-12)


def test_even_chunks_cover_every_row():
    assert even_chunks(7195, 2, 2) == (3598, 3597)
    assert even_chunks(7195, 3, 2) == (1799, 1799, 1799, 1798)
    assert even_chunks(10, 1, 1) == (10,)
    assert even_chunks(3, 8, 2) == (1, 1, 1)
    for n, b, t in ((14500, 8, 2), (101, 5, 3), (1, 1, 4)):
        c = even_chunks(n, b, t)
        assert sum(c) == n and max(c) - min(c) <= 1 and len(c) >= min(b, n)


def test_bad_input():
    with pytest.raises(ValueError, match="contains NaN"):
        TUMKELM(2).fit(np.array([[0.0, 1.0], [np.nan, 1.0], [2.0, 3.0]]))
    with pytest.raises(ValueError, match="must be 2-D"):
        TUMKELM(2).fit(np.arange(5.0))


@pytest.mark.parametrize("mode", ["exact", "scalable"])
def test_kmeans_unit_clusters_the_unit_rows_of_the_eigenvectors(blobs, monkeypatch, mode):
    """assignment="kmeans-unit": the k-means of stage 1 receives the rows of U scaled to unit
    length (dense check on the last iteration's U = embedding_); with one iteration U is
    that of the initial weights, the same as with assignment="kmeans"."""
    import elmscale.algorithms._tumkelm as mod

    X, _ = blobs
    seen = []
    real_km, real_dask_km = mod.KMeans, mod.kmeans

    class Spy(real_km):
        def fit(self, E, *a, **k):
            seen.append(np.array(E))
            return super().fit(E, *a, **k)

    def spy_kmeans(E, *a, **k):
        seen.append(np.asarray(E.compute()))
        return real_dask_km(E, *a, **k)

    monkeypatch.setattr(mod, "KMeans", Spy)
    monkeypatch.setattr(mod, "kmeans", spy_kmeans)
    params = dict(
        kernels=["linear", ("rbf", {"width": 1.0})],
        mode=mode,
        n_landmarks=40,
        random_state=0,
        max_iter=1,
    )
    m = TUMKELM(3, assignment="kmeans-unit", **params).fit(X)
    U = np.asarray(m.embedding_)
    np.testing.assert_allclose(
        seen[-1], U / np.linalg.norm(U, axis=1, keepdims=True), rtol=1e-10, atol=1e-12
    )
    plain = TUMKELM(3, assignment="kmeans", **params).fit(X)
    np.testing.assert_allclose(np.asarray(plain.embedding_), U, atol=1e-10)


@pytest.mark.parametrize("mode", ["exact", "scalable"])
def test_sweep_over_solve_parameters_equals_separate_fits(blobs, mode, monkeypatch):
    """TUMK-ELM on the estimator template: a grid over parameters the reduction does not
    read (C, assignment, n_clusters) reduces the data once and gives the fits of separate
    estimators exactly."""
    X, _ = blobs
    base = TUMKELM(
        3,
        kernels=["linear", ("rbf", {"width": 1.0}), ("rbf", {"width": 1e-10})],
        mode=mode,
        n_landmarks=40,
        max_iter=4,
        random_state=0,
    )
    grid = {"C": [0.5, 4.0], "assignment": ["argmax", "kmeans-unit"], "n_clusters": [3, 4]}
    calls = []
    real_reduce = TUMKELM.reduce

    def counting_reduce(self, *args, **kwargs):
        calls.append(1)
        return real_reduce(self, *args, **kwargs)

    monkeypatch.setattr(TUMKELM, "reduce", counting_reduce)
    fits = elmscale.sweep(base, X, grid)
    assert len(calls) == 1 and len(fits) == 8
    monkeypatch.setattr(TUMKELM, "reduce", real_reduce)
    for setting, model in fits:
        alone = clone(base).set_params(**setting).fit(X)
        np.testing.assert_array_equal(model.labels_, alone.labels_)
        np.testing.assert_array_equal(model.history_, alone.history_)
        np.testing.assert_array_equal(model.kernel_weights_, alone.kernel_weights_)
        np.testing.assert_array_equal(model.embedding_, alone.embedding_)
        assert model.mode_ == mode and model.n_features_in_ == X.shape[1]


def test_feature_names_are_recorded_and_checked(blobs):
    """The template records feature_names_in_ from a DataFrame and checks them on new data."""
    pd = pytest.importorskip("pandas")
    X, _ = blobs
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = TUMKELM(3, kernels=["linear"], mode="exact", max_iter=2, random_state=0).fit(df)
    assert list(model.feature_names_in_) == list(df.columns)
    with pytest.raises(ValueError, match="feature names"):
        model.predict(df.rename(columns={"f0": "g0"}))


@pytest.mark.parametrize("mode", ["exact", "scalable"])
@pytest.mark.parametrize("scramble", [False, True])
def test_kmeans_start_is_kept_only_when_its_loss_is_lower(blobs, monkeypatch, mode, scramble):
    """init="kmeans": the first iteration's assignment is the k-means partition of the
    standardised rows, and the returned labels are that partition when its loss (eq. 10)
    under the returned weights is below the iterations' result's, else the iterations'.
    With stage 1's eigenvectors replaced by noise the iterations' labels are noise, and the
    start is kept; ``predict`` then gives the start's nearest centre."""
    import elmscale.algorithms._tumkelm as mod

    X, _ = blobs
    starts, noise = [], np.random.RandomState(0)

    def spy(E, k, **kwargs):
        out = elmscale.cluster.kmeans(E, k, **kwargs)
        if E.shape[1] == X.shape[1]:  # the start; stage 1 clusters n_clusters columns
            starts.append(np.asarray(out[1]))
        return out

    def scrambled(real):
        def eigenvectors(*args):
            U, s = real(*args)
            return noise.randn(*U.shape), s

        return eigenvectors

    monkeypatch.setattr(mod, "kmeans", spy)
    if scramble:
        monkeypatch.setattr(
            mod, "exact_leading_eigenvectors", scrambled(exact_leading_eigenvectors)
        )
        monkeypatch.setattr(mod, "leading_eigenvectors", scrambled(leading_eigenvectors))
    model = TUMKELM(3, mode=mode, init="kmeans", n_landmarks=40, random_state=0).fit(X)
    (start,) = starts
    Xs = (X - X.mean(0)) / X.std(0)
    np.testing.assert_array_equal(
        start, _nearest(Xs, np.array([Xs[start == c].mean(0) for c in range(3)]))
    )  # a k-means fixed point of the standardised rows
    chosen = model.history_[model.selected_iter_]
    if mode == "exact":
        Xm = (X - model.scaling_[0]) / model.scaling_[1]
        uniform = np.full(len(model.kernels_), 1 / len(model.kernels_))
        first = exact_pass(model.kernels_, Xm, start, uniform, "distance", 3)[1]
        np.testing.assert_allclose(model.history_[0], first, rtol=1e-10)
        at_end = exact_pass(model.kernels_, Xm, start, model.kernel_weights_, "distance", 3)[1]
        assert model.start_kept_ == (at_end < chosen)
        assert model.loss_ == min(at_end, chosen)
    if scramble:
        assert model.start_kept_ and model.loss_ < chosen
    if model.start_kept_:
        np.testing.assert_array_equal(np.asarray(model.labels_), start)
        np.testing.assert_array_equal(model.predict(X), start)
    else:
        assert model.loss_ == chosen


def _nearest(X, centers):
    return np.argmin(((X[:, None] - centers[None]) ** 2).sum(-1), axis=1)
