"""The elmscale demo: US-ELM on scikit-learn's handwritten digits, on a local Dask cluster.

Run it with ``python -m elmscale.demo``. It starts a ``distributed.LocalCluster`` (the
library itself never starts one), clusters the 1,797 digits into 10 groups with default
parameters, and compares with k-means on the raw pixels.
"""

import argparse
import time


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m elmscale.demo", description=__doc__)
    parser.add_argument("--workers", type=int, default=2, help="local worker processes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import dask.array as da
    import numpy as np
    from distributed import Client, LocalCluster
    from scipy.optimize import linear_sum_assignment
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits
    from sklearn.metrics import normalized_mutual_info_score

    import elmscale

    def accuracy(y, labels):
        table = np.zeros((labels.max() + 1, y.max() + 1))
        np.add.at(table, (labels, y), 1)
        rows, cols = linear_sum_assignment(-table)
        return table[rows, cols].sum() / len(y)

    X, y = load_digits(return_X_y=True)
    with (
        LocalCluster(
            n_workers=args.workers, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        print(f"elmscale {elmscale.__version__} on {client}")
        print(f"digits: {X.shape[0]} images of {X.shape[1]} pixels, 10 classes")
        Xd = da.from_array(X, chunks=(600, 64))  # three row chunks spread over the workers
        t0 = time.perf_counter()
        model = elmscale.USELM(n_clusters=10, random_state=args.seed).fit(Xd)
        labels = model.labels_.compute()
        t_fit = time.perf_counter() - t0
        km = KMeans(10, n_init=10, random_state=args.seed).fit(X)
        print(
            f"US-ELM : ACC {accuracy(y, labels):.3f}  NMI "
            f"{normalized_mutual_info_score(y, labels):.3f}  ({t_fit:.1f} s)"
        )
        print(
            f"k-means: ACC {accuracy(y, km.labels_):.3f}  NMI "
            f"{normalized_mutual_info_score(y, km.labels_):.3f}  (raw pixels)"
        )
        E = model.transform(X[:5])  # NumPy in, NumPy out; works on unseen points too
        print(
            f"embedding of 5 images: shape {E.shape}; predicted clusters "
            f"{model.predict(X[:5]).tolist()}"
        )


if __name__ == "__main__":
    main()
