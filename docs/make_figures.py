"""Draw the README's picture with elmscale.plot (run from the repository root):

    python docs/make_figures.py        # writes docs/assets/quickstart.png

Left: the US-ELM embedding of scikit-learn's digits (its ten dimensions projected onto the
plane of the cluster centres), coloured by cluster; right: TUMK-ELM's loss (eq. 10) and kernel weights per iteration on
the wine data (the paper's Fig. 4).
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from sklearn.datasets import load_digits, load_wine  # noqa: E402

import elmscale  # noqa: E402
from elmscale import plot  # noqa: E402

OUT = Path(__file__).parent / "assets" / "quickstart.png"

if __name__ == "__main__":
    X, _ = load_digits(return_X_y=True)
    uselm = elmscale.USELM(n_clusters=10, random_state=0).fit(X)
    W, _ = load_wine(return_X_y=True)
    tumk = elmscale.TUMKELM(n_clusters=3, random_state=0).fit(W)

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    plot.embedding(uselm, X, ax=left)
    plot.history(tumk, ax=right)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=100)
    print(f"wrote {OUT}")
