"""The README example, run against a running scheduler (see deploy/start-cluster.sh).

    python deploy/example.py tcp://127.0.0.1:8786
    TLS_DIR=certs python deploy/example.py tls://10.0.0.5:8786   # with mutual TLS

Prints the number of workers and the agreement with the digit labels; exits non-zero when
the cluster has no worker or the labels are incomplete.
"""

import os
import sys

import dask.array as da
from distributed import Client
from distributed.security import Security
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score

import elmscale


def security_from(tls_dir):
    """Mutual TLS with the certificates of deploy/tls/make-certs.sh, or None."""
    if not tls_dir:
        return None
    return Security(
        tls_ca_file=os.path.join(tls_dir, "ca.pem"),
        tls_client_cert=os.path.join(tls_dir, "node.pem"),
        tls_client_key=os.path.join(tls_dir, "node-key.pem"),
        require_encryption=True,
    )


if __name__ == "__main__":
    address = sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:8786"
    security = security_from(os.environ.get("TLS_DIR"))
    with Client(address, security=security, timeout="30s") as client:  # the active client
        client.wait_for_workers(int(os.environ.get("N_WORKERS", "1")), timeout=120)
        X, y = load_digits(return_X_y=True)
        Xd = da.from_array(X, chunks=(600, 64))  # data chunked by rows
        model = elmscale.USELM(n_clusters=10, random_state=0).fit(Xd)
        labels = model.labels_.compute()  # dask in, dask out
        workers = client.scheduler_info()["workers"]
        print(
            f"ran on {len(workers)} workers; "
            f"ARI vs digit labels {adjusted_rand_score(y, labels):.3f}"
        )
        sys.exit(0 if workers and len(labels) == len(y) else 1)
