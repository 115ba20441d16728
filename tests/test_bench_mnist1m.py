"""The MNIST-1M benchmark's command line and its rule for reusing a Zarr store of rows
(benchmarks/quality/bench_mnist1m.py): a store is reused only for the same rows."""

import importlib

import pytest

bench = importlib.import_module("benchmarks.quality.bench_mnist1m")


def test_deformation_and_kmeans_options_are_parsed_and_checked(capsys):
    args = bench.parse_args(
        ["--n-samples", "5000", "--deform", "shift=2,sigma=4", "--kmeans", "none"]
    )
    assert args.deform == {"shift": 2.0, "sigma": 4.0}
    assert args.kmeans == []
    assert bench.parse_args([]).kmeans == ["minibatch", "kmeans"]
    assert bench.parse_args(["--set", "n_components=15,graph='exact'"]).set == (
        "n_components=15,graph='exact'"
    )
    for bad in (
        ["--deform", "alfa=3"],
        ["--deform", "shift"],
        ["--kmeans", "dbscan"],
        ["--set", "graph=exact"],
    ):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
    assert "alfa" in capsys.readouterr().err


def test_a_store_is_reused_only_for_the_same_rows(tmp_path):
    import zarr

    path = tmp_path / "z"
    args = bench.parse_args(["--n-samples", "5000", "--seed", "2"])
    assert bench._stored_attrs(path) is None
    assert not bench.reusable(bench._stored_attrs(path), bench.store_attrs(args))
    zarr.open_group(str(path), mode="w").attrs["mnist1m"] = bench.store_attrs(args)
    stored = bench._stored_attrs(path)
    assert stored == bench.store_attrs(args)
    for same, extra in ((True, ["--n-samples", "4000"]), (True, []), (False, ["--seed", "3"])):
        wanted = bench.store_attrs(bench.parse_args(["--n-samples", "5000", "--seed", "2", *extra]))
        assert bench.reusable(stored, wanted) is same
    for other in (["--n-samples", "6000"], ["--deform", "shift=2"]):
        wanted = bench.store_attrs(bench.parse_args(["--n-samples", "5000", "--seed", "2", *other]))
        assert not bench.reusable(stored, wanted)
