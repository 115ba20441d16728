"""Seconds of ``elmscale.plot.embedding`` for a fitted model, as a user draws it after a fit.

    python -m benchmarks.scale.bench_plot               # MNIST's 60,000 training digits

One ``USELM(n_clusters=10, random_state=0)`` fit (``--fit``) on MNIST's first ``--rows`` rows
(pixels / 255, float32, dask's threads), then ``plot.embedding`` timed with X omitted, with X
the training rows (recognised as such: drawn from ``embedding_``) and with the other rows of
the file (embedded by ``transform``), each drawn on the Agg backend and closed. Printed: one
JSON record with the fit's seconds, each plot's seconds and the machine.
"""

import argparse
import json
import time

import numpy as np

from benchmarks._common import load_dataset, machine_info, make_estimator, utc_now


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=60_000, help="MNIST's first rows to fit")
    p.add_argument("--new-rows", type=int, default=10_000, help="rows after them to draw")
    p.add_argument("--fit", default="USELM(n_clusters=10, random_state=0)")
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    from elmscale import plot

    X, _ = load_dataset("mnist")
    X = (X / 255).astype(np.float32)
    train, new = X[: args.rows], X[args.rows : args.rows + args.new_rows]
    model = make_estimator(args.fit)
    start = time.perf_counter()
    model.fit(train)
    out = {"benchmark": "plot", "when": utc_now(), "fit": args.fit, "rows": len(train)}
    out["fit_s"] = round(time.perf_counter() - start, 1)
    for name, rows in [("omitted_s", None), ("training_s", train), ("new_rows_s", new)]:
        start = time.perf_counter()
        plot.embedding(model, rows)
        out[name] = round(time.perf_counter() - start, 1)
        pyplot.close("all")
    out["machine"] = machine_info()
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
