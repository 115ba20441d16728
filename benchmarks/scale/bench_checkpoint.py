"""A fit killed midway and run again with its checkpoint, against an uninterrupted fit.

    python -m benchmarks.scale.bench_checkpoint [--n-samples 200000] [--estimator USELM]
        [--kill-at gram]

Each fit runs in a fresh interpreter (a 2-worker LocalCluster, the mixture of
benchmarks/_mixture.py generated on the workers, ``USELM`` or ``ELMJEC`` with
``n_clusters=10, random_state=0``; ``--chunk-rows`` and ``--n-hidden`` for smaller runs):

1. the full fit, without a checkpoint;
2. the same fit with ``checkpoint=DIR``, whose whole process group (the client and its
   cluster) gets SIGKILL once the stage named by ``--kill-at`` is on disk: ``graph`` (the
   graph's manifest), ``gram`` (``--kill-partials`` partial sums of the Gram pass written, by
   default 2: half the pass at 200,000 rows in 4 chunks), ``iteration`` (ELM-JEC:
   ``--kill-iterations`` iterations' states written, by default 1);
3. the same command again, which resumes from DIR.

Prints one JSON line: wall seconds of each run (interpreter start to exit) and, inside it,
the cluster's start and the fit's own seconds with its ``timings_`` (the data's fingerprint
is in the first stage's); the resumed run's share of the full one, the checkpoint's size,
and whether the resumed labels (and ELM-JEC's objective and iteration count) equal the full
fit's.
"""

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._common import REPO_ROOT, cluster_arguments, machine_info, utc_now
from benchmarks._mixture import mixture_dask


def child(args):
    """One fit in this process: labels to ``args.labels``, one JSON line of timings."""
    import elmscale
    from benchmarks._common import local_cluster

    t0 = time.perf_counter()
    with local_cluster(args.workers, args.worker_gb, dashboard_address=None):
        t1 = time.perf_counter()
        X, _ = mixture_dask(args.n, args.d, args.clusters, args.seed)
        X = X.rechunk({0: args.chunk_rows}) if args.chunk_rows else X
        kw = {"checkpoint": args.checkpoint} if args.checkpoint else {}
        params = {"n_hidden": args.n_hidden} if args.n_hidden else {}
        model = getattr(elmscale, args.estimator)(n_clusters=10, random_state=0, **params)
        model.fit(X, **kw)
        labels = np.asarray(model.labels_.compute())
        t2 = time.perf_counter()
    np.save(args.labels, labels)
    out = {"cluster_start_s": round(t1 - t0, 2), "fit_seconds": round(t2 - t1, 2)}
    out["cluster_close_s"] = round(time.perf_counter() - t2, 2)
    out["timings"] = {k: round(v, 2) for k, v in model.timings_.items()}
    for name in ("n_iter_", "objective_"):
        if hasattr(model, name):
            out[name.rstrip("_")] = float(getattr(model, name))
    print(json.dumps(out))


def _kill_condition(args, folder):
    if args.kill_at == "graph":
        return lambda: bool(glob.glob(os.path.join(folder, "*-graph", "manifest.json")))
    if args.kill_at == "iteration":
        pattern = os.path.join(folder, "*-iteration-*", "manifest.json")
        return lambda: len(glob.glob(pattern)) >= args.kill_iterations
    pattern = os.path.join(folder, "*-gram", "partials-*", "*.pkl")
    return lambda: len(glob.glob(pattern)) >= args.kill_partials


def run(args, labels, checkpoint=None, kill=None):
    """One fit in a fresh interpreter (its own session): ``(wall seconds, JSON or None)``,
    killed with its cluster once ``kill()`` is true."""
    cmd = [sys.executable, "-m", "benchmarks.scale.bench_checkpoint", *args.argv, "--child"]
    cmd += ["--labels", str(labels)] + (["--checkpoint", str(checkpoint)] if checkpoint else [])
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    log = open(Path(labels).with_suffix(".log"), "w")  # noqa: SIM115 - closed below
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        start_new_session=True,
        text=True,
    )
    while kill is not None and proc.poll() is None:
        if kill():
            os.killpg(proc.pid, signal.SIGKILL)  # the client, its scheduler and workers
            break
        time.sleep(0.1)
    out, _ = proc.communicate()
    wall = time.perf_counter() - t0
    log.close()
    if proc.returncode != 0:
        if kill is None:
            sys.exit(Path(log.name).read_text()[-3000:])
        return wall, None
    return wall, json.loads(out.strip().splitlines()[-1])


def main(args):
    if args.tmp is not None:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        tmp = Path(tmp)
        ckpt = tmp / "checkpoint"
        full_wall, full = run(args, tmp / "full.npy")
        kill_wall, killed = run(args, tmp / "killed.npy", ckpt, _kill_condition(args, ckpt))
        stages = sorted(p.name for p in ckpt.iterdir())
        resume_wall, resumed = run(args, tmp / "resumed.npy", ckpt)
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
        same = bool(np.array_equal(np.load(tmp / "full.npy"), np.load(tmp / "resumed.npy")))
    if same and "objective" in full:  # an iterative fit: the same path to the same end
        same = all(full[k] == resumed[k] for k in ("objective", "n_iter"))
    out = {
        "benchmark": "checkpoint",
        "when": utc_now(),
        "machine": machine_info(),
        "n_samples": args.n,
        "n_features": args.d,
        "estimator": args.estimator,
        "kill_at": args.kill_at,
        "killed": killed is None,
        "stages_on_disk_at_kill": stages,
        "full_wall_s": round(full_wall, 2),
        "time_to_kill_s": round(kill_wall, 2),
        "resume_wall_s": round(resume_wall, 2),
        "resume_over_full": round(resume_wall / full_wall, 3),
        "full": full,
        "resumed": resumed,
        "checkpoint_mb": round(size / 1e6, 1),
        "result_identical": same,
    }
    print(json.dumps(out))
    return out


def parse(argv=None):
    ap = cluster_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    ap.add_argument("--estimator", choices=("USELM", "ELMJEC"), default="USELM")
    ap.add_argument("--kill-at", choices=("graph", "gram", "iteration"), default="gram")
    ap.add_argument("--kill-partials", type=int, default=2)
    ap.add_argument("--kill-iterations", type=int, default=1)
    ap.add_argument(
        "--tmp", default=None, help="folder for the checkpoint and labels (created if missing)"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--labels", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the child runs with the same
    return args


if __name__ == "__main__":
    arguments = parse()
    if arguments.kill_at == "iteration" and arguments.estimator != "ELMJEC":
        sys.exit("--kill-at iteration needs --estimator ELMJEC (US-ELM does not iterate)")
    child(arguments) if arguments.child else main(arguments)
