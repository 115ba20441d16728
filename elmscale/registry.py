"""The plugin registry: one pluggy manager, built-ins and third parties alike.

Names are resolved on the client. ``load_plugins()`` is lazy and idempotent: the first lookup
loads the built-in plugins, then every entry point in the group ``elmscale``. A plugin that
fails to import, to validate, or to register is skipped with a ``PluginLoadWarning`` naming it
and its entry point; the others keep working. Environment variables:

``ELMSCALE_STRICT_PLUGINS=1``
    turn those failures into ``PluginLoadError`` (for a plugin's own CI);
``ELMSCALE_LOAD_PLUGINS=a,b``
    load only these entry points (an empty value loads none);
``ELMSCALE_DISABLE_PLUGINS=x,y``
    skip these entry points;
``ELMSCALE_TRACE_PLUGINS=1``
    log every hook call and every name registered at DEBUG level (logger
    ``elmscale.registry``).

Built-ins always load first, so a plugin cannot take over a built-in name: a name (or alias)
already taken is refused with a warning naming both plugins, and the plugin's other names are
kept. A plugin whose hook raises is removed whole; a hook with an unknown name (a misspelling)
or a signature that does not match its spec blocks the plugin; so does a second plugin under a
name already in use, without disturbing the first.
"""

import dataclasses
import functools
import importlib.metadata
import logging
import os
import threading
import traceback
import warnings

import pluggy

from . import hookspecs
from .exceptions import PluginLoadError, PluginLoadWarning, UnknownPluginError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "elmscale"
KINDS = {
    "algorithm": "register_algorithms",
    "activation": "register_activations",
    "hidden": "register_hidden_layers",  # node families: NodeFamily, ``data_nodes=``
    "graph": "register_graph_backends",
    "kernel": "register_kernels",
}
BUILTIN_PACKAGE = "elmscale._builtins"


def builtin_plugins():
    """Module names of the built-in plugins: every module of ``elmscale._builtins``, sorted."""
    import pkgutil

    from . import _builtins

    return [
        f"{BUILTIN_PACKAGE}.{m.name}"
        for m in sorted(pkgutil.iter_modules(_builtins.__path__), key=lambda m: m.name)
    ]


@functools.cache
def builtin_algorithms():
    """The estimator classes elmscale's own plugins register, by class name: what the
    ``elmscale`` namespace exports (``elmscale.USELM``). Read from the built-in plugins'
    ``register_algorithms`` hooks alone, so no other plugin is loaded for it."""
    import importlib

    found = {}

    def register(name, obj, *, aliases=(), description=""):
        found[obj.__name__] = obj

    for modname in builtin_plugins():
        hook = getattr(importlib.import_module(modname), KINDS["algorithm"], None)
        if hook is not None:
            hook(register)
    return dict(sorted(found.items()))


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered object and where it came from."""

    kind: str
    name: str
    obj: object
    plugin: str
    aliases: tuple = ()
    description: str = ""


@dataclasses.dataclass
class PluginFailure:
    """A plugin that could not be used, kept for ``elmscale plugins --verbose``."""

    plugin: str
    entry_point: str
    distribution: str
    error: str
    traceback: str


def _own_distribution():
    try:
        return f"elmscale {importlib.metadata.version('elmscale')}"
    except importlib.metadata.PackageNotFoundError:
        return "elmscale"


def _check_protocol(kind, name, obj):
    """The cheap part of each kind's protocol, checked when a name is registered
    (``elmscale.testing`` has the full contract checks)."""
    if kind == "algorithm":
        if not (isinstance(obj, type) and hasattr(obj, "get_params") and hasattr(obj, "fit")):
            raise TypeError(
                f"algorithm {name!r} must be an estimator class with get_params "
                f"and fit, got {obj!r}"
            )
    elif kind == "hidden":
        if not all(callable(getattr(obj, m, None)) for m in ("fit", "transform")):
            raise TypeError(
                f"hidden-node family {name!r} must have methods fit(sample, n_nodes, rng, *, "
                f"width) and transform(rows, params), got {obj!r}"
            )
    elif not callable(obj):
        raise TypeError(f"{kind} {name!r} must be callable, got {obj!r}")


class Registry:
    """A pluggy ``PluginManager`` plus the tables of registered names, per kind."""

    def __init__(self):
        self.pm = pluggy.PluginManager("elmscale")
        self.pm.add_hookspecs(hookspecs)
        self._entries = {kind: {} for kind in KINDS}
        self._aliases = {kind: {} for kind in KINDS}
        self.failures = []
        self._loaded = False
        self._lock = threading.RLock()
        self._distributions = {}
        self._entry_points = {}
        self._trace = False

    # -- loading ---------------------------------------------------------------------------
    def load_plugins(self, *, entry_points=True):
        """Load built-ins and (unless disabled) installed entry points, once."""
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            self._trace = bool(os.environ.get("ELMSCALE_TRACE_PLUGINS"))
            if self._trace:
                self.pm.trace.root.setwriter(logger.debug)
                self.pm.enable_tracing()
            import importlib

            own = _own_distribution()
            for modname in builtin_plugins():
                self.register_plugin(
                    importlib.import_module(modname), name=modname, distribution=own
                )
            if entry_points:
                self._load_entry_points()

    def _load_entry_points(self):
        only = os.environ.get("ELMSCALE_LOAD_PLUGINS")
        only = None if only is None else {s.strip() for s in only.split(",") if s.strip()}
        disabled = os.environ.get("ELMSCALE_DISABLE_PLUGINS", "")
        disabled = {s.strip() for s in disabled.split(",") if s.strip()}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if (only is not None and ep.name not in only) or ep.name in disabled:
                continue
            dist = getattr(ep, "dist", None)
            dist_name = f"{dist.name} {dist.version}" if dist is not None else "unknown"
            try:
                module = ep.load()
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - nothing may stop the rest
                self._fail(ep.name, f"{ep.name} = {ep.value}", dist_name, exc)
                continue
            self.register_plugin(
                module, name=ep.name, entry_point=f"{ep.name} = {ep.value}", distribution=dist_name
            )

    def register_plugin(self, plugin, *, name=None, entry_point="", distribution="elmscale"):
        """Register a module or object implementing hooks, and collect what it registers.

        Used for built-ins, entry points and tests alike. Failures are reported through
        ``PluginLoadWarning`` (or raised under ``ELMSCALE_STRICT_PLUGINS=1``). Returns the
        plugin's name, or None when it was skipped.
        """
        name = name or getattr(plugin, "__name__", repr(plugin))
        self.load_plugins()  # built-ins first, whoever registers: they keep their names
        with self._lock:
            if self.pm.has_plugin(name) or self.pm.is_registered(plugin):
                # a second plugin under a taken name (or the same object twice): skip it,
                # and leave the one already registered alone
                holder = self.pm.get_name(plugin) if self.pm.is_registered(plugin) else name
                self._fail(
                    name,
                    entry_point,
                    distribution,
                    ValueError(
                        f"a plugin is already registered as {holder!r}; "
                        "entry point names must be unique"
                    ),
                )
                return None
            if self.pm.is_blocked(name):
                self.pm.unblock(name)  # e.g. a sample plugin registered again by a test
            self._entry_points[name] = entry_point
            self._distributions[name] = distribution
            try:
                self.pm.register(plugin, name=name)
                self.pm.check_pending()  # hookimpls with a misspelt hook name
                hookimpls = self.pm.get_hookcallers(plugin) or []
                if not any(hc.name in KINDS.values() for hc in hookimpls):
                    raise TypeError(
                        "it implements none of the hooks "
                        f"{', '.join(sorted(KINDS.values()))} (is @elmscale.hookimpl missing?)"
                    )
            except Exception as exc:  # noqa: BLE001 - PluginValidationError and friends
                self._block(plugin, name)
                self._fail(name, entry_point, distribution, exc)
                return None
            for kind, hook_name in KINDS.items():
                for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                    if impl.plugin is not plugin:
                        continue
                    kwargs = (
                        {"register": self._register_callback(kind, name)}
                        if "register" in impl.argnames
                        else {}
                    )
                    if self._trace:
                        logger.debug("plugin %r: calling %s", name, hook_name)
                    try:
                        impl.function(**kwargs)
                    except PluginLoadError:  # strict mode, already reported
                        self._remove_entries(name)
                        self._block(plugin, name)
                        raise
                    except Exception as exc:  # noqa: BLE001
                        # a hook that raises leaves nothing behind: the plugin is removed whole
                        self._remove_entries(name)
                        self._block(plugin, name)
                        self._fail(name, entry_point, distribution, exc)
                        return None
            return name

    def _block(self, plugin, name):
        if self.pm.get_plugin(name) is plugin:
            self.pm.unregister(plugin)
        if not self.pm.has_plugin(name):
            self.pm.set_blocked(name)

    def _remove_entries(self, name):
        for kind in KINDS:
            for entry_name in [n for n, e in self._entries[kind].items() if e.plugin == name]:
                entry = self._entries[kind].pop(entry_name)
                for alias in entry.aliases:
                    self._aliases[kind].pop(alias, None)

    def unregister_plugin(self, name):
        """Remove a plugin and every name it registered (used by tests)."""
        with self._lock:
            plugin = self.pm.get_plugin(name)
            if plugin is not None:
                self.pm.unregister(plugin)
            self.pm.unblock(name)
            self._remove_entries(name)
            self._distributions.pop(name, None)
            self._entry_points.pop(name, None)
            self.failures = [f for f in self.failures if f.plugin != name]

    def _register_callback(self, kind, plugin_name):
        def register(name, obj, *, aliases=(), description=""):
            if not isinstance(name, str) or not name:
                raise TypeError(f"{kind} name must be a non-empty string, got {name!r}")
            if isinstance(aliases, str):
                aliases = (aliases,)
            _check_protocol(kind, name, obj)
            for key in (name, *aliases):
                holder = self._owner(kind, key)
                if holder is not None:
                    msg = (
                        f"plugin {plugin_name!r} registers {kind} {key!r}, which plugin "
                        f"{holder.plugin!r} already registered; keeping {holder.plugin!r}'s"
                    )
                    self._fail(
                        plugin_name,
                        self._entry_points.get(plugin_name, ""),
                        self._distributions.get(plugin_name, ""),
                        ValueError(msg),
                        duplicate=True,
                    )
                    return
            entry = Entry(kind, name, obj, plugin_name, tuple(aliases), description)
            if self._trace:
                logger.debug(
                    "plugin %r registers %s %r (aliases %s)", plugin_name, kind, name, list(aliases)
                )
            self._entries[kind][name] = entry
            for alias in aliases:
                self._aliases[kind][alias] = name

        return register

    def _owner(self, kind, key):
        key = self._aliases[kind].get(key, key)
        return self._entries[kind].get(key)

    def _fail(self, plugin, entry_point, distribution, exc, duplicate=False):
        where = [f"entry point {entry_point!r}"] if entry_point else []
        if distribution:
            where.append(f"distribution {distribution}")
        where = f" ({', '.join(where)})" if where else ""
        what = "registers a taken name" if duplicate else "failed"
        message = f"elmscale plugin {plugin!r}{where} {what}: {type(exc).__name__}: {exc}"
        self.failures.append(
            PluginFailure(
                plugin,
                entry_point,
                distribution,
                f"{type(exc).__name__}: {exc}",
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            )
        )
        if os.environ.get("ELMSCALE_STRICT_PLUGINS") == "1":
            raise PluginLoadError(message) from exc
        warnings.warn(message, PluginLoadWarning, stacklevel=4)

    # -- lookups ---------------------------------------------------------------------------
    def _check_kind(self, kind):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")

    def available(self, kind):
        """Sorted registered names of ``kind`` (aliases not included)."""
        self._check_kind(kind)
        self.load_plugins()
        return sorted(self._entries[kind])

    def is_registered(self, kind, name):
        """Whether ``name`` is a registered name, or an alias of one, of ``kind``."""
        self._check_kind(kind)
        self.load_plugins()
        return isinstance(name, str) and self._owner(kind, name) is not None

    def entry(self, kind, name):
        """The ``Entry`` registered as ``name`` (or an alias of it)."""
        self._check_kind(kind)
        self.load_plugins()
        entry = self._owner(kind, name) if isinstance(name, str) else None
        if entry is None:
            raise UnknownPluginError(
                f"{kind} {name!r} is not registered; available: "
                f"{', '.join(self.available(kind))} (run `elmscale plugins`)"
            )
        return entry

    def get(self, kind, name):
        """The object registered as ``name``."""
        return self.entry(kind, name).obj

    def list_plugins(self):
        """One dict per plugin: name, distribution, and what it registered."""
        self.load_plugins()
        out = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked: it failed, see ``failures``
                continue
            registered = {
                kind: sorted(e.name for e in self._entries[kind].values() if e.plugin == name)
                for kind in KINDS
            }
            out.append(
                {
                    "name": name,
                    "distribution": self._distributions.get(name, ""),
                    "entry_point": self._entry_points.get(name, ""),
                    "registered": {k: v for k, v in registered.items() if v},
                }
            )
        return out


_registry = Registry()


def get_registry():
    """The process-wide ``Registry``."""
    return _registry


def load_plugins():
    """Load built-in and installed plugins (idempotent)."""
    _registry.load_plugins()


def available(kind):
    """Registered names for ``kind`` in {"algorithm", "activation", "hidden", "graph",
    "kernel"}."""
    return _registry.available(kind)


def is_registered(kind, name):
    """Whether ``name`` is a registered name or alias for ``kind`` (what ``get`` resolves)."""
    return _registry.is_registered(kind, name)


def get(kind, name):
    """The object registered as ``name`` for ``kind``; ``UnknownPluginError`` lists the choices."""
    return _registry.get(kind, name)


#: ``all_estimators``' type filters and the scikit-learn mixin each one asks for
_TYPE_FILTERS = {
    "classifier": "ClassifierMixin",
    "regressor": "RegressorMixin",
    "cluster": "ClusterMixin",
    "transformer": "TransformerMixin",
}


def all_estimators(type_filter=None):
    """Every registered estimator class, built-in or from a plugin, as ``(name, class)``
    pairs sorted by the registered name, as ``sklearn.utils.discovery.all_estimators`` lists
    scikit-learn's. ``type_filter`` ("classifier", "regressor", "cluster", "transformer" or
    a list of them) keeps the classes with any of those scikit-learn mixins.

    Registering an estimator is all it takes to be listed here, and so to be in elmscale's
    common tests and (for a built-in) in the ``elmscale`` namespace and the API reference.
    """
    import sklearn.base

    pairs = [(name, _registry.get("algorithm", name)) for name in available("algorithm")]
    if type_filter is None:
        return pairs
    filters = [type_filter] if isinstance(type_filter, str) else list(type_filter)
    unknown = sorted(set(filters) - set(_TYPE_FILTERS))
    if unknown:
        raise ValueError(
            f"type_filter must be None or among {sorted(_TYPE_FILTERS)}, got {unknown}"
        )
    mixins = tuple(getattr(sklearn.base, _TYPE_FILTERS[f]) for f in filters)
    return [(name, cls) for name, cls in pairs if issubclass(cls, mixins)]


def make(name, **params):
    """Build the estimator registered as algorithm ``name``: ``make("us-elm", n_clusters=3)``."""
    return _registry.get("algorithm", name)(**params)


def list_plugins():
    """What each loaded plugin registered (backs ``elmscale plugins``)."""
    return _registry.list_plugins()


def resolve(kind, value, parameter):
    """A callable/class given directly is returned as is; a name is looked up.

    ``parameter`` names the estimator parameter in the error message.
    """
    if not isinstance(value, str):
        return value
    try:
        return _registry.get(kind, value)
    except UnknownPluginError as exc:
        raise UnknownPluginError(f"{parameter}={value!r}: {exc}") from None
