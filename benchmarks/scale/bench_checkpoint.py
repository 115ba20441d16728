"""A US-ELM fit killed mid-Gram-pass and run again with its checkpoint, against an
uninterrupted fit.

    python -m benchmarks.scale.bench_checkpoint [--n-samples 200000] [--kill-at gram]

Each fit runs in a fresh interpreter (a 2-worker LocalCluster, the mixture of
benchmarks/_mixture.py generated on the workers, ``USELM(n_clusters=10, random_state=0)``):

1. the full fit, without a checkpoint;
2. the same fit with ``checkpoint=DIR``, whose whole process group (the client and its
   cluster) gets SIGKILL once the stage named by ``--kill-at`` is on disk: ``graph`` (the
   graph's manifest), ``gram`` (``--kill-partials`` partial sums of the Gram pass written, by
   default 2: half the pass at 200,000 rows in 4 chunks);
3. the same command again, which resumes from DIR.

Prints one JSON line: wall seconds of each run (interpreter, cluster start, data fingerprint
and fit; the fit's own seconds and ``timings_`` too), the resumed run's share of the full
one, the checkpoint's size, and whether the resumed labels equal the full fit's.
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
    from benchmarks._common import local_cluster
    from elmscale import USELM

    with local_cluster(args.workers, args.worker_gb, dashboard_address=None):
        X, _ = mixture_dask(args.n_samples, n_features=args.features)
        t0 = time.perf_counter()
        kw = {"checkpoint": args.checkpoint} if args.checkpoint else {}
        model = USELM(n_clusters=10, random_state=0).fit(X, **kw)
        labels = np.asarray(model.labels_.compute())
        seconds = time.perf_counter() - t0
    np.save(args.labels, labels)
    print(json.dumps({"fit_seconds": round(seconds, 2), "timings": model.timings_}))


def _kill_condition(args, folder):
    if args.kill_at == "graph":
        return lambda: bool(glob.glob(os.path.join(folder, "*-graph", "manifest.json")))
    pattern = os.path.join(folder, "*-gram", "partials-*", "*.pkl")
    return lambda: len(glob.glob(pattern)) >= args.kill_partials


def run(args, labels, checkpoint=None, kill=None):
    """One fit in a fresh interpreter (its own session): ``(wall seconds, JSON or None)``,
    killed with its cluster once ``kill()`` is true."""
    cmd = [sys.executable, "-m", "benchmarks.scale.bench_checkpoint", "--child"]
    cmd += ["--n-samples", str(args.n_samples), "--features", str(args.features)]
    cmd += ["--workers", str(args.workers), "--worker-gb", str(args.worker_gb)]
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
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        tmp = Path(tmp)
        ckpt = tmp / "checkpoint"
        full_wall, full = run(args, tmp / "full.npy")
        kill_wall, killed = run(args, tmp / "killed.npy", ckpt, _kill_condition(args, ckpt))
        stages = sorted(p.name for p in ckpt.iterdir())
        resume_wall, resumed = run(args, tmp / "resumed.npy", ckpt)
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
        same = bool(np.array_equal(np.load(tmp / "full.npy"), np.load(tmp / "resumed.npy")))
    print(
        json.dumps(
            {
                "benchmark": "checkpoint",
                "when": utc_now(),
                "machine": machine_info(),
                "n_samples": args.n_samples,
                "n_features": args.features,
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
                "labels_identical": same,
            }
        )
    )


def parse(argv=None):
    ap = cluster_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    ap.add_argument("--kill-at", choices=("graph", "gram"), default="gram")
    ap.add_argument("--kill-partials", type=int, default=2)
    ap.add_argument("--tmp", default=None, help="folder for the checkpoint and labels")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--labels", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    child(arguments) if arguments.child else main(arguments)
