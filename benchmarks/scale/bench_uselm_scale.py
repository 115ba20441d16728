"""US-ELM at scale: elmscale on a 2-worker LocalCluster, stage by stage, from generated or
on-disk data.

    python -m benchmarks.scale.bench_uselm_scale --n 1000000
    python -m benchmarks.scale.bench_uselm_scale --n 10000000 --write parquet:/data/mix10m  # once
    python -m benchmarks.scale.bench_uselm_scale --n 10000000 --input parquet:/data/mix10m

Out-of-core input: ``--write parquet:PATH`` (or ``zarr:PATH``) generates the mixture on the
workers and writes it to disk, one Parquet file / Zarr chunk per 64 MiB block of H (columns
x0..x{d-1} and y; Zarr arrays X and y), then exits. ``--input parquet:PATH`` reads it back as
a user would: ``dask.dataframe.read_parquet`` handed to ``USELM.fit`` as a dask DataFrame (or
``dask.array.from_zarr``), not persisted, so the fit's time includes every read of the files.
Needs pyarrow (Parquet) or zarr (the ``bench`` extra).

The fit: a synthetic d-dimensional mixture generated on the workers, USELM (n_hidden=1000,
10 neighbours, float32 blocks) fitted on the cluster; stage times from ``timings_``, peak RSS
of each worker and of the client (and the client's peak per stage), ACC, the graph's chunks and
halo rows, recall@k of the graph against exact search on a sample.
"""

import argparse
import functools
import json
import os
import time

import numpy as np

from benchmarks._common import (
    RSSSampler,
    blas_info,
    clustering_accuracy,
    local_cluster,
    machine_info,
    peak_memory_mb,
    recall_at_k,
    utc_now,
)
from benchmarks._mixture import mixture_dask


def _output_path(spec):
    kind, _, path = spec.partition(":")
    if kind not in ("parquet", "zarr") or not path:
        raise SystemExit(f"expected parquet:PATH or zarr:PATH, got {spec!r}")
    return kind, path


def write_input(args, log):
    """Generate the mixture on the workers and write it in blocks of the fit's chunk size."""
    import dask

    kind, path = _output_path(args.write)
    with local_cluster(args.workers, args.worker_gb):
        X, y = mixture_dask(args.n, args.d, args.clusters, args.seed)
        rows = _rows_per_chunk(args)
        X, y = X.rechunk({0: rows, 1: -1}), y.rechunk(rows)
        t0 = time.perf_counter()
        if kind == "parquet":
            import dask.array as da
            import dask.dataframe as dd

            cols = [f"x{i}" for i in range(args.d)]
            df = dd.from_dask_array(
                da.concatenate([X, y[:, None].astype(X.dtype)], axis=1), columns=cols + ["y"]
            )
            df["y"] = df["y"].astype("int64")
            df.to_parquet(path, write_index=False)
        else:
            dask.compute(
                X.to_zarr(path, component="X", overwrite=True, compute=False),
                y.to_zarr(path, component="y", overwrite=True, compute=False),
            )
        out = {"written": args.write, "rows": args.n, "chunk_rows": rows}
        out["seconds"] = time.perf_counter() - t0
        log(json.dumps(out))
    return out


def read_input(spec):
    """``(X, y)``: X as the user hands it to ``fit`` (a dask DataFrame of the feature
    columns, or a dask array), y as a dask Series or array (``.compute()`` gives the
    labels); nothing is read yet."""
    import dask.array as da

    kind, path = _output_path(spec)
    if kind == "parquet":
        import dask.dataframe as dd

        df = dd.read_parquet(path)
        return df[[c for c in df.columns if c != "y"]], df["y"]
    return da.from_zarr(path, component="X"), da.from_zarr(path, component="y")


def run_elmscale(args, log):
    import dask

    import elmscale

    out = {}
    with local_cluster(args.workers, args.worker_gb) as client:
        if args.warm:  # compile pynndescent's numba code in every worker before timing
            t0 = time.perf_counter()
            client.run(_warm_pynndescent)
            out["warmup_s"] = time.perf_counter() - t0
            log(f"workers warmed (numba compile) in {out['warmup_s']:.1f} s")
        if args.input:
            Xd, yd = read_input(args.input)
        else:
            Xd, yd = mixture_dask(args.n, args.d, args.clusters, args.seed)
            Xd, yd = dask.persist(Xd, yd)
            dask.compute(Xd.sum())
        with (
            elmscale.config_context(compute_dtype=args.dtype, chunk_bytes=args.chunk_mb * 2**20),
            RSSSampler() as rss,
        ):
            if not args.input:
                Xd = Xd.rechunk({0: _rows_per_chunk(args)})
                Xd = Xd.persist()
            t0 = time.perf_counter()
            fit_start = t0 - rss._t0
            model = elmscale.USELM(
                n_clusters=args.clusters,
                n_hidden=args.n_hidden,
                n_neighbors=args.k,
                lam=args.lam,
                graph=args.graph,
                random_state=args.seed,
            )
            # fit as reduce + solve: the reduction keeps the graph for the halo and recall
            reduction = model.reduce(Xd)
            model.solve(reduction)
            out["fit_only_s"] = time.perf_counter() - t0
            labels = model.labels_.compute()
            out["fit_s"] = time.perf_counter() - t0
        out["stages_s"] = model.timings_
        out["load_avg"] = [round(x, 2) for x in os.getloadavg()]
        out["client_rss_mb_by_stage"] = rss.peak_by_stage(fit_start, list(model.timings_.items()))
        out["acc"] = clustering_accuracy(np.asarray(yd.compute()), labels)
        graph = reduction.graph
        out["n_chunks"] = len(graph.chunks)
        out["halo_rows"] = graph.halo_size()
        out["recall"] = recall_at_k(graph.X, graph.indices, args.k, n_sample=1000, seed=args.seed)
        out["worker_peak_mb"] = sorted(client.run(peak_memory_mb).values())
        out["client_peak_mb"] = peak_memory_mb()
        reduction.release()
        log(json.dumps(out, default=float))
    return out


def _rows_per_chunk(args):
    itemsize = 4 if args.dtype == "float32" else 8
    return max(1000, args.chunk_mb * 2**20 // (args.n_hidden * itemsize))


def _warm_pynndescent():
    import pynndescent

    X = np.random.RandomState(0).rand(2000, 5).astype(np.float32)
    pynndescent.NNDescent(X, n_neighbors=31, random_state=0).neighbor_graph  # noqa: B018


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--clusters", type=int, default=10)
    p.add_argument("--n-hidden", type=int, default=1000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--lam", type=float, default=0.01, help="USELM default")
    p.add_argument("--graph", default="auto")
    p.add_argument("--dtype", default="float32")
    p.add_argument(
        "--chunk-mb", type=int, default=64, help="bytes of one H block (library default)"
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--worker-gb", type=float, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-warm", dest="warm", action="store_false")
    p.add_argument("--write", default=None, help="parquet:PATH or zarr:PATH: write the data, exit")
    p.add_argument("--input", default=None, help="parquet:PATH or zarr:PATH: read X (and y)")
    args = p.parse_args(argv)
    log = functools.partial(print, flush=True)
    log(f"# {utc_now()} {machine_info()}")
    log(f"# BLAS: {blas_info()}")
    log(f"# args: {vars(args)}")
    result = {"args": vars(args)}
    if args.write:
        return write_input(args, log)
    result["elmscale"] = run_elmscale(args, log)
    log("RESULT " + json.dumps(result, default=float))
    return result


if __name__ == "__main__":
    main()
