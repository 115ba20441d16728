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
