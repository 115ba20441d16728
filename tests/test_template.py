"""The public estimator template (elmscale.BaseELM): an algorithm written in one file against
public API only fits like the built-ins, and the example plugin elmscale-celm is such a file."""

import ast
import logging
import re
import subprocess
import sys
import types
from numbers import Real
from pathlib import Path

import dask
import numpy as np
import pytest
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

import elmscale
from elmscale.algorithms import elm_output_weights
from elmscale.gram import hidden_stats
from elmscale.hidden import MixedHiddenLayer, RandomHiddenLayer
from elmscale.mixins import DataNodesMixin, GraphMixin
from elmscale.testing import check_algorithm
from elmscale.validation import Interval

from ._reference import elm_ridge, hidden, knn_laplacian
from .test_docs_run import rst_python_blocks
from .test_threads import _blas_threads, _recording_activation

ROOT = Path(__file__).resolve().parents[1]
CELM_SRC = ROOT / "plugins" / "elmscale-celm" / "src"


class RidgeELM(RegressorMixin, elmscale.BaseELM):
    """What a plugin author writes: parameters, the two hooks, predict."""

    _parameter_constraints = {
        **elmscale.BaseELM._parameter_constraints,
        "C": [Interval(Real, 0, None, closed="neither")],
    }
    reduce_params = ("n_hidden", "activation", "scaling", "cache", "random_state")

    def __init__(
        self,
        n_hidden=20,
        *,
        C=1.0,
        activation="sigmoid",
        scaling="standard",
        cache=False,
        random_state=None,
    ):
        self.n_hidden = n_hidden
        self.C = C
        self.activation = activation
        self.scaling = scaling
        self.cache = cache
        self.random_state = random_state

    def reduce_hidden(self, reduction, y):
        Y = dask.array.from_array(
            np.asarray(y, dtype=float)[:, None], chunks=(reduction.X.chunks[0], 1)
        )
        reduction.stats = hidden_stats(reduction.features, ("hth", "hty"), Y=Y)

    def solve_reduced(self, reduction, rng):
        self.output_weights_ = elm_output_weights(
            reduction.stats["hth"], reduction.stats["hty"], self.C
        )

    def predict(self, X):
        check_is_fitted(self, "output_weights_")
        Xd, was_dask = self.validate_X(X, reset=False)
        out = self.hidden_features(Xd).project(self.output_weights_)[:, 0]
        return self.as_output(out, was_dask)


def test_a_one_file_algorithm_equals_dense_numpy_and_sweeps(blobs):
    X, y = blobs
    y = y.astype(float)
    model = RidgeELM(C=10.0, random_state=0).fit(X, y)
    H = hidden(X, model.hidden_layer_)
    np.testing.assert_allclose(model.output_weights_, elm_ridge(H, y[:, None], 10.0), rtol=1e-8)
    np.testing.assert_allclose(model.predict(X), H @ model.output_weights_[:, 0], rtol=1e-6)
    assert model.n_features_in_ == X.shape[1] and list(model.timings_) == [
        "hidden",
        "reduce",
        "solve",
    ]
    fits = elmscale.sweep(RidgeELM(random_state=0), X, {"C": [0.1, 10.0]}, y)
    np.testing.assert_array_equal(fits[1][1].output_weights_, model.output_weights_)


def test_project_is_the_dense_product_with_the_same_keys_every_call(blobs):
    X, y = blobs
    model = RidgeELM(random_state=0).fit(X, y.astype(float))
    Xd = dask.array.from_array(X, chunks=(70, X.shape[1]))
    W = np.random.RandomState(1).standard_normal((model.n_hidden, 3))
    first, again = model.project(Xd, W), model.project(Xd, W.copy())
    assert first.name == again.name and first.name.startswith("elmscale-embed-")
    assert dict(first.dask).keys() == dict(again.dask).keys()
    np.testing.assert_allclose(first.compute(), hidden(X, model.hidden_layer_) @ W, rtol=1e-10)
    V = W[: X.shape[1]]
    layer = model.hidden_layer_
    np.testing.assert_allclose(
        model.project(Xd, V, scaled_input=True).compute(),
        ((X - layer.offset) / layer.scale) @ V,
        rtol=1e-10,
    )
    assert model.project(Xd, V, scaled_input=True).name != model.project(Xd, V).name


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.distributed
def test_predictions_computed_again_meet_no_run_spec_collision(blobs, dask_client):
    """A plugin's predict through ``project``, computed while an earlier result is still
    held on the cluster, resubmits the same tasks under the same keys."""
    X, y = blobs
    model = RidgeELM(random_state=0).fit(X, y.astype(float))
    Xd = dask.array.from_array(X, chunks=(70, X.shape[1]))
    records = _Records()
    scheduler_log = logging.getLogger("distributed.scheduler")
    scheduler_log.addHandler(records)
    level = scheduler_log.level
    scheduler_log.setLevel(logging.DEBUG)
    try:
        held = model.project(Xd, model.output_weights_).persist()
        again = model.project(Xd, model.output_weights_).compute()
        np.testing.assert_array_equal(held.compute(), again)
    finally:
        scheduler_log.removeHandler(records)
        scheduler_log.setLevel(level)
    assert not [m for m in records.messages if "run_spec" in m]


class GraphEmbedding(GraphMixin, elmscale.BaseELM):
    """A plugin that declares the graph parameters through the mixin and reduces H^T L H."""

    _parameter_constraints = {
        **elmscale.BaseELM._parameter_constraints,
        **GraphMixin._graph_constraints,
    }

    def __init__(
        self,
        n_hidden=20,
        *,
        activation="tanh",
        scaling=None,
        graph="auto",
        n_neighbors=6,
        weights="heat",
        sigma=None,
        normalized=False,
        cache=False,
        random_state=None,
    ):
        self.n_hidden, self.activation, self.scaling = n_hidden, activation, scaling
        self.graph, self.n_neighbors, self.weights = graph, n_neighbors, weights
        self.sigma, self.normalized = sigma, normalized
        self.cache, self.random_state = cache, random_state

    def reduce_hidden(self, reduction, y):
        reduction.graph = self.build_graph(reduction.X, reduction.rng)
        reduction.stats = hidden_stats(reduction.features, ("htlh",), graph=reduction.graph)

    def solve_reduced(self, reduction, rng):
        self.htlh_ = reduction.stats["htlh"]


@pytest.mark.parametrize("normalized", [False, True])
def test_graph_mixin_gives_a_plugin_the_graph_term_of_dense_numpy(blobs, normalized):
    X, _ = blobs
    model = GraphEmbedding(normalized=normalized, random_state=0).fit(X)
    H = hidden(X, model.hidden_layer_)
    L = knn_laplacian(X, 6, weights="heat", normalized=normalized)
    np.testing.assert_allclose(model.htlh_, H.T @ L @ H, rtol=1e-8, atol=1e-8)
    with pytest.raises(ValueError, match="weights"):
        GraphEmbedding(weights="gauss").fit(X)


def test_data_nodes_come_with_the_mixin_only(blobs):
    """BaseELM draws Gaussian data nodes only for an estimator with DataNodesMixin."""
    X, y = blobs
    plain = RidgeELM(random_state=0).fit(X, y.astype(float))
    assert type(plain.hidden_layer_) is RandomHiddenLayer
    mixed = elmscale.USELM(3, n_hidden=20, rbf_fraction=0.5, graph="exact", random_state=0)
    layer = mixed.fit(X).hidden_layer_
    assert isinstance(mixed, DataNodesMixin) and isinstance(layer, MixedHiddenLayer)
    assert [p.n_hidden for p in layer.parts] == [10, 10]


def test_elmscale_testing_is_an_attribute_loaded_on_first_use():
    code = (
        "import sys, elmscale\n"
        "assert 'elmscale.testing' not in sys.modules\n"
        "assert elmscale.testing.check_algorithm is not None\n"
        "import elmscale.testing as t\n"
        "assert t is elmscale.testing\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_check_algorithm_accepts_a_complete_reduce_params_list():
    check_algorithm(RidgeELM, y="blobs", sklearn_checks=False)


class LeakyRidgeELM(RidgeELM):
    """Its reduce_hidden reads C, which reduce_params leaves out: a sweep over C would
    re-solve with the targets scaled by the first setting's C."""

    def reduce_hidden(self, reduction, y):
        super().reduce_hidden(reduction, np.asarray(y, dtype=float) * self.C)


def test_check_algorithm_fails_when_reduce_params_misses_what_reduce_hidden_reads():
    with pytest.raises(AssertionError, match="C is not in reduce_params, but reduce_hidden"):
        check_algorithm(LeakyRidgeELM, y="blobs", sklearn_checks=False)
    # listing it makes the same estimator pass
    fixed = type(
        "FixedRidgeELM", (LeakyRidgeELM,), {"reduce_params": (*RidgeELM.reduce_params, "C")}
    )
    check_algorithm(fixed, y="blobs", sklearn_checks=False)
    # and values given for the sweep are the ones tried
    with pytest.raises(AssertionError, match=r"C=5\.0 re-solved"):
        check_algorithm(LeakyRidgeELM, y="blobs", sklearn_checks=False, sweep_values={"C": 5.0})


def test_the_developer_page_estimator_is_dense_pca_then_kmeans_and_sweeps(blobs, monkeypatch):
    """The estimator of the documentation's architecture page, executed as written (as a
    module, so that its estimator pickles): its embedding is H's leading principal
    directions, as a dense eigendecomposition gives them, and a sweep equals a fit."""
    page = (ROOT / "docs" / "developer.rst").read_text()
    (source,) = [
        b for b in rst_python_blocks(ROOT / "docs" / "developer.rst") if "class YourELM" in b
    ]
    assert source.startswith("# elmscale_yours/_model.py") and "class YourELM" in page
    module = types.ModuleType("developer_page_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source, "docs/developer.rst", "exec"), module.__dict__)
    YourELM = module.YourELM
    X, _ = blobs
    model = YourELM(3, n_components=2, n_hidden=30, random_state=0).fit(X)
    H = hidden(X, model.hidden_layer_)
    cov = np.cov(H, rowvar=False, bias=True)
    top = np.linalg.eigh(cov)[0][::-1][:2]
    W = model.output_weights_
    np.testing.assert_allclose(np.diag(W.T @ cov @ W), top, rtol=1e-8)
    np.testing.assert_allclose(model.transform(X), H @ W, rtol=1e-10, atol=1e-12)
    fits = elmscale.sweep(YourELM(3, n_hidden=30, random_state=0), X, {"n_components": [2, 4]})
    np.testing.assert_array_equal(fits[0][1].labels_, model.labels_)
    assert YourELM.reduce_params == ("n_hidden", "activation", "scaling", "cache", "random_state")


def test_template_checks_n_clusters_and_needs_a_solve(blobs):
    X, _ = blobs

    class NoSolve(elmscale.BaseELM):
        def __init__(
            self,
            n_hidden=5,
            *,
            n_clusters=3,
            activation="sigmoid",
            scaling=None,
            cache=False,
            random_state=None,
        ):
            self.n_hidden, self.n_clusters, self.activation = n_hidden, n_clusters, activation
            self.scaling, self.cache, self.random_state = scaling, cache, random_state

    with pytest.raises(ValueError, match="n_clusters=500 must be <= n_samples=240"):
        NoSolve(n_clusters=500).fit(X)
    with pytest.raises(NotImplementedError, match="must implement solve_reduced"):
        NoSolve().fit(X)


# -- the example plugin ----------------------------------------------------------------------
@pytest.fixture
def celm(monkeypatch):
    """The elmscale_celm module of plugins/elmscale-celm, imported from its source tree (it
    stays imported: its classes must keep their identity for pickling)."""
    monkeypatch.syspath_prepend(str(CELM_SRC))
    import elmscale_celm

    return elmscale_celm


def _private_elmscale_imports(path):
    """(line, imported path) of every import of a private elmscale module or name."""
    return _private_imports(path.read_text(), ("elmscale",), str(path))


def _private_imports(source, packages, filename="<source>"):
    """(line, imported path) of every import of a private module or name of ``packages``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] in packages and any(p.startswith("_") for p in parts[1:]):
                found.append((node.lineno, name))
    return found


def _private_elmscale_attributes(path):
    """(line, "module._name") of every private attribute read from an imported elmscale
    module or class (``from elmscale import gram; gram._task_groups``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "elmscale":
                bound |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "elmscale":
                    bound.add(alias.asname or alias.name.split(".")[0])
    return [
        (node.lineno, f"{node.value.id}.{node.attr}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in bound
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]


def test_benchmarks_use_only_the_public_api():
    files = sorted((ROOT / "benchmarks").rglob("*.py"))
    assert {p.parent.name for p in files} >= {"benchmarks", "paper", "scale", "quality"}
    assert len(files) > 20
    for path in files:
        assert _private_elmscale_imports(path) == [], path
        assert _private_elmscale_attributes(path) == [], path


def test_private_attribute_finder_finds_module_attributes(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import elmscale\nfrom elmscale import gram\nimport numpy as np\n"
        "gram._task_groups(1)\nelmscale.__version__\nnp._x\nelmscale.USELM()._fit\n"
    )
    assert _private_elmscale_attributes(src) == [(4, "gram._task_groups")]


def test_private_import_finder_finds_private_imports(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import elmscale._config\nfrom elmscale.base import _Clock\n"
        "from elmscale.utils._random import draw_seed\nfrom elmscale import sweep\n"
        "from sklearn.base import _fit_context\nfrom . import _celm\n"
    )
    assert _private_elmscale_imports(src) == [
        (1, "elmscale._config"),
        (2, "elmscale.base._Clock"),
        (3, "elmscale.utils._random.draw_seed"),
    ]


def _copied_python_blocks():
    """The README's Python blocks and the architecture page's, by where they stand."""
    readme = (ROOT / "README.md").read_text()
    blocks = [
        (f"README block {i}", b)
        for i, b in enumerate(re.findall(r"```python\n(.*?)```", readme, flags=re.S))
    ]
    page = rst_python_blocks(ROOT / "docs" / "developer.rst")
    return blocks + [(f"docs/developer.rst block {i}", b) for i, b in enumerate(page)]


def test_readme_and_plugins_import_nothing_private_from_elmscale_or_sklearn():
    """What a plugin author copies (the README's and the architecture page's code,
    plugins/) builds on public names only."""
    blocks = _copied_python_blocks()
    assert any("class YourELM" in b for _, b in blocks)
    for where, block in blocks:
        assert _private_imports(block, ("elmscale", "sklearn"), where) == [], block
    files = sorted((ROOT / "plugins").rglob("*.py"))
    assert len(files) >= 5
    for path in files:
        assert _private_imports(path.read_text(), ("elmscale", "sklearn"), str(path)) == [], path


def test_private_import_finder_checks_sklearn_when_asked():
    src = (
        "from sklearn.utils._param_validation import Interval\n"
        "import sklearn._config\nfrom sklearn.base import ClusterMixin\n"
        "from elmscale.validation import Interval\n"
    )
    assert _private_imports(src, ("elmscale", "sklearn")) == [
        (1, "sklearn.utils._param_validation.Interval"),
        (2, "sklearn._config"),
    ]


def test_celm_imports_nothing_private_from_elmscale():
    files = sorted(CELM_SRC.rglob("*.py"))
    assert len(files) == 3
    for path in files:
        assert _private_elmscale_imports(path) == [], path


def test_celm_passes_the_algorithm_contract(celm):
    check_algorithm(celm.CELM)
    assert issubclass(celm.CELM, elmscale.BaseELM)


@pytest.mark.parametrize("scheduler, workers", [("threads", 2), ("sync", 1)])
@pytest.mark.parametrize("name", ["CELM", "USELM", "EMMC"])
def test_plugin_and_builtins_run_dask_tasks_on_one_blas_thread(celm, name, scheduler, workers):
    """On dask's threaded scheduler every task of fit and predict sees BLAS on one thread,
    for the plugin as for the built-ins; on the sync scheduler BLAS keeps its threads."""
    before = _blas_threads()
    if not before:
        pytest.skip("no BLAS found by threadpoolctl")
    seen = []
    activation = _recording_activation(seen)
    cls = celm.CELM if name == "CELM" else getattr(elmscale, name)
    params = dict(n_hidden=20, activation=activation, random_state=0, n_clusters=3)
    if name == "USELM":
        params.update(graph="exact")
    X = np.random.RandomState(0).standard_normal((300, 3))
    with dask.config.set(scheduler=scheduler, num_workers=workers):
        model = cls(**params).fit(X)
        n_fit = len(seen)
        model.predict(X)
    assert n_fit >= 1 and len(seen) > n_fit
    want = {1} if scheduler == "threads" else set(before.values())
    assert all(s == want for s in seen), seen
    assert _blas_threads() == before


def test_solve_params_give_reduce_params_as_every_other_parameter():
    """``solve_params`` names what only the solve reads; ``reduce_params`` is then every
    other parameter of ``__init__``, in its order (a class listing its own keeps them)."""

    class SolveC(RidgeELM):
        solve_params = ("C",)

    assert SolveC.reduce_params == ("n_hidden", "activation", "scaling", "cache", "random_state")
    regressor = elmscale.ELMRegressor
    assert set(regressor.reduce_params) == set(regressor().get_params()) - {"C"}

    class Listed(SolveC):
        reduce_params = ("n_hidden",)

    assert Listed.reduce_params == ("n_hidden",)
    with pytest.raises(TypeError, match=r"solve_params names \['lam'\], not parameters"):
        type("Wrong", (RidgeELM,), {"solve_params": ("lam",)})
