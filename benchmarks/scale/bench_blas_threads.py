"""BLAS threads inside dask's threaded scheduler: estimators with NumPy input, as shipped
(BLAS on one thread per dask thread while they compute) against BLAS left at its default
threads inside every dask task (``config_context(task_blas_threads=os.cpu_count())``),
alternated in one process.

    python -m benchmarks.scale.bench_blas_threads [--repeats 3] [--json out.jsonl]

Prints a markdown table: median seconds of each configuration and their ratio.
"""

import argparse
import json
import os
import statistics
import sys
import time

from sklearn.datasets import make_blobs, make_classification

from benchmarks._common import blas_info, machine_info, utc_now


def cases():
    """(name, make_data, fit_and_predict) for each estimator timed."""
    from elmscale import USELM, ELMClassifier

    def uselm_data():
        return make_blobs(n_samples=50_000, n_features=20, centers=10, random_state=0)

    def uselm(X, y):
        USELM(n_clusters=10, n_hidden=1000, graph="exact", random_state=0).fit(X)

    def elm_data():
        return make_classification(
            n_samples=200_000, n_features=50, n_informative=20, n_classes=5, random_state=0
        )

    def elm(X, y):
        ELMClassifier(n_hidden=1000, random_state=0).fit(X, y).predict(X)

    return [
        ("USELM fit, 50,000 x 20, n_hidden 1000, exact graph", uselm_data, uselm),
        ("ELMClassifier fit + predict, 200,000 x 50, n_hidden 1000", elm_data, elm),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="append one line per case to this file")
    args = parser.parse_args(argv)

    import elmscale

    def timed(run, X, y, pinned):
        # one BLAS thread per task (the default) against BLAS's own thread count in each task
        threads = "auto" if pinned else os.cpu_count()
        with elmscale.config_context(task_blas_threads=threads):
            t0 = time.perf_counter()
            run(X, y)
            return time.perf_counter() - t0

    print(
        json.dumps({"machine": machine_info(), "blas": blas_info(), "utc": utc_now()}),
        file=sys.stderr,
    )
    rows = []
    for name, data, run in cases():
        X, y = data()
        run(X[:2000], y[:2000])  # warm-up: imports, numba, caches
        seconds = {True: [], False: []}
        for _ in range(args.repeats):
            for pinned in (False, True):
                seconds[pinned].append(timed(run, X, y, pinned))
        row = {
            "case": name,
            "repeats": args.repeats,
            "utc": utc_now(),
            "default_threads_s": statistics.median(seconds[False]),
            "one_thread_per_task_s": statistics.median(seconds[True]),
            "all_s": {"default": seconds[False], "pinned": seconds[True]},
        }
        rows.append(row)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")
    print(
        "| case | BLAS default threads in each task (s) | one BLAS thread per task (s) | speed-up |"
    )
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['default_threads_s']:.2f} | {r['one_thread_per_task_s']:.2f} "
            f"| {r['default_threads_s'] / r['one_thread_per_task_s']:.2f}x |"
        )
    return rows


if __name__ == "__main__":
    main()
