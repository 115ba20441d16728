"""
The kNN graph for other libraries
=================================

:class:`~elmscale.KNNGraphTransformer` builds elmscale's kNN graph (on the Dask workers when a
client is active) and returns it in the form of scikit-learn's ``KNeighborsTransformer``:
row *i* holds *i* itself at distance 0, then its nearest neighbours, and by default (made
symmetric) also the points that have *i* among theirs. Here one graph of the digits feeds
three libraries that take a precomputed neighbours graph: scikit-learn's
``SpectralClustering`` and ``HDBSCAN``, and umap-learn; in a pipeline, ``make_pipeline(
KNNGraphTransformer(n_neighbors=10), HDBSCAN(metric="precomputed"))`` does the same.
"""

import warnings

import matplotlib.pyplot as plt
from sklearn.cluster import HDBSCAN, SpectralClustering
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score

from elmscale.neighbors import KNNGraphTransformer, knn_arrays

X, y = load_digits(return_X_y=True)
G = KNNGraphTransformer(n_neighbors=10).fit_transform(X)
print(repr(G))

# %%
# Spectral clustering
# -------------------
# ``affinity="precomputed_nearest_neighbors"`` keeps the ``n_neighbors`` nearest entries of each
# row (the point itself among them: the kNN graph, which the symmetric graph contains) and
# symmetrises: the same graph as scikit-learn's ``affinity="nearest_neighbors"`` builds from
# X, so the partition is the same.
spectral = SpectralClustering(
    n_clusters=10, affinity="precomputed_nearest_neighbors", n_neighbors=10, random_state=0
).fit_predict(G)
reference = SpectralClustering(
    n_clusters=10, affinity="nearest_neighbors", n_neighbors=10, random_state=0
).fit_predict(X)
print(f"same partition as scikit-learn's own: ARI {adjusted_rand_score(reference, spectral):.3f}")
print(f"against the digits: ARI {adjusted_rand_score(y, spectral):.3f}")

# %%
# HDBSCAN
# -------
# scikit-learn's HDBSCAN takes a sparse distance matrix that is symmetric (as the graph is:
# every edge found in either direction, at its distance) and connected; 10 neighbours connect
# the digits' graph.
hdb = HDBSCAN(metric="precomputed", min_samples=3, min_cluster_size=20, copy=True)
hdb = hdb.fit_predict(G)
clustered = hdb >= 0
print(f"HDBSCAN: {hdb.max() + 1} clusters, {1 - clustered.mean():.0%} of the points left as noise")
agreement = adjusted_rand_score(y[clustered], hdb[clustered])
print(f"against the digits, clustered points: ARI {agreement:.3f}")

# %%
# UMAP
# ----
# umap-learn's ``metric="precomputed"`` would take ``G`` itself (it, too, wants it symmetric);
# to keep X, it takes the neighbour lists as arrays: :func:`~elmscale.neighbors.knn_arrays`
# reads them off the directed graph (``symmetric=False``; 11 columns: the point and its 10
# neighbours, as UMAP's own search gives them). Without a search index UMAP warns that
# ``transform`` of new points is unavailable.
import umap  # noqa: E402

directed = KNNGraphTransformer(n_neighbors=10, symmetric=False).fit_transform(X)
indices, distances = knn_arrays(directed)
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="precomputed_knn\\[2\\]")
    warnings.filterwarnings("ignore", message="n_jobs value")
    embedding = umap.UMAP(
        n_neighbors=indices.shape[1], precomputed_knn=(indices, distances, None), random_state=0
    ).fit_transform(X)

fig, axes = plt.subplots(1, 3, figsize=(14, 4.3))
for ax, labels, title in zip(
    axes,
    [spectral, hdb, y],
    ["SpectralClustering on the graph", "HDBSCAN on the graph", "the true digits"],
    strict=True,
):
    noise = labels < 0  # HDBSCAN's unclustered points, in grey
    ax.scatter(*embedding[noise].T, c="0.8", s=4)
    ax.scatter(*embedding[~noise].T, c=labels[~noise], cmap="tab10", s=4)
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
fig.suptitle("UMAP of the digits from elmscale's kNN graph, coloured three ways (noise in grey)")
fig.tight_layout()
