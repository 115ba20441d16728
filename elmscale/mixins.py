"""Mixins that give an estimator written on :class:`elmscale.BaseELM` a group of parameters
with the steps that read them.

BaseELM itself reads only its own parameters (``n_hidden``, ``activation``, ``scaling``,
``cache``, ``random_state``, listed in ``BaseELM._parameter_constraints``) and checks
``n_clusters <= n_samples`` when ``__init__`` has an ``n_clusters``. Every other parameter a
step of the template reads comes with a mixin, which declares its constraints (merge them
into ``_parameter_constraints``) and the step:

- :class:`GraphMixin`: ``graph``, ``n_neighbors``, ``weights``, ``sigma``, ``normalized``,
  read by ``build_graph``;
- :class:`DataNodesMixin`: ``rbf_fraction``, ``rbf_width``, ``data_nodes``, read by
  ``draw_hidden_layer`` through ``data_node_params``.

:class:`EmbeddingClusterMixin` gives an estimator that embeds its rows and clusters them the
methods that follow (``transform``, ``predict``, ``fit_transform``, ``score``, and the
embedding's ``get_feature_names_out`` with ``set_output``), as scikit-learn's ``_BaseKMeans``
holds them once for its k-means estimators. Put the mixins left of ``BaseELM`` in the class's
bases.
"""

from numbers import Integral, Real

from sklearn.base import ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from . import registry
from .cluster import assign_nearest, negative_sse
from .graph import WEIGHTS, knn_graph, resolve_backend
from .utils._random import draw_seed
from .validation import HasMethods, Interval, Registered, StrOptions


class EmbeddingClusterMixin(ClusterMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin):
    """``transform``, ``predict``, ``fit_transform`` and ``score`` of an estimator whose fit
    embeds the rows (``embedding_``) and clusters them (``labels_``, ``cluster_centers_``).

    What differs between such estimators are hooks:

    - :meth:`embed_rows` (required): the lazy embedding of validated rows, the map
      ``transform`` applies;
    - :meth:`label_rows` (optional): the clusters ``predict`` gives validated rows (by
      default :meth:`label_embedding` of their embedding);
    - :meth:`label_embedding` (optional): the clusters of rows given their embedding, for
      ``predict`` and ``score`` alike (the nearest of ``cluster_centers_`` by default);
    - :meth:`to_cluster_space` (optional): the embedding in the space where
      ``cluster_centers_`` live (the identity by default; unit rows for an estimator that
      clusters the directions of its embedding);
    - ``_n_features_out`` (optional): the embedding's width, by default the columns of
      ``output_weights_``; ``get_feature_names_out`` names the columns ``"<classname>0"``,
      ``"<classname>1"``...

    ``predict`` gives each row the nearest of ``cluster_centers_``; ``score`` is minus the
    sum of squared distances to it (``KMeans.score``). An estimator with another assignment
    rule gives it in :meth:`label_embedding`, and both follow it.
    """

    def embed_rows(self, Xd):
        """Hook: the embedding of the rows of Xd (validated by ``validate_X``), lazy and
        chunked like Xd's rows (or NumPy for NumPy Xd)."""
        raise NotImplementedError(f"{type(self).__name__} must implement embed_rows(Xd)")

    def to_cluster_space(self, E):
        """Hook: the embedding E in the space of ``cluster_centers_`` (here E itself)."""
        return E

    def transform(self, X):
        """Embed X (seen or unseen rows): :meth:`embed_rows` of the validated X, NumPy for
        NumPy input and lazy dask for dask input."""
        check_is_fitted(self)
        Xd, was_dask = self.validate_X(X, reset=False)
        return self.as_output(self.embed_rows(Xd), was_dask)

    def label_embedding(self, Xd, E):
        """Hook: the cluster of each row of Xd (validated by ``validate_X``) given E, its
        embedding in :meth:`to_cluster_space` (NumPy or lazy dask, as E). None, the
        default, stands for the nearest of ``cluster_centers_``: ``predict`` computes it and
        ``score`` takes the distance to it (``KMeans.score``). An estimator that assigns
        rows by another rule returns its labels, which ``predict`` gives and ``score``
        measures the distances to ``cluster_centers_`` with; Xd is there for a rule that
        reads the rows themselves."""
        return None

    def label_rows(self, Xd):
        """Hook: the clusters of the rows of Xd (validated by ``validate_X``), lazy for
        dask Xd: :meth:`label_embedding` of their embedding (in :meth:`to_cluster_space`),
        by default the index of each row's nearest cluster centre."""
        E = self.to_cluster_space(self.embed_rows(Xd))
        labels = self.label_embedding(Xd, E)
        if labels is not None:
            return labels
        return assign_nearest(E, self.cluster_centers_)

    def predict(self, X):
        """The cluster of each row of X (:meth:`label_rows` of the validated X), NumPy for
        NumPy input and lazy dask for dask input."""
        check_is_fitted(self, "cluster_centers_")
        Xd, was_dask = self.validate_X(X, reset=False)
        return self.as_output(self.label_rows(Xd), was_dask)

    def fit_transform(self, X, y=None):
        """Fit and return the training embedding (``embedding_``)."""
        return self.fit(X).embedding_

    def score(self, X, y=None):
        """Opposite of the k-means objective of X in the embedding: ``-sum ||e(x) - c||^2``
        over the points, e(x) the embedding (``transform``, in :meth:`to_cluster_space`) and
        c the cluster centre :meth:`label_embedding` assigns x, by default the nearest (as
        ``KMeans.score``; higher is better). X is embedded once. ``y`` is ignored."""
        check_is_fitted(self, "cluster_centers_")
        Xd, was_dask = self.validate_X(X, reset=False)
        E = self.to_cluster_space(self.as_output(self.embed_rows(Xd), was_dask))
        return negative_sse(E, self.cluster_centers_, self.label_embedding(Xd, E))

    @property
    def _n_features_out(self):
        return self.output_weights_.shape[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags


class GraphMixin:
    """The kNN graph parameters and :meth:`build_graph`.

    ``graph`` ("auto", a registered graph backend or a callable), ``n_neighbors``,
    ``weights`` ("binary", "heat" or "fuzzy"), ``sigma`` (heat-kernel width or None) and
    ``normalized`` (the normalised Laplacian), as in :func:`elmscale.graph.knn_graph`.
    """

    #: Constraints of the graph parameters: merge them into ``_parameter_constraints``.
    _graph_constraints = {
        "graph": [StrOptions({"auto"}), Registered("graph"), callable],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "weights": [StrOptions(set(WEIGHTS))],
        "sigma": [Interval(Real, 0, None, closed="neither"), None],
        "normalized": ["boolean"],
    }

    def build_graph(self, Xd, rng, *, n_neighbors=None, order="auto"):
        """The kNN graph of the scaled rows of Xd from the graph parameters (``graph="auto"``:
        exact search up to 10,000 rows, the distributed cell search above, resolved here in
        the plugin registry); an integer seed for an approximate backend is drawn from
        ``rng``. No recall estimate and no directed lists kept
        (:meth:`~elmscale.graph.KNNGraph.release_lists`): nothing in a fit reads them."""
        n_neighbors = self.n_neighbors if n_neighbors is None else n_neighbors
        name = resolve_backend(self.graph, Xd.shape[0])
        layer = self.hidden_layer_
        return knn_graph(
            Xd,
            n_neighbors,
            backend=registry.resolve("graph", name, "graph"),
            weights=self.weights,
            sigma=self.sigma,
            normalized=self.normalized,
            random_state=draw_seed(rng),
            order=order,
            scaling=(layer.offset, layer.scale),
            estimate_recall=False,  # the estimators do not read it
        ).release_lists()


class DataNodesMixin:
    """Hidden nodes fitted on a sample of data rows: ``round(rbf_fraction * n_hidden)`` of the
    ``n_hidden`` nodes, of the family ``data_nodes`` (a name registered through
    ``register_hidden_layers`` or a :class:`elmscale.hidden.NodeFamily`; by default
    ``"gaussian-rows"``, Gaussians centred on data rows of width ``rbf_width`` times the
    median distance between the centres; :func:`elmscale.hidden.draw_mixed_layer`). An
    estimator without a ``data_nodes`` parameter gets ``"gaussian-rows"``."""

    #: Constraints of the data-node parameters: merge them into ``_parameter_constraints``.
    _data_node_constraints = {
        "rbf_fraction": [Interval(Real, 0, 1, closed="both")],
        "rbf_width": [Interval(Real, 0, None, closed="neither")],
        "data_nodes": [Registered("hidden"), HasMethods(["fit", "transform"])],
    }

    def data_node_params(self):
        """``(rbf_fraction, rbf_width, data_nodes)``, read by ``BaseELM.draw_hidden_layer``."""
        return self.rbf_fraction, self.rbf_width, getattr(self, "data_nodes", "gaussian-rows")


__all__ = [
    "DataNodesMixin",
    "EmbeddingClusterMixin",
    "GraphMixin",
]
