"""Saving and loading fitted models: pickle, joblib and skops round trips for every
estimator, each loaded in a NEW process (no client, no state shared with the fit), also
after a fit on a distributed cluster, whose dask attributes hold futures until saved."""

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import dask.array as da
import joblib
import numpy as np
import pytest
from sklearn.datasets import make_blobs

from ._estimators import NAMES, assert_same_results, estimators, fit, make, on_cluster, outputs

skops_io = pytest.importorskip("skops.io")

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("pickle", "joblib", "skops")
X, Y = make_blobs(300, n_features=4, centers=3, random_state=0)
# NumPy fits, and TUMK-ELM's scalable mode, whose fitted state holds kernel factors
MODELS = {
    **{name: (name, {}) for name in NAMES},
    "TUMKELM-scalable": ("TUMKELM", {"mode": "scalable"}),
}

#: what skops may ask to trust: elmscale's names, and each registered estimator's class
OWN = ("elmscale.", *(f"{c.__module__}.{c.__qualname__}" for c in estimators().values()))

# Loads every saved model listed in argv[1]/index.txt (a fresh interpreter: no client, no
# elmscale imported until the load) and saves what each gives for X into <path>.out.npz.
LOADER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import numpy as np
    folder = Path(sys.argv[1])
    X = np.load(folder / "X.npy")
    sys.path.insert(0, sys.argv[2])
    from tests._estimators import outputs
    for line in (folder / "index.txt").read_text().splitlines():
        fmt, path, *trusted = line.split()
        if fmt == "pickle":
            import pickle
            model = pickle.loads(Path(path).read_bytes())
        elif fmt == "joblib":
            import joblib
            model = joblib.load(path)
        else:
            import skops.io
            model = skops.io.load(path, trusted=trusted)
        np.savez(path + ".out.npz", **outputs(model, X))
""")


def _save(model, fmt, path):
    if fmt == "pickle":
        path.write_bytes(pickle.dumps(model))
    elif fmt == "joblib":
        joblib.dump(model, path)
    else:
        skops_io.dump(model, path)


def _load_elsewhere(folder, saved):
    """Load every ``(fmt, path)`` of ``saved`` in one new Python process; return the outputs
    each loaded model gives for X."""
    np.save(folder / "X.npy", X)
    lines = []
    for fmt, path in saved:
        trusted = skops_io.get_untrusted_types(file=path) if fmt == "skops" else []
        # only elmscale's own classes and functions need trusting, and a plugin estimator's
        # own class; nothing foreign
        assert all(t.startswith(OWN) for t in trusted), trusted
        lines.append(" ".join([fmt, str(path), *trusted]))
    (folder / "index.txt").write_text("\n".join(lines))
    done = subprocess.run(
        [sys.executable, "-c", LOADER, str(folder), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {path: dict(np.load(str(path) + ".out.npz")) for _, path in saved}


@pytest.fixture(scope="module")
def numpy_round_trips(tmp_path_factory):
    """{(model, format): (outputs before saving, outputs after loading elsewhere)}."""
    folder = tmp_path_factory.mktemp("numpy_models")
    expected, saved = {}, []
    for key, (name, params) in MODELS.items():
        model = fit(make(name, **params), name, X, Y)
        expected[key] = outputs(model, X)
        for fmt in FORMATS:
            path = folder / f"{key}.{fmt}"
            _save(model, fmt, path)
            saved.append((fmt, path))
    loaded = _load_elsewhere(folder, saved)
    return {
        (key, fmt): (expected[key], loaded[folder / f"{key}.{fmt}"])
        for key in MODELS
        for fmt in FORMATS
    }


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key", list(MODELS))
def test_round_trip_in_a_new_process(numpy_round_trips, key, fmt):
    """predict, transform, decision_function, predict_proba, labels_ and embedding_ of the
    loaded model equal the original's, bit for bit."""
    expected, loaded = numpy_round_trips[key, fmt]
    assert expected, key
    stored = [k for k in expected if k.endswith("_")]
    assert_same_results(
        {k: expected[k] for k in stored}, {k: loaded[k] for k in stored}, f"{key} via {fmt}"
    )  # the saved attributes: bit for bit
    # recomputed from X in another process: BLAS may round differently there
    assert_same_results(expected, loaded, f"{key} via {fmt}", rtol=1e-9)


@pytest.fixture(scope="module")
def cluster_round_trips(dask_client, tmp_path_factory):
    """Every estimator fitted on dask input on the shared cluster, saved by pickle and skops
    and loaded in one new process: {name: (lazy attributes, outputs, {path: loaded
    outputs}, pickled copy)}."""
    folder = tmp_path_factory.mktemp("cluster_models")
    Xd = da.from_array(X, chunks=((100, 120, 80), 4))
    fitted, saved = {}, []
    for name in NAMES:
        with on_cluster(dask_client):
            model = fit(make(name), name, Xd, Y)
        lazy = {
            attr: getattr(model, attr)
            for attr in ("labels_", "embedding_")
            if isinstance(getattr(model, attr, None), da.Array)
        }
        paths = []
        with on_cluster(dask_client):
            for fmt in ("pickle", "skops"):
                path = folder / f"{name}.{fmt}"
                _save(model, fmt, path)
                paths.append(path)
                saved.append((fmt, path))
            fitted[name] = (lazy, outputs(model, X), paths, pickle.loads(pickle.dumps(model)))
    loaded = _load_elsewhere(folder, saved)
    return {
        name: (lazy, expected, {p: loaded[p] for p in paths}, copy)
        for name, (lazy, expected, paths, copy) in fitted.items()
    }


@pytest.mark.distributed
@pytest.mark.parametrize("name", NAMES)
def test_model_fitted_on_a_cluster_loads_without_it(cluster_round_trips, name):
    """A fit on dask input leaves labels_/embedding_ as persisted dask arrays (futures on
    the workers); the saved model holds their values, and loads in a process that has no
    client as dask arrays with the same chunks."""
    lazy, expected, loaded, copy = cluster_round_trips[name]
    if name in ("USELM", "ELMJEC", "EMMC", "TUMKELM"):
        assert "labels_" in lazy  # the case this test is about
    for attr, value in lazy.items():  # restored lazily, with the fit's chunks
        assert isinstance(getattr(copy, attr), da.Array)
        assert getattr(copy, attr).chunks == value.chunks
    for path, outs in loaded.items():
        # stored attributes are bit for bit; outputs recomputed from X on another layout of
        # processes (a client's threads, not a worker) may round differently
        assert_same_results(
            {k: v for k, v in expected.items() if k.endswith("_")},
            {k: v for k, v in outs.items() if k.endswith("_")},
            f"{name} via {path.suffix}",
        )
        assert_same_results(expected, outs, f"{name} via {path.suffix}", rtol=1e-9)


def test_saving_after_the_cluster_closed_names_the_attributes():
    """Futures whose cluster is gone cannot be computed: the error says which attributes
    and what to do, instead of failing later at load time."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        model = fit(make("USELM"), "USELM", da.from_array(X, chunks=(100, 4)), Y)
    with pytest.raises(pickle.PicklingError, match="embedding_, labels_|labels_, embedding_"):
        pickle.dumps(model)
