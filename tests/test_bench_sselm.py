"""The SS-ELM benchmark's graph-setting grammar and global input maps
(benchmarks/paper/bench_sselm.py): the Table II numbers in benchmarks/paper/RESULTS.md depend on
them."""

import importlib
import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench():
    return importlib.import_module("benchmarks.paper.bench_sselm")


def test_parse_graph_defaults_and_fixed_sigma(bench):
    g = bench.parse_graph("none:10:2:norm")
    assert g == dict(
        spec="none:10:2:norm",
        input="none",
        factor=1.0,
        scaling=None,
        n_neighbors=10,
        laplacian_power=2,
        normalized=True,
        weights="heat",
        sigma=None,
    )
    g = bench.parse_graph("minmax:2:1:raw:binary")
    assert (g["scaling"], g["normalized"], g["weights"], g["sigma"]) == (
        "minmax",
        False,
        "binary",
        None,
    )
    g = bench.parse_graph("pm1:10:2:norm:heat:9.4")
    assert (g["input"], g["scaling"], g["sigma"], g["factor"]) == ("pm1", None, 9.4, 1.0)
    # the factor scales the inputs; sigma is given before it, so the graph does not change
    g = bench.parse_graph("pm1*0.25:10:5:norm:heat:9.4")
    assert g["factor"] == 0.25 and g["sigma"] == pytest.approx(9.4 * 0.25)
    assert g["laplacian_power"] == 5


@pytest.mark.parametrize(
    "spec,match",
    [
        ("none:10:2", "expected input:k:power"),
        ("foo:10:2:norm", "input 'foo' not in"),
        ("standard*2:10:2:norm", "would be undone"),
        ("pm1*0:10:2:norm", "factor must be > 0"),
        ("none:10:2:normalised", "expected norm or raw"),
        ("none:10:2:norm:gauss", "weights must be binary or heat"),
        ("none:10:2:norm:binary:3", "sigma must be > 0 and needs heat"),
        ("none:10:2:norm:heat:-1", "sigma must be > 0 and needs heat"),
    ],
)
def test_parse_graph_rejects_bad_settings(bench, spec, match):
    with pytest.raises(ValueError, match=match):
        bench.parse_graph(spec)


def test_map_inputs(bench):
    X = np.array([[0.0, 0.5], [1.0, 0.25]])
    np.testing.assert_array_equal(bench.map_inputs(X, bench.parse_graph("none:5:1:norm")), X)
    np.testing.assert_array_equal(bench.map_inputs(X, bench.parse_graph("standard:5:1:norm")), X)
    np.testing.assert_allclose(bench.map_inputs(X, bench.parse_graph("pm1:5:1:norm")), 2 * X - 1)
    X255 = 255.0 * X
    np.testing.assert_allclose(
        bench.map_inputs(X255, bench.parse_graph("unit*0.5:5:1:norm")), 0.5 * X
    )


def test_fixed_sigma_reaches_the_graph(bench):
    """A fixed sigma with a factor gives the same graph as the unscaled data with sigma."""
    from elmscale import SSELM

    rng = np.random.RandomState(0)
    X = rng.rand(60, 4)
    y = np.full(60, -1)
    y[:3], y[3:6] = 0, 1
    Ls = []
    for spec in ("pm1:6:1:norm:heat:0.7", "pm1*0.1:6:1:norm:heat:0.7"):
        g = bench.parse_graph(spec)
        m = SSELM(
            n_hidden=10,
            graph="exact",
            n_neighbors=6,
            weights="heat",
            sigma=g["sigma"],
            scaling=g["scaling"],
            normalized=True,
            random_state=0,
        )
        graph = m.reduce(bench.map_inputs(X, g), y).graph
        assert graph.sigma == pytest.approx(g["sigma"])
        Ls.append(graph.laplacian().toarray())
    np.testing.assert_allclose(Ls[0], Ls[1], rtol=1e-10, atol=1e-12)


def _needs(name):
    from .conftest import missing_dataset

    if missing_dataset(name):
        pytest.skip(missing_dataset(name))


def test_table2_on_one_g50c_split_refits_what_the_sweep_chose(bench, tmp_path, capsys):
    """The Woodbury sweep's test error of the chosen (C0, lam) is the refitted SSELM's: the
    script says so when they differ."""
    _needs("g50c")
    out = tmp_path / "table2.json"
    argv = ["table2", "--quick", "--n-hidden", "100", "--graphs", "none:10:1:norm"]
    results = bench.main([*argv, "--out", str(out)])
    assert "note: refit" not in capsys.readouterr().out
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    (run,) = results["g50c"]["runs"]
    assert run["sizes"] == [50, 50, 313, 137] and run["graph_spec"] == "none:10:1:norm"
    assert run["sselm_params"]["lam"] in bench.GRID and run["sselm_params"]["C0"] in bench.GRID
    for key in ("sselm_test", "sselm_unl", "elm_test", "ls_test"):
        assert 0 <= run[key] < 30, key  # two Gaussian classes: chance is 50 %
    assert run["sselm_oracle_test"] <= run["sselm_test"]
    assert results["g50c"]["summary"]["sselm_test"] == (run["sselm_test"], 0.0)
