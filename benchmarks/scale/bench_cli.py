"""`elmscale fit` from a file against the Python API on the same data and cluster.

    python -m benchmarks.scale.bench_cli [--n 200000] [--features 20] [--rounds 2]

Writes the synthetic mixture (benchmarks/_mixture.py) as a Parquet folder and a .npy file
in a temporary directory, then alternates, per round: the command
`elmscale fit us-elm FILE --workers 2 --labels OUT` in a fresh interpreter (wall time,
including interpreter start, cluster start, reading, fit and writing), and in this
process a 2-worker LocalCluster fit of USELM on the same file read with dask (read + fit +
writing the labels). Checks that both give the same labels; prints one JSON line
per measurement.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._common import REPO_ROOT, utc_now
from benchmarks._mixture import mixture_numpy

PARAMS = ["n_clusters=10", "n_hidden=300", "random_state=0"]


def python_api(path, out):
    """What a Python user writes: read the file with dask, fit, save the labels."""
    import dask.array as da
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    import elmscale

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cl, Client(cl):
        t0 = time.perf_counter()
        if path.suffix == ".npy":
            X = da.from_array(np.load(path, mmap_mode="r"), chunks=(50_000, -1))
        else:
            X = dd.read_parquet(path).to_dask_array(lengths=True)
        model = elmscale.USELM(n_clusters=10, n_hidden=300, random_state=0).fit(X)
        np.save(out, np.asarray(model.labels_))
        return time.perf_counter() - t0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    X, _ = mixture_numpy(args.n, n_features=args.features, dtype=np.float64)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        import pandas as pd

        pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).to_parquet(
            tmp / "x.parquet", row_group_size=50_000
        )
        np.save(tmp / "x.npy", X)
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        for r in range(args.rounds):
            for kind in ("npy", "parquet"):
                src = tmp / f"x.{kind}"
                t0 = time.perf_counter()
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "elmscale.cli",
                        "fit",
                        "us-elm",
                        str(src),
                        "--param",
                        *PARAMS,
                        "--workers",
                        "2",
                        "--labels",
                        str(tmp / "cli.npy"),
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                wall = time.perf_counter() - t0
                assert done.returncode == 0, done.stderr
                fitted = float(done.stderr.split("fitted in ")[1].split(" s")[0])
                api = python_api(src, tmp / "api.npy")
                same = bool(np.array_equal(np.load(tmp / "cli.npy"), np.load(tmp / "api.npy")))
                print(
                    json.dumps(
                        {
                            "date": utc_now(),
                            "round": r,
                            "input": kind,
                            "n": args.n,
                            "d": args.features,
                            "cli_wall_s": round(wall, 2),
                            "cli_fit_s": fitted,
                            "api_read_fit_write_s": round(api, 2),
                            "same_labels": same,
                        }
                    ),
                    flush=True,
                )
