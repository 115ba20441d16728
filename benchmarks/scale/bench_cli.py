"""`elmscale fit` from a file against the Python API on the same data and cluster.

    python -m benchmarks.scale.bench_cli [--n 200000] [--features 20] [--rounds 2] [--workers 2]
        [--inputs npy parquet]

Writes the synthetic mixture (benchmarks/_mixture.py) as a Parquet folder and a .npy file
in a temporary directory, then alternates, per round: the command
`elmscale fit us-elm FILE --workers W --labels OUT` in a fresh interpreter (wall time,
including interpreter start, cluster start, reading, fit and writing), and in this process a
fit of USELM on a LocalCluster of as many workers, the same file read with dask (read + fit +
writing the labels). Checks that both give the same labels; prints one JSON line per
measurement.
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

from benchmarks._common import REPO_ROOT, local_cluster, utc_now
from benchmarks._mixture import mixture_numpy

PARAMS = ["n_clusters=10", "n_hidden=300", "random_state=0"]


def python_api(path, out, workers):
    """What a Python user writes: read the file with dask, fit, save the labels."""
    import dask.array as da
    import dask.dataframe as dd

    import elmscale

    with local_cluster(workers, worker_gb=None, dashboard_address=None):
        t0 = time.perf_counter()
        if path.suffix == ".npy":
            X = da.from_array(np.load(path, mmap_mode="r"), chunks=(50_000, -1))
        else:
            X = dd.read_parquet(path).to_dask_array(lengths=True)
        model = elmscale.USELM(n_clusters=10, n_hidden=300, random_state=0).fit(X)
        np.save(out, np.asarray(model.labels_))
        return time.perf_counter() - t0


def cli_fit(src, labels, workers):
    """``elmscale fit us-elm`` in a fresh interpreter: its wall seconds and the seconds of the
    fit it reports."""
    cmd = [sys.executable, "-m", "elmscale.cli", "fit", "us-elm", str(src), "--param", *PARAMS]
    cmd += ["--workers", str(workers), "--labels", str(labels)]
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return wall, float(done.stderr.split("fitted in ")[1].split(" s")[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--inputs", nargs="+", choices=("npy", "parquet"), default=["npy", "parquet"])
    args = ap.parse_args(argv)
    import pandas as pd

    X, _ = mixture_numpy(args.n, n_features=args.features, dtype=np.float64)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).to_parquet(
            tmp / "x.parquet", row_group_size=50_000
        )
        np.save(tmp / "x.npy", X)
        for r in range(args.rounds):
            for kind in args.inputs:
                src = tmp / f"x.{kind}"
                wall, fitted = cli_fit(src, tmp / "cli.npy", args.workers)
                api = python_api(src, tmp / "api.npy", args.workers)
                same = bool(np.array_equal(np.load(tmp / "cli.npy"), np.load(tmp / "api.npy")))
                row = {"date": utc_now(), "round": r, "input": kind, "n": args.n}
                row.update(d=args.features, cli_wall_s=round(wall, 2), cli_fit_s=fitted)
                row.update(api_read_fit_write_s=round(api, 2), same_labels=same)
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


if __name__ == "__main__":
    main()
