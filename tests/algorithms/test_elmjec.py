"""ELM-JEC: chunked == dense NumPy Algorithm 1, ascent, the rank trap, sweeps, bad input."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import elmscale
from elmscale import gram
from elmscale.algorithms import _elmjec
from elmscale.algorithms._elmjec import (
    ELMJEC,
    ELMJECReduced,
    FewerComponentsWarning,
    elmjec_embedding,
    elmjec_sweep,
)

from .._reference import hidden, knn_laplacian
from .._reference_elmjec import elmjec_dense, minmax, solve_dense

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture
def overlapping(global_seed):
    """(X, y): 210 points in 4-d, 4 overlapping blobs: Algorithm 1 takes a few iterations."""
    return make_blobs(
        n_samples=210, n_features=4, centers=4, cluster_std=3.5, random_state=global_seed
    )


PARAMS = dict(
    n_clusters=4,
    n_hidden=40,
    graph="exact",
    n_neighbors=5,
    n_restarts=3,
    max_iter=6,
    lam=0.5,
    gamma=0.05,
    n_components=3,
    random_state=7,
)


def _model(**kw):
    return ELMJEC(**{**PARAMS, **kw})


def _same_partition(a, b):
    return adjusted_rand_score(np.asarray(a), np.asarray(b)) == 1.0


@pytest.mark.parametrize("n_basis", [None, 8])
@pytest.mark.parametrize("lam,gamma,n_components", [(0.5, 0.5, 3), (4.0, 0.05, 5)])
def test_chunked_equals_dense_numpy_algorithm(overlapping, lam, gamma, n_components, n_basis):
    """Uneven dask chunks, same seed: beta, G, E, the objective history and the labels match
    a dense implementation written from eq. 6 with the N x N matrix M; with ``n_basis``, beta
    confined to that many leading eigenvectors of H~^T M H~ at the first partition (of 40
    hidden directions), there too."""
    X, _ = overlapping
    Xd = da.from_array(X, chunks=((50, 90, 70), (4,)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewerComponentsWarning)
        m = _model(lam=lam, gamma=gamma, n_components=n_components, n_basis=n_basis).fit(Xd)
    ref = elmjec_dense(
        X,
        4,
        n_basis=n_basis,
        n_hidden=40,
        lam=lam,
        gamma=gamma,
        n_components=n_components,
        n_restarts=3,
        max_iter=6,
        n_neighbors=5,
        random_state=7,
    )
    assert m.history_["n_changed"][1] > 0  # the case exercises the update step
    np.testing.assert_allclose(m.history_["objective"], ref["history"]["objective"], rtol=1e-10)
    np.testing.assert_allclose(
        m.history_["kmeans_objective"], ref["history"]["kmeans_objective"], rtol=1e-10
    )
    np.testing.assert_array_equal(m.history_["n_changed"], ref["history"]["n_changed"])
    assert _same_partition(m.labels_.compute(), ref["labels"])
    np.testing.assert_allclose(m.output_weights_, ref["beta"], rtol=1e-8, atol=1e-9)
    E = m.embedding_.compute()
    np.testing.assert_allclose(E, ref["E"], rtol=1e-10, atol=1e-10 * np.abs(ref["E"]).max())
    np.testing.assert_allclose(m.objective_, ref["objective"], rtol=1e-10)


def test_reduced_solve_equals_dense_eq_6(overlapping):
    """The function over reduced matrices: objective = Tr(beta^T H~^T M H~ beta), beta
    orthonormal, G the cluster means of E (eq. 10)."""
    X, _ = overlapping
    m = _model(scaling=None, max_iter=0).fit(X)
    H = hidden(X, m.hidden_layer_)
    L = knn_laplacian(X, 5)
    labels = np.arange(len(X)) % 4
    F = np.eye(4)[labels]
    beta, eig, G, obj = elmjec_embedding(
        H.T @ H, H.sum(0), len(X), H.T @ L @ H, H.T @ F, F.sum(0), 0.5, 0.05, 3
    )
    Hc = H - H.mean(0)
    b_ref, G_ref, obj_ref = solve_dense(Hc, L, labels, 4, 0.5, 0.05, 3)
    np.testing.assert_allclose(obj, obj_ref, rtol=1e-10)
    np.testing.assert_allclose(eig.sum(), obj, rtol=1e-12)
    np.testing.assert_allclose(beta.T @ beta, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(
        G,
        np.stack([(Hc @ beta)[labels == j].mean(0) for j in range(4)], axis=1),
        rtol=1e-9,
        atol=1e-12,
    )
    red = ELMJECReduced(H.T @ H, H.sum(0), len(X), H.T @ L @ H)
    E = Hc @ beta
    km = sum(((E[labels == j] - E[labels == j].mean(0)) ** 2).sum() for j in range(4))
    np.testing.assert_allclose(red.kmeans_objective(beta, H.T @ F, F.sum(0)), km, rtol=1e-9)


@pytest.mark.parametrize(
    "spectrum",
    [
        np.r_[np.linspace(-5.0, -1.0, 55), [3e-10, 1e-9, 2.0, 3.0, 4.0]],  # near-zero: exact check
        np.r_[np.linspace(-5.0, -1.0, 58), [2.0, 3.0]],  # fewer positive than asked
        np.linspace(0.5, 3.0, 60),  # all positive
    ],
)
def test_top_eigenpairs_and_positive_count_equal_the_full_spectrum(spectrum):
    """The per-iteration solve computes only the top n_components eigenpairs; they and the
    number kept as positive (> POSITIVE_RTOL * max |eigenvalue|) equal the full spectrum's."""
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((60, 60)))
    S = (Q * spectrum) @ Q.T
    S = 0.5 * (S + S.T)
    full = np.linalg.eigvalsh(S)[::-1]
    expected = int(np.count_nonzero(full > _elmjec.POSITIVE_RTOL * np.abs(full).max()))
    w, Y = _elmjec._top_eigh(S, 8)
    np.testing.assert_allclose(w, full[:8], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Y.T @ Y, np.eye(8), atol=1e-12)
    np.testing.assert_allclose(S @ Y, Y * w, atol=1e-12)  # (3e-10 and 1e-9 nearly coincide)
    assert _elmjec._count_positive(S, w) == min(8, expected)


def test_accepted_partition_never_worse_than_baseline_and_objective_ascends(overlapping):
    X, _ = overlapping
    m = _model(max_iter=8, lam=2.0, n_components=2).fit(X)
    h = m.history_
    assert (h["n_changed"][1:] > 0).sum() >= 2 and len(h["objective"]) == m.n_iter_ + 1
    assert np.all(h["kmeans_objective"][1:] <= h["baseline_kmeans_objective"][1:])
    assert set(h["accepted"][1:]) <= {"baseline", "restart"}
    # block-coordinate ascent on eq. 6: F step (never worse than Lloyd from G), then beta step
    assert np.all(np.diff(h["objective"]) >= -1e-9 * np.abs(h["objective"]).max())
    # without restarts the baseline is always the accepted run
    b = _model(max_iter=4, n_restarts=0).fit(X)
    assert set(b.history_["accepted"][1:]) == {"baseline"}


def test_fewer_positive_eigenvalues_than_components_trap(overlapping):
    """lam > 1: at most n_clusters - 1 = 3 positive eigenvalues. The literal top-n_o eigenvectors
    give all-zero embedding columns; the estimator keeps the positive ones only and warns."""
    X, _ = overlapping
    with pytest.warns(FewerComponentsWarning, match=r"only [123] positive .* n_components=8"):
        m = _model(lam=4.0, n_components=8, n_hidden=300).fit(X)  # rank H~ < N < n_h
    assert 1 <= m.n_components_ <= 3
    assert m.embedding_.shape == (len(X), m.n_components_)
    assert m.cluster_centers_.shape == (4, m.n_components_)
    kept = np.linalg.norm(m.embedding_, axis=0)
    assert np.all(kept > 1e-6 * kept.max())  # no null-space (all-zero) column
    assert np.all(m.eigenvalues_ > 0)
    # the trap, literally: top 8 eigenvectors of the full H~^T M H~
    H = hidden(X, m.hidden_layer_)
    Hc = H - H.mean(0)
    offset, scale = minmax(X)
    L = knn_laplacian((X - offset) / scale, 5)
    F = np.eye(4)[np.asarray(m.labels_)]
    M = -3.0 * np.eye(len(X)) + 4.0 * F @ np.diag(1 / F.sum(0)) @ F.T - 0.05 * L
    w, V = np.linalg.eigh(Hc.T @ M @ Hc)
    literal = Hc @ V[:, ::-1][:, :8]
    norms = np.linalg.norm(literal, axis=0)
    assert (norms < 1e-6 * norms.max()).sum() >= 8 - 3  # all-zero columns beyond n_clusters - 1
    # when nothing is positive, fit says what to change
    with pytest.raises(
        ValueError, match="no positive eigenvalue for lam=4.0, gamma=1000000.0.*Lower gamma"
    ):
        _model(lam=4.0, gamma=1e6).fit(X)


def test_numpy_and_dask_input_agree_and_output_follows_input(overlapping):
    X, _ = overlapping
    mn = _model().fit(X)
    md = _model().fit(da.from_array(X, chunks=(64, 4)))
    assert isinstance(mn.labels_, np.ndarray) and isinstance(mn.embedding_, np.ndarray)
    assert isinstance(md.labels_, da.Array) and isinstance(md.embedding_, da.Array)
    np.testing.assert_array_equal(mn.labels_, md.labels_.compute())
    np.testing.assert_allclose(mn.embedding_, md.embedding_.compute(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mn.history_["objective"], md.history_["objective"], rtol=1e-10)
    assert isinstance(md.predict(da.from_array(X[:30], chunks=10)), da.Array)
    assert isinstance(mn.transform(X[:30]), np.ndarray)


def test_transform_and_predict_on_unseen_points(overlapping):
    X, y = overlapping
    m = _model().fit(X[:150])
    np.testing.assert_allclose(m.transform(X[:150]), m.embedding_, rtol=1e-10, atol=1e-12)
    H = hidden(X[150:], m.hidden_layer_)
    E_new = (H - m.hidden_mean_) @ m.output_weights_  # E = (h(x) - mu) beta
    np.testing.assert_allclose(m.transform(X[150:]), E_new, rtol=1e-10, atol=1e-12)
    d2 = ((E_new[:, None, :] - m.cluster_centers_[None]) ** 2).sum(2)
    np.testing.assert_array_equal(m.predict(X[150:]), d2.argmin(1))
    # G holds the cluster means of the training embedding under labels_
    for j in range(4):
        np.testing.assert_allclose(
            m.cluster_centers_[j], m.embedding_[m.labels_ == j].mean(0), rtol=1e-9, atol=1e-12
        )


@pytest.mark.parametrize("cache", [False, True])
def test_corrected_htf_gives_the_fit_of_a_pass_per_iteration(monkeypatch, cache):
    """H^T F corrected by the rows whose cluster changed (after renaming the clusters to
    match: accepted restarts name them anew) gives the fit that recomputes it by a pass over
    H in every iteration. The data take eight iterations, four of them restarts."""
    X, _ = make_blobs(400, n_features=5, centers=4, cluster_std=4.0, random_state=2)
    params = dict(n_clusters=4, n_hidden=60, graph="exact", n_restarts=2, random_state=2)
    corrected = ELMJEC(cache=cache, **params).fit(X)
    assert (corrected.history_["n_changed"][1:] > 0).sum() >= 5
    assert list(corrected.history_["accepted"]).count("restart") >= 3
    monkeypatch.setattr(gram, "CORRECTED_SHARE", -1.0)
    full = ELMJEC(cache=cache, **params).fit(X)
    np.testing.assert_array_equal(corrected.labels_, full.labels_)
    np.testing.assert_allclose(corrected.embedding_, full.embedding_, rtol=1e-9, atol=1e-11)
    np.testing.assert_array_equal(corrected.history_["n_changed"], full.history_["n_changed"])
    np.testing.assert_allclose(corrected.objective_, full.objective_, rtol=1e-10)


def test_one_gram_pass_per_fit_and_htf_passes_only_where_most_labels_change(
    overlapping, monkeypatch
):
    calls = []
    real = gram.hidden_stats

    def spy(features, terms, **kw):
        calls.append(tuple(terms))
        return real(features, terms, **kw)

    monkeypatch.setattr(_elmjec, "hidden_stats", spy)
    monkeypatch.setattr(gram, "hidden_stats", spy)
    m = _model(cache=True).fit(X := overlapping[0])
    assert [c for c in calls if "hth" in c or "htlh" in c] == [
        ("count", "colsum", "hth", "htlh", "htf", "sizes")  # with the initial partition's
    ]
    full = [c for c in calls if "hth" not in c]
    assert set(full) <= {("htf", "sizes")}
    changed = m.history_["n_changed"][1:]
    assert len(full) == sum(changed > gram.CORRECTED_SHARE * len(X))
    # the sweep: still one fixed-Gram pass for the whole grid
    calls.clear()
    fits = elmjec_sweep(
        X, {"lam": [0.5, 2.0], "gamma": [0.05, 0.2], "n_components": [2, 3]}, clone(_model())
    )
    assert len(fits) == 8
    assert sum("hth" in c for c in calls) == 1


def test_a_basis_as_wide_as_the_range_is_the_exact_fit(overlapping):
    """``n_basis`` at least the rank of H~ (and "auto" where that covers it) leaves nothing
    out: the fit of ``n_basis=None``, bit for bit."""
    X, _ = overlapping
    exact = _model(n_basis=None).fit(X)
    assert exact.rank_ == 40
    for n_basis in (40, 55, "auto"):  # "auto": 64 directions here
        m = _model(n_basis=n_basis).fit(X)
        np.testing.assert_array_equal(m.labels_, exact.labels_)
        np.testing.assert_array_equal(m.output_weights_, exact.output_weights_)
        np.testing.assert_array_equal(m.history_["objective"], exact.history_["objective"])


def test_auto_basis_is_the_whole_range_on_small_data_and_a_subspace_above(overlapping, monkeypatch):
    """``n_basis="auto"``: the literal algorithm up to ``BASIS_MIN_ROWS`` samples, above it
    max(64, 4 n_components) directions."""
    X, _ = overlapping
    params = dict(n_hidden=100, max_iter=3)
    small = _model(**params).fit(X)
    np.testing.assert_array_equal(
        small.output_weights_, _model(n_basis=None, **params).fit(X).output_weights_
    )
    monkeypatch.setattr(_elmjec, "BASIS_MIN_ROWS", 200)
    large = _model(**params).fit(X)
    assert large.rank_ > 64
    np.testing.assert_array_equal(
        large.output_weights_, _model(n_basis=64, **params).fit(X).output_weights_
    )
    assert not np.allclose(large.output_weights_, small.output_weights_)


class _CountingLayer:
    """Counts the rows the hidden layer builds (dask's threads share the counter)."""

    def __init__(self, monkeypatch):
        self.rows = 0
        real = elmscale.hidden.RandomHiddenLayer.__call__

        def count(layer, X):
            self.rows += len(X)
            return real(layer, X)

        monkeypatch.setattr(elmscale.hidden.RandomHiddenLayer, "__call__", count)


@pytest.mark.parametrize("cache", [True, False])
def test_iterations_in_a_subspace_read_its_rows_not_h(monkeypatch, cache):
    """With ``n_basis`` below the rank the iterations read P = H~ basis (N x n_basis): held,
    the solve builds each hidden row once, for P; rebuilt, once per embedding and for the
    label sums of the rows that change cluster."""
    X, _ = make_blobs(400, n_features=5, centers=4, cluster_std=4.0, random_state=2)
    model = ELMJEC(4, n_hidden=60, graph="exact", n_restarts=2, random_state=2, n_basis=8)
    reduction = model.set_params(cache=cache).reduce(X)
    counter = _CountingLayer(monkeypatch)
    model.solve(reduction)
    assert model.n_iter_ >= 3
    changed = model.history_["n_changed"][1:]
    embeddings = 1 + int((changed > 0).sum())
    if cache:
        assert counter.rows == len(X)
    else:
        assert embeddings * len(X) <= counter.rows <= 2 * embeddings * len(X)
    assert model.output_weights_.shape == (60, 4)
    np.testing.assert_allclose(
        model.output_weights_.T @ model.output_weights_, np.eye(4), atol=1e-12
    )


def test_sweep_equals_fitting_each_setting(overlapping):
    X, _ = overlapping
    grid = {"lam": [0.5, 4.0], "gamma": [0.05], "n_components": [2, 3]}
    for setting, fitted in elmjec_sweep(X, grid, **PARAMS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewerComponentsWarning)
            alone = _model(**setting).fit(X)
        np.testing.assert_array_equal(fitted.labels_, alone.labels_)
        np.testing.assert_allclose(fitted.output_weights_, alone.output_weights_, rtol=1e-12)
        np.testing.assert_allclose(
            fitted.history_["objective"], alone.history_["objective"], rtol=1e-12
        )
        np.testing.assert_array_equal(fitted.predict(X[:20]), alone.predict(X[:20]))
    with pytest.raises(
        ValueError,
        match=r"'gamma' parameter of ELMJEC must be a float in the "
        r"range \(0.0, inf\)",
    ):
        elmjec_sweep(X, {"gamma": [0.1, -1.0]}, **PARAMS)
    fits = elmjec_sweep(X, {"gamma": [0.05, 1e6], "lam": [4.0]}, **PARAMS)
    assert isinstance(fits[1][1], ValueError) and isinstance(fits[0][1], ELMJEC)


def test_clusters_separated_blobs(blobs):
    X, y = blobs
    m = ELMJEC(3, n_hidden=60, graph="exact", random_state=0).fit(X)
    assert adjusted_rand_score(y, m.labels_) > 0.95
    assert np.array_equal(m.fit_predict(X), m.labels_)


@pytest.mark.distributed
@pytest.mark.parametrize("n_basis", [None, 8])
def test_fit_on_distributed_cluster_matches_local(overlapping, dask_client, n_basis):
    X, _ = overlapping
    Xd = da.from_array(X, chunks=((50, 90, 70), (4,)))
    dist = _model(max_iter=2, n_restarts=1, n_basis=n_basis).fit(Xd)
    labels = dist.labels_.compute()
    with elmscale_sync():
        local = _model(max_iter=2, n_restarts=1, n_basis=n_basis).fit(Xd)
        local_labels = local.labels_.compute()
    np.testing.assert_array_equal(labels, local_labels)
    np.testing.assert_allclose(dist.history_["objective"], local.history_["objective"], rtol=1e-10)


def elmscale_sync():
    import dask

    return dask.config.set(scheduler="sync")


def test_registered_as_plugin():
    assert "elm-jec" in elmscale.available("algorithm")
    m = elmscale.make("elm-jec", n_clusters=2)
    assert isinstance(m, ELMJEC) and m.n_clusters == 2


@pytest.mark.parametrize(
    "params,match",
    [
        (dict(lam=0.0), r"'lam' parameter of ELMJEC must be a float in the range \(0.0, inf\)"),
        (dict(lam=-1.0), r"'lam' parameter of ELMJEC must be a float in the range \(0.0, inf\)"),
        (dict(lam=np.inf), r"'lam' parameter of ELMJEC must be a float in the range \(0.0, inf\)"),
        (dict(gamma=0.0), r"'gamma' parameter of ELMJEC must be a float in the range \(0.0, inf\)"),
        (
            dict(gamma=np.inf),
            r"'gamma' parameter of ELMJEC must be a float in the range \(0.0, "
            r"inf\)",
        ),
        (dict(gamma="big"), r"'gamma' parameter of ELMJEC must be a float"),
        (dict(n_clusters=500), "n_clusters=500 must be <= n_samples=210"),
        (dict(n_components=40), "n_components=40 must be smaller than n_hidden=40"),
        (dict(n_neighbors=210), r"n_neighbors=210 must be in \[1, n_samples - 1\]"),
        (dict(n_restarts=-1), "n_restarts"),
        (dict(max_iter=1.5), "max_iter"),
        (dict(tol=1.0), r"'tol' parameter of ELMJEC must be a float in the range \[0.0, 1.0\)"),
        (dict(tol="loose"), "'tol' parameter of ELMJEC"),
        (dict(activation="sigmod"), "activation.*sigmoid"),
        (dict(n_basis=2), "n_basis=2 must be at least the number of components"),
        (dict(n_basis=0), "'n_basis' parameter of ELMJEC must be"),
        (dict(n_basis="all"), "'n_basis' parameter of ELMJEC must be"),
    ],
)
def test_bad_parameters(overlapping, params, match):
    with pytest.raises(ValueError, match=match):
        _model(**params).fit(overlapping[0])


def test_tol_stops_where_few_points_move_with_the_model_of_a_shorter_run(global_seed):
    """With ``tol`` the iterations end after the first that moves at most tol * N points,
    with beta and G updated to its partition: the fit ``tol=0`` gives with ``max_iter`` at
    that iteration."""
    X, _ = make_blobs(500, n_features=4, centers=4, cluster_std=3.5, random_state=global_seed)
    params = {**PARAMS, "max_iter": 20}
    full = _model(tol=0, **params).fit(X)
    moved = [int(c) for c in full.history_["n_changed"][1:]]
    small = sorted({c for c in moved if c > 0})
    if len(moved) < 2 or not small:
        pytest.skip(f"the iterations end too soon to stop earlier: {moved}")
    tol = small[0] / len(X)
    stop = next(i + 1 for i, c in enumerate(moved) if c <= tol * len(X))
    assert stop < full.n_iter_
    early = _model(tol=tol, **params).fit(X)
    capped = _model(tol=0, **{**params, "max_iter": stop}).fit(X)
    assert early.n_iter_ == stop
    assert [int(c) for c in early.history_["n_changed"][1:]] == moved[:stop]
    np.testing.assert_array_equal(early.labels_, capped.labels_)
    np.testing.assert_array_equal(early.output_weights_, capped.output_weights_)
    np.testing.assert_array_equal(early.cluster_centers_, capped.cluster_centers_)


@pytest.mark.parametrize(
    "X,err,match",
    [
        (np.array([[0.0, np.nan]] * 20), ValueError, "NaN or infinity"),
        (np.zeros(20), ValueError, "must be 2-D"),
        (np.zeros((0, 3)), ValueError, "is empty"),
        (np.array([["a", "b"]] * 20), TypeError, "must hold numbers"),
    ],
)
def test_bad_input(X, err, match):
    with pytest.raises(err, match=match):
        _model().fit(X)


def test_predict_before_fit_and_wrong_features(overlapping):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        _model().predict(overlapping[0])
    m = _model(max_iter=1).fit(overlapping[0])
    with pytest.raises(ValueError, match="X has 3 features, but ELMJEC is expecting 4 features"):
        m.predict(overlapping[0][:, :3])
