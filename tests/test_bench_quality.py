"""The quality benchmarks in benchmarks/quality/ run end to end on small inputs (iris, a few
seeds; MNIST-1M's first 2,000 rows) and write the records RESULTS.md's quality tables are read
from. Not timing. (bench_mnist1m's options and store: tests/test_bench_mnist1m.py.)"""

import csv
import json

import numpy as np
import pytest

from .conftest import missing_dataset


def _table(text):
    """The rows of a Markdown table, as lists of cells, by their first cell."""
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_quality_peers_estimators_and_report(tmp_path, monkeypatch, capsys):
    """Fresh records go in the results folder and are skipped when there; the report takes
    them for their cells and RESULTS.md's per-set means (reference_means.csv) for the rest."""
    from benchmarks.quality import bench_quality as bench

    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    argv = ["--datasets", "iris", "--seeds", "1"]
    bench.main(["peers", *argv, "--methods", "KMeans,SpectralClustering"])
    bench.main(["estimators", *argv, "--methods", "USELM,EMMC"])
    peers = json.loads((tmp_path / "quality_peers.json").read_text())
    ests = json.loads((tmp_path / "quality_estimators.json").read_text())
    records = peers["records"] + ests["records"]
    assert {(r["dataset"], r["method"], r["seed"]) for r in records} == {
        ("iris", m, 0) for m in ("KMeans", "SpectralClustering", "USELM", "EMMC")
    }
    assert all(0.6 < r["acc"] <= 1 and 0 < r["nmi"] <= 1 and r["seconds"] > 0 for r in records)
    bench.main(["peers", *argv, "--methods", "KMeans"])  # done already: nothing fitted
    again = json.loads((tmp_path / "quality_peers.json").read_text())
    assert again["records"] == peers["records"]

    capsys.readouterr()
    bench.main(["report", "--datasets", "iris,wine", "--methods", "KMeans,UMAP+KMeans"])
    table = _table(capsys.readouterr().out)
    assert table["dataset"] == ["KMeans", "UMAP+KMeans"]
    kmeans = {r["method"]: r for r in records}["KMeans"]["acc"]
    # iris: KMeans fresh (seed 0), UMAP + KMeans from the reference; wine: both reference
    assert table["iris"] == [f"{100 * kmeans:.1f}", "82.8"]
    assert table["wine"] == ["96.6", "92.7"]  # RESULTS.md's quality table


def test_seeds_fit_and_predict_on_iris_then_a_peer(tmp_path, capsys):
    """``--predict`` on the training rows gives ``labels_`` back (RESULTS.md: equal on every
    row); an interrupted run resumes from the CSV file; ``--peer`` fits KMeans instead."""
    from benchmarks.quality import bench_seeds as bench

    path = tmp_path / "seeds.csv"
    argv = ["--datasets", "iris", "--csv", str(path)]
    rows = bench.main([*argv, "--seeds", "2", "--unseeded", "1", "--predict"])
    assert [(r["seed"], r["mode"]) for r in rows] == [("0", "predict"), ("1", "predict")] + [
        ("none-0", "predict")
    ]
    for r in rows:
        assert int(r["n"]) == 150 and 0.8 < float(r["acc"]) <= 1 and int(r["n_components"]) >= 3
        assert float(r["agree"]) == 1.0 and 0.9 < float(r["agree_moved"]) <= 1
    assert "| iris | - | predict | 3 |" in capsys.readouterr().out
    assert bench.main([*argv, "--seeds", "2", "--unseeded", "0", "--predict"]) == rows

    rows = bench.main([*argv, "--seeds", "1", "--unseeded", "0", "--peer", "KMeans"])
    (peer,) = [r for r in rows if r["mode"] == "peer"]
    assert (peer["tag"], peer["seed"], peer["n_components"]) == ("KMeans", "0", "0")
    with open(path, newline="") as f:
        assert tuple(next(csv.reader(f))) == bench.FIELDS


@pytest.mark.slow
@pytest.mark.distributed
def test_mnist1m_on_its_first_rows(tmp_path):
    """The rows written once to a Zarr store, reused by the next run, fitted on a cluster and
    scored with KMeans beside; every stage of the fit timed. Not run without mnist.npz."""
    if missing_dataset("mnist"):
        pytest.skip(missing_dataset("mnist"))
    from benchmarks.quality import bench_mnist1m as bench

    store, out = tmp_path / "rows", tmp_path / "mnist1m.json"
    small = ["--n-samples", "2000", "--workers", "1", "--worker-gb", "2", "--store", str(store)]
    bench.main([*small, "--generate-only", "--json", str(out)])
    assert json.loads(out.read_text())["generate"]["reused"] is False
    bench.main([*small, "--kmeans", "kmeans", "--set", "n_hidden=100", "--json", str(out)])
    record = json.loads(out.read_text())
    assert record["generate"]["reused"] is True
    uselm = record["uselm"]
    assert set(uselm["stages_s"]) >= {"hidden", "graph", "gram", "solve", "embed_cluster"}
    assert uselm["params"]["n_hidden"] == 100 and uselm["fit_s"] > 0
    assert 0.2 < uselm["acc"] <= 1 and 0.2 < record["kmeans"]["kmeans"]["acc"] <= 1
    assert np.all(np.asarray(uselm["worker_peak_mb"]) > 0)


def test_compare_revisions_finds_head_identical_to_itself():
    from benchmarks.quality import compare_revisions as bench

    rows = bench.main(["--rev", "HEAD", "--datasets", "iris", "--estimators", "USELM,SSELM"])
    assert [(r["dataset"], r["estimator"]) for r in rows] == [("iris", "USELM"), ("iris", "SSELM")]
    assert all(r["labels_identical"] and r["labels_differing"] == 0 for r in rows)
    assert rows[0]["embedding_max_abs_diff"] == 0.0
