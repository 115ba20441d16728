"""A worker SIGKILLed while the kNN graph's rows shuffle into cell order, and while its edges
are symmetrised: the same graph and the same US-ELM labels as an undisturbed fit.

    python -m benchmarks.scale.bench_faults [--n-samples 200000] [--faults order reverse]

On one 2-worker LocalCluster (nannies restart a killed worker), the mixture of
benchmarks/_mixture.py generated on the workers (``--chunk-rows`` to rechunk it),
``USELM(n_clusters=10, random_state=0)`` (``--n-hidden`` to change its layer) is fitted once
undisturbed, then once per fault: a scheduler plugin
(``benchmarks._faults.fit_under_fault``) SIGKILLs the worker that the first task reading an
exchange's packs (:mod:`elmscale.graph._exchange`) is handed to, when every pack of that
worker's group is computed and about half of them sit on the worker killed:

- ``order``: the first ``elmscale-graph-order-place`` task (unpack and placing fused), in the
  shuffle of rows into the cells' order (the first one moves the cell assignments, the next X);
- ``reverse``: the first ``elmscale-graph-reverse-unpack`` task, in the exchange of reverse
  edges that symmetrises the graph.

Each fit is ``reduce`` then ``solve``, so the graph it used (``reduction.graph``) is compared,
in the input's row order, with the undisturbed one: neighbours and weights per row, exactly;
then the labels, exactly. Prints one JSON line: per fit the wall seconds, the task killed, the
packs of the exchange in memory at the kill, and whether graph and labels are identical.
"""

import argparse
import json
import sys

import numpy as np

from benchmarks._common import cluster_arguments, local_cluster, machine_info, utc_now
from benchmarks._faults import fit_under_fault, same_graph
from benchmarks._mixture import mixture_dask


def _model(n_hidden):
    from elmscale import USELM

    return USELM(n_clusters=10, random_state=0, **({"n_hidden": n_hidden} if n_hidden else {}))


def main(args):
    import dask

    with (
        local_cluster(args.workers, args.worker_gb, dashboard_address=None) as client,
        dask.config.set(scheduler="dask.distributed"),
    ):
        X, _ = mixture_dask(args.n, args.d, args.clusters, args.seed)
        X = X.rechunk({0: args.chunk_rows}) if args.chunk_rows else X
        graph, labels, base = fit_under_fault(client, _model(args.n_hidden), X)
        runs = [base]
        for fault in args.faults:
            g, lab, record = fit_under_fault(client, _model(args.n_hidden), X, fault)
            record["graph_identical"] = same_graph(graph, g)
            record["labels_identical"] = bool(np.array_equal(labels, lab))
            runs.append(record)
    out = {
        "benchmark": "faults",
        "when": utc_now(),
        "machine": machine_info(),
        "n_samples": args.n,
        "n_features": args.d,
        "graph_edges": int(graph.nnz),
        "runs": runs,
    }
    print(json.dumps(out))
    if not all(r["killed_task"] for r in runs[1:]):
        sys.exit("a fault was not injected: its exchange never ran (one row chunk, no order?)")
    return out


def parse(argv=None):
    ap = cluster_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    ap.add_argument(
        "--faults",
        nargs="+",
        choices=("order", "reverse"),
        default=["order", "reverse"],
        help="exchanges to kill a worker in, one fit each",
    )
    return ap.parse_args(argv)


if __name__ == "__main__":
    main(parse())
