"""elmscale on an HPC batch scheduler (SLURM or PBS) through dask-jobqueue: each batch job
runs dask workers that connect back to a scheduler in this process.

    pip install dask-jobqueue
    python deploy/jobqueue.py slurm --queue normal --account myproject --jobs 4 data.npy
    python deploy/jobqueue.py pbs --queue workq --jobs 4 data.npy

Run it on a login node (or in a small job) of a cluster whose compute nodes can reach it,
with elmscale installed in the same environment on every node (a shared home or
container). ``data.npy`` must be on a file system the compute nodes see. Each job asks for
``--cores`` cores and runs that many single-threaded worker processes (one BLAS thread
per core); the memory is split evenly between them.
"""

import argparse

from distributed import Client

import elmscale
from elmscale._cli_io import read_matrix, write_array


def make_cluster(kind, args):
    import dask_jobqueue

    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[kind]
    extra = {"account": args.account} if args.account else {}
    return cls(
        queue=args.queue,
        cores=args.cores,
        processes=args.cores,
        memory=args.memory,
        walltime=args.walltime,
        job_script_prologue=["export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"],
        local_directory="$TMPDIR",
        **extra,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["slurm", "pbs"])
    parser.add_argument("input", help=".npy, .zarr, .parquet or .csv, on a shared file system")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--account")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--memory", default="32GB")
    parser.add_argument("--walltime", default="01:00:00")
    parser.add_argument("--n-clusters", type=int, default=10)
    parser.add_argument("--labels", default="labels.parquet")
    args = parser.parse_args()

    with make_cluster(args.kind, args) as cluster, Client(cluster) as client:
        print(cluster.job_script())  # what was submitted, for the record
        cluster.scale(jobs=args.jobs)
        client.wait_for_workers(args.jobs * args.cores, timeout=3600)
        print(f"dashboard {client.dashboard_link}")
        X, _ = read_matrix(args.input)
        model = elmscale.USELM(n_clusters=args.n_clusters, random_state=0).fit(X)
        write_array(model.labels_, args.labels, "label")
        print(f"labels written to {args.labels}")
