"""Peak memory of a fit on NumPy input with no cluster: dask's threads in this process.

    python -m benchmarks.scale.bench_numpy_memory --copies 5

The input is MNIST-70k (pixels / 255; its first ``--rows`` rows) stacked ``--copies`` times
with N(0, ``--noise``) added, float32, as a user holds it in memory (350,000 x 784, 1.1 GB for
5 copies). One ``USELM(n_clusters=10, random_state=0)`` fit (``--fit`` to change it) runs on
dask's threaded scheduler; a thread samples this process's RSS every 50 ms. Printed: the
input's bytes, the RSS before the fit (the input and the imports), the peak during it, the peak
over the input's size, the fit's seconds and stages with the peak RSS in each (MiB), ACC
against the stacked labels, and the machine.
"""

import argparse
import json
import time

import numpy as np

from benchmarks._common import (
    RSSSampler,
    clustering_accuracy,
    load_dataset,
    machine_info,
    make_estimator,
    utc_now,
)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--copies", type=int, default=5)
    p.add_argument("--rows", type=int, default=None, help="MNIST's first rows (default: all)")
    p.add_argument("--noise", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fit", default="USELM(n_clusters=10, random_state=0)")
    args = p.parse_args(argv)

    import psutil

    X0, y0 = (a[: args.rows] for a in load_dataset("mnist"))
    rng = np.random.default_rng(args.seed)
    X = np.concatenate([X0.astype(np.float32) / 255] * args.copies)
    X += rng.normal(0, args.noise, X.shape).astype(np.float32)
    y = np.tile(y0, args.copies)
    del X0
    model = make_estimator(args.fit)
    before_mb = psutil.Process().memory_info().rss / 2**20
    with RSSSampler(interval=0.05) as rss:
        start = time.perf_counter()
        model.fit(X)
        seconds = time.perf_counter() - start
    start -= rss._t0
    timings = getattr(model, "timings_", {})
    peak_mb = max(mb for _, mb in rss.samples + [(0, psutil.Process().memory_info().rss / 2**20)])
    out = {
        "benchmark": "numpy_memory",
        "when": utc_now(),
        "machine": machine_info(),
        "fit": args.fit,
        "shape": list(X.shape),
        "input_bytes": X.nbytes,
        "rss_before_fit_mb": before_mb,
        "peak_rss_mb": peak_mb,
        "peak_over_input": round(peak_mb * 2**20 / X.nbytes, 2),
        "seconds": round(seconds, 1),
        "timings": {k: round(v, 1) for k, v in timings.items()},
        "stage_peak_rss_mb": rss.peak_by_stage(start, list(timings.items())),
        "acc": round(float(clustering_accuracy(y, model.labels_)), 4),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
