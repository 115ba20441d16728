"""Draw the README's and the user guide's pictures with elmscale.plot (run from the repository
root):

    python docs/make_figures.py        # writes docs/assets/quickstart.png and
                                       # docs/assets/mnist10k_embedding.png

quickstart.png, left: the US-ELM embedding of scikit-learn's digits (its ten dimensions laid
out by t-SNE), coloured by cluster; right: TUMK-ELM's loss (eq. 10) and kernel weights per
iteration on the wine data (the paper's Fig. 4).

mnist10k_embedding.png: USELM(n_clusters=10, random_state=0) on the first 10,000 MNIST digits
(pixels / 255), the default t-SNE layout of every fourth (2,500) coloured by cluster and by
the true digit, and the plane of the cluster centres (``projection="centres"``) to compare.
It needs ``mnist.npz`` (arrays X, y) in ``$ELMSCALE_DATASETS`` or ``../shared/datasets`` and
is skipped without it.
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits, load_wine  # noqa: E402

import elmscale  # noqa: E402
from elmscale import plot  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import DATASETS_DIR  # noqa: E402

ASSETS = Path(__file__).parent / "assets"
MNIST = DATASETS_DIR / "mnist.npz"


def save(fig, name):
    ASSETS.mkdir(parents=True, exist_ok=True)
    fig.savefig(ASSETS / name, dpi=100)
    print(f"wrote {ASSETS / name}")


def quickstart():
    X, _ = load_digits(return_X_y=True)
    uselm = elmscale.USELM(n_clusters=10, random_state=0).fit(X)
    W, _ = load_wine(return_X_y=True)
    tumk = elmscale.TUMKELM(n_clusters=3, random_state=0).fit(W)

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    plot.embedding(uselm, X, ax=left)
    plot.history(tumk, ax=right)
    fig.tight_layout()
    save(fig, "quickstart.png")


def mnist10k():
    if not MNIST.exists():
        print(f"skipped mnist10k_embedding.png: no {MNIST}")
        return
    with np.load(MNIST) as data:
        X = data["X"][:10_000].astype(np.float64) / 255.0
        y = data["y"][:10_000].astype(np.int64)
    model = elmscale.USELM(n_clusters=10, random_state=0).fit(X)
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(19, 5))
    plot.embedding(model, X, ax=left)
    plot.embedding(model, X, labels=y, ax=middle)
    middle.set_title("the same points coloured by the true digit")
    plot.embedding(model, X, labels=y, projection="centres", ax=right)
    right.set_title('true digits, projection="centres" (10,000 points)')
    fig.tight_layout()
    save(fig, "mnist10k_embedding.png")


if __name__ == "__main__":
    quickstart()
    mnist10k()
