"""The code examples of the getting-started page, the README (with ``--runslow``), the
kNN-graph guide and the architecture page run as written: each document's Python blocks are
executed in order in one namespace, with warnings as errors, on small data (scikit-learn's
digits cut to their first 360 rows, all ten digits).

What a block points at outside this machine is replaced by a local equivalent, listed in
``OUTSIDE``: the cluster a block connects to or starts becomes the test session's
``distributed.LocalCluster``, an S3 checkpoint URL a temporary folder."""

import re
import sys
import textwrap
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GETTING_STARTED = ROOT / "docs" / "getting_started.rst"
README = ROOT / "README.md"
GRAPH_GUIDE = ROOT / "docs" / "user_guide" / "graph.rst"
DEVELOPER = ROOT / "docs" / "developer.rst"
#: rows of the digits the examples run on: seconds, not minutes, for every estimator
ROWS = 360


def rst_python_blocks(path):
    """The bodies of the ``.. code-block:: python`` directives of an .rst file, dedented."""
    lines = Path(path).read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        directive = re.match(r"^(\s*)\.\. code-block:: python\s*$", lines[i])
        i += 1
        if not directive:
            continue
        indent, body = len(directive.group(1)), []
        while i < len(lines) and (not lines[i].strip() or re.match(r"^\s+:\w", lines[i])):
            i += 1  # the blank line and any options
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
        ):
            body.append(lines[i])
            i += 1
        blocks.append(textwrap.dedent("\n".join(body)).strip() + "\n")
    return blocks


def markdown_python_blocks(path):
    """The bodies of the ```` ```python ```` fences of a Markdown file."""
    return re.findall(r"^```python\n(.*?)^```", Path(path).read_text(), re.M | re.S)


def _outside(address, tmp_path):
    """Resources a block names that are not on this machine, and their local stand-ins."""
    return {
        'Client("tcp://scheduler:8786")': f"Client({address!r})",
        "Client(LocalCluster(n_workers=2, threads_per_worker=1))": f"Client({address!r})",
        "s3://bucket/run1": str(tmp_path / "run1"),
    }


@pytest.fixture
def small_digits(monkeypatch):
    """``sklearn.datasets.load_digits`` returning its first ``ROWS`` rows."""
    import sklearn.datasets

    full = sklearn.datasets.load_digits

    def load_digits(*args, **kwargs):
        X, y = full(return_X_y=True)
        assert kwargs == {"return_X_y": True}, "the documents load the digits as (X, y)"
        return X[:ROWS], y[:ROWS]

    monkeypatch.setattr(sklearn.datasets, "load_digits", load_digits)
    return full(return_X_y=True)[0][:ROWS], full(return_X_y=True)[1][:ROWS]


def run_blocks(blocks, namespace, replace, expected_warning=None):
    """Execute the blocks in order in ``namespace``, warnings as errors except the one the
    document announces (``expected_warning``, a message regex); the client a block opened is
    closed afterwards."""
    try:
        for n, block in enumerate(blocks):
            for old, new in replace.items():
                block = block.replace(old, new)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                if expected_warning:
                    warnings.filterwarnings("ignore", message=expected_warning)
                exec(compile(block, f"<block {n + 1}>", "exec"), namespace)
    finally:
        client = namespace.get("client")
        if client is not None:
            client.close()
    return namespace


def _timings_comment(blocks):
    """The stage names the ``model.timings_`` line's comment lists."""
    (comment,) = re.findall(r"^model\.timings_\s+# [^:]*: (.*)$", "\n".join(blocks), re.M)
    return [name.strip() for name in comment.split(",")]


def test_finds_every_block_of_each_document():
    assert len(rst_python_blocks(GETTING_STARTED)) == GETTING_STARTED.read_text().count(
        ".. code-block:: python"
    )
    assert len(markdown_python_blocks(README)) == README.read_text().count("```python")
    (graph,) = rst_python_blocks(GRAPH_GUIDE)
    assert graph.startswith("from sklearn.cluster import HDBSCAN")


@pytest.mark.distributed
def test_getting_started_runs(small_digits, dask_client, tmp_path):
    blocks = rst_python_blocks(GETTING_STARTED)
    ns = run_blocks(blocks, {}, _outside(dask_client.scheduler.address, tmp_path))
    assert ns["labels"].compute().shape == (ROWS,)
    assert set(np.unique(ns["y_partial"])) == {-1, *np.unique(small_digits[1])}


def test_timings_comment_lists_the_stages_of_the_example():
    """On the full digits, as the documents fit them (``smoothing`` filters only data sets of
    a few thousand rows and up, so the small-data runs above have no such stage)."""
    (first, *_) = rst_python_blocks(GETTING_STARTED)
    stages = list(run_blocks([first], {}, {})["model"].timings_)
    assert _timings_comment(rst_python_blocks(GETTING_STARTED)) == stages
    assert _timings_comment(markdown_python_blocks(README)) == stages


@pytest.mark.slow  # every estimator at its defaults (1,000 hidden nodes), six ELM-JEC fits:
@pytest.mark.distributed  # about a minute of CPU whatever the rows
def test_readme_runs(small_digits, dask_client, tmp_path, monkeypatch):
    import dask.array as da

    monkeypatch.chdir(tmp_path)  # the saving example writes files into the working folder
    # the scaling example reads its rows from a Zarr array, as a user's would be stored
    da.from_array(small_digits[0], chunks=(100, -1)).to_zarr(str(tmp_path / "X.zarr"))
    blocks = markdown_python_blocks(README)
    ns = run_blocks(blocks, {}, _outside(dask_client.scheduler.address, tmp_path))
    assert list(ns["fitted"].timings_)  # the last runnable block ran to its end


def test_architecture_page_runs(small_digits, monkeypatch):
    """The estimator, graph backend and activation of the architecture page, each checked
    with ``elmscale.testing`` as the page does; run as a module, so that the estimator
    pickles (scikit-learn's pickling check)."""
    module = types.ModuleType("architecture_page")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    blocks = rst_python_blocks(DEVELOPER)
    assert len(blocks) == DEVELOPER.read_text().count(".. code-block:: python") == 4
    ns = run_blocks(blocks, module.__dict__, {})
    assert ns["model"].labels_.shape == (ROWS,)
    assert {"YourELM", "sklearn_knn", "softsign"} <= set(ns)


def _graph_guide(umap_lines):
    (block,) = rst_python_blocks(GRAPH_GUIDE)
    return [block if umap_lines else block[: block.index("import umap")]]


@pytest.fixture
def digits_X():
    """All 1,797 digits: the guide's HDBSCAN and SpectralClustering need a connected graph,
    which ten neighbours of a few hundred digits are not."""
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)[0]


def test_graph_guide_runs_without_warnings(digits_X):
    """The HDBSCAN and SpectralClustering lines, without umap-learn's (see the slow test)."""
    ns = run_blocks(_graph_guide(umap_lines=False), {"X": digits_X}, {})
    assert ns["G"].shape == (len(digits_X), len(digits_X))


@pytest.mark.slow  # umap-learn compiles with numba in every fresh process (tens of seconds)
@pytest.mark.xdist_group("numba")  # one process compiles pynndescent and umap-learn once
def test_graph_guide_runs_with_umap(digits_X):
    pytest.importorskip("umap")
    # the guide says umap-learn warns that transform is unavailable without its own index
    # and, with metric="precomputed", that inverse_transform is
    announced = (
        "precomputed_knn.*transforming new data with transform will be unavailable"
        "|using precomputed metric; inverse_transform will be unavailable"
    )
    ns = run_blocks(_graph_guide(umap_lines=True), {"X": digits_X}, {}, announced)
    assert ns["indices"].shape == (len(digits_X), 11)
    assert (ns["G"] != ns["G"].T).nnz == 0
