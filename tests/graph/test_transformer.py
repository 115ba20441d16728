"""KNNGraphTransformer: elmscale's kNN graph in KNeighborsTransformer's form, for other
libraries."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.cluster import HDBSCAN, KMeans, SpectralClustering
from sklearn.datasets import load_digits, make_blobs
from sklearn.exceptions import EfficiencyWarning
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.cluster import contingency_matrix
from sklearn.neighbors import KNeighborsTransformer
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

import elmscale
from elmscale.graph import knn_graph
from elmscale.neighbors import KNNGraphTransformer, knn_arrays


def _assert_same_graph(G, S):
    """Same rows, same columns in the same (neighbour) order, same values."""
    assert sp.issparse(G) and G.format == "csr" and G.shape == S.shape
    np.testing.assert_array_equal(G.indptr, S.indptr)
    np.testing.assert_array_equal(G.indices, S.indices)
    np.testing.assert_allclose(G.data, S.data, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["distance", "connectivity"])
@pytest.mark.parametrize("k", [1, 7])
def test_equals_kneighbors_transformer(blobs, mode, k):
    """fit_transform and fit().transform() give scikit-learn's own graph, entry for entry
    (the point itself first, at distance 0, then its neighbours nearest first)."""
    X, _ = blobs
    S = KNeighborsTransformer(n_neighbors=k, mode=mode).fit_transform(X)
    directed = KNNGraphTransformer(n_neighbors=k, mode=mode, symmetric=False)
    _assert_same_graph(directed.fit_transform(X), S)
    _assert_same_graph(directed.fit(X).transform(X), S)


def test_transform_of_new_points_searches_the_training_data(blobs):
    X, _ = blobs
    train, new = X[:200], X[200:]
    S = KNeighborsTransformer(n_neighbors=6).fit(train).transform(new)
    G = KNNGraphTransformer(n_neighbors=6, symmetric=False).fit(train).transform(new)
    assert G.shape == (40, 200)
    _assert_same_graph(G, S)


@pytest.mark.parametrize("backend", ["exact", "cells"])
def test_graph_is_knn_graph_indices(blobs_dask, backend):
    """The rows hold the point itself, then exactly knn_graph's directed lists (the graph the
    estimators build), on the same data and seed."""
    Xd, _ = blobs_dask
    k = 8
    G = KNNGraphTransformer(
        n_neighbors=k, symmetric=False, graph=backend, random_state=3
    ).fit_transform(Xd)
    assert isinstance(G, da.Array) and G.chunks[0] == Xd.chunks[0]
    assert all(sp.issparse(G.blocks[i].compute()) for i in range(G.numblocks[0]))
    ref = knn_graph(Xd, k, backend=backend, random_state=3, order=False)
    indices, distances = knn_arrays(G.compute())
    np.testing.assert_array_equal(indices[:, 0], np.arange(Xd.shape[0]))
    np.testing.assert_array_equal(indices[:, 1:], ref.indices.compute())
    np.testing.assert_allclose(distances[:, 1:], ref.distances.compute())


@pytest.mark.distributed
def test_on_a_distributed_cluster_the_graph_is_the_same(dask_client, blobs, blobs_dask):
    """Built by the workers of a multi-process LocalCluster, the graph is the in-process one."""
    X, _ = blobs
    Xd, _ = blobs_dask
    G = KNNGraphTransformer(n_neighbors=6, graph="cells", random_state=0).fit_transform(Xd)
    local = KNNGraphTransformer(n_neighbors=6, graph="cells", random_state=0)
    with dask.config.set(scheduler="sync"):
        expected = local.fit_transform(Xd).compute()
    _assert_same_graph(G.compute(), expected)


def test_dask_input_gives_lazy_blocks_equal_to_numpy(blobs, blobs_dask):
    X, _ = blobs
    Xd, _ = blobs_dask
    G = KNNGraphTransformer(n_neighbors=5).fit(Xd).transform(Xd[:100])
    assert isinstance(G, da.Array) and G.shape == (100, 240)
    _assert_same_graph(G.compute(), KNNGraphTransformer(n_neighbors=5).fit(X).transform(X[:100]))


def test_spectral_clustering_matches_scikit_learns_on_digits():
    """SpectralClustering on the precomputed graph finds the partition of scikit-learn's own
    10-NN SpectralClustering (which builds the graph itself), point for point. The cluster
    numbers may differ: digits' integer pixels tie many distances, and tied neighbours are
    ordered differently (as they are between scikit-learn's two paths)."""
    X, _ = load_digits(return_X_y=True)
    ours = SpectralClustering(
        n_clusters=10, affinity="precomputed_nearest_neighbors", n_neighbors=10, random_state=0
    ).fit_predict(KNNGraphTransformer(n_neighbors=10, graph="exact").fit_transform(X))
    theirs = SpectralClustering(
        n_clusters=10, affinity="nearest_neighbors", n_neighbors=10, random_state=0
    ).fit_predict(X)
    table = contingency_matrix(ours, theirs)
    assert table.shape == (10, 10)
    assert ((table > 0).sum(axis=0) == 1).all() and ((table > 0).sum(axis=1) == 1).all()


def test_hdbscan_in_a_pipeline_agrees_with_hdbscan_on_the_data():
    """HDBSCAN(metric="precomputed") after the transformer in a pipeline (it refuses a graph
    that is not symmetric, as KNeighborsTransformer's is not) finds nearly the clusters it
    finds from all pairwise distances."""
    X, _ = make_blobs(600, centers=[(0, 0), (5, 0), (0, 5)], random_state=0)
    pipe = make_pipeline(
        KNNGraphTransformer(n_neighbors=15), HDBSCAN(metric="precomputed", min_samples=5, copy=True)
    )
    ours = pipe.fit_predict(X)
    dense = HDBSCAN(min_samples=5, copy=True).fit_predict(X)
    assert adjusted_rand_score(ours, dense) > 0.85
    with pytest.raises(ValueError, match="symmetric"):
        make_pipeline(
            KNeighborsTransformer(n_neighbors=15), HDBSCAN(metric="precomputed", copy=True)
        ).fit(X)


def test_spectral_clustering_in_a_pipeline_matches_scikit_learns(blobs):
    """SpectralClustering keeps each row's n_neighbors nearest entries: on the union graph
    those are the kNN graph's, so the pipeline gives scikit-learn's own partition, without
    the warning of rows not sorted by distance."""
    X, _ = blobs
    params = dict(n_clusters=3, n_neighbors=10, random_state=0)
    pipe = make_pipeline(
        KNNGraphTransformer(n_neighbors=10),
        SpectralClustering(affinity="precomputed_nearest_neighbors", **params),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", EfficiencyWarning)
        ours = pipe.fit_predict(X)
    theirs = SpectralClustering(affinity="nearest_neighbors", **params).fit_predict(X)
    assert adjusted_rand_score(ours, theirs) == 1.0


@pytest.mark.slow
@pytest.mark.xdist_group("numba")  # one process compiles pynndescent and umap-learn once
def test_umap_in_a_pipeline_takes_the_graph(blobs):
    """umap-learn's precomputed path (which refuses a sparse graph that is not symmetric)
    embeds the graph in a pipeline, from the kNN lists the graph holds."""
    umap = pytest.importorskip("umap")
    X, y = blobs
    pipe = make_pipeline(
        KNNGraphTransformer(n_neighbors=15),
        umap.UMAP(metric="precomputed", n_neighbors=15, random_state=0, n_jobs=1),
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="using precomputed metric")
        warnings.filterwarnings("ignore", message="n_jobs value")
        embedding = pipe.fit_transform(X)
    assert embedding.shape == (240, 2)
    indices, _ = knn_arrays(KNNGraphTransformer(n_neighbors=14, symmetric=False).fit_transform(X))
    np.testing.assert_array_equal(np.sort(pipe[-1]._knn_indices, axis=1), np.sort(indices, axis=1))
    assert adjusted_rand_score(y, KMeans(3, n_init=5, random_state=0).fit_predict(embedding)) == 1


def _union(D):
    """The union of the directed graph D and its transpose, distances kept, diagonal explicit."""
    U = sp.csr_matrix(D.maximum(D.T))
    U.setdiag(0)  # the point itself, at distance 0
    return U


@pytest.mark.parametrize("mode", ["distance", "connectivity"])
def test_symmetric_graph_is_the_union_of_both_directions(blobs, blobs_dask, mode):
    """Each row holds the point itself (explicit 0), its neighbours and the points that have
    it among theirs, nearest first (ties by column): exactly symmetric, equal for NumPy and
    dask input (chunks exchange their reverse edges)."""
    X, _ = blobs
    Xd, _ = blobs_dask
    others = 6 if mode == "distance" else 5  # connectivity counts the point itself
    D = KNNGraphTransformer(n_neighbors=others, symmetric=False).fit_transform(X)
    U = _union(D)
    S = KNNGraphTransformer(n_neighbors=6, mode=mode).fit_transform(X)
    Sd = KNNGraphTransformer(n_neighbors=6, mode=mode).fit_transform(Xd)
    assert isinstance(Sd, da.Array) and Sd.chunks[0] == Xd.chunks[0]
    _assert_same_graph(Sd.compute(), S)
    # before any scipy operation, which sorts the rows' columns in place
    for i in range(0, 240, 7):  # nearest first
        cols, d = S.indices[S.indptr[i] : S.indptr[i + 1]], U[i].toarray().ravel()
        assert list(cols) == sorted(cols, key=lambda j: (d[j], j))
        if mode == "distance":
            np.testing.assert_array_equal(S.data[S.indptr[i] : S.indptr[i + 1]], d[cols])
    assert S.format == "csr" and (S != S.T).nnz == 0 and S.nnz == U.nnz
    np.testing.assert_array_equal(S.diagonal(), 0 if mode == "distance" else 1)
    assert ((S != 0) + sp.eye(240) > 0).toarray().tolist() == (
        (U + sp.eye(240)).toarray() > 0
    ).tolist()


def test_symmetric_transform_of_the_training_data_is_fit_transform(blobs, blobs_dask):
    """transform adds the training points whose radius reaches the query: the training
    data's rows are fit_transform's (NumPy and dask), new points' rows are the brute-force
    ones, and the transform of a subset is the subset of the rows."""
    X, _ = blobs
    Xd, _ = blobs_dask
    model = KNNGraphTransformer(n_neighbors=5).fit(X)
    S = KNNGraphTransformer(n_neighbors=5).fit_transform(X)
    _assert_same_graph(model.transform(X), S)
    _assert_same_graph(KNNGraphTransformer(n_neighbors=5).fit(Xd).transform(Xd).compute(), S)
    _assert_same_graph(model.transform(X[50:90]), S[50:90])
    new = X[:30] + 0.3
    dist = np.sqrt(((new[:, None] - X[None]) ** 2).sum(-1))
    radius = np.sort(np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)), axis=1)[:, 5]
    np.testing.assert_allclose(model.radius_, radius)  # to the 5th other point
    expected = (dist <= radius[None]) | (dist <= np.sort(dist, axis=1)[:, 5:6])
    np.testing.assert_array_equal(model.transform(new).toarray() > 0, expected)


@pytest.mark.slow
@pytest.mark.xdist_group("numba")  # one process compiles pynndescent and umap-learn once
def test_knn_arrays_feed_umap(blobs):
    umap = pytest.importorskip("umap")
    X, _ = blobs
    graph = KNNGraphTransformer(n_neighbors=9, symmetric=False).fit_transform(X)
    indices, distances = knn_arrays(graph)
    assert indices.shape == (240, 10)
    with pytest.warns(UserWarning, match="knn_search_index"):
        model = umap.UMAP(
            n_neighbors=10, precomputed_knn=(indices, distances, None), random_state=0, n_jobs=1
        ).fit(X)
    np.testing.assert_array_equal(model._knn_indices, indices)
    assert model.embedding_.shape == (240, 2)


def test_knn_arrays_needs_rows_of_equal_length():
    with pytest.raises(ValueError, match="same number of entries in every row"):
        knn_arrays(sp.csr_matrix(np.eye(3) + np.eye(3, k=1)))


def test_bad_input_is_named(blobs):
    X, _ = blobs
    with pytest.raises(ValueError, match="n_neighbors=240 with mode='distance'"):
        KNNGraphTransformer(n_neighbors=240).fit(X)
    with pytest.raises(ValueError, match="'mode' parameter"):
        KNNGraphTransformer(mode="weights").fit(X)
    with pytest.raises(ValueError, match="'graph' parameter .* registered graph name"):
        KNNGraphTransformer(graph="nope").fit_transform(X)


def test_exported_from_the_package():
    assert elmscale.KNNGraphTransformer is KNNGraphTransformer


@parametrize_with_checks([KNNGraphTransformer(n_neighbors=3)])
def test_sklearn_contract(estimator, check):
    check(estimator)


def test_recall_estimate_is_reported_by_the_cell_search():
    """The cells search reports its sampled recall on the transformer and on knn_graph's
    graph; an exact search reports none."""
    from elmscale.graph import knn_graph

    X, _ = make_blobs(3000, n_features=8, centers=6, random_state=0)
    cells = KNNGraphTransformer(n_neighbors=5, graph="cells", random_state=0)
    cells.fit_transform(X)
    assert 0.5 <= cells.recall_estimate_ <= 1.0
    exact = KNNGraphTransformer(n_neighbors=5, graph="exact").fit(X)
    assert exact.recall_estimate_ is None
    graph = knn_graph(da.from_array(X, chunks=1000), 5, backend="cells", random_state=0)
    assert 0.5 <= graph.recall_estimate_ <= 1.0
    assert knn_graph(da.from_array(X, chunks=1000), 5, backend="exact").recall_estimate_ is None


def test_the_transformer_searches_for_its_target_recall():
    """Above 10,000 rows ``graph="auto"`` searches for ``target_recall`` as knn_graph does
    (the estimate reached); ``target_recall=None`` is the estimators' fixed search, the
    graph of ``graph="cells"``; a bad target is refused by name."""
    X = np.random.default_rng(0).normal(size=(12_000, 30))  # cells cut most neighbourhoods
    default = KNNGraphTransformer(n_neighbors=10, symmetric=False, random_state=0)
    default.fit_transform(X)
    assert default.recall_estimate_ >= 0.98
    fixed = KNNGraphTransformer(n_neighbors=10, symmetric=False, target_recall=None, random_state=0)
    cells = KNNGraphTransformer(n_neighbors=10, symmetric=False, graph="cells", random_state=0)
    assert (fixed.fit_transform(X) != cells.fit_transform(X)).nnz == 0
    assert fixed.recall_estimate_ == cells.recall_estimate_ < default.recall_estimate_ - 0.2
    with pytest.raises(ValueError, match="'target_recall' parameter of KNNGraphTransformer"):
        KNNGraphTransformer(target_recall=2.0).fit(X[:50])


def test_a_graph_without_recall_estimate_is_the_same_graph(monkeypatch):
    """knn_graph(estimate_recall=False), as the estimators build their graphs, runs no exact
    search of the recall sample and gives the same graph; "auto" refinement, whose rounds
    the estimate decides, keeps it; the registered search itself is left as it was."""
    import elmscale.graph._cell_search as cell_search
    from elmscale import registry
    from elmscale.graph import CellSearch

    X, _ = make_blobs(3000, n_features=8, centers=6, random_state=0)
    Xd = da.from_array(X, chunks=1000)
    exact_searches = []
    real = cell_search.exact_sample_neighbours
    monkeypatch.setattr(
        cell_search,
        "exact_sample_neighbours",
        lambda *a: exact_searches.append(1) or real(*a),
    )
    estimated = knn_graph(Xd, 5, backend="cells", random_state=0)
    assert len(exact_searches) == 1
    skipped = knn_graph(Xd, 5, backend="cells", random_state=0, estimate_recall=False)
    assert len(exact_searches) == 1 and skipped.recall_estimate_ is None
    for a, b in zip(
        dask.compute(estimated.indices, estimated.distances),
        dask.compute(skipped.indices, skipped.distances),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    assert registry.get("graph", "cells").recall_sample == 500
    auto = CellSearch(n_refine="auto")
    assert auto.without_recall_estimate() is auto
    knn_graph(Xd, 5, backend=auto, random_state=0, estimate_recall=False)
    assert len(exact_searches) == 2 and auto.recall_estimate_ is not None
    elmscale.USELM(n_clusters=6, graph="cells", n_hidden=50, random_state=0).fit(X)
    assert len(exact_searches) == 2  # the estimators do not read it
