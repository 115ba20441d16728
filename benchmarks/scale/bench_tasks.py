"""Tasks, client memory and bytes moved by the kNN graph and a US-ELM fit, against the number
of row chunks, on a 2-worker LocalCluster (processes x 1 thread).

    python -m benchmarks.scale.bench_tasks --rows 200000 --chunks 100 250 1000
    python -m benchmarks.scale.bench_tasks --rows 1000000 --chunks 100 250 1000 --what graph
    python -m benchmarks.scale.bench_tasks --rows 200000 --chunks 4 --what fit --repeats 3 \\
        --code new=. --code old=/tmp/old      # alternate two versions of elmscale, after
    git archive <commit> elmscale | tar -x -C /tmp/old

Each measurement runs in a fresh process with a fresh cluster: the data (the 50-d Gaussian
mixture of ``benchmarks/_mixture.py``, generated on the workers and cut into ``--chunks``
row chunks) is persisted first, untimed; then ``knn_graph(X, 10)`` (``--what graph``: the
graph's blocks persisted) or ``USELM(n_clusters=10).fit(X)`` (``--what fit``) runs under
distributed's task stream. Recorded: wall seconds, tasks run (in all and by key prefix), the
client process's peak RSS, and the bytes the workers sent each other
(``transfer_outgoing_bytes_total``). ``--graph-chunks data`` builds the graph on X's own
chunks (the ``graph_chunks`` setting), as on a cluster with as many workers as chunks;
``auto`` joins small chunks. ``--code label=DIR`` imports elmscale from DIR in that run
(a directory holding an ``elmscale`` package and no ``benchmarks``, e.g. an exported earlier
commit), so that versions alternate within one run on the same
machine; versions without the ``graph_chunks`` setting always use their own default.
"""

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import time

from benchmarks._common import local_cluster, machine_info, results_file, utc_now


def _sent_bytes(dask_worker):
    return dask_worker.transfer_outgoing_bytes_total


def _elmscale_dir():
    import elmscale

    return os.path.dirname(elmscale.__file__)


def _total_sent(client):
    return sum(client.run(_sent_bytes).values())


def _data(rows, chunks):
    from benchmarks._mixture import mixture_dask

    X, _ = mixture_dask(rows)
    return X.rechunk({0: -(-rows // chunks)})


def _work(what, X):
    from elmscale.algorithms import USELM
    from elmscale.graph import knn_graph

    if what == "graph":
        return lambda: knn_graph(X, 10, random_state=0)
    return lambda: USELM(n_clusters=10, random_state=0).fit(X)


def one_run(args):
    """One measurement in this process: a dict of the figures."""
    import contextlib

    from dask.utils import key_split
    from distributed import get_task_stream

    import elmscale

    setting = contextlib.nullcontext()
    if args.graph_chunks == "data" and "graph_chunks" in elmscale.get_config():
        setting = elmscale.config_context(graph_chunks="data")
    with local_cluster(2, args.worker_gb, dashboard_address=None) as client, setting:
        X = _data(args.rows, args.chunks).persist()
        worker_code = set(client.run(_elmscale_dir).values())
        sent = _total_sent(client)
        work = _work(args.what, X)
        t0 = time.perf_counter()
        with get_task_stream() as stream:
            work()
        seconds = time.perf_counter() - t0
        sent = _total_sent(client) - sent
        prefixes = collections.Counter(key_split(t["key"]) for t in stream.data)
    return {
        "what": args.what,
        "rows": args.rows,
        "chunks": args.chunks,
        "graph_chunks": args.graph_chunks,
        "elmscale": os.path.dirname(elmscale.__file__),
        "worker_elmscale": sorted(worker_code),
        "seconds": round(seconds, 2),
        "tasks": sum(prefixes.values()),
        "client_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "bytes_moved_mb": round(sent / 2**20, 1),
        "top_prefixes": prefixes.most_common(8),
    }


def _one_command(args, chunks, what, code):
    cmd = [sys.executable, "-m", "benchmarks.scale.bench_tasks", "--one"]
    cmd += ["--rows", str(args.rows), "--chunks", str(chunks), "--what", what]
    cmd += ["--graph-chunks", args.graph_chunks, "--worker-gb", str(args.worker_gb)]
    return cmd + (["--code", code] if code else [])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[100, 250, 1000])
    parser.add_argument("--what", nargs="+", default=["graph", "fit"], choices=["graph", "fit"])
    parser.add_argument("--graph-chunks", default="data", choices=["data", "auto"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--worker-gb", type=float, default=6)
    parser.add_argument("--code", action="append", default=[], help="label=DIR (repeatable)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per measurement")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        args.chunks, args.what = args.chunks[0], args.what[0]
        if args.code:
            sys.path.insert(0, os.path.abspath(args.code[0]))
        print(json.dumps(one_run(args)))
        return
    codes = [c.split("=", 1) for c in args.code] or [("current", None)]
    out = {"machine": machine_info(), "started": utc_now(), "runs": []}
    print(json.dumps(out["machine"]))
    for repeat in range(args.repeats):
        for what in args.what:
            for chunks in args.chunks:
                for label, code in codes:  # versions alternate within each configuration
                    cmd = _one_command(args, chunks, what, code)
                    try:
                        done = subprocess.run(
                            cmd, capture_output=True, text=True, timeout=args.timeout, check=True
                        )
                    except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as exc:
                        print(f"{label} {what} {chunks} chunks: failed ({type(exc).__name__})")
                        continue
                    run = json.loads(done.stdout.strip().splitlines()[-1])
                    run.update(code=label, repeat=repeat)
                    out["runs"].append(run)
                    print(
                        f"{label:8s} {what:5s} {chunks:5d} chunks: {run['tasks']:7d} tasks "
                        f"{run['seconds']:8.1f} s  client {run['client_peak_rss_mb']:5d} MB  "
                        f"moved {run['bytes_moved_mb']:8.1f} MB",
                        flush=True,
                    )
    path = results_file(f"tasks-{args.rows}.json")
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
