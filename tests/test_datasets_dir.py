"""Where the real datasets come from: ``$ELMSCALE_DATASETS`` or ``../shared/datasets``; a
test without its file skips and pytest's summary says which file and where it looked."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from .conftest import missing_dataset

REPO = Path(__file__).resolve().parents[1]


def _run(args, datasets):
    env = {**os.environ, "ELMSCALE_DATASETS": str(datasets), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_elmscale_datasets_names_the_folder(tmp_path):
    rng = np.random.RandomState(0)
    np.savez(tmp_path / "tiny.npz", X=rng.normal(size=(7, 3)), y=np.arange(7) % 2)
    code = (
        "from benchmarks._common import DATASETS_DIR, load_dataset\n"
        "X, y = load_dataset('tiny')\n"
        "print(DATASETS_DIR, X.shape, y.tolist(), sep='\\n')"
    )
    done = _run(["-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(tmp_path), "(7, 3)", "[0, 1, 0, 1, 0, 1, 0]"]


def test_missing_dataset_says_where_it_looked_and_how_to_point_elsewhere():
    reason = missing_dataset("no-such-set")
    assert "no-such-set.npz not found in" in reason and "ELMSCALE_DATASETS" in reason


def test_pytest_summary_lists_why_a_data_test_skipped(tmp_path):
    """What a fresh clone sees: the skip reason names the file, the folder and the variable."""
    done = _run(
        ["-m", "pytest", "tests/test_deformed_mnist.py", "-q", "-ra", "-p", "no:cacheprovider"],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"dataset mnist.npz not found in {tmp_path} (set ELMSCALE_DATASETS" in done.stdout
    assert "skipped" in done.stdout.splitlines()[-1]
