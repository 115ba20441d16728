"""Wall time of the same fit at two git revisions, in fresh processes, alternated.

    python -m benchmarks.scale.bench_revisions --rev a588545 --rounds 3
    python -m benchmarks.scale.bench_revisions --rev main~2 --fit "USELM(n_clusters=3)"

The other revision is checked out into a temporary git worktree. Each round runs one process
per revision (this checkout, then ``--rev``), each importing its own ``elmscale`` and fitting
``--fit`` (an expression over the names of ``elmscale``; default ``USELM(n_clusters=10,
random_state=0)``) on MNIST-70k (pixels / 255, float32 NumPy input) ``--fits`` times: the first fit
includes the process's warm-up, the later ones do not. This host's speed drifts between
minutes, so only the ratios within a round mean much. Prints one JSON line per process and a
summary with the per-round ratios. Run it alone on the machine.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import DATASETS_DIR, REPO_ROOT, machine_info, utc_now

CHILD = """
import json, sys, time
import numpy as np
import elmscale
data = np.load(sys.argv[1])
X = (data["X"] / 255).astype(np.float32)
walls = []
for _ in range(int(sys.argv[3])):
    model = eval(sys.argv[2], vars(elmscale))
    t0 = time.perf_counter()
    model.fit(X)
    walls.append(time.perf_counter() - t0)
print(json.dumps({"walls": walls, "timings": getattr(model, "timings_", {})}))
"""


def fit_once(checkout, args):
    """One fresh interpreter importing the ``elmscale`` of ``checkout``: its fits' walls."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(args.data), args.fit, str(args.fits)],
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
    ap.add_argument("--data", type=Path, default=DATASETS_DIR / "mnist.npz")
    args = ap.parse_args(argv)
    if not args.data.exists():
        sys.exit(f"{args.data} not found")
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other"
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(other), args.rev],
            check=True,
            capture_output=True,
        )
        try:
            rounds = []
            for r in range(args.rounds):
                here, there = fit_once(REPO_ROOT, args), fit_once(other, args)
                for name, res in (("this checkout", here), (args.rev, there)):
                    print(json.dumps({"round": r, "revision": name, **res}), flush=True)
                rounds.append([h / t for h, t in zip(here["walls"], there["walls"], strict=True)])
        finally:
            subprocess.run(
                ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(other)],
                check=False,
                capture_output=True,
            )
    print(
        json.dumps(
            {
                "benchmark": "revisions",
                "when": utc_now(),
                "machine": machine_info(),
                "fit": args.fit,
                "rev": args.rev,
                "ratio_this_over_rev_per_round": [[round(x, 3) for x in r] for r in rounds],
            }
        )
    )


if __name__ == "__main__":
    main()
