"""The kNN graph on a 2-worker LocalCluster: the distributed cell search against pynndescent.

    python -m benchmarks.scale.bench_graph --data mnist subspace:200000 --backends cells pynndescent
    python -m benchmarks.scale.bench_graph --data subspace:1000000 mixture:1000000 --rounds 1
    python -m benchmarks.scale.bench_graph --data subspace:1000000 --workers 1 2 --backends cells

What is timed is what a user runs: ``knn_graph(Xd, 10, backend=..., order=False)`` (backend
``auto``: knn_graph's default, the cell search for its ``target_recall``; ``cells``: the
estimators' fixed search) with the directed lists persisted on the workers (and the
symmetrised graph built). Each measurement
starts a fresh LocalCluster (processes, 1 thread each), generates or loads X on the workers
(not timed), then times a cold build (fresh worker processes: imports, numba compilation for
pynndescent) and a warm one (the same call again; pynndescent's kernels compiled on every
worker first, since its one task may run on another worker than the cold one). Backends
alternate within each round.

Recorded per run: seconds, recall@10 on 2,000 sampled rows against exact search (float64
brute force on the cluster), the search's own estimate of it and the probes and refinement
rounds it used, bytes the workers sent each other, peak RSS of each worker and of the client.

Data: ``mnist`` (../shared/datasets/mnist.npz, pixels / 255, chunks of 7,000 rows),
``subspace:N`` (10 clusters, each on its own random 6-d affine subspace of R^50, plus noise
0.05), ``mixture:N`` (the 50-d Gaussian mixture of ``_mixture.py``), ``deformed:N``
(deformed MNIST digits, 784-d, ``benchmarks/_deformed_mnist.py``), chunks of 50,000.
A backend with the suffix ``@numpy`` (e.g. ``auto@numpy``) runs on the NumPy path
(``config_context(compiled=False)``): the same graph without the compiled kernels.
"""

import argparse
import json
import os
import time

import numpy as np

from benchmarks._common import (
    load_dataset,
    local_cluster,
    machine_info,
    peak_memory_mb,
    recall_at_k,
    results_file,
    utc_now,
)
from benchmarks._mixture import generated_dask, mixture_chunk, subspace_chunk


def _sent_bytes(dask_worker):
    return dask_worker.transfer_outgoing_bytes_total


def _compile_nndescent():
    """pynndescent's kernels compiled in this worker (a small index), so that a warm build
    is warm on whichever worker runs it; returns the small graph's shape."""
    import pynndescent

    rows = np.random.default_rng(0).random((2000, 8), dtype=np.float32)
    index = pynndescent.NNDescent(rows, n_neighbors=11, low_memory=True, compressed=False)
    return index.neighbor_graph[0].shape


def _data(spec, k):
    import dask.array as da

    if spec == "mnist":
        X = load_dataset("mnist")[0].astype(np.float32) / 255
        return da.from_array(X, chunks=(7000, X.shape[1])), "mnist"
    kind, n = spec.split(":")
    if kind == "deformed":
        from benchmarks._deformed_mnist import deformed_mnist_dask

        return deformed_mnist_dask(int(n), chunk=50_000)[0], spec
    fn = {"subspace": subspace_chunk, "mixture": mixture_chunk}[kind]
    X, _ = generated_dask(fn, int(n))
    return X, spec


def _backend(name, args):
    """A backend name, or ``cells+R``: the cell search with ``n_refine=R`` (an int or
    "auto"); a suffix ``@numpy`` (stripped here) runs it with ``compiled=False``."""
    base, _, refine = name.partition("@")[0].partition("+")
    if base == "cells" and (args.n_probes or refine or args.target_recall):
        from elmscale.graph import CellSearch

        kw = {"n_refine": refine if refine == "auto" else int(refine)} if refine else {}
        if args.n_probes:
            kw["n_probes"] = args.n_probes
        if args.target_recall:
            kw["target_recall"] = args.target_recall
        return CellSearch(**kw)
    return name.partition("@")[0]


def one_run(spec, backend, workers, args, log):
    from distributed import wait

    import elmscale
    from elmscale.graph import knn_graph

    out = {
        "data": spec,
        "backend": backend,
        "workers": workers,
        "k": args.k,
        "n_probes": args.n_probes,
        "target_recall": args.target_recall,
        "chunk_rows": args.chunk_rows,
        "load_average": list(os.getloadavg()),
    }
    with local_cluster(workers, args.worker_gb, dashboard_address=None) as client:
        X, name = _data(spec, args.k)
        if args.chunk_rows:
            X = X.rechunk((args.chunk_rows, -1))
        X = X.persist()
        wait(X)
        out["n"], out["d"], out["n_chunks"] = X.shape[0], X.shape[1], len(X.chunks[0])
        sent0 = sum(client.run(_sent_bytes).values())
        chosen = _backend(backend, args)
        # a named built-in is the registered object: read what its search reports from it;
        # "auto" (knn_graph's default, the search for its target recall) reports on the graph
        if backend.partition("@")[0] == "auto":
            reporter = None
        else:
            reporter = elmscale.get("graph", chosen) if isinstance(chosen, str) else chosen
        for seed, label in enumerate(("cold", "warm") if args.warm else ("cold",)):
            if label == "warm" and backend == "pynndescent":
                # its one task may land on the worker that did not compile it in the cold call
                client.run(_compile_nndescent)
            # another seed for the warm call: pure task keys must not hit the cold result
            t0 = time.perf_counter()
            with elmscale.config_context(compiled=not backend.endswith("@numpy")):
                g = knn_graph(X, args.k, backend=chosen, order=False, random_state=seed)
            wait([g.indices, g.distances])
            out[f"{label}_s"] = time.perf_counter() - t0
            log(f"  {name} {backend} {workers}w {label}: {out[f'{label}_s']:.1f} s")
            if label == "cold":
                out["sent_mb"] = (sum(client.run(_sent_bytes).values()) - sent0) / 1e6
                out["worker_peak_mb"] = sorted(client.run(peak_memory_mb).values())
                out["recall"] = recall_at_k(X, g.indices, args.k)
                out["recall_estimate"] = getattr(reporter or g, "recall_estimate_", None)
                out["refine_rounds"] = getattr(reporter, "n_refine_", None)
                out["probes_used"] = getattr(reporter, "n_probes_", None)
            del g
        out["client_peak_mb"] = peak_memory_mb()
        out["load_average_end"] = list(os.getloadavg())
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", nargs="+", default=["mnist", "subspace:200000"])
    p.add_argument("--backends", nargs="+", default=["cells", "pynndescent"])
    p.add_argument("--workers", nargs="+", type=int, default=[2])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--target-recall", type=float, default=None)
    p.add_argument(
        "--n-probes", type=lambda v: v if v == "auto" else int(v), default=None, help='or "auto"'
    )
    p.add_argument("--worker-gb", type=float, default=10)
    p.add_argument(
        "--chunk-rows",
        type=int,
        default=None,
        help="rechunk X to this many rows per chunk (default: as generated)",
    )
    p.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default=str(results_file("graph.jsonl")))
    args = p.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    info = {"date": utc_now(), "machine": machine_info()}
    log(json.dumps(info))
    rows = []
    with open(args.out, "a") as f:
        for r in range(args.rounds):
            for spec in args.data:
                for workers in args.workers:
                    for backend in args.backends if r % 2 == 0 else args.backends[::-1]:
                        res = one_run(spec, backend, workers, args, log)
                        res.update(round=r, date=info["date"])
                        log(json.dumps(res, default=float))
                        f.write(json.dumps(res, default=float) + "\n")
                        f.flush()
                        rows.append(res)
    return rows


if __name__ == "__main__":
    main()
