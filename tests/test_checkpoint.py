"""Checkpoints: a fit stopped after a stage resumes from it with the same result to the last
bit, without passing over the data again for the stages kept; a checkpoint of other data or
parameters is refused naming the change; a damaged file is named, never used."""

import io
import os
import shutil
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning

import elmscale
from elmscale import ELMJEC, EMMC, SSELM, USELM, cli, gram
from elmscale.algorithms import _uselm
from elmscale.checkpoint import CheckpointCorruptError, CheckpointMismatchError
from elmscale.graph import _build
from elmscale.mixins import GraphMixin

from .test_no_large_compute import (  # noqa: F401  (fixture)
    max_rows,
    no_large_compute,
)


class Stop(Exception):
    """Stands for the crash of a fit."""


@pytest.fixture
def mixture():
    """(X, y): 1,200 points in 6-d around 4 centres, enough rows for graph smoothing."""
    return make_blobs(n_samples=1200, n_features=6, centers=4, random_state=3)


@pytest.fixture
def overlapping():
    """1,200 points in 6-d from 4 overlapping blobs: ELM-JEC takes 3 iterations."""
    return make_blobs(n_samples=1200, n_features=6, centers=4, random_state=3, cluster_std=4.0)[0]


def _dask(X, chunks=300):
    return da.from_array(X, chunks=(chunks, X.shape[1]))


def _model(**params):
    return USELM(**{"n_clusters": 4, "n_hidden": 60, "random_state": 0, **params})


def _numpy(a):
    return a.compute() if hasattr(a, "compute") else np.asarray(a)


def _same_fit(a, b, names=("labels_", "embedding_", "output_weights_")):
    for name in names:
        assert np.array_equal(_numpy(getattr(a, name)), _numpy(getattr(b, name))), name


def _raise(*args, **kwargs):
    raise Stop


#: what every Gram pass calls first, in the module that defines it
#: (:func:`elmscale.gram.hidden_stats` checks its request): patched there, a pass is stopped or
#: counted whichever estimator module runs it and however that module imported hidden_stats
GRAM_PASS = "_check_request"


def _stop_after(monkeypatch, owner, name, calls):
    """Let ``owner.name`` run ``calls`` times, then raise Stop; returns the call counter."""
    real, count = getattr(owner, name), [0]

    def wrapped(*args, **kwargs):
        count[0] += 1
        if count[0] > calls:
            raise Stop
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapped)
    return count


@pytest.mark.parametrize("as_dask", [False, True])
def test_uselm_resumes_after_the_graph_with_the_same_result(
    mixture, tmp_path, monkeypatch, as_dask
):
    X = _dask(mixture[0]) if as_dask else mixture[0]
    full = _model().fit(X)
    with monkeypatch.context() as m:
        m.setattr(gram, GRAM_PASS, _raise)  # dies in the Gram pass
        with pytest.raises(Stop):
            _model().fit(X, checkpoint=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["01-hidden", "02-graph", "03-smoothing"]
    monkeypatch.setattr(GraphMixin, "build_graph", _raise)  # kept: never built again
    monkeypatch.setattr(_uselm, "smoothed_graph_if_kept", _raise)
    monkeypatch.setattr("elmscale.base.fit_scaling", _raise)  # nor the input scaling
    resumed = _model().fit(X, checkpoint=tmp_path)
    _same_fit(full, resumed)
    assert isinstance(resumed.labels_, da.Array) == as_dask
    monkeypatch.setattr(gram, GRAM_PASS, _raise)  # the reduction is kept as well
    _same_fit(full, _model().fit(X, checkpoint=tmp_path))


def test_a_gram_pass_killed_midway_resumes_from_its_partial_sums(mixture, tmp_path, monkeypatch):
    X = _dask(mixture[0], chunks=100)  # 12 chunks, one task each
    with monkeypatch.context() as m:
        tasks = _stop_after(m, gram, "_block_partials", 100)
        full = _model(smoothing=0).fit(X)
    assert tasks[0] == 12
    with monkeypatch.context() as m:
        _stop_after(m, gram, "_block_partials", 3)
        with pytest.raises(Stop):
            _model(smoothing=0).fit(X, checkpoint=tmp_path)
    partials = [p for p in (tmp_path / "03-gram").iterdir() if p.name.startswith("partials-")]
    assert len(partials) == 1 and len(list(partials[0].iterdir())) == 3
    count = _stop_after(monkeypatch, gram, "_block_partials", 100)
    resumed = _model(smoothing=0).fit(X, checkpoint=tmp_path)
    assert count[0] == 12 - 3  # only the tasks not written before
    _same_fit(full, resumed)
    kept = sorted(p.name for p in (tmp_path / "03-gram").iterdir())
    assert kept == ["manifest.json", "value.pkl"]  # the partial sums are deleted


@pytest.mark.slow
@pytest.mark.distributed
def test_uselm_resumes_on_a_cluster(dask_client, tmp_path, monkeypatch):
    monkeypatch.setattr(_build, "ORDER_MIN_SAMPLES", 0)  # a locality order, as above 20,000 rows
    X, _ = make_blobs(n_samples=6_000, n_features=5, centers=4, random_state=1)
    Xd = _dask(X, chunks=750)  # 8 chunks: the graph is built on 8 runs
    params = {"n_hidden": 40, "n_init": 2, "graph": "exact"}
    full = _model(**params).fit(Xd)
    with monkeypatch.context() as m:
        m.setattr(_uselm.USELM, "_cluster", _raise)  # dies after the reduction
        with pytest.raises(Stop):
            _model(**params).fit(Xd, checkpoint=tmp_path)
    monkeypatch.setattr(GraphMixin, "build_graph", _raise)
    monkeypatch.setattr(gram, GRAM_PASS, _raise)
    resumed = _model(**params).fit(Xd, checkpoint=tmp_path)
    assert resumed.reduce(Xd, checkpoint=tmp_path).graph.order is not None
    _same_fit(full, resumed)


@pytest.mark.parametrize("n_basis", [None, 8])
def test_elmjec_resumes_after_its_last_iteration(overlapping, tmp_path, monkeypatch, n_basis):
    X = _dask(overlapping)
    params = {"n_clusters": 4, "n_hidden": 60, "n_restarts": 2, "max_iter": 6, "random_state": 0}
    params["n_basis"] = n_basis
    full = ELMJEC(**params).fit(X)
    assert full.n_iter_ >= 3
    with monkeypatch.context() as m:
        _stop_after(m, ELMJEC, "_assign", 2)  # dies in the third iteration
        with pytest.raises(Stop):
            ELMJEC(**params).fit(X, checkpoint=tmp_path)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == [
        "01-hidden",
        "02-graph",
        "03-init",
        "04-gram",
        "05-iteration-00001",
        "05-iteration-00002",
    ]
    monkeypatch.setattr(GraphMixin, "build_graph", _raise)
    passes = _stop_after(monkeypatch, gram, GRAM_PASS, 100)
    count = _stop_after(monkeypatch, ELMJEC, "_assign", 100)
    resumed = ELMJEC(**params).fit(X, checkpoint=tmp_path)
    assert count[0] == full.n_iter_ - 2  # the iterations left, and no earlier stage
    # H^T F is corrected by the rows whose cluster changed, or, where most did, a full pass
    N, left = X.shape[0], full.history_["n_changed"][3:]
    assert passes[0] == sum(left > gram.CORRECTED_SHARE * N)
    _same_fit(full, resumed)
    assert resumed.n_iter_ == full.n_iter_ and resumed.objective_ == full.objective_
    for key, value in full.history_.items():
        np.testing.assert_array_equal(resumed.history_[key], value)


def test_sselm_and_emmc_resume_their_reductions(moons_partially_labelled, tmp_path, monkeypatch):
    X, _, y_semi = moons_partially_labelled
    sselm = SSELM(n_hidden=50, lam=1.0, random_state=0)
    emmc = EMMC(n_clusters=2, n_hidden=50, max_iter=1, random_state=0)  # no pass in the solve
    full = sselm.fit(X, y_semi).predict(X), emmc.fit(X).labels_
    clone(sselm).fit(X, y_semi, checkpoint=tmp_path / "ss")
    clone(emmc).fit(X, checkpoint=tmp_path / "emmc")
    monkeypatch.setattr(GraphMixin, "build_graph", _raise)
    monkeypatch.setattr(gram, GRAM_PASS, _raise)
    resumed = clone(sselm).fit(X, y_semi, checkpoint=tmp_path / "ss")
    np.testing.assert_array_equal(resumed.output_weights_, sselm.output_weights_)
    np.testing.assert_array_equal(resumed.predict(X), full[0])
    resumed = clone(emmc).fit(X, checkpoint=tmp_path / "emmc")
    np.testing.assert_array_equal(resumed.labels_, full[1])
    np.testing.assert_array_equal(resumed.output_weights_, emmc.output_weights_)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"n_neighbors": 7}, "parameter n_neighbors (checkpoint: 10, this fit: 7)"),
        ({"n_hidden": 61}, "parameter n_hidden"),
        ({"random_state": 1}, "parameter random_state"),
    ],
)
def test_a_changed_parameter_is_refused(mixture, tmp_path, change, named):
    X = _dask(mixture[0])
    _model().fit(X, checkpoint=tmp_path)
    with pytest.raises(CheckpointMismatchError, match="changed") as err:
        _model(**change).fit(X, checkpoint=tmp_path)
    assert named in str(err.value) and str(tmp_path) in str(err.value)
    _model(lam=1.0, n_clusters=3).fit(X, checkpoint=tmp_path)  # not read by the reduction


def test_changed_data_chunking_or_estimator_are_refused(mixture, tmp_path):
    X = mixture[0]
    _model().fit(_dask(X), checkpoint=tmp_path)
    other = X.copy()
    other[700, 2] += 1e-9
    with pytest.raises(CheckpointMismatchError, match="data content of row chunk 2"):
        _model().fit(_dask(other), checkpoint=tmp_path)
    with pytest.raises(CheckpointMismatchError, match="data chunking"):
        _model().fit(_dask(X, chunks=400), checkpoint=tmp_path)
    with pytest.raises(CheckpointMismatchError, match="data shape"):
        _model().fit(_dask(X[:900]), checkpoint=tmp_path)
    with pytest.raises(CheckpointMismatchError, match="estimator"):
        ELMJEC(n_clusters=4, n_hidden=60, random_state=0).fit(_dask(X), checkpoint=tmp_path)


def test_elmjec_iterations_with_another_lam_are_refused(overlapping, tmp_path):
    X = _dask(overlapping)
    params = {"n_clusters": 4, "n_hidden": 60, "n_restarts": 2, "max_iter": 2, "random_state": 0}
    with pytest.warns(ConvergenceWarning):
        ELMJEC(**params).fit(X, checkpoint=tmp_path)
    with pytest.raises(CheckpointMismatchError, match=r"parameter lam \(checkpoint: 0.5"):
        ELMJEC(**params, lam=2.0).fit(X, checkpoint=tmp_path)
    # a larger max_iter continues the iterations kept
    more = ELMJEC(**{**params, "max_iter": 4}).fit(X, checkpoint=tmp_path)
    assert more.n_iter_ == 3
    _same_fit(ELMJEC(**{**params, "max_iter": 4}).fit(X), more)
    assert (tmp_path / "05-iteration-00003").exists()


def test_a_stage_refers_to_the_pieces_an_earlier_stage_wrote(mixture, tmp_path):
    """The filtered graph shares its graph's blocks, kNN lists and row order: the smoothing
    stage writes only its filtered rows and reads the rest from the graph stage's files, in a
    fit that computes both stages and in one that resumes from the graph."""
    X = _dask(mixture[0])
    full = _model().fit(X, checkpoint=tmp_path)
    own = {p.name for p in (tmp_path / "03-smoothing" / "graph-0").iterdir()}
    assert own == {"X"}
    assert (tmp_path / "02-graph" / "graph-0" / "blocks").is_dir()
    for stage in ("03-smoothing", "04-gram"):
        shutil.rmtree(tmp_path / stage)
    resumed = _model().fit(X, checkpoint=tmp_path)  # graph loaded, smoothing written again
    assert {p.name for p in (tmp_path / "03-smoothing" / "graph-0").iterdir()} == {"X"}
    _same_fit(full, resumed)
    _same_fit(full, _model().fit(X, checkpoint=tmp_path))  # every stage loaded


def _damage(path, how):
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(flipped))


@pytest.mark.parametrize("how", ["truncate", "flip"])
@pytest.mark.parametrize(
    "relpath",
    ["02-graph/manifest.json", "02-graph/value.pkl", "02-graph/graph-0/blocks/00001.pkl"],
)
def test_a_damaged_file_is_named(mixture, tmp_path, relpath, how):
    X = _dask(mixture[0])
    full = _model().fit(X, checkpoint=tmp_path)
    _damage(tmp_path / relpath, how)
    with pytest.raises(CheckpointCorruptError, match="corrupt or truncated") as err:
        _model().fit(X, checkpoint=tmp_path)
    assert str(tmp_path / relpath) in str(err.value)
    for stage in ("02-graph", "03-smoothing", "04-gram"):  # deleting the stage recovers
        if relpath.startswith(stage):
            shutil.rmtree(tmp_path / stage)
    _same_fit(full, _model().fit(X, checkpoint=tmp_path))


def test_a_missing_piece_is_named(mixture, tmp_path):
    X = _dask(mixture[0])
    _model().fit(X, checkpoint=tmp_path)
    (tmp_path / "03-smoothing" / "graph-0" / "X" / "00002.npy").unlink()
    with pytest.raises(CheckpointCorruptError, match="00002.npy is missing"):
        _model().fit(X, checkpoint=tmp_path)


def test_checkpoint_needs_a_seed_and_a_supporting_estimator(mixture, tmp_path):
    X = mixture[0]
    with pytest.raises(ValueError, match="set random_state to an int"):
        _model(random_state=None).fit(X, checkpoint=tmp_path)
    with pytest.raises(ValueError, match="TUMKELM does not support checkpoint="):
        elmscale.TUMKELM(n_clusters=3, random_state=0).fit(X, checkpoint=tmp_path)
    assert not list(Path(tmp_path).iterdir())


def test_sweep_reuses_a_checkpointed_reduction(mixture, tmp_path, monkeypatch):
    X = _dask(mixture[0])
    _model().fit(X, checkpoint=tmp_path)
    grid = {"lam": [0.01, 1.0], "n_components": [2, 3]}
    expected = [_model(**setting).fit(X) for setting, _ in elmscale.sweep(_model(), X, grid)]
    monkeypatch.setattr(GraphMixin, "build_graph", _raise)
    monkeypatch.setattr(gram, GRAM_PASS, _raise)
    fits = elmscale.sweep(_model(), X, grid, checkpoint=tmp_path)
    for (_, model), reference in zip(fits, expected, strict=True):
        _same_fit(reference, model)


def _cli(*argv):
    err = io.StringIO()
    status = cli.main([str(a) for a in argv], out=io.StringIO(), err=err)
    return status, err.getvalue()


def test_cli_fit_resumes_with_checkpoint(mixture, tmp_path, monkeypatch):
    data, ckpt = tmp_path / "x.npy", tmp_path / "ckpt"
    np.save(data, mixture[0])
    params = ["-p", "n_clusters=4", "n_hidden=60", "random_state=0"]

    def fit(out):
        return _cli("fit", "us-elm", data, *params, "--labels", out, "--checkpoint", ckpt)

    reference = _model().fit(mixture[0]).labels_
    with monkeypatch.context() as m:
        m.setattr(gram, GRAM_PASS, _raise)
        assert fit(tmp_path / "a.npy")[0] == 1
    monkeypatch.setattr(GraphMixin, "build_graph", _raise)
    status, err = fit(tmp_path / "b.npy")
    assert status == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), reference)
    status, err = _cli("fit", "tumk-elm", data, "--checkpoint", ckpt)
    assert status == 2 and "drop --checkpoint" in err


@pytest.mark.slow
def test_writing_and_resuming_bring_no_n_sized_array_to_the_client(
    tmp_path,
    monkeypatch,
    no_large_compute,  # noqa: F811
):
    from elmscale.graph import _reference

    # the training reference predict searches is bounded by its byte budgets, not by N:
    # made smaller than N rows and N keys here
    monkeypatch.setattr(_reference, "REFERENCE_BYTES", 2**18)
    monkeypatch.setattr(_reference, "LOOKUP_BYTES", 2**17)
    N = 21_000
    Xd = _dask(np.random.RandomState(0).randn(N, 3), chunks=5_250)
    params = {"n_clusters": 3, "n_hidden": 20, "graph": "exact", "n_neighbors": 5}
    _model(**params).fit(Xd, checkpoint=tmp_path)  # locality order, smoothing, the Gram pass
    assert (tmp_path / "02-graph" / "graph-0" / "order").is_dir()
    _model(**params).fit(Xd, checkpoint=tmp_path)
    assert max_rows(no_large_compute) <= 20_000 < N


def test_an_fsspec_url_works_as_a_folder(mixture, monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    url = "memory://elmscale-tests/checkpoint"
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)
    X = _dask(mixture[0])
    full = _model().fit(X, checkpoint=url)
    assert fs.exists(f"{url}/04-gram/manifest.json")
    monkeypatch.setattr(GraphMixin, "build_graph", _raise)
    monkeypatch.setattr(gram, GRAM_PASS, _raise)
    _same_fit(full, _model().fit(X, checkpoint=url))
    fs.rm(url, recursive=True)


def test_a_damaged_partial_sum_is_named(mixture, tmp_path, monkeypatch):
    X = _dask(mixture[0], chunks=100)
    with monkeypatch.context() as m:
        _stop_after(m, gram, "_block_partials", 2)
        with pytest.raises(Stop):
            _model(smoothing=0).fit(X, checkpoint=tmp_path)
    (folder,) = (tmp_path / "03-gram").glob("partials-*")
    piece = sorted(folder.iterdir())[1]
    _damage(piece, "flip")
    with pytest.raises(CheckpointCorruptError, match="corrupt or truncated") as err:
        _model(smoothing=0).fit(X, checkpoint=tmp_path)
    assert str(piece) in str(err.value)
