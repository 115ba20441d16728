"""US-ELM end to end: paths agree, output follows input, bad input gets a clear error."""

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.linalg as sla
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score
from sklearn.neighbors import NearestNeighbors

import elmscale
from elmscale import USELM
from elmscale.exceptions import UnknownPluginError

from .._reference import hidden, knn_laplacian


def _model(**kw):
    params = dict(n_clusters=3, n_hidden=60, graph="exact", n_neighbors=8, lam=0.1, random_state=0)
    params.update(kw)
    return USELM(**params)


def test_embedding_solves_eq20_against_dense_numpy(blobs):
    """beta from the chunked engine equals a dense eigen-solve of eq. 20 on the full H, L."""
    X, _ = blobs
    m = _model(n_components=2, scaling=None, normalized=False).fit(X)
    H = hidden(X, m.hidden_layer_)
    L = knn_laplacian(X, 8)
    A = np.eye(60) + 0.1 * H.T @ L @ H
    mu, V = sla.eigh(H.T @ H, A)
    V = V[:, ::-1][:, 1:3]
    V /= np.linalg.norm(H @ V, axis=0)
    for j in range(2):  # same direction up to sign
        c = abs(V[:, j] @ m.output_weights_[:, j]) / (
            np.linalg.norm(V[:, j]) * np.linalg.norm(m.output_weights_[:, j])
        )
        assert c == pytest.approx(1, abs=1e-8)
    np.testing.assert_allclose(np.linalg.norm(m.embedding_, axis=0), 1, rtol=1e-8)  # eq. 22
    np.testing.assert_allclose(m.eigenvalues_, 1 / mu[::-1][1:3], rtol=1e-8)


def test_primal_and_dual_agree(blobs):
    X, y = blobs
    X = X[:100]
    primal = _model(n_hidden=150, solver="primal").fit(X)
    dual = _model(n_hidden=150, solver="dual").fit(X)
    assert adjusted_rand_score(primal.labels_, dual.labels_) == 1.0
    np.testing.assert_allclose(primal.eigenvalues_, dual.eigenvalues_, rtol=1e-6)


def test_auto_solver_picks_dual_when_hidden_exceeds_samples(blobs):
    X, _ = blobs
    m = _model(n_hidden=300).fit(X)
    assert m._solver == "dual"
    assert _model(n_hidden=50).fit(X)._solver == "primal"


def test_clusters_blobs(blobs):
    X, y = blobs
    m = _model().fit(X)
    assert adjusted_rand_score(y, m.labels_) > 0.95
    assert m.labels_.dtype == np.int64 and m.labels_.shape == (240,)


def test_transform_reproduces_training_embedding_and_predicts_new_points(blobs):
    X, y = blobs
    m = _model().fit(X[:200])
    np.testing.assert_allclose(m.transform(X[:200]), m.embedding_, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(m.predict(X[:200]), m.labels_)
    pred = m.predict(X[200:])
    ref = m.labels_[np.argmin(((X[200:, None] - X[None, :200]) ** 2).sum(-1), axis=1)]
    assert (pred == ref).mean() > 0.95  # new points land with their nearest training point


@pytest.mark.parametrize("chunks", [(240,), (70, 90, 80), (30,) * 8])
def test_result_does_not_depend_on_chunking(blobs, chunks):
    X, _ = blobs
    ref = _model().fit(X)
    m = _model().fit(da.from_array(X, chunks=(chunks, 5)))
    assert isinstance(m.embedding_, da.Array) and isinstance(m.labels_, da.Array)
    np.testing.assert_allclose(m.output_weights_, ref.output_weights_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(m.embedding_.compute(), ref.embedding_, rtol=1e-7, atol=1e-9)
    np.testing.assert_array_equal(m.labels_.compute(), ref.labels_)


def test_output_follows_input(blobs_dask):
    Xd, _ = blobs_dask
    m = _model().fit(Xd)
    assert isinstance(m.transform(Xd), da.Array)
    assert isinstance(m.predict(Xd), da.Array)
    assert isinstance(m.transform(Xd.compute()), np.ndarray)
    assert isinstance(m.predict(Xd.compute()), np.ndarray)


@pytest.mark.distributed
def test_fit_on_distributed_cluster_matches_local(blobs, dask_client):
    X, _ = blobs
    Xd = da.from_array(X, chunks=((70, 90, 80), 5))
    m = _model().fit(Xd)
    assert len(dask_client.scheduler_info()["workers"]) == 2
    labels = m.labels_.compute()
    with dask.config.set(scheduler="sync"):
        ref = _model().fit(Xd)
    np.testing.assert_allclose(m.output_weights_, ref.output_weights_, rtol=1e-7, atol=1e-9)
    assert adjusted_rand_score(labels, ref.labels_.compute()) == 1.0


def test_make_builds_by_registered_name():
    m = elmscale.make("us-elm", n_clusters=4, lam=2.0)
    assert isinstance(m, USELM) and m.n_clusters == 4 and m.lam == 2.0
    assert clone(m).get_params() == m.get_params()


def test_input_is_not_modified(blobs):
    X, _ = blobs
    X = np.asfortranarray(X)
    before = X.copy()
    _model(scaling="standard").fit(X).predict(X)
    np.testing.assert_array_equal(X, before)


@pytest.mark.parametrize(
    "X,err,match",
    [
        (np.array([[0.0, np.nan]] * 20), ValueError, "NaN or infinity"),
        (np.array([[0.0, np.inf]] * 20), ValueError, "NaN or infinity"),
        (np.zeros(20), ValueError, "must be 2-D"),
        (np.zeros((4, 5, 2)), ValueError, "must be 2-D"),
        (np.zeros((0, 3)), ValueError, "0 sample"),
        (np.array([["a", "b"]] * 20), TypeError, "must hold numbers"),
    ],
)
def test_bad_input(X, err, match):
    with pytest.raises(err, match=match):
        _model().fit(X)


def test_nan_in_dask_input_is_reported_at_compute(blobs):
    X, _ = blobs
    X = X.copy()
    X[100, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        _model().fit(da.from_array(X, chunks=(80, 5)))


@pytest.mark.parametrize(
    "params,match",
    [
        (dict(n_clusters=500), "n_clusters=500 must be <= n_samples=240"),
        (dict(n_components=60), "n_components=60 must be smaller than n_hidden=60"),
        (dict(n_neighbors=240), r"n_neighbors=240 must be in \[1, n_samples - 1\]"),
        (dict(activation="sigmod"), "activation.*sigmoid"),
        (dict(graph="annoy"), "graph.*exact.*pynndescent"),
        (dict(lam=-1.0), "lam"),
        (dict(weights="gauss"), "weights"),
        (dict(rbf_fraction=1.5), "rbf_fraction"),
        (dict(rbf_width=0.0), "rbf_width"),
        (dict(row_normalize="yes"), "row_normalize"),
    ],
)
def test_bad_parameters(blobs, params, match):
    with pytest.raises(ValueError, match=match):
        _model(**params).fit(blobs[0])


def test_unknown_activation_lists_registered_names(blobs):
    with pytest.raises(ValueError) as info:
        _model(activation="sigmod").fit(blobs[0])
    for name in elmscale.available("activation"):
        assert name in str(info.value)


def test_predict_with_wrong_number_of_features(blobs):
    m = _model().fit(blobs[0])
    with pytest.raises(ValueError, match="X has 4 features, but USELM is expecting 5 features"):
        m.predict(blobs[0][:, :4])


def test_callable_activation_and_gaussian_nodes(blobs):
    X, y = blobs
    for act in ("gaussian", "tanh", elmscale.hidden.relu):
        m = _model(activation=act, rbf_fraction=0.0).fit(X)
        assert adjusted_rand_score(y, m.labels_) > 0.9


def test_resolve_unknown_name_is_value_error():
    assert issubclass(UnknownPluginError, ValueError)


def test_reduce_exposes_the_graph_of_the_fit(blobs):
    """reduce(X).graph is the kNN graph the fit used: its Laplacian equals the dense one."""
    X, _ = blobs
    model = _model(scaling=None, normalized=False)
    reduction = model.reduce(X)
    np.testing.assert_allclose(
        reduction.graph.laplacian().toarray(), knn_laplacian(X, 8), atol=1e-12
    )
    fitted = model.solve(reduction)
    np.testing.assert_array_equal(
        fitted.labels_, _model(scaling=None, normalized=False).fit(X).labels_
    )


def test_data_rbf_layer_equals_dense_gaussians_and_eq20(blobs):
    """rbf_fraction=1: H is exp(-||x' - c||^2 / (w m)^2) with c rows of the scaled X and m
    their median distance, and beta solves eq. 20 on that H (dense NumPy)."""
    from scipy.spatial.distance import cdist, pdist

    X, _ = blobs
    m = _model(rbf_fraction=1.0, rbf_width=0.7, n_components=2, normalized=False).fit(X)
    layer = m.hidden_layer_
    Xs = (X - layer.offset) / layer.scale
    centres = layer.input_weights.T
    rows = [np.flatnonzero(np.all(np.isclose(Xs, c_), axis=1)) for c_ in centres]
    assert all(len(r) >= 1 for r in rows)  # every centre is a row of the scaled X
    width = 0.7 * np.median(pdist(centres))
    H = np.exp(-cdist(Xs, centres, "sqeuclidean") / width**2)
    np.testing.assert_allclose(hidden(X, layer), H, rtol=1e-10, atol=1e-12)
    L = knn_laplacian(Xs, 8)
    mu, V = sla.eigh(H.T @ H, np.eye(60) + 0.1 * H.T @ L @ H)
    V = V[:, ::-1][:, 1:3]
    for j in range(2):
        c = abs(V[:, j] @ m.output_weights_[:, j]) / (
            np.linalg.norm(V[:, j]) * np.linalg.norm(m.output_weights_[:, j])
        )
        assert c == pytest.approx(1, abs=1e-6)


def test_mixed_layer_puts_engine_nodes_first(blobs):
    X, _ = blobs
    m = _model(rbf_fraction=0.25).fit(X)
    kinds = [p.node for p in m.hidden_layer_.parts]
    sizes = [p.n_hidden for p in m.hidden_layer_.parts]
    assert kinds == ["additive", "rbf"] and sizes == [45, 15]


def test_kmeans_weighs_separate_starts_below_one_thousand_rows_and_above_one_sample():
    """Each of n_init starts its own fit (and the chooser's pick among them) under 1,000
    rows and where the rows outnumber one k-means sample; one fit's best start between."""
    from elmscale.algorithms._uselm import KMEANS_SAMPLE_ROWS, SMOOTHING_MIN_SAMPLES

    model = _model(n_init=7)
    assert model._kmeans_draws(SMOOTHING_MIN_SAMPLES - 1) == 7
    assert model._kmeans_draws(SMOOTHING_MIN_SAMPLES) == 1
    assert model._kmeans_draws(KMEANS_SAMPLE_ROWS) == 1
    assert model._kmeans_draws(KMEANS_SAMPLE_ROWS + 1) == 7


@pytest.mark.parametrize("as_dask", [False, True])
def test_row_normalize_runs_kmeans_on_unit_rows(blobs, as_dask, monkeypatch):
    """k-means sees the unit-length rows of embedding_ (which itself stays unscaled);
    labels_ and predict are the nearest centres in that scaled space."""
    import elmscale.algorithms._uselm as mod

    X, _ = blobs
    seen = []
    real = mod.refined_starts

    def spy(E, *a, **k):
        seen.append(np.asarray(E.compute()))
        assert k["sample_draws"] == k["n_init"]  # under 1,000 rows: each start its own fit
        return real(E, *a, **k)

    monkeypatch.setattr(mod, "refined_starts", spy)
    ref = _model(n_components=3).fit(X)
    m = _model(n_components=3, row_normalize=True, refine_rounds=0).fit(
        da.from_array(X, chunks=(70, 5)) if as_dask else X
    )
    E = np.asarray(m.embedding_)
    np.testing.assert_allclose(E, ref.embedding_, rtol=1e-7, atol=1e-9)
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    np.testing.assert_allclose(seen[-1], U, rtol=1e-12)  # k-means sees exactly U
    labels = np.asarray(m.labels_)
    d2 = ((U[:, None, :] - m.cluster_centers_[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(labels, d2.argmin(1))
    np.testing.assert_array_equal(np.asarray(m.predict(X)), labels)
    assert np.all(np.linalg.norm(m.cluster_centers_, axis=1) <= 1 + 1e-9)  # means of unit rows


@pytest.mark.parametrize("as_dask", [False, True])
def test_refine_rounds_vote_on_the_fit_graph(as_dask):
    """labels_ are k-means's labels after refine_rounds rounds of neighbour-majority votes on
    the fit's graph (a dense reference), and cluster_centers_ the means of the unit rows of
    the refined clusters."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(240, n_features=5, centers=3, cluster_std=3.0, random_state=1)
    Xin = da.from_array(X, chunks=(70, 5)) if as_dask else X
    # one k-means start: where there are several, the votes also weigh in the choice of start
    plain = _model(n_components=3, refine_rounds=0, n_init=1).fit(Xin)
    m = _model(n_components=3, refine_rounds=2, n_init=1).fit(Xin)
    L = _model(n_components=3).reduce(X).graph.laplacian().toarray()
    A = ((np.diag(np.diag(L)) - L) != 0).astype(float)
    labels = np.asarray(plain.labels_)
    for _ in range(2):
        Y = np.eye(m.n_clusters)[labels]
        labels = np.argmax(A @ Y + 1.5 * Y, axis=1)
    np.testing.assert_array_equal(np.asarray(m.labels_), labels)
    assert (labels != np.asarray(plain.labels_)).any()  # the votes moved some rows
    E = np.asarray(m.embedding_)
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    means = np.array([U[labels == j].mean(0) for j in range(m.n_clusters)])
    np.testing.assert_allclose(m.cluster_centers_, means, rtol=1e-10, atol=1e-12)
    assert m.inertia_ == pytest.approx(((U - means[labels]) ** 2).sum(), rel=1e-8)
    # "auto": no votes below 1,000 rows, where a cluster can be as small as a neighbourhood
    auto = _model(n_components=3).fit(Xin)
    np.testing.assert_array_equal(np.asarray(auto.labels_), np.asarray(plain.labels_))


@pytest.mark.parametrize("smoothing", ["auto", 0])
def test_refine_rounds_auto_votes_where_the_fit_filtered_its_rows(smoothing, monkeypatch):
    """From 1,000 rows "auto" votes 3 rounds on each candidate partition when the fit
    filtered its rows and none when it did not (the votes average over the neighbourhoods
    the filter does), and gives the labels of that explicit setting."""
    from sklearn.datasets import make_blobs

    import elmscale.algorithms._uselm as mod

    X, _ = make_blobs(1200, n_features=5, centers=3, cluster_std=3.0, random_state=1)
    rounds, real = [], mod.refine_labels

    def spy(graph, labels, k, n_rounds):
        rounds.append(n_rounds)
        return real(graph, labels, k, n_rounds)

    monkeypatch.setattr(mod, "refine_labels", spy)
    auto = _model(n_components=3, smoothing=smoothing).fit(X)
    assert (auto.smoothing_steps_ > 0) == (smoothing == "auto")
    expected = 3 if smoothing == "auto" else 0
    assert rounds == [expected]  # one call for the candidates of every width
    fixed = _model(n_components=3, smoothing=smoothing, refine_rounds=expected).fit(X)
    np.testing.assert_array_equal(auto.labels_, fixed.labels_)


def test_unit_rows_numpy_and_dask_agree_and_keep_zero_rows():
    from elmscale.algorithms._embedding import unit_rows

    E = np.array([[3.0, 4.0], [0.0, 0.0], [-1.0, 0.0]])
    np.testing.assert_allclose(unit_rows(E), [[0.6, 0.8], [0, 0], [-1, 0]])
    np.testing.assert_allclose(unit_rows(da.from_array(E, chunks=(2, 2))).compute(), unit_rows(E))


def _dense_smoothed_embedding(X, L, layer, steps, lam, n_components):
    """Eq. 20 solved densely on H of ((I + P) / 2)^steps X, P = W with unit row sums."""
    W = np.diag(np.diag(L)) - L
    np.fill_diagonal(W, 0.0)
    P = W / W.sum(1, keepdims=True)
    for _ in range(steps):
        X = 0.5 * (X + P @ X)
    H = hidden(X, layer)
    mu, V = sla.eigh(H.T @ H, np.eye(H.shape[1]) + lam * H.T @ L @ H)
    V = V[:, ::-1][:, 1 : n_components + 1]
    V /= np.linalg.norm(H @ V, axis=0)
    return H @ V


def _assert_same_columns(E, expected):
    for j in range(expected.shape[1]):  # same column up to sign
        c = abs(expected[:, j] @ np.asarray(E)[:, j])
        assert c == pytest.approx(1, abs=1e-8)


def test_smoothing_solves_eq20_on_the_filtered_rows(rng):
    """smoothing=t: the embedding is eq. 20 solved densely on H of ((I + P) / 2)^t X (P the
    graph's row-normalised W), for NumPy input and for dask input in uneven chunks alike."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(400, n_features=5, centers=3, random_state=4)
    params = dict(n_components=2, scaling=None, normalized=False, smoothing=3)
    m = _model(**params).fit(X)
    assert m.smoothing_steps_ == 3
    L = knn_laplacian(X, 8)
    _assert_same_columns(m.embedding_, _dense_smoothed_embedding(X, L, m.hidden_layer_, 3, 0.1, 2))
    md = _model(**params).fit(da.from_array(X, chunks=((90, 150, 160), (5,))))
    # the filter's steps run in float32: other chunkings sum its products in another order
    scale = np.abs(m.embedding_).max()
    np.testing.assert_allclose(np.asarray(md.embedding_), m.embedding_, atol=1e-6 * scale)
    np.testing.assert_array_equal(np.asarray(md.labels_), m.labels_)
    # a row's embedding is the mean of embedding_ over its 8 nearest training rows
    new = X[:50] + 0.1 * rng.standard_normal((50, 5))
    _, idx = NearestNeighbors(n_neighbors=8).fit(X).kneighbors(new)
    np.testing.assert_allclose(m.transform(new), m.embedding_[idx].mean(axis=1), rtol=1e-10)
    np.testing.assert_allclose(md.transform(new), m.transform(new), atol=1e-6 * scale)


def test_smoothing_on_locality_ordered_rows(monkeypatch):
    """On a graph that holds the rows in its own locality order, the filtered rows stay in
    that order and only the embedding moves back: row i of ``embedding_`` is still the
    dense eq. 20 solution at input row i, and ``labels_`` follow the input's chunks."""
    from sklearn.datasets import make_blobs

    import elmscale.graph._build as build

    monkeypatch.setattr(build, "ORDER_MIN_SAMPLES", 0)
    X, _ = make_blobs(1200, n_features=5, centers=3, random_state=4)
    Xd = da.from_array(X, chunks=((250, 350, 300, 300), (5,)))
    params = dict(graph="cells", n_components=2, scaling=None, normalized=False, smoothing=3)
    m = _model(**params).fit(Xd)
    graph = _model(**params).reduce(Xd).graph
    assert graph.order is not None
    positions = graph.order.apply(da.arange(1200, chunks=Xd.chunks[0])).compute()
    assert not np.array_equal(positions, np.arange(1200))
    L = graph.laplacian().toarray()
    E_graph = _dense_smoothed_embedding(X[positions], L, m.hidden_layer_, 3, 0.1, 2)
    expected = np.empty_like(E_graph)
    expected[positions] = E_graph
    _assert_same_columns(m.embedding_.compute(), expected)
    assert m.embedding_.chunks[0] == m.labels_.chunks[0] == Xd.chunks[0]


def test_auto_smoothing_follows_size_and_retained_variance():
    """ "auto" filters from 1,000 rows on, unless the filter would keep less than a quarter of
    the variance (noise-like neighbourhoods); an explicit step count is always taken."""
    from sklearn.datasets import make_blobs

    structured, _ = make_blobs(1200, n_features=5, centers=4, random_state=0)
    noise = np.random.default_rng(0).standard_normal((1200, 30))
    assert _model().fit(structured).smoothing_steps_ == 8
    assert _model().fit(structured[:999]).smoothing_steps_ == 0
    assert _model().fit(noise).smoothing_steps_ == 0
    assert _model(smoothing=2).fit(noise).smoothing_steps_ == 2
    with pytest.raises(ValueError, match="smoothing"):
        _model(smoothing=-1).fit(structured)


@pytest.mark.parametrize("chunks", [(1797,), (600, 600, 597)])
def test_numpy_and_dask_input_give_identical_labels(chunks):
    """One k-means path for both inputs: the same labels and centres, not just the same
    partition up to renaming, on data where k-means has several near-equal optima."""
    from sklearn.datasets import load_digits

    X, _ = load_digits(return_X_y=True)
    ref = USELM(n_clusters=10, n_hidden=200, random_state=0).fit(X)
    m = USELM(n_clusters=10, n_hidden=200, random_state=0).fit(
        da.from_array(X, chunks=(chunks, 64))
    )
    np.testing.assert_array_equal(m.labels_.compute(), ref.labels_)
    # the graph filter runs in float32: the centres agree to its rounding
    scale = np.abs(ref.cluster_centers_).max()
    np.testing.assert_allclose(m.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-6 * scale)
    np.testing.assert_array_equal(ref.predict(X), m.predict(X))


def test_the_choosers_scores_are_those_of_the_partitions_kept(monkeypatch):
    """n_components="auto" compares the normalised cut and modularity that k-means's chooser
    computed for the partition it kept (no second pass): they are that partition's."""
    from sklearn.datasets import make_blobs

    from elmscale.algorithms import _uselm
    from elmscale.graph import cut_and_modularity

    kept = []
    call = _uselm._LowestCutAmongBest.choose_among

    def recording(self, runs):
        best = call(self, runs)
        kept.extend((self.graph, v, s) for v, s in zip(self.voted, self.scores, strict=True))
        return best

    monkeypatch.setattr(_uselm._LowestCutAmongBest, "choose_among", recording)
    X, _ = make_blobs(600, n_features=6, centers=4, cluster_std=4.0, random_state=2)
    USELM(n_clusters=4, n_hidden=80, random_state=0).fit(X)
    assert len(kept) == 2  # one per candidate width, weighed in one pass
    for graph, voted, (cut, q) in kept:
        again = cut_and_modularity(graph, voted, 4)
        assert (cut, q) == pytest.approx(again, rel=1e-12)


def test_auto_components_keep_narrow_only_when_cut_and_modularity_agree(monkeypatch):
    """n_components="auto": k-means in n_clusters and in ceil(1.5 n_clusters) dimensions of
    one solve, and the labels, embedding and weights of the narrow partition when it has
    both the lower normalised cut and the higher modularity on the fit's graph (or a cut
    below half the wide one's, next test), of the wide one otherwise; a given n_components
    is used as it is."""
    from sklearn.datasets import make_blobs

    from elmscale.algorithms._uselm import SEPARATE_PIECES_CUT, _narrow_or_wide
    from elmscale.graph import modularity, normalized_cut

    assert _narrow_or_wide([0.5, 0.6], [0.8, 0.7], 4) == 0
    assert _narrow_or_wide([0.2, 0.6], [0.7, 0.8], 4) == 1  # the scores disagree: wide
    assert _narrow_or_wide([0.6, 0.5], [0.8, 0.7], 4) == 1
    # clusters that lose 0.5 % of their edges: the graph's separate pieces, narrow
    assert _narrow_or_wide([0.02, 0.06], [0.7, 0.8], 4) == 0
    assert _narrow_or_wide([0.02, 0.01], [0.8, 0.7], 4) == 1  # unless the wide cuts less

    X, _ = make_blobs(600, n_features=6, centers=4, cluster_std=4.0, random_state=2)
    params = dict(n_clusters=4, n_hidden=80, random_state=0)
    auto = USELM(**params).fit(X)
    fixed = {n: USELM(n_components=n, **params).fit(X) for n in (4, 6)}
    graph = USELM(**params).reduce(X).graph
    labels = {n: da.from_array(m.labels_, chunks=600) for n, m in fixed.items()}
    cut = {n: normalized_cut(graph, lab, 4) for n, lab in labels.items()}
    q = {n: modularity(graph, lab, 4) for n, lab in labels.items()}
    narrow = cut[4] < cut[6] and (q[4] > q[6] or cut[4] < SEPARATE_PIECES_CUT * 4)
    best = 4 if narrow else 6
    assert auto.n_components_ == best and auto.embedding_.shape == (600, best)
    np.testing.assert_array_equal(auto.labels_, fixed[best].labels_)
    np.testing.assert_allclose(auto.embedding_, fixed[best].embedding_, atol=1e-8)
    np.testing.assert_allclose(auto.output_weights_, fixed[best].output_weights_, atol=1e-8)
    np.testing.assert_array_equal(auto.predict(X), fixed[best].predict(X))

    def refuse(*args):
        raise AssertionError("a given n_components is not chosen")

    monkeypatch.setattr("elmscale.algorithms._uselm._narrow_or_wide", refuse)
    assert USELM(n_components=6, **params).fit(X).n_components_ == 6
    assert USELM(n_clusters=None, n_hidden=80, random_state=0).fit(X).n_components_ == 2


def test_auto_components_follow_separate_pieces_of_unequal_size():
    """Where the graph falls into separate pieces of unequal size, the partition into those
    pieces cuts no edge, yet the modularity prefers one that cuts through the largest piece
    and merges the two small ones (three volumes closer to equal: a lower null term). The
    rule keeps the partition that follows the pieces."""
    from sklearn.datasets import make_blobs

    from elmscale.algorithms._uselm import _narrow_or_wide
    from elmscale.graph import cut_and_modularity, knn_graph

    centers = [[0, 0], [40, 0], [0, 40]]
    X, y = make_blobs([600, 100, 100], centers=centers, cluster_std=1.0, random_state=0)
    graph = knn_graph(da.from_array(X, chunks=200), 10, backend="exact", random_state=0)
    split = np.where(y == 0, (X[:, 0] > np.median(X[y == 0, 0])).astype(int), 2)
    parts = [da.from_array(p, chunks=200) for p in (y, split)]
    cut, q = cut_and_modularity(graph, parts, 3)
    assert cut[0] == 0 < cut[1] and q[0] < q[1]
    assert _narrow_or_wide(cut, q, 3) == 0


@pytest.fixture(scope="module")
def digits_fits():
    """USELM's defaults on scikit-learn's digits (filtered: 1,797 rows), on NumPy and on dask
    input in uneven chunks: ``(X, numpy_model, dask_model)``."""
    from sklearn.datasets import load_digits

    X, _ = load_digits(return_X_y=True)
    params = dict(n_clusters=10, random_state=0)
    # the threaded scheduler whatever ran before: the dask fit's persisted embedding must not
    # live on a cluster that another test's client may close
    with dask.config.set(scheduler="threads"):
        m = USELM(**params).fit(X)
        md = USELM(**params).fit(da.from_array(X, chunks=((600, 600, 597), 64)))
    return X, m, md


def test_predict_on_training_rows_gives_labels_back(digits_fits):
    """The fit clusters filtered rows; transform and predict extend what it computed to new
    rows from their nearest training rows and give it back on the training rows themselves
    (fit_transform equals fit then transform, fit_predict equals fit then predict), for NumPy
    and dask fits; a row moved off its training row gets its neighbourhood's vote, which on
    digits mostly still agrees."""
    X, m, md = digits_fits
    assert m.smoothing_steps_ == 8 and m.reference_.rows.shape == X.shape
    assert m.refine_rounds_ == 3
    for model in (m, md):
        np.testing.assert_array_equal(np.asarray(model.predict(X)), np.asarray(model.labels_))
        np.testing.assert_allclose(
            np.asarray(model.transform(X)), np.asarray(model.embedding_), rtol=1e-12
        )
    moved = X + 1e-3 * np.random.RandomState(0).standard_normal(X.shape)
    assert (m.predict(moved) == m.labels_).mean() >= 0.99
    E = m.transform(moved)
    raw = m.project(da.from_array(X), m.output_weights_).compute()  # h(x) beta, unfiltered
    assert np.linalg.norm(E - m.embedding_) < 0.5 * np.linalg.norm(raw - m.embedding_)


def test_fuzzy_weights_fit_alike_on_any_chunking_and_predict_their_labels():
    """With UMAP's fuzzy memberships as edge weights, a NumPy and a dask fit in uneven chunks
    give the same labels and embedding (each row's memberships come from its own list), and
    predict and transform give them back on the training rows (a new row is weighed by its
    own memberships among its nearest training rows)."""
    from sklearn.datasets import load_digits

    X, _ = load_digits(return_X_y=True)
    params = dict(n_clusters=10, weights="fuzzy", random_state=0)
    with dask.config.set(scheduler="threads"):
        m = USELM(**params).fit(X)
        md = USELM(**params).fit(da.from_array(X, chunks=((500, 700, 597), 64)))
    np.testing.assert_array_equal(np.asarray(md.labels_), m.labels_)
    # the filter's steps run in float32: other chunkings sum its products in another order
    scale = np.abs(m.embedding_).max()
    np.testing.assert_allclose(np.asarray(md.embedding_), m.embedding_, atol=1e-5 * scale)
    assert m.smoothing_steps_ == 8
    np.testing.assert_array_equal(m.predict(X), m.labels_)
    np.testing.assert_allclose(m.transform(X), m.embedding_, rtol=1e-12)


def test_predict_numpy_and_dask_agree(digits_fits):
    """The out-of-sample step gives the same labels for NumPy and dask fits and queries."""
    X, m, md = digits_fits
    assert md.reference_.rows.shape == m.reference_.rows.shape
    Xq = X[::3] + 0.5
    expected = m.predict(Xq)
    np.testing.assert_array_equal(md.predict(Xq), expected)
    out = md.predict(da.from_array(Xq, chunks=(100, 64)))
    assert isinstance(out, da.Array)
    np.testing.assert_array_equal(out.compute(), expected)


def test_pickled_model_still_predicts(digits_fits):
    """A fitted model keeps what predict needs (the training rows, the embedding) through a
    pickle round trip, from NumPy and from dask fits."""
    import pickle

    X, m, md = digits_fits
    for model in (m, md):
        loaded = pickle.loads(pickle.dumps(model))
        np.testing.assert_array_equal(
            np.asarray(loaded.predict(X[:300])), np.asarray(model.predict(X[:300]))
        )


def test_predict_casts_the_fits_vote_among_the_nearest_training_rows(digits_fits):
    """After votes refined labels_, predict is the same vote among a row's nearest training
    rows (each one vote for its label in labels_) and its own nearest centre (OWN_VOTE):
    a dense NumPy reference with scikit-learn's exact neighbours gives the same labels."""
    from elmscale.algorithms._embedding import unit_rows
    from elmscale.cluster import nearest_center
    from elmscale.cluster._refine import OWN_VOTE
    from elmscale.hidden import apply_scaling

    X, m, _ = digits_fits
    Xq = X[::4] + 0.25
    layer = m.hidden_layer_
    Z, Zq = (apply_scaling(A, layer.offset, layer.scale) for A in (X, Xq))
    idx = NearestNeighbors(n_neighbors=m.n_neighbors).fit(Z).kneighbors(Zq)[1]
    votes = np.stack([np.bincount(m.labels_[i], minlength=10) for i in idx]).astype(float)
    E = m.transform(Xq)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    own = ((E[:, None, :] - m.cluster_centers_[None]) ** 2).sum(-1).argmin(1)
    votes[np.arange(len(Xq)), own] += OWN_VOTE
    expected = votes.argmax(1)
    np.testing.assert_array_equal(m.predict(Xq), expected)
    unvoted = USELM(n_clusters=10, random_state=0, refine_rounds=0).fit(X)
    assert unvoted.refine_rounds_ == 0
    np.testing.assert_array_equal(
        unvoted.predict(Xq),
        nearest_center(unit_rows(unvoted.transform(Xq)), unvoted.cluster_centers_),
    )


def test_kmeans_start_kept_is_the_lowest_cut_among_the_least_inertia(rng):
    """Of k-means's refined starts within INERTIA_MARGIN of the least inertia, USELM keeps
    the partition of lowest normalised cut after the votes; a start of more inertia than
    the margin is not a candidate, whatever its cut."""
    from sklearn.datasets import make_blobs

    from elmscale.algorithms import _uselm
    from elmscale.cluster import refine_labels
    from elmscale.graph import cut_and_modularity, knn_graph

    X, y = make_blobs(900, centers=3, cluster_std=0.5, random_state=0)
    Xd = da.from_array(X, chunks=300)
    graph = knn_graph(Xd, 8, backend="exact")
    merged = np.where(y == 2, 1, y)
    merged[(y == 0) & (X[:, 0] > np.median(X[y == 0, 0]))] = 2  # blob 0 split in two
    partitions = np.stack([merged, y, y], axis=1)

    def labels(indices):
        return da.from_array(partitions[:, indices], chunks=(300, -1))

    choose = _uselm._LowestCutAmongBest(graph, 3, rounds=2)
    margin = _uselm.INERTIA_MARGIN
    assert choose(np.array([100.0, 100.0 * (1 + margin / 2), 200.0]), labels) == 1
    expected = refine_labels(graph, da.from_array(y, chunks=300), 3, 2).compute()
    np.testing.assert_array_equal(choose.voted.compute(), expected)
    cut = cut_and_modularity(graph, [labels([0])[:, 0], labels([1])[:, 0]], 3)[0]
    assert cut[1] < cut[0]
    outside = _uselm._LowestCutAmongBest(graph, 3, rounds=2)
    assert outside(np.array([100.0, 100.0 * (1 + 2 * margin), 150.0]), labels) == 0
    merged_voted = refine_labels(graph, da.from_array(merged, chunks=300), 3, 2).compute()
    np.testing.assert_array_equal(outside.voted.compute(), merged_voted)
