"""The papers' protocols in benchmarks/paper/ run end to end on small inputs: one set, one or
two seeds, a few settings; each run's record holds what the tables in benchmarks/paper/RESULTS.md
are read from. Not timing. (bench_sselm's runs: tests/test_bench_sselm.py.)"""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import missing_dataset

ROOT = Path(__file__).resolve().parents[1]


def _needs(name):
    if missing_dataset(name):
        pytest.skip(missing_dataset(name))


def _lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_uselm_accuracy_grid_and_spectral_on_iris(tmp_path):
    from benchmarks.paper import bench_uselm_accuracy as bench

    out = tmp_path / "grid.json"
    (grid,) = bench.main(["--mode", "grid", "--quick", "--datasets", "iris", "--json", str(out)])
    assert grid["dataset"] == "iris" and grid["n_hidden"] == 1000 and grid["seeds"] == [0, 1]
    acc = np.array(grid["acc"])  # seeds x lam x n_o: the --quick grid
    assert acc.shape == (2, 3, 3) and ((acc > 0.3) & (acc <= 1)).all()
    best = grid["best"]
    assert best["acc_mean"] == pytest.approx(acc.mean(axis=0).max())
    assert (best["lam"], best["n_o"]) in itertools.product((1e-2, 1.0, 1e2), (2, 8, 32))
    assert json.loads(out.read_text())["results"] == [grid]

    (spectral,) = bench.main(["--mode", "spectral", "--seeds", "2", "--datasets", "iris"])
    assert len(spectral["acc"]) == 2 and min(spectral["acc"]) > 0.6


def test_elmjec_table_and_report_on_iris(tmp_path, capsys):
    from benchmarks.paper import bench_elmjec as bench

    out = tmp_path / "elmjec.jsonl"
    argv = ["--datasets", "iris", "--grid", "tiny", "--runs", "1", "--n-hidden", "100"]
    bench.main(["table", *argv, "--out", str(out)])
    (row,) = _lines(out)
    assert (row["dataset"], row["n"], row["c"], row["n_hidden"]) == ("iris", 150, 3, 100)
    assert row["n_settings"] == len(row["grid_scores"]) == 6  # 3 lam x 2 gamma x 1 n_o
    scores = [s for _, s, _, _ in row["grid_scores"] if s is not None]
    assert row["select_acc_seed0"] == max(scores)
    for key in ("elmjec_acc", "default_acc", "kmeans_acc", "uselm_acc"):
        assert len(row[key]) == 1 and 50 < row[key][0] <= 100, key  # ACC in %
    capsys.readouterr()
    bench.main(["report", "--out", str(out)])
    table = capsys.readouterr().out
    assert "| iris | 150 x 4, 3 | 97.20 |" in table  # beside the paper's figure


def test_elmjec_sweep_gives_every_setting_the_labels_of_its_own_fit(tmp_path):
    from benchmarks.paper import bench_elmjec as bench

    out = tmp_path / "elmjec.jsonl"
    res = bench.main(["sweep", "--dataset", "iris", "--n-hidden", "100", "--out", str(out)])
    assert res["n_settings"] == 18 and res["identical_labels"] == 18
    assert _lines(out) == [{"sweep": json.loads(json.dumps(res))}]


def test_emmc_tables_on_digits_one_against_seven(tmp_path):
    from benchmarks.paper import bench_emmc as bench

    out = tmp_path / "emmc.json"
    argv = ["--datasets", "Digits1-7", "--runs", "1", "--c-step", "10", "--json", str(out)]
    results = bench.main(argv)
    entry = results["tables"]["Digits1-7"]
    assert (entry["n"], entry["d"], entry["k"], entry["L"], entry["runs"]) == (361, 64, 2, 361, 1)
    assert sorted(entry["grid"]) == [-10, 0, 10]  # log2 C
    assert entry["tuned"] == entry["grid"][entry["best_log2C"]]
    assert all(entry["tuned"]["acc"] >= g["acc"] for g in entry["grid"].values())
    assert entry["default"]["acc"] > 0.9 and entry["paper_acc"] == 99.26
    assert json.loads(out.read_text())["tables"]["Digits1-7"]["k"] == 2


def test_emmc_timing_on_ringnorm(tmp_path):
    _needs("ringnorm")
    from benchmarks.paper import bench_emmc as bench

    out = tmp_path / "timing.jsonl"
    argv = ["--tables", "none", "--timing", "--timing-sets", "Ringnorm", "--timing-repeats", "1"]
    rows = bench.main([*argv, "--timing-out", str(out)])["timing"]
    settings = [(r["setting"], r["n_hidden"]) for r in rows]
    assert settings == [("defaults", 200), ("paper L, C=1", 300)]
    for r in rows:
        assert r["wall_s"] > 0 and r["speedup"] == pytest.approx(73.0 / r["wall_s"])
        assert r["acc"] > 0.9  # Ringnorm: EMMC's case (RESULTS.md: 97 %)
    assert [r["setting"] for r in _lines(out)] == ["defaults", "paper L, C=1"]


def _tumkelm(*argv):
    # a fresh interpreter: the script pins BLAS through the environment before NumPy loads
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.paper.bench_tumkelm", *map(str, argv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_tumkelm_repeats_on_iris(tmp_path):
    out = tmp_path / "repeats.jsonl"
    argv = ["--datasets", "iris", "--forms", "distance", "--assignments", "kmeans"]
    stdout = _tumkelm("repeats", *argv, "--seeds", "2", "--max-iter", "5", "--json", out)
    runs = _lines(out)
    assert [r["seed"] for r in runs] == [0, 1]
    for r in runs:
        assert (r["dataset"], r["mode"], r["protocol"]) == ("iris", "exact", "repeats")
        assert 0.6 < r["acc"] <= 1 and 0 < r["purity"] <= 1 and r["n_iter"] <= 5
        assert len(r["weights"]) == 15  # the paper's 15 base kernels
    assert "| iris | 150 | exact | minmax | distance | kmeans |" in stdout


def test_tumkelm_timing_on_iris_and_a_small_mixture(tmp_path):
    out = tmp_path / "timing.jsonl"
    _tumkelm("timing", "--datasets", "iris", "--repeats", "1", "--scale-n", "2000", "--json", out)
    iris, *mixture = _lines(out)
    assert (iris["dataset"], iris["mode"], iris["n"]) == ("iris", "exact", 150)
    assert [(r["mode"], r["n"]) for r in mixture] == [("scalable", 2000)] * 2
    assert all(r["seconds"] > 0 and 0 < r["acc"] <= 1 for r in (iris, *mixture))
