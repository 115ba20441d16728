"""The scale benchmarks in benchmarks/scale/ run end to end on small inputs (a few thousand rows,
small hidden layers, one-worker clusters): each run's record has the fields RESULTS.md's scale
tables are read from, with sane values. Not timing. Most start a LocalCluster of their own,
some several: those are slow. (bench_parallel: tests/test_bench_parallel.py.)"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import missing_dataset

ROOT = Path(__file__).resolve().parents[1]
#: a one-worker cluster of 1 GiB and a small mixture in several row chunks
SMALL = ["--workers", "1", "--worker-gb", "1"]


def _is_git_checkout():
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    return done.returncode == 0


needs_git = pytest.mark.skipif(not _is_git_checkout(), reason="needs the repository's git history")


def test_numpy_memory_on_mnist_rows():
    if missing_dataset("mnist"):
        pytest.skip(missing_dataset("mnist"))
    from benchmarks.scale import bench_numpy_memory as bench

    fit = "USELM(n_clusters=10, n_hidden=50, random_state=0)"
    out = bench.main(["--rows", "1000", "--copies", "2", "--fit", fit])
    assert out["shape"] == [2000, 784] and out["input_bytes"] == 2000 * 784 * 4
    assert out["peak_rss_mb"] >= out["rss_before_fit_mb"] > 0
    assert out["peak_over_input"] == round(out["peak_rss_mb"] * 2**20 / out["input_bytes"], 2)
    stages = out["stage_peak_rss_mb"]
    assert set(out["timings"]) <= set(stages) and "before_fit" in stages
    assert all(mb is None or mb <= out["peak_rss_mb"] for mb in stages.values())
    assert 0.2 < out["acc"] <= 1  # ten digits: chance is about 0.1


@pytest.mark.slow
@needs_git
def test_revisions_times_this_checkout_against_head(tmp_path):
    """As the main engineer runs it: compare_revisions --time, from the repository root."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(600, n_features=8, centers=3, random_state=0)
    np.savez(tmp_path / "blobs.npz", X=255 * (X - X.min()) / np.ptp(X), y=y)  # read as X / 255
    fit = "USELM(n_clusters=3, n_hidden=30, random_state=0)"
    argv = ["--rev", "HEAD", "--rounds", "1", "--fits", "1", "--fit", fit]
    cmd = [sys.executable, "-m", "benchmarks.quality.compare_revisions", "--time", *argv]
    done = subprocess.run(
        [*cmd, "--data", str(tmp_path / "blobs.npz")], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    (round_,) = out["ratio_this_over_rev_per_round"]
    (ratio,) = round_["ratios"]
    assert out["rev"] == "HEAD" and round_["data"].endswith("blobs.npz") and ratio > 0


@pytest.mark.distributed
def test_graph_of_a_small_subspace_set(tmp_path):
    from benchmarks.scale import bench_graph as bench

    out = tmp_path / "graph.jsonl"
    argv = ["--data", "subspace:4000", "--backends", "cells", "--rounds", "1", "--no-warm"]
    (row,) = bench.main([*argv, *SMALL, "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(row, default=float))
    assert (row["data"], row["backend"], row["n"], row["d"]) == ("subspace:4000", "cells", 4000, 50)
    assert row["cold_s"] > 0 and "warm_s" not in row and row["worker_peak_mb"][0] > 0
    # 4,000 rows, 10 clusters on 6-d subspaces: the fixed search finds nearly every neighbour
    assert 0.9 < row["recall"] <= 1 and 0.9 < row["recall_estimate"] <= 1


@pytest.mark.slow
@pytest.mark.distributed
def test_scale_writes_parquet_and_fits_uselm_from_it(tmp_path):
    """US-ELM read from the files bench_scale wrote, with its stages, graph halo and recall."""
    from benchmarks.scale import bench_scale as bench

    small = ["--n", "6000", "--d", "10", "--n-hidden", "50", "--chunk-rows", "1500", *SMALL]
    path = tmp_path / "mix"
    written = bench.main([*small, "--write", f"parquet:{path}"])
    assert written["rows"] == 6000 and len(list(path.glob("*.parquet"))) > 1
    (res,) = bench.main([*small, "--estimator", "USELM", "--input", f"parquet:{path}", "--floors"])
    assert set(res["stages_s"]) >= {"hidden", "graph", "gram", "solve", "embed_cluster"}
    floors = res["floors_s"]  # every timed stage but the solve has a same-run floor
    assert set(floors) == set(res["stages_s"]) - {"solve"} | {"hth"} and min(floors.values()) > 0
    for stage, ratio in res["over_floor"].items():
        assert ratio == pytest.approx(res["stages_s"][stage] / floors[stage], abs=0.01)
    assert res["fit_over_floor"] == pytest.approx(res["fit_s"] / floors["hth"], abs=0.01)
    assert res["fit_s"] > 0 and 0.15 < res["acc"] <= 1 and res["n"] == 6000
    assert res["n_chunks"] > 1 and res["halo_rows"] > 0 and 0 < res["recall"] <= 1
    assert res["worker_peak_mb"][0] > 0 and res["client_rss_mb_by_stage"]["before_fit"] > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_scale_fits_a_clusterer_and_sselm(tmp_path):
    """Clusterers are scored from the workers' contingency table, SS-ELM on its unlabelled
    rows (1 % labelled)."""
    from benchmarks.scale import bench_scale as bench

    small = ["--n", "6000", "--d", "10", "--n-hidden", "50", "--chunk-rows", "1500", *SMALL]
    for name, score in (("USELM", "acc"), ("SSELM", "accuracy")):
        (out,) = bench.main([*small, "--estimator", name])
        assert out["estimator"] == name and out["n"] == 6000 and out["params"]["n_hidden"] == 50
        assert 0.15 < out[score] <= 1  # 10 balanced classes: chance is 0.1
        assert out["fit_s"] > 0 and out["stages_s"] and out["workers_restarted"] == 0
        assert out["worker_peak_mb"][0] > 0 and out["spilled_mb"] == [0.0]
