"""Quality at a million rows of real-looking data: US-ELM's defaults on MNIST-1M against KMeans.

    python -m benchmarks.quality.bench_mnist1m --n-samples 100000
    python -m benchmarks.quality.bench_mnist1m --n-samples 1000000 --store /tmp/mnist1m

MNIST-1M is ``_deformed_mnist.py``'s: the 70,000 MNIST digits under random elastic fields and
small affine moves, generated on the workers, pixels in [0, 1], labels inherited. Three steps,
each timed on its own:

1. **generate**: a 2-worker LocalCluster (1 thread each) generates the rows and writes them to
   a Zarr store (``--store``, else a temporary folder deleted at the end), chunks of elmscale's
   NumPy row chunks; the cluster is closed. A store that already holds the rows (same seed
   and deformation, at least ``n`` rows) is reused: its first ``n`` rows are read. The
   single-core cost per 10,000 rows is timed in the client first.
2. **fit**: a fresh cluster reads the store and persists X in the workers (``load_s``, not in
   the fit's time); ``USELM(n_clusters=10, random_state=seed)`` with every other parameter at
   its default (or as ``--set``, e.g. ``--set "n_components=15,graph='exact'"`` to swap in one
   stage's exact version; ``graph=CellSearch(n_probes=12)`` for a backend's options) is
   fitted, float32 blocks (``--dtype``: the ``compute_dtype`` setting, as in the scale
   benchmarks; float64 doubles the workers' memory); ``fit_s`` is the wall time of
   ``fit`` plus computing ``labels_``, ``stages_s`` the estimator's ``timings_``. Peak RSS
   (``ru_maxrss``) of each worker (read + persist + fit) and of the client (which also runs
   the scheduler) at the end of the fit.
3. **KMeans**: the cluster closed, the same rows read into the client and clustered by
   scikit-learn's ``MiniBatchKMeans(10, n_init=3)`` and ``KMeans(10, n_init=1)`` (lloyd),
   on the raw pixels (``--kmeans`` picks), seed ``--seed``; wall time and the client's peak RSS.

ACC (Hungarian matching, ``_common.clustering_accuracy``) and NMI against the inherited labels.
One JSON record (``--json``, default ``benchmarks/results/mnist1m_<n>.json``) with the command,
date, machine, BLAS and the load average at each step (the machine may be shared).
"""

import argparse
import functools
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from benchmarks._common import (
    blas_info,
    clustering_accuracy,
    load_average,
    local_cluster,
    nmi,
    parse_params,
    peak_memory_mb,
    results_file,
    run_info,
    timed,
)
from benchmarks._deformed_mnist import DEFORMATION, deformed_mnist_dask, deformed_mnist_numpy

KMEANS = ("minibatch", "kmeans")


def _scores(y, labels):
    return {"acc": clustering_accuracy(y, labels), "nmi": nmi(y, labels)}


def store_attrs(args):
    """What the rows of a store are a function of, and how many it holds."""
    return {"n": args.n_samples, "seed": args.seed, "deformation": {**DEFORMATION, **args.deform}}


def reusable(stored, wanted):
    """Whether a store of ``stored`` attributes holds the rows ``wanted``: the same seed and
    deformation and at least as many rows (row r depends on (seed, r) only, so the first n
    rows of a larger store are the rows of n)."""
    if not stored:
        return False
    same = all(stored.get(k) == wanted[k] for k in ("seed", "deformation"))
    return same and stored.get("n", -1) >= wanted["n"]


def _stored_attrs(path):
    import zarr

    try:
        return dict(zarr.open_group(str(path), mode="r").attrs).get("mnist1m")
    except (FileNotFoundError, ValueError, KeyError, zarr.errors.GroupNotFoundError):
        return None


def generate(args, path, log):
    """Write the rows to the Zarr store at ``path`` on a fresh cluster; the step's record."""
    import dask
    import zarr

    out = {"store": str(path)}
    with timed() as t:
        deformed_mnist_numpy(10_000, seed=args.seed, **args.deform)
    out["one_core_s_per_10k"] = t.seconds
    if reusable(_stored_attrs(path), store_attrs(args)):
        out["reused"] = True
        log(f"generate: reusing {path}")
        return out
    with local_cluster(args.workers, args.worker_gb) as client:
        X, y = deformed_mnist_dask(args.n_samples, seed=args.seed, **args.deform)
        with timed() as t:
            dask.compute(
                X.to_zarr(str(path), component="X", overwrite=True, compute=False),
                y.to_zarr(str(path), component="y", overwrite=True, compute=False),
            )
        out["reused"] = False
        out["seconds"] = t.seconds
        out["cluster_s_per_10k"] = t.seconds * 1e4 / args.n_samples
        out["chunk_rows"] = X.chunks[0][0]
        out["worker_peak_mb"] = sorted(client.run(peak_memory_mb).values())
    zarr.open_group(str(path), mode="r+").attrs["mnist1m"] = store_attrs(args)
    out["load_avg"] = load_average()
    log(f"generate: {json.dumps(out)}")
    return out


def fit_uselm(args, path, log):
    """USELM at its defaults on the stored rows, on a fresh cluster; the step's record."""
    import dask.array as da
    from distributed import wait

    import elmscale

    out = {}
    with local_cluster(args.workers, args.worker_gb) as client:
        with timed() as t:
            X = da.from_zarr(str(path), component="X")[: args.n_samples].persist()
            wait(X)
        out["load_s"] = t.seconds
        y = np.asarray(da.from_zarr(str(path), component="y")[: args.n_samples].compute())
        model = elmscale.USELM(n_clusters=10, random_state=args.seed, **parse_params(args.set))
        with timed() as t:
            model.fit(X)
            labels = np.asarray(model.labels_.compute())
        out["fit_s"] = t.seconds
        out["stages_s"] = dict(model.timings_)
        out["smoothing_steps"] = getattr(model, "smoothing_steps_", None)
        out["n_components"] = model.n_components_
        out["params"] = {k: v for k, v in model.get_params().items() if v is not None}
        out.update(_scores(y, labels))
        out["worker_peak_mb"] = sorted(client.run(peak_memory_mb).values())
        out["client_peak_mb"] = peak_memory_mb()
    out["load_avg"] = load_average()
    log(f"uselm: {json.dumps(out, default=str)}")
    return out, y


def kmeans_peer(kind, X, y, seed):
    """scikit-learn's KMeans of ``kind`` on the rows in memory: its scores and time."""
    from sklearn.cluster import KMeans, MiniBatchKMeans

    if kind == "minibatch":
        model = MiniBatchKMeans(10, n_init=3, batch_size=4096, random_state=seed)
    else:
        model = KMeans(10, n_init=1, random_state=seed)
    with timed() as t:
        labels = model.fit_predict(X)
    out = {"estimator": repr(model), "seconds": t.seconds, "n_iter": int(model.n_iter_)}
    out.update(_scores(y, labels))
    return out


def run_kmeans(args, path, y, log):
    import zarr

    out = {}
    with timed() as t:
        X = np.asarray(zarr.open_array(str(path), mode="r", path="X")[: args.n_samples])
    out["read_s"] = t.seconds
    for kind in args.kmeans:
        out[kind] = kmeans_peer(kind, X, y, args.seed)
        log(f"{kind}: {json.dumps(out[kind])}")
    out["client_peak_mb"] = peak_memory_mb()
    out["load_avg"] = load_average()
    return out


def _deformation(text):
    """``alpha=30,shift=1`` -> dict of floats, keys checked against DEFORMATION."""
    out = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in DEFORMATION:
            raise argparse.ArgumentTypeError(
                f"expected KEY=VALUE with KEY in {sorted(DEFORMATION)}, got {item!r}"
            )
        out[key] = float(value)
    return out


def _kmeans_kinds(text):
    kinds = [k for k in text.split(",") if k and k != "none"]
    bad = set(kinds) - set(KMEANS)
    if bad:
        raise argparse.ArgumentTypeError(f"--kmeans takes {KMEANS} or none, got {sorted(bad)}")
    return kinds


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n-samples", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=0, help="data, USELM and KMeans seed")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--worker-gb", type=float, default=9, help="memory limit per worker (GiB)")
    p.add_argument("--store", default=None, help="Zarr folder of the rows (kept; reused)")
    p.add_argument("--deform", type=_deformation, default={}, help="e.g. shift=1,sigma=6")
    p.add_argument("--set", default="", help="USELM parameters, e.g. 'n_components=15'")
    p.add_argument("--kmeans", type=_kmeans_kinds, default=list(KMEANS), help="or none")
    p.add_argument("--json", default=None, help="output file (default benchmarks/results/)")
    p.add_argument("--generate-only", action="store_true", help="write --store, then stop")
    p.add_argument(
        "--dtype", default="float32", choices=("float32", "float64"), help="compute_dtype"
    )
    args = p.parse_args(argv)
    if args.n_samples < 10:
        p.error(f"--n-samples must be at least 10, got {args.n_samples}")
    try:
        parse_params(args.set)
    except (ValueError, SyntaxError, TypeError) as exc:
        p.error(f"--set expects KEY=VALUE,... with Python literal values, got {args.set!r}: {exc}")
    if args.generate_only and not args.store:
        p.error("--generate-only needs --store (where to keep the rows)")
    return args


def main(argv=None):
    import elmscale

    args = parse_args(argv)
    log = functools.partial(print, flush=True)
    deformation = {**DEFORMATION, **args.deform}
    record = run_info(blas=blas_info(), args=dict(vars(args)), deformation=deformation)
    log(f"# {record['date']} {record['machine']}")
    path = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="mnist1m-")) / "z"
    try:
        with elmscale.config_context(compute_dtype=args.dtype):
            record["generate"] = generate(args, path, log)
            if not args.generate_only:
                record["uselm"], y = fit_uselm(args, path, log)
                if args.kmeans:
                    record["kmeans"] = run_kmeans(args, path, y, log)
    finally:
        if not args.store:
            shutil.rmtree(path.parent, ignore_errors=True)
    out = Path(args.json or results_file(f"mnist1m_{args.n_samples}.json"))
    out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    log(f"RESULT {json.dumps(record, default=str)}")
    log(f"# written to {out}")


if __name__ == "__main__":
    main()
