"""
SS-ELM with few labels
======================

With ten labelled digits per class, :class:`~elmscale.SSELM` uses the unlabelled points too: a
manifold term over the kNN graph of all points pulls its decision function along the data. The
supervised :class:`~elmscale.ELMClassifier` sees only the labelled rows. Both are scored on the
points whose labels they were not given.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

import elmscale

X, y = load_digits(return_X_y=True)
rng = np.random.RandomState(0)


def keep_labels(y, per_class):
    """y with all but ``per_class`` random labels of each class replaced by -1 (unlabelled)."""
    keep = np.concatenate(
        [rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in np.unique(y)]
    )
    partial = np.full_like(y, -1)
    partial[keep] = y[keep]
    return partial


def both_scores(per_class):
    """Accuracy on the unlabelled digits of SS-ELM (all points) and ELM (labelled points)."""
    partial = keep_labels(y, per_class)
    labelled, unlabelled = partial >= 0, partial == -1
    ss = elmscale.SSELM(n_hidden=1000, random_state=0).fit(X, partial)
    sup = elmscale.ELMClassifier(n_hidden=1000, random_state=0).fit(X[labelled], y[labelled])
    return [(m.predict(X[unlabelled]) == y[unlabelled]).mean() for m in (ss, sup)]


ss_acc, sup_acc = both_scores(10)
print(f"10 labels per class: SS-ELM {ss_acc:.3f}, ELM on the labelled rows {sup_acc:.3f}")

# %%
# How the advantage changes with the number of labels per class.
per_class = [2, 5, 10, 20, 40]
scores = np.array([both_scores(n) for n in per_class])

fig, ax = plt.subplots(figsize=(6, 4))
for column, name in enumerate(["SS-ELM", "ELM (labelled rows only)"]):
    ax.plot(per_class, scores[:, column], "o-", label=name)
ax.set_xscale("log")
ax.set_xticks(per_class, [str(n) for n in per_class])
ax.set_xlabel("labelled digits per class")
ax.set_ylabel("accuracy on the unlabelled digits")
ax.legend()
fig.tight_layout()
