"""The README example, run against a running scheduler (see deploy/start-cluster.sh).

    python deploy/example.py tcp://127.0.0.1:8786
"""

import sys

import dask.array as da
from distributed import Client
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score

import elmscale

if __name__ == "__main__":
    address = sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:8786"
    with Client(address) as client:            # elmscale uses the active client
        X, y = load_digits(return_X_y=True)
        Xd = da.from_array(X, chunks=(600, 64))  # data chunked by rows
        model = elmscale.USELM(n_clusters=10, random_state=0).fit(Xd)
        labels = model.labels_.compute()         # dask in, dask out
        print(f"ran on {len(client.scheduler_info()['workers'])} workers; "
              f"ARI vs digit labels {adjusted_rand_score(y, labels):.3f}")
