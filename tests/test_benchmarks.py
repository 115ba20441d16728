"""The benchmark scripts stay runnable as documented in benchmarks/README.md: every one imports
(with its shared helpers and the scripts it reuses) when run from the repository root as
``python -m benchmarks.<folder>.<script>``, and ``--help`` works that way."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in (ROOT / "benchmarks").rglob("*.py")
)


def _run(*args):
    # a fresh interpreter in the repository root, as a reader of the README runs the scripts
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_every_benchmark_module_imports_from_the_repository_root():
    assert len(MODULES) > 20
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)"
    done = _run("-c", code, *MODULES)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_script_runs_as_a_module():
    done = _run("-m", "benchmarks.quality.bench_seeds", "--help")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--seeds" in done.stdout


def test_rule_tables_choose_each_left_out_set_by_the_others_worst_and_mean():
    """The rule chosen with a set left out is the best on the other sets by (mean + worst) / 2,
    so a rule that is best on average but collapses on one seed is not chosen."""
    import numpy as np

    from benchmarks._common import rule_tables

    acc = {
        "steady": {"a": [0.80, 0.80], "b": [0.80, 0.80], "c": [0.78, 0.78]},
        "erratic": {"a": [1.00, 0.70], "b": [1.00, 0.70], "c": [1.00, 0.70]},
    }
    lines = rule_tables(list(acc), ["a", "b", "c"], lambda r, s: np.array(acc[r][s]), "erratic")
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert rows["steady"].endswith("| 79.3 |")  # the mean over the sets of each set's mean
    left_out = [line for line in lines if line.startswith(("| a |", "| b |", "| c |"))]
    # erratic has the higher mean on every set, steady the higher (mean + worst) / 2
    assert [line.split(" | ")[1] for line in left_out] == ["steady"] * 3
    assert left_out[0].endswith("| 80.0 (80.0) | 85.0 (70.0) |")
