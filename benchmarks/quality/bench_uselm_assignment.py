"""USELM's last step compared: k-means on the embedding against spectral discretisations.

    python -m benchmarks.quality.bench_uselm_assignment --seeds 1
    python -m benchmarks.quality.bench_uselm_assignment --datasets mnist --seeds 1

For every set of bench_quality.py (``--datasets``; "mnist" is the whole MNIST-70k) and seed,
``USELM(n_clusters=c, random_state=seed)`` is fitted with its defaults, and its embedding
(``embedding_``) is assigned three ways, none using labels:

- ``kmeans``: the estimator's own ``labels_`` (k-means, 10 restarts, on the unit rows);
- ``discretize``: Yu and Shi's multiclass spectral discretisation (2003), the rotation of the
  unit rows nearest to a one-hot matrix, as scikit-learn's ``SpectralClustering(
  assign_labels="discretize")`` runs it;
- ``cluster_qr``: Damle, Minden and Ying's column-pivoted QR (2019), scikit-learn's
  ``assign_labels="cluster_qr"``.

Both come from scikit-learn's spectral clustering module (``sklearn.cluster._spectral``: they
have no public entry point outside ``SpectralClustering``). Prints one JSON line per fit and a
table of ACC (%) per set, with wins and losses against ``kmeans``.
"""

import argparse
import json
import time
import warnings
from collections import defaultdict

import numpy as np

from benchmarks._common import accuracy_table
from benchmarks.quality.bench_quality import load, score

DEFAULT_SETS = (
    "iris,wine,breast_cancer,digits,coil20,uspst,usps,orl,yale,yaleb,segment,ecoli,diabetes,"
    "g50c,ionosphere,ringnorm,frogs,mnist10k"
)
METHODS = ("kmeans", "discretize", "cluster_qr")


def assignments(model, seed):
    """Labels of a fitted USELM's embedding by each method of ``METHODS``."""
    from sklearn.cluster._spectral import cluster_qr, discretize

    E = np.asarray(model.embedding_, dtype=np.float64)
    unit = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    return {
        "kmeans": np.asarray(model.labels_),
        "discretize": discretize(unit, random_state=seed),
        "cluster_qr": cluster_qr(unit),
    }


def main(argv=None):
    from elmscale import USELM

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", default=DEFAULT_SETS)
    p.add_argument("--seeds", type=int, default=1)
    args = p.parse_args(argv)
    acc = defaultdict(lambda: defaultdict(list))
    for name in args.datasets.split(","):
        X, y = load(name)
        c = len(np.unique(y))
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = USELM(n_clusters=c, random_state=seed).fit(X)
            record = {"dataset": name, "seed": seed, "fit_s": time.perf_counter() - t0}
            for method, labels in assignments(model, seed).items():
                record[method] = score(y, labels)[0]
                acc[name][method].append(record[method])
            print(json.dumps(record), flush=True)
    for line in accuracy_table(acc, METHODS, "kmeans"):
        print(line)


if __name__ == "__main__":
    main()
