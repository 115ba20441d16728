"""
US-ELM on a distributed LocalCluster
====================================

elmscale runs on the active ``distributed.Client``. Here a two-worker
``distributed.LocalCluster`` stands for a real cluster (``Client("tcp://scheduler:8786")``
connects to one): X becomes a dask array chunked by rows, the fit's graph, Gram pass and
k-means run on the workers, and the results come back as lazy dask arrays that stay there until
computed. Worker processes import this script, so the work sits under
``if __name__ == "__main__":``.
"""

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score

import elmscale


def main():
    X, y = load_digits(return_X_y=True)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        print(f"{len(client.scheduler_info()['workers'])} workers")
        Xd = da.from_array(X, chunks=(450, X.shape[1]))  # 4 row chunks
        model = elmscale.USELM(n_clusters=10, random_state=0).fit(Xd)
        print("labels_ is", type(model.labels_).__name__, "with chunks", model.labels_.chunks[0])
        labels = model.labels_.compute()
        print("seconds per stage:", {k: round(v, 2) for k, v in model.timings_.items()})

        # the same fit on NumPy input, in-process: the same embedding (up to signs), and
        # clusters that differ in a few points (NumPy input runs its k-means in-process)
        local = elmscale.USELM(n_clusters=10, random_state=0).fit(X)
        same = adjusted_rand_score(local.labels_, labels)
        print(f"agreement with the in-process fit: adjusted Rand index {same:.3f}")
        print("cluster sizes:", np.bincount(labels))


if __name__ == "__main__":
    main()
