"""A well-behaved plugin: one activation and one algorithm, both from public building blocks."""

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import KMeans

import elmscale
from elmscale.hidden import RandomHiddenLayer, activation, fit_scaling
from elmscale.utils import as_row_chunked, check_features


@activation("additive")
def cube(Z):
    """z ** 3, in place."""
    Z **= 3
    return Z


class ToyELMKMeans(ClusterMixin, BaseEstimator):
    """k-means on H for small NumPy data (H computed on the client: a toy, not a model)."""

    def __init__(self, n_clusters=3, *, n_hidden=20, activation="sigmoid", random_state=None):
        self.n_clusters = n_clusters
        self.n_hidden = n_hidden
        self.activation = activation
        self.random_state = random_state

    def fit(self, X, y=None):
        Xd, was_dask = as_row_chunked(X, n_hidden=self.n_hidden)
        self.n_features_in_ = Xd.shape[1]
        offset, scale = fit_scaling(Xd, "standard")
        self.hidden_layer_ = RandomHiddenLayer.draw(
            Xd.shape[1],
            self.n_hidden,
            elmscale.registry.resolve("activation", self.activation, "activation"),
            self.random_state,
            offset=offset,
            scale=scale,
        )
        H = self.hidden_layer_.transform(Xd).compute()  # a toy: small data only
        self.kmeans_ = KMeans(self.n_clusters, n_init=2, random_state=0).fit(H)
        labels = self.kmeans_.labels_
        self.labels_ = da.from_array(labels, chunks=Xd.chunks[0]) if was_dask else labels
        return self

    def predict(self, X):
        Xd, was_dask = as_row_chunked(X, n_hidden=self.n_hidden)
        check_features(Xd, self.n_features_in_)
        labels = Xd.map_blocks(
            lambda b: self.kmeans_.predict(self.hidden_layer_(b)),
            drop_axis=1,
            dtype=np.int32,
            meta=np.empty((0,), np.int32),
        )
        return labels if was_dask else labels.compute()


@elmscale.hookimpl
def register_activations(register):
    register("cube", cube, description="z ** 3")


@elmscale.hookimpl
def register_algorithms(register):
    register("toy-elm-kmeans", ToyELMKMeans, aliases=("toy",), description="k-means on H")
