"""elmscale.plot on the Agg backend: each function draws what the fitted model holds and
returns the Axes."""

import numpy as np
import pytest

mpl = pytest.importorskip("matplotlib")
mpl.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from elmscale import ELMJEC, EMMC, TUMKELM, USELM, plot  # noqa: E402

KERNELS = ["linear", ("rbf", {"width": 1.0}), ("polynomial", {"degree": 2})]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture
def uselm(blobs):
    return USELM(n_clusters=3, n_hidden=40, graph="exact", random_state=0).fit(blobs[0])


def test_embedding_draws_the_transform_coloured_by_predict(blobs, uselm):
    X, y = blobs
    ax = plot.embedding(uselm, X, projection="columns")
    (points,) = ax.collections
    np.testing.assert_allclose(points.get_offsets(), uselm.transform(X)[:, :2])
    np.testing.assert_array_equal(points.get_array(), uselm.predict(X))
    assert "240 points" in ax.get_title()


def test_embedding_with_given_labels_subsampled_on_given_axes(blobs, uselm):
    import dask.array as da

    X, y = blobs
    _, ax0 = plt.subplots()
    ax = plot.embedding(
        uselm,
        da.from_array(X, chunks=(70, 5)),
        labels=y,
        ax=ax0,
        max_points=100,
        projection="columns",
    )
    assert ax is ax0
    (points,) = ax.collections
    np.testing.assert_allclose(points.get_offsets(), uselm.transform(X[::3])[:, :2])
    np.testing.assert_array_equal(points.get_array(), y[::3])
    assert "80 of 240 points" in ax.get_title()


@pytest.fixture
def filtered(blobs):
    """A US-ELM whose fit filtered the rows: its transform searches the training rows."""
    model = USELM(n_clusters=3, n_hidden=40, graph="exact", smoothing=2, random_state=0)
    return model.fit(blobs[0])


def _no_search(monkeypatch, model):
    def searched(*args, **kwargs):
        raise AssertionError("the training rows were searched")

    for method in ("transform", "predict", "embed_rows", "label_rows"):
        monkeypatch.setattr(model, method, searched)


@pytest.mark.parametrize("as_dask", [False, True])
def test_embedding_of_the_training_data_reuses_the_fit(blobs, filtered, monkeypatch, as_dask):
    """The training data (NumPy, or a dask array of the same rows) is drawn from the fit's
    embedding_ and labels_ at the sampled rows: no search for rows whose embedding is known."""
    import dask.array as da

    X, _ = blobs
    assert filtered.reference_ is not None
    E, labels = filtered.embedding_, filtered.labels_
    _no_search(monkeypatch, filtered)
    data = da.from_array(X, chunks=(70, 5)) if as_dask else X
    ax = plot.embedding(filtered, data, projection="columns", max_points=100)
    (points,) = ax.collections
    np.testing.assert_array_equal(points.get_offsets(), E[::3, :2])
    np.testing.assert_array_equal(points.get_array(), labels[::3])
    assert "80 of 240 points" in ax.get_title()
    ax = plot.embedding(filtered, projection="columns")  # X omitted: the training data
    np.testing.assert_array_equal(ax.collections[0].get_offsets(), E[:, :2])


def test_embedding_of_a_dask_fit_computes_only_the_drawn_rows(blobs):
    import dask.array as da

    X, _ = blobs
    Xd = da.from_array(X, chunks=(70, 5))
    model = USELM(n_clusters=3, n_hidden=40, graph="exact", smoothing=2, random_state=0).fit(Xd)
    assert isinstance(model.embedding_, da.Array)
    ax = plot.embedding(model, Xd, projection="columns", max_points=100)
    expected = model.embedding_.compute()[::3, :2]
    np.testing.assert_array_equal(ax.collections[0].get_offsets(), expected)


def test_embedding_of_other_rows_still_embeds_them(blobs, filtered):
    """Rows that are not the training rows (here moved a little) are embedded by transform."""
    X, _ = blobs
    moved = X + 0.01
    ax = plot.embedding(filtered, moved, projection="columns")
    np.testing.assert_allclose(ax.collections[0].get_offsets(), filtered.transform(moved)[:, :2])


def test_embedding_of_emmc_uses_its_outputs(blobs):
    X, _ = blobs
    model = EMMC(n_clusters=3, n_hidden=30, random_state=0).fit(X)
    ax = plot.embedding(model, X, projection="columns")
    np.testing.assert_allclose(ax.collections[0].get_offsets(), model.decision_function(X)[:, :2])


class _Hidden:
    """A stand-in model whose 8-column embedding hides 4 well-separated blobs in columns
    3-8: its first two columns are noise of the same spread for every blob."""

    def __init__(self, seed):
        from sklearn.datasets import make_blobs

        rng = np.random.RandomState(seed)
        Z, self.y = make_blobs(
            400, n_features=6, centers=4, center_box=(-20, 20), random_state=seed
        )
        self.E = np.column_stack([rng.normal(scale=5.0, size=(400, 2)), Z])

    def transform(self, X):
        return self.E[X[:, 0].astype(int)]

    def predict(self, X):
        return self.y[X[:, 0].astype(int)]


def _separation(P, y):
    """Smallest distance between two blobs' 2-D centres over the largest blob spread."""
    centres = np.array([P[y == c].mean(axis=0) for c in np.unique(y)])
    spread = max(
        np.linalg.norm(P[y == c] - centres[i], axis=1).std()
        + np.linalg.norm(P[y == c] - centres[i], axis=1).mean()
        for i, c in enumerate(np.unique(y))
    )
    gaps = np.linalg.norm(centres[:, None] - centres[None], axis=2)
    return gaps[np.triu_indices(len(centres), 1)].min() / spread


@pytest.mark.parametrize("projection", ["centres", "pca"])
def test_projection_separates_blobs_the_first_columns_hide(global_seed, projection):
    model = _Hidden(global_seed)
    X = np.arange(400, dtype=float)[:, None]
    separated = plot.embedding(model, X, projection=projection).collections[0].get_offsets()
    hidden = plot.embedding(model, X, projection="columns").collections[0].get_offsets()
    assert _separation(np.asarray(separated), model.y) > 2
    assert _separation(np.asarray(hidden), model.y) < 1


def test_centres_projection_spreads_two_clusters_on_two_axes(global_seed):
    """With two clusters the centres span one direction; the second is the points' spread."""
    from elmscale.plot import project

    model = _Hidden(global_seed)
    E, y = model.E, (model.y > 1).astype(int)
    P, names = project(E, y, "centres")
    assert P.shape == (400, 2) and np.linalg.matrix_rank(P) == 2
    assert names[0] == "between-cluster direction 1"


@pytest.mark.parametrize(
    "projection, xlabel", [("auto", "t-SNE 1"), ("centres", "between-cluster direction 1")]
)
def test_embedding_has_a_legend_per_cluster(blobs, uselm, projection, xlabel):
    X, _ = blobs
    ax = plot.embedding(uselm, X, projection=projection)
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "cluster"
    assert [t.get_text() for t in legend.get_texts()] == ["0", "1", "2"]
    assert ax.get_xlabel() == xlabel


@pytest.mark.parametrize("projection", ["auto", "centres"])
def test_given_labels_colour_the_plane_of_the_models_clusters(blobs, uselm, projection):
    X, y = blobs
    by_cluster = plot.embedding(uselm, X, projection=projection).collections[0].get_offsets()
    _, ax = plt.subplots()
    by_label = plot.embedding(uselm, X, labels=y[::-1], ax=ax, projection=projection)
    np.testing.assert_allclose(by_label.collections[0].get_offsets(), by_cluster)
    np.testing.assert_array_equal(by_label.collections[0].get_array(), y[::-1])


def test_default_layout_is_a_seeded_tsne_of_a_sample(blobs, uselm):
    """t-SNE of every 3rd row: finite 2-D points, the same figure for the same seed."""
    X, _ = blobs
    first = plot.embedding(uselm, X, max_points=100)
    _, ax = plt.subplots()
    again = plot.embedding(uselm, X, max_points=100, ax=ax)
    P = np.asarray(first.collections[0].get_offsets())
    assert P.shape == (80, 2) and np.isfinite(P).all()
    np.testing.assert_array_equal(P, again.collections[0].get_offsets())
    np.testing.assert_array_equal(first.collections[0].get_array(), uselm.predict(X[::3]))
    assert first.get_title() == "USELM embedding (80 of 240 points, t-SNE)"
    assert first.get_xlabel() == "t-SNE 1"


def test_auto_sample_size_depends_on_the_projection(monkeypatch):
    """``max_points="auto"`` draws fewer rows for a nonlinear layout than a projection."""
    model = _Hidden(0)
    X = np.arange(400, dtype=float)[:, None]
    monkeypatch.setitem(plot.MAX_POINTS, "layout", 50)
    monkeypatch.setitem(plot.MAX_POINTS, "linear", 200)
    assert len(plot.embedding(model, X).collections[0].get_offsets()) == 50
    assert len(plot.embedding(model, X, projection="pca").collections[0].get_offsets()) == 200


def test_tsne_layout_separates_digit_clusters_a_plane_overlaps():
    """On scikit-learn's digits the US-ELM embedding has ten columns: the t-SNE layout keeps
    the digits apart (silhouette by true digit well above zero) where the best linear plane
    overlaps them."""
    from sklearn.datasets import load_digits
    from sklearn.metrics import silhouette_score

    X, y = load_digits(return_X_y=True)
    model = USELM(n_clusters=10, random_state=0).fit(X)
    drawn = {}
    for projection in ("tsne", "centres", "pca"):
        _, ax = plt.subplots()
        plot.embedding(model, X, labels=y, projection=projection, max_points=600, ax=ax)
        drawn[projection] = silhouette_score(ax.collections[0].get_offsets(), y[::3])
    assert drawn["tsne"] > 0.3
    assert drawn["tsne"] > max(drawn["centres"], drawn["pca"]) + 0.25


def test_layout_of_very_few_rows_is_their_principal_plane():
    from elmscale.plot import layout, project

    E = np.random.RandomState(0).normal(size=(3, 5))
    np.testing.assert_allclose(layout(E)[0], project(E, None, "pca")[0])


@pytest.mark.slow  # umap-learn compiles with numba in every fresh process (tens of seconds)
@pytest.mark.xdist_group("numba")  # one process compiles pynndescent and umap-learn once
def test_umap_layout_is_seeded():
    pytest.importorskip("umap")
    from sklearn.datasets import make_blobs

    from elmscale.plot import layout

    E, _ = make_blobs(150, n_features=6, centers=3, random_state=0)
    P, names = layout(E, "umap", random_state=1)
    assert P.shape == (150, 2) and np.isfinite(P).all() and names == ("UMAP 1", "UMAP 2")
    np.testing.assert_array_equal(P, layout(E, "umap", random_state=1)[0])


def test_umap_without_umap_learn_names_the_package(monkeypatch):
    import sys

    from elmscale.plot import layout

    monkeypatch.setitem(sys.modules, "umap", None)
    with pytest.raises(ImportError, match="projection='umap' needs umap-learn"):
        layout(np.zeros((10, 3)), "umap")


def test_embedding_of_continuous_labels_has_a_colour_bar(blobs, uselm):
    X, _ = blobs
    ax = plot.embedding(uselm, X, labels=X[:, 0])
    assert ax.get_legend() is None
    assert len(ax.figure.axes) == 2  # the scatter's and the colour bar's


def test_embedding_rejects_an_unknown_projection(blobs, uselm):
    with pytest.raises(ValueError, match="projection must be one of"):
        plot.embedding(uselm, blobs[0], projection="isomap")


def test_history_of_elmjec_plots_objective_per_iteration(blobs):
    X, _ = blobs
    model = ELMJEC(n_clusters=3, n_hidden=40, graph="exact", n_restarts=3, random_state=0).fit(X)
    ax = plot.history(model)
    objective, kmeans = ax.get_lines()
    np.testing.assert_array_equal(objective.get_ydata(), model.history_["objective"])
    np.testing.assert_array_equal(kmeans.get_ydata(), model.history_["kmeans_objective"])


def test_history_of_tumkelm_plots_loss_and_kernel_weights(blobs):
    X, _ = blobs
    model = TUMKELM(n_clusters=3, kernels=KERNELS, random_state=0).fit(X)
    ax = plot.history(model)
    (loss,) = ax.get_lines()
    np.testing.assert_array_equal(loss.get_ydata(), model.history_)
    twin = [a for a in ax.figure.axes if a is not ax][0]
    drawn = np.array([line.get_ydata() for line in twin.get_lines()]).T
    np.testing.assert_array_equal(drawn, model.weights_history_)


def test_history_of_emmc_plots_changed_labels(blobs):
    X, _ = blobs
    model = EMMC(n_clusters=3, n_hidden=30, random_state=0).fit(X)
    changed = plot.history(model).get_lines()[0].get_ydata()
    assert list(changed) == [r["n_changed"] for r in model.history_]


def test_timings_draws_one_bar_per_stage(uselm):
    ax = plot.timings(uselm)
    widths = [p.get_width() for p in ax.patches]
    assert widths == list(uselm.timings_.values())
    assert [t.get_text() for t in ax.get_yticklabels()] == list(uselm.timings_)


def test_unfitted_or_unsupported_models_raise(uselm):
    with pytest.raises(ValueError, match="no history_"):
        plot.history(uselm)
    with pytest.raises(ValueError, match="no timings_"):
        plot.timings(TUMKELM())
