"""benchmarks/scale/bench_knn_consumers.py at a tiny N: one complete row per (consumer,
variant), scores in range, the exact graph's recall 1 and SpectralClustering's partition the
same on either graph; a run over its budget is recorded as such, not waited for. Not timing."""

import json

import pytest

from benchmarks.scale import bench_knn_consumers as bench

SMALL = ["--n", "1200", "--workers", "0", "--warmup-rows", "0", "--sample", "500"]


def _run(tmp_path, *extra):
    out = tmp_path / "rows.jsonl"
    rows = bench.main([*SMALL, "--recall-queries", "200", "--out", str(out), *extra])
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    return rows


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_every_consumer_gives_a_complete_row_for_each_variant(tmp_path):
    # installed by the test extra; skipped (with the reason) in an install without them
    pytest.importorskip("umap", reason="umap-learn is a consumer this benchmark runs")
    pytest.importorskip("pyamg", reason="SpectralClustering's amg solver needs pyamg")
    rows = _run(tmp_path, "--consumers", *bench.CONSUMERS)
    by = {(r["consumer"], r["variant"]): r for r in rows}
    assert len(rows) == len(by) == 6
    assert set(by) == {(c, v) for c in bench.CONSUMERS for v in bench.VARIANTS}
    graph_s = rows[0]["graph_s"]
    assert graph_s > 0
    for (consumer, variant), r in by.items():
        assert r["status"] == "ok", r
        assert r["n"] == 1200 and r["d"] == 50 and r["machine"]["cores"] >= 1
        assert len(r["load_average"]) == 3 and r["date"].endswith("UTC")
        # 1,200 rows: the transformer searches exactly
        assert r["graph_recall"] == 1.0 and r["graph_s"] == graph_s
        assert r["seconds"] > 0 and r["peak_rss_mb"] > 0
        extra = graph_s if variant == "elmscale" else 0.0
        assert r["end_to_end_s"] == pytest.approx(r["seconds"] + extra)
        assert 0 <= r["acc"] <= 1 and 0 <= r["nmi"] <= 1 and 0 <= r["noise_fraction"] <= 1
        if consumer != "hdbscan":
            assert r["noise_fraction"] == 0 and r["n_clusters_found"] == 10
            assert r["acc"] > 0.2  # ten balanced classes: chance is about 0.1
    for variant in bench.VARIANTS:
        assert 0.7 < by["umap", variant]["trustworthiness"] <= 1
    trust = [by["umap", v]["trustworthiness"] for v in bench.VARIANTS]
    assert abs(trust[0] - trust[1]) < 0.05
    # the same exact 10-NN graph (each row with itself) either way: the same partition
    own, ours = by["spectral", "own"], by["spectral", "elmscale"]
    assert (own["acc"], own["nmi"]) == pytest.approx((ours["acc"], ours["nmi"]))


def test_a_run_over_its_budget_is_recorded_as_a_timeout(tmp_path):
    rows = _run(tmp_path, "--consumers", "spectral", "--variants", "own", "--budget", "0.5")
    (row,) = rows
    assert row["status"] == "timeout" and row["seconds"] is None
    assert "end_to_end_s" not in row and "acc" not in row
    assert "graph_s" not in row  # no elmscale variant asked for: no graph built


def test_a_run_that_fails_is_recorded_with_the_library_s_message(tmp_path):
    # 15 columns per row cannot give HDBSCAN 40 neighbours of every point
    rows = _run(tmp_path, "--consumers", "hdbscan", "--variants", "elmscale", "--min-samples", "40")
    (row,) = rows
    assert row["status"] == "error" and row["seconds"] is None and row["returncode"] == 1
    assert "fewer than 40 neighbors" in row["error"]
    assert row["graph_recall"] == 1.0 and "end_to_end_s" not in row
