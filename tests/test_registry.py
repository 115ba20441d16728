"""The plugin registry: lookups, sample plugins (good, broken, duplicate, misspelt), the
environment switches, and the contract checks of ``elmscale.testing``.

Hermetic: sample plugins from ``tests/plugins`` go into a fresh ``Registry()`` or into the
global one through a fixture that unregisters them; entry points are faked by patching
``importlib.metadata.entry_points``, so nothing installed is loaded.
"""

import importlib
import importlib.metadata
import re
import subprocess
import sys
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

import elmscale
from elmscale import registry
from elmscale.exceptions import PluginLoadError, PluginLoadWarning, UnknownPluginError
from elmscale.hidden import sigmoid
from elmscale.registry import Registry
from elmscale.testing import check_activation, check_algorithm, check_graph_backend

PLUGINS = Path(__file__).parent / "plugins"
ROOT = Path(__file__).resolve().parents[1]
BUILTIN_ACTIVATIONS = "elmscale._builtins.activations"


@pytest.fixture
def samples(monkeypatch):
    """Import function for the sample plugin modules of tests/plugins (fresh each time)."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    for name in ("good_plugin", "duplicate_sigmoid", "misspelt_hook", "broken_import"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module


@pytest.fixture
def clean_env(monkeypatch):
    """No plugin environment variables (the global registry is loaded first, while the
    suite's ELMSCALE_LOAD_PLUGINS="" still keeps installed entry points out of it)."""
    registry.load_plugins()
    for var in (
        "ELMSCALE_STRICT_PLUGINS",
        "ELMSCALE_LOAD_PLUGINS",
        "ELMSCALE_DISABLE_PLUGINS",
        "ELMSCALE_TRACE_PLUGINS",
    ):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture
def fresh(clean_env):
    """A new Registry with the built-ins loaded and no entry points."""
    clean_env.setenv("ELMSCALE_LOAD_PLUGINS", "")
    reg = Registry()
    reg.load_plugins()
    return reg


@pytest.fixture
def fake_entry_points(clean_env, samples):
    """Make ``importlib.metadata.entry_points(group="elmscale")`` return the given
    ``name = module`` pairs (modules from tests/plugins); other groups are untouched."""
    real = importlib.metadata.entry_points

    def install(**pairs):
        eps = importlib.metadata.EntryPoints(
            importlib.metadata.EntryPoint(name, value, registry.ENTRY_POINT_GROUP)
            for name, value in pairs.items()
        )

        def entry_points(**params):
            if params.get("group") == registry.ENTRY_POINT_GROUP:
                return eps
            return real(**params)

        clean_env.setattr(importlib.metadata, "entry_points", entry_points)

    return install


def _messages(record):
    return [str(w.message) for w in record if issubclass(w.category, PluginLoadWarning)]


# -- lookups on the global registry -----------------------------------------------------------
@pytest.mark.parametrize(
    "kind, names",
    [
        ("algorithm", {"us-elm"}),
        ("activation", {"sigmoid", "tanh", "relu", "gaussian", "identity"}),
        ("graph", {"exact", "pynndescent"}),
        ("kernel", {"linear", "rbf", "poly"}),
        ("hidden", {"gaussian-rows"}),
    ],
)
def test_available_lists_builtins_sorted(kind, names):
    got = elmscale.available(kind)
    assert names <= set(got)
    assert got == sorted(got)


def test_available_rejects_unknown_kind():
    with pytest.raises(
        ValueError,
        match=r"kind must be one of \['activation', 'algorithm', "
        r"'graph', 'hidden', 'kernel'\], got 'model'",
    ):
        elmscale.available("model")


def test_make_builds_the_registered_estimator():
    model = elmscale.make("us-elm", n_clusters=3)
    assert isinstance(model, elmscale.USELM)
    assert model.get_params()["n_clusters"] == 3
    assert type(elmscale.make("uselm")) is elmscale.USELM  # alias
    assert elmscale.get("activation", "sigmoid") is sigmoid
    assert elmscale.get("activation", "rbf") is elmscale.get("activation", "gaussian")


def test_unknown_name_lists_registered_ones():
    listed = ", ".join(elmscale.available("algorithm"))
    with pytest.raises(
        UnknownPluginError,
        match=re.escape(
            f"algorithm 'us_elm' is not registered; available: {listed} (run `elmscale plugins`)"
        ),
    ):
        elmscale.make("us_elm")
    listed = ", ".join(elmscale.available("activation"))
    with pytest.raises(
        UnknownPluginError,
        match=re.escape(
            f"activation='sigmod': activation 'sigmod' is not registered; available: {listed}"
        ),
    ):
        registry.resolve("activation", "sigmod", "activation")


def test_unknown_activation_in_an_estimator_lists_registered_ones(blobs):
    X, _ = blobs
    with pytest.raises(
        ValueError,
        match=r"'activation' parameter of USELM must be a registered "
        r"activation name among \[.*'sigmoid'.*\] \(run `elmscale plugins`\).* "
        r"Got 'sigmod' instead",
    ):
        elmscale.USELM(3, n_hidden=20, activation="sigmod", graph="exact").fit(X)


def test_builtins_come_from_builtin_plugins():
    plugins = {p["name"]: p for p in elmscale.list_plugins()}
    assert plugins[BUILTIN_ACTIVATIONS]["registered"]["activation"][:1] == ["gaussian"]
    assert "us-elm" in plugins["elmscale._builtins.uselm"]["registered"]["algorithm"]
    assert plugins["elmscale._builtins.uselm"]["distribution"].startswith("elmscale")


# -- a good plugin ----------------------------------------------------------------------------
def test_good_plugin_in_a_fresh_registry(fresh, samples):
    good = samples("good_plugin")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fresh.register_plugin(good, name="good", distribution="good-dist 1.0") == "good"
    assert fresh.get("algorithm", "toy-elm-kmeans") is good.ToyELMKMeans
    assert fresh.get("algorithm", "toy") is good.ToyELMKMeans
    assert fresh.get("activation", "cube") is good.cube
    assert "cube" in fresh.available("activation") and "toy" not in fresh.available("algorithm")
    listing = {p["name"]: p for p in fresh.list_plugins()}
    assert listing["good"] == {
        "name": "good",
        "distribution": "good-dist 1.0",
        "entry_point": "",
        "registered": {"algorithm": ["toy-elm-kmeans"], "activation": ["cube"]},
    }
    assert fresh.failures == []
    check_activation(good.cube)
    check_algorithm(good.ToyELMKMeans)


@pytest.fixture
def good_in_global(samples):
    """The good sample plugin registered in the process-wide registry, removed afterwards."""
    good = samples("good_plugin")
    reg = registry.get_registry()
    reg.register_plugin(good, name="tests-good")
    yield good
    reg.unregister_plugin("tests-good")


def test_good_plugin_usable_by_name_everywhere(good_in_global, blobs):
    X, y = blobs
    model = elmscale.make(
        "toy-elm-kmeans", n_clusters=3, n_hidden=30, activation="cube", random_state=0
    ).fit(X)
    assert model.hidden_layer_.activation is good_in_global.cube
    assert sorted(set(model.labels_.tolist())) == [0, 1, 2]
    # an estimator of elmscale takes the plugin's activation by name too
    uselm = elmscale.USELM(3, n_hidden=30, activation="cube", graph="exact", random_state=0)
    assert uselm.fit(X).labels_.shape == (X.shape[0],)


def test_unregister_removes_every_name(good_in_global):
    reg = registry.get_registry()
    reg.unregister_plugin("tests-good")
    assert "cube" not in elmscale.available("activation")
    with pytest.raises(UnknownPluginError, match="'toy' is not registered"):
        elmscale.make("toy")
    reg.register_plugin(good_in_global, name="tests-good")  # registering again works
    assert "cube" in elmscale.available("activation")


# -- duplicate names --------------------------------------------------------------------------
def test_duplicate_name_warns_naming_both_and_keeps_builtin(fresh, samples):
    dup = samples("duplicate_sigmoid")
    with pytest.warns(
        PluginLoadWarning,
        match=re.escape(
            "elmscale plugin 'dup' (distribution dup-dist 0.1) registers a taken name: "
            "ValueError: plugin 'dup' registers activation 'sigmoid', which plugin "
            f"'{BUILTIN_ACTIVATIONS}' already registered; keeping '{BUILTIN_ACTIVATIONS}''s"
        ),
    ):
        fresh.register_plugin(dup, name="dup", distribution="dup-dist 0.1")
    assert fresh.get("activation", "sigmoid") is sigmoid
    assert fresh.get("activation", "hard-sigmoid") is dup.hard_sigmoid  # the rest is kept
    assert [f.plugin for f in fresh.failures] == ["dup"]


def test_builtins_win_even_when_a_plugin_registers_first(clean_env, samples):
    clean_env.setenv("ELMSCALE_LOAD_PLUGINS", "")
    reg = Registry()  # nothing loaded yet: registering loads the built-ins first
    with pytest.warns(PluginLoadWarning, match="keeping 'elmscale._builtins.activations''s"):
        reg.register_plugin(samples("duplicate_sigmoid"), name="dup")
    assert reg.get("activation", "sigmoid") is sigmoid


def test_duplicate_alias_is_a_taken_name(fresh):
    class Plugin:
        @elmscale.hookimpl
        def register_graph_backends(self, register):
            register("brute-force", lambda X, k, *, random_state=None: None, aliases=("brute",))

    with pytest.warns(
        PluginLoadWarning,
        match="registers graph 'brute', which plugin 'elmscale._builtins.graphs' already",
    ):
        fresh.register_plugin(Plugin(), name="aliased")
    assert "brute-force" not in fresh.available("graph")


def test_second_plugin_with_a_taken_plugin_name_leaves_the_first(fresh, samples):
    good = samples("good_plugin")
    fresh.register_plugin(good, name="same", entry_point="same = good_plugin")
    with pytest.warns(
        PluginLoadWarning,
        match=re.escape(
            "elmscale plugin 'same' (entry point 'same = other', distribution other 1) "
            "failed: ValueError: a plugin is already registered as 'same'"
        ),
    ):
        fresh.register_plugin(
            samples("duplicate_sigmoid"),
            name="same",
            entry_point="same = other",
            distribution="other 1",
        )
    assert fresh.get("activation", "cube") is good.cube  # the first one still works
    assert "hard-sigmoid" not in fresh.available("activation")
    with pytest.warns(PluginLoadWarning, match="already registered as 'same'"):
        fresh.register_plugin(good, name="again")  # the same module twice
    assert "same" in [p["name"] for p in fresh.list_plugins()]


# -- broken plugins ---------------------------------------------------------------------------
def test_misspelt_hook_is_caught_by_check_pending(fresh, samples):
    with pytest.warns(
        PluginLoadWarning,
        match=r"elmscale plugin 'misspelt' \(distribution "
        r"elmscale\) failed: PluginValidationError: unknown hook "
        r"'register_algorithm' in plugin",
    ):
        assert fresh.register_plugin(samples("misspelt_hook"), name="misspelt") is None
    assert "kmeans" not in fresh.available("algorithm")
    assert "misspelt" not in [p["name"] for p in fresh.list_plugins()]
    assert fresh.pm.is_blocked("misspelt")
    # later registrations are not affected by the leftover hook caller
    good = samples("good_plugin")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh.register_plugin(good, name="good")
    assert "cube" in fresh.available("activation")


def test_hook_signature_mismatch_is_a_load_failure(fresh):
    class Plugin:
        @elmscale.hookimpl
        def register_algorithms(self, register, extra):
            pass

    with pytest.warns(
        PluginLoadWarning,
        match=r"PluginValidationError: Plugin 'bad-args' "
        r"for hook 'register_algorithms'",
    ):
        fresh.register_plugin(Plugin(), name="bad-args")


def test_plugin_without_hookimpl_markers_is_reported(fresh):
    class Plugin:
        def register_algorithms(self, register):  # @elmscale.hookimpl forgotten
            register("never", object)

    with pytest.warns(
        PluginLoadWarning,
        match=r"it implements none of the hooks "
        r"register_activations, register_algorithms, register_graph_backends, "
        r"register_hidden_layers, register_kernels \(is @elmscale.hookimpl missing\?\)",
    ):
        fresh.register_plugin(Plugin(), name="unmarked")


def test_hook_that_raises_leaves_nothing_behind(fresh):
    class Plugin:
        @elmscale.hookimpl
        def register_activations(self, register):
            register("half-done", np.tanh)
            raise RuntimeError("boom in the middle")

    with pytest.warns(PluginLoadWarning, match="failed: RuntimeError: boom in the middle"):
        fresh.register_plugin(Plugin(), name="raiser")
    assert "half-done" not in fresh.available("activation")
    assert "raiser" not in [p["name"] for p in fresh.list_plugins()]


@pytest.mark.parametrize(
    "kind_hook, obj, message",
    [
        ("register_algorithms", "not a class", "algorithm 'x' must be an estimator class"),
        ("register_activations", 42, "activation 'x' must be callable, got 42"),
    ],
)
def test_objects_breaking_the_protocol_are_refused(fresh, kind_hook, obj, message):
    def hook(register):
        register("x", obj)

    plugin = type("Plugin", (), {kind_hook: staticmethod(elmscale.hookimpl(hook))})
    with pytest.warns(PluginLoadWarning, match=f"TypeError: {re.escape(message)}"):
        fresh.register_plugin(plugin, name="protocol")
    assert "x" not in fresh.available("algorithm") + fresh.available("activation")


def test_broken_entry_point_is_skipped_and_the_rest_work(fake_entry_points):
    fake_entry_points(good="good_plugin", broken="broken_import", dup="duplicate_sigmoid")
    reg = Registry()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        reg.load_plugins()
    messages = _messages(record)
    assert len(messages) == 2, messages
    assert messages[0] == (
        "elmscale plugin 'broken' (entry point 'broken = broken_import', distribution unknown) "
        "failed: ImportError: simulated: elmscale_broken needs the package 'notinstalled'"
    )
    assert messages[1].startswith(
        "elmscale plugin 'dup' (entry point 'dup = duplicate_sigmoid', distribution unknown) "
        "registers a taken name: ValueError: plugin 'dup' registers activation 'sigmoid'"
    )
    assert {"cube", "hard-sigmoid", "sigmoid", "tanh"} <= set(reg.available("activation"))
    assert {"toy-elm-kmeans", "us-elm"} <= set(reg.available("algorithm"))
    assert reg.get("activation", "sigmoid") is sigmoid
    failure = reg.failures[0]
    assert (failure.plugin, failure.entry_point) == ("broken", "broken = broken_import")
    assert "Traceback" in failure.traceback and "broken_import.py" in failure.traceback
    assert type(reg.get("algorithm", "us-elm")(n_clusters=3)) is elmscale.USELM


def test_strict_mode_raises_plugin_load_error(fake_entry_points, clean_env):
    fake_entry_points(good="good_plugin", broken="broken_import")
    clean_env.setenv("ELMSCALE_STRICT_PLUGINS", "1")
    with pytest.raises(
        PluginLoadError,
        match=r"elmscale plugin 'broken' \(entry point "
        r"'broken = broken_import'.*ImportError: simulated",
    ):
        Registry().load_plugins()


def test_strict_mode_raises_on_duplicates_and_misspelt_hooks(fresh, samples, clean_env):
    clean_env.setenv("ELMSCALE_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="registers activation 'sigmoid'"):
        fresh.register_plugin(samples("duplicate_sigmoid"), name="dup")
    assert "hard-sigmoid" not in fresh.available("activation")
    with pytest.raises(PluginLoadError, match="unknown hook 'register_algorithm'"):
        fresh.register_plugin(samples("misspelt_hook"), name="misspelt")
    assert fresh.get("activation", "sigmoid") is sigmoid


@pytest.mark.parametrize(
    "load, disable, expected",
    [
        ("good", None, {"good"}),
        ("good, dup", None, {"good", "dup"}),
        ("", None, set()),
        (None, "broken", {"good", "dup"}),
        (None, "broken,dup", {"good"}),
        ("good,broken", "broken", {"good"}),
    ],
)
def test_load_and_disable_switches(fake_entry_points, clean_env, load, disable, expected):
    fake_entry_points(good="good_plugin", broken="broken_import", dup="duplicate_sigmoid")
    if load is not None:
        clean_env.setenv("ELMSCALE_LOAD_PLUGINS", load)
    if disable is not None:
        clean_env.setenv("ELMSCALE_DISABLE_PLUGINS", disable)
    reg = Registry()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        reg.load_plugins()
    loaded = {p["name"] for p in reg.list_plugins()} - set(registry.builtin_plugins())
    assert loaded == expected
    assert not any("'broken'" in m for m in _messages(record))  # never imported
    assert "us-elm" in reg.available("algorithm")


def test_load_plugins_is_idempotent(fake_entry_points):
    fake_entry_points(good="good_plugin")
    reg = Registry()
    reg.load_plugins()
    reg.load_plugins()
    assert reg.available("activation").count("cube") == 1
    assert [p["name"] for p in reg.list_plugins()].count("good") == 1


# -- contract checks (elmscale.testing) ------------------------------------------------------
@pytest.mark.parametrize("name", ["sigmoid", "tanh", "relu", "identity", "gaussian"])
def test_builtin_activations_meet_the_contract(name):
    check_activation(name)


def test_exact_graph_meets_the_contract():
    check_graph_backend("exact", min_recall=1.0)


def test_uselm_meets_the_algorithm_contract():
    check_algorithm("us-elm")


def _bad_dtype(Z):
    return Z.astype(np.float64) * 2


def _bad_shape(Z):
    return Z[:, :-1]


def _not_row_wise(Z):
    return Z - Z.mean(axis=0)


_calls = []


def _stateful(Z):
    _calls.append(1)
    Z += len(_calls)
    return Z


def _bad_node(Z):
    return Z


_bad_node.node = "multiplicative"


@pytest.mark.parametrize(
    "func, message",
    [
        (_bad_dtype, "changed the dtype: float32 in, float64 out"),
        (_bad_shape, "changed the shape: (13, 7) in, (13, 6) out"),
        (_not_row_wise, "is not row-wise"),
        (_stateful, "is not stateless"),
        (_bad_node, "attribute node must be 'additive' or 'rbf', got 'multiplicative'"),
        (lambda Z: np.full_like(Z, np.inf), "gave non-finite values for finite float64 input"),
    ],
)
def test_check_activation_failures(func, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_activation(func)


def _with_self(X, k, *, random_state=None):
    import dask.array as da

    idx, dist = registry.get("graph", "exact")(X, k)
    idx = da.concatenate([da.arange(X.shape[0], chunks=X.chunks[0])[:, None], idx[:, 1:]], axis=1)
    return idx, dist


def _misaligned(X, k, *, random_state=None):
    idx, dist = registry.get("graph", "exact")(X, k)
    return idx.rechunk(40), dist.rechunk(40)


def _poor_recall(X, k, *, random_state=None):
    import dask.array as da

    Xc = X.compute()
    d = np.sqrt(((Xc[:, None, :] - Xc[None, :, :]) ** 2).sum(axis=2))
    idx = np.argsort(d, axis=1)[:, -k:]  # the k farthest points, nearest of them first
    chunks = (X.chunks[0], (k,))
    return (
        da.from_array(idx, chunks=chunks),
        da.from_array(np.take_along_axis(d, idx, axis=1), chunks=chunks),
    )


@pytest.mark.parametrize(
    "backend, message",
    [
        (_with_self, "rows list themselves as a neighbour"),
        (_misaligned, "are not X's (50, 70, 60)"),
        (_poor_recall, "recall@6 against brute force is"),
        (
            lambda X, k, *, random_state=None: (X, X),
            "indices has shape (180, 4), expected (180, 6)",
        ),
    ],
)
def test_check_graph_backend_failures(backend, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_graph_backend(backend)


class _RewritesParams(elmscale.USELM):
    def __init__(self, n_clusters=8, *, n_hidden=1000, random_state=None):
        self.n_clusters = n_clusters
        self.n_hidden = max(n_hidden, 100)
        self.random_state = random_state


class _FitReturnsLabels(elmscale.USELM):
    def fit(self, X, y=None):
        return super().fit(X).labels_


@pytest.mark.parametrize(
    "cls, message",
    [
        (_RewritesParams, "__init__ changed parameter n_hidden: passed 40"),
        (_FitReturnsLabels, "fit() must return self, got ndarray"),
        (sigmoid, "must be a class, got function"),
    ],
)
def test_check_algorithm_failures(cls, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_algorithm(cls, sklearn_checks=False)


def test_trace_logs_hook_calls_and_names(clean_env, samples, caplog):
    clean_env.setenv("ELMSCALE_LOAD_PLUGINS", "")
    clean_env.setenv("ELMSCALE_TRACE_PLUGINS", "1")
    reg = Registry()
    with caplog.at_level("DEBUG", logger="elmscale.registry"):
        reg.register_plugin(samples("good_plugin"), name="good")
    messages = [r.getMessage() for r in caplog.records]
    assert "plugin 'good': calling register_algorithms" in messages
    assert "plugin 'good' registers activation 'cube' (aliases [])" in messages
    assert (
        "plugin 'elmscale._builtins.uselm' registers algorithm 'us-elm' (aliases ['uselm'])"
    ) in messages


def test_plugin_calling_sys_exit_on_import_is_contained(fake_entry_points, tmp_path, monkeypatch):
    (tmp_path / "exits_plugin.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_entry_points(exits="exits_plugin", good="good_plugin")
    reg = Registry()
    with pytest.warns(PluginLoadWarning, match="'exits' .* failed: SystemExit: 3"):
        reg.load_plugins()
    assert "cube" in reg.available("activation")


@pytest.mark.slow  # numba compiles pynndescent for ~20 s; the exact backend covers the checks
@pytest.mark.xdist_group("numba")  # one process compiles pynndescent and umap-learn once
def test_pynndescent_graph_meets_the_contract():
    check_graph_backend("pynndescent", min_recall=0.9)


def test_check_algorithm_supervised_and_skips():
    if "elm-classifier" in elmscale.available("algorithm"):
        check_algorithm("elm-classifier", y="blobs", sklearn_checks=False)
    with pytest.raises(ValueError, match=r"skip_checks: unknown checks \['check_nope'\]"):
        check_algorithm("us-elm", skip_checks=("check_nope",))


def test_cell_search_graph_meets_the_contract():
    from elmscale.graph import CellSearch

    check_graph_backend("cells", min_recall=0.99)
    check_graph_backend(CellSearch(rows_per_cell=30, n_probes=2, n_refine=1), min_recall=0.9)


# -- one table of names: aliases and third-party backends work wherever a built-in does -------
def _fit_labels(X, **params):
    model = elmscale.USELM(3, n_hidden=30, random_state=0, **params)
    return model.fit(X).labels_


@pytest.mark.parametrize(
    "parameter, alias, name",
    [("graph", "brute", "exact"), ("activation", "linear", "identity")],
)
def test_an_alias_is_a_valid_estimator_parameter(blobs, parameter, alias, name):
    X, _ = blobs
    base = {"graph": "exact"}
    labels = _fit_labels(X, **{**base, parameter: alias})
    np.testing.assert_array_equal(labels, _fit_labels(X, **{**base, parameter: name}))


def test_knn_graph_takes_an_alias(blobs):
    from elmscale.graph import knn_graph

    Xd = da.from_array(blobs[0], chunks=(80, 5))
    L_alias = knn_graph(Xd, 5, backend="brute").laplacian()
    L_name = knn_graph(Xd, 5, backend="exact").laplacian()
    assert (L_alias != L_name).nnz == 0


def test_a_plugins_activation_draws_a_hidden_layer_by_name(good_in_global):
    """Activation names resolve in the registry outside an estimator too: the hidden layer
    looks them up where the graph looks up its backends."""
    from elmscale.hidden import RandomHiddenLayer

    layer = RandomHiddenLayer.draw(4, 10, "cube", 0)
    assert layer.activation is good_in_global.cube
    X = np.random.RandomState(1).randn(6, 4)
    np.testing.assert_allclose(layer(X), (X @ layer.input_weights + layer.biases) ** 3)


def test_a_hidden_layer_names_an_unknown_activation_and_the_known_ones():
    from elmscale.hidden import RandomHiddenLayer

    with pytest.raises(UnknownPluginError) as err:
        RandomHiddenLayer.draw(4, 10, "softplus", 0)
    assert str(err.value) == (
        "activation='softplus': activation 'softplus' is not registered; available: "
        f"{', '.join(elmscale.available('activation'))} (run `elmscale plugins`)"
    )
    with pytest.raises(TypeError, match="activation must be a registered name or a callable"):
        RandomHiddenLayer.draw(4, 10, 42, 0)


def test_the_old_table_of_builtin_activations_is_the_registrys():
    with pytest.warns(FutureWarning, match="BUILTIN_ACTIVATIONS is deprecated"):
        table = elmscale.hidden.BUILTIN_ACTIVATIONS
    assert table["sigmoid"] is sigmoid and table["rbf"] is elmscale.get("activation", "gaussian")
    assert "BUILTIN_ACTIVATIONS" not in elmscale.hidden.__all__


def test_importing_the_registry_imports_no_estimator_or_builtin():
    """The registry is the bottom of the house: importing it alone (a fresh interpreter)
    imports neither the built-in plugins nor any estimator, layer or graph module; the
    built-ins load on the first lookup."""
    code = (
        "import sys, elmscale.registry as r\n"
        "print(sorted(m for m in sys.modules if m.startswith('elmscale')))\n"
        "r.available('activation')\n"
        "print('elmscale._builtins.uselm' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.splitlines()
    assert out[0] == str(
        ["elmscale", "elmscale.exceptions", "elmscale.hookspecs", "elmscale.registry"]
    )
    assert out[1] == "True"


class _CountingBackend:
    """A third-party graph backend: the exact search, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, X, n_neighbors, *, random_state=None):
        self.calls += 1
        return elmscale.get("graph", "exact")(X, n_neighbors, random_state=random_state)


@pytest.fixture
def third_party_backend():
    """A backend registered through the normal hook as "tests-counting" (alias
    "tests-count") in the process-wide registry, removed afterwards."""
    backend = _CountingBackend()

    class Plugin:
        @elmscale.hookimpl
        def register_graph_backends(self, register):
            register("tests-counting", backend, aliases=("tests-count",))

    reg = registry.get_registry()
    assert reg.register_plugin(Plugin(), name="tests-backend") == "tests-backend"
    yield backend
    reg.unregister_plugin("tests-backend")


@pytest.mark.parametrize("name", ["tests-counting", "tests-count"])
def test_a_third_party_backend_works_in_an_estimator_and_in_knn_graph(
    third_party_backend, blobs, name
):
    from elmscale.graph import knn_graph

    X, _ = blobs
    labels = _fit_labels(X, graph=name)
    assert third_party_backend.calls == 1
    np.testing.assert_array_equal(labels, _fit_labels(X, graph="exact"))
    Xd = da.from_array(X, chunks=(80, 5))
    L = knn_graph(Xd, 5, backend=name).laplacian()
    assert third_party_backend.calls == 2
    assert (L != knn_graph(Xd, 5, backend="exact").laplacian()).nnz == 0
    graph = elmscale.KNNGraphTransformer(n_neighbors=5, graph=name).fit_transform(X)
    assert third_party_backend.calls == 3
    exact = elmscale.KNNGraphTransformer(n_neighbors=5, graph="brute").fit_transform(X)
    assert (graph != exact).nnz == 0


def test_an_unknown_name_is_refused_by_the_estimator_and_knn_graph(blobs):
    from elmscale.graph import knn_graph
    from elmscale.validation import InvalidParameterError

    X, _ = blobs
    with pytest.raises(InvalidParameterError, match="'graph' parameter of USELM"):
        _fit_labels(X, graph="annoy")
    with pytest.raises(UnknownPluginError, match="backend='annoy'.*available: cells, exact"):
        knn_graph(da.from_array(X, chunks=(80, 5)), 5, backend="annoy")
