"""Wall time of the same fit at two git revisions, in fresh processes, alternated.

    python -m benchmarks.scale.bench_revisions --rev a588545 --rounds 3
    python -m benchmarks.scale.bench_revisions --rev main~2 --fit "USELM(n_clusters=3)"
    python -m benchmarks.scale.bench_revisions --rev 03dcb6b --fits 1 --rounds 2 \
        --data mixture:1000000 --data subspace:1000000 \
        --fit "USELM(n_clusters=10, n_hidden=1000, n_components=9, random_state=0)"

The other revision is checked out into a temporary git worktree. Each round runs one process per
revision (this checkout first in even rounds, ``--rev`` first in odd ones), each importing its
own ``elmscale`` and fitting ``--fit`` (an expression over the names of ``elmscale``; default
``USELM(n_clusters=10, random_state=0)``) ``--fits`` times on each ``--data``: MNIST-70k (pixels
/ 255, float32 NumPy input, the default) or an ``.npz`` path, or ``mixture:N`` / ``subspace:N``,
N generated rows of :mod:`benchmarks._mixture` (the 50-d mixture, or 10 clusters on 6-d
subspaces) as a float32 dask array persisted on a LocalCluster of ``--workers`` single-threaded
workers started in the process before the clock starts. The first fit includes the process's
warm-up (imports, JIT), the later ones do not. Each round alternates the revisions on each data.
This host's speed drifts between minutes, so only the ratios within a round mean much. Prints
one JSON line per process and a summary with the per-round ratios. Run it alone on the machine.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks._common import DATASETS_DIR, REPO_ROOT, machine_info, revision_checkout, utc_now

CHILD = """
import json, sys, time
import numpy as np
import elmscale
spec, fit, n_fits, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
kind, _, n = spec.partition(":")
if kind in ("mixture", "subspace"):
    from distributed import Client, LocalCluster
    from benchmarks._mixture import generated_dask, mixture_chunk, subspace_chunk
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, memory_limit="10GB", dashboard_address=None
    )
    client = Client(cluster)
    chunk_fn = mixture_chunk if kind == "mixture" else subspace_chunk
    X = generated_dask(chunk_fn, int(n))[0].persist()
    client.wait_for_workers(workers)
    X.sum().compute()
else:
    data = np.load(spec)
    X = (data["X"] / 255).astype(np.float32)
names = {name: getattr(elmscale, name) for name in elmscale.__all__}  # estimators load lazily
walls = []
for _ in range(n_fits):
    model = eval(fit, names)
    t0 = time.perf_counter()
    model.fit(X)
    walls.append(time.perf_counter() - t0)
timings = {k: round(v, 2) for k, v in getattr(model, "timings_", {}).items()}
print(json.dumps({"data": spec, "walls": walls, "timings": timings}))
"""


#: ``--data`` kinds generated on a LocalCluster: ``kind:N``
GENERATED = ("mixture", "subspace")


def fit_once(checkout, args, data):
    """One fresh interpreter importing the ``elmscale`` of ``checkout``: its fits' walls on
    ``data`` (a path or a generated spec)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, data, args.fit, str(args.fits), str(args.workers)],
        env=env,
        cwd=checkout,  # "" heads sys.path: the checkout's own elmscale, not the caller's
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", required=True, help="the git revision to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fits", type=int, default=2, help="fits per process")
    ap.add_argument("--fit", default="USELM(n_clusters=10, random_state=0)")
    ap.add_argument(
        "--data",
        action="append",
        help="an .npz path, mixture:N or subspace:N (repeatable; default MNIST-70k)",
    )
    ap.add_argument("--workers", type=int, default=2, help="workers for generated data")
    args = ap.parse_args(argv)
    args.data = args.data or [str(DATASETS_DIR / "mnist.npz")]
    for spec in args.data:
        if spec.partition(":")[0] not in GENERATED and not Path(spec).exists():
            sys.exit(f"{spec} not found")
    rounds = []
    with revision_checkout(args.rev) as other:
        for r in range(args.rounds):
            for data in args.data:
                # odd rounds run the other revision first: a slot that is slower whatever
                # runs in it (the first fit after data is generated) then weighs on both
                # revisions alike
                order = [("this checkout", REPO_ROOT), (args.rev, other)][:: (-1) ** r]
                res = {name: fit_once(root, args, data) for name, root in order}
                for name, _ in order:
                    print(json.dumps({"round": r, "revision": name, **res[name]}), flush=True)
                here, there = res["this checkout"], res[args.rev]
                ratios = [h / t for h, t in zip(here["walls"], there["walls"], strict=True)]
                rounds.append({"round": r, "data": data, "ratios": ratios})
    out = {
        "benchmark": "revisions",
        "when": utc_now(),
        "machine": machine_info(),
        "fit": args.fit,
        "rev": args.rev,
        "ratio_this_over_rev_per_round": [
            {**r, "ratios": [round(x, 3) for x in r["ratios"]]} for r in rounds
        ],
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
