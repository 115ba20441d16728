"""
US-ELM on handwritten digits
============================

:class:`~elmscale.USELM` clusters scikit-learn's 1,797 handwritten digits without their labels:
a kNN graph, one pass for ``H^T H`` and ``H^T L H``, a small eigenproblem, then k-means on the
embedding. The labels are used only to score the clusters, after matching each cluster to a
digit (the Hungarian method), and to compare with scikit-learn's KMeans on the raw pixels.
"""

import matplotlib.pyplot as plt
import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.metrics.cluster import contingency_matrix

import elmscale
from elmscale import plot

X, y = load_digits(return_X_y=True)
model = elmscale.USELM(n_clusters=10, random_state=0).fit(X)


def matched_accuracy(truth, clusters):
    """Accuracy after mapping each cluster to one class, the best one-to-one mapping."""
    table = contingency_matrix(truth, clusters)
    rows, cols = linear_sum_assignment(-table)
    return table[rows, cols].sum() / len(truth)


kmeans = KMeans(n_clusters=10, n_init=10, random_state=0).fit_predict(X)
print(f"US-ELM accuracy {matched_accuracy(y, model.labels_):.3f}")
print(f"KMeans accuracy {matched_accuracy(y, kmeans):.3f}")
print("seconds per stage:", {k: round(v, 2) for k, v in model.timings_.items()})

# %%
# The embedding has ten columns (``n_components``). :func:`elmscale.plot.embedding` lays it
# out in the plane with t-SNE (``projection="centres"`` draws the linear plane in which the
# clusters' centres lie furthest apart instead); left coloured by the clusters found, right by
# the true digits.
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
plot.embedding(model, X, ax=left)
plot.embedding(model, X, labels=y, ax=right)
right.set_title("coloured by the true digit")
fig.tight_layout()

# %%
# The embedding extends to points the model has not seen: ``transform`` maps them through the
# same hidden layer and output weights, and ``predict`` assigns the nearest cluster centre.
new = X[:5] + np.random.RandomState(0).normal(scale=0.5, size=(5, X.shape[1]))
print("clusters of five perturbed digits:", model.predict(new))
