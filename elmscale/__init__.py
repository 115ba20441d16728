"""elmscale: unsupervised and semi-supervised Extreme Learning Machines on Dask.

The estimators and helpers load on first use (PEP 562): ``import elmscale`` itself imports
neither scikit-learn nor dask, so that the ``elmscale`` command answers a usage error at
once; ``from elmscale import USELM`` and ``elmscale.USELM`` work as usual.

The estimator classes are those the built-in plugins register
(:func:`elmscale.registry.builtin_algorithms`): a new built-in estimator is one module of
``elmscale/algorithms`` and its registration in ``elmscale/_builtins``, and the namespace,
``__all__`` and the API reference follow."""

import importlib
import importlib.util
import sys
import types

# public names, re-exported: ``__all__`` is computed on first use (``__getattr__``)
from .exceptions import PluginLoadError, PluginLoadWarning, UnknownPluginError  # noqa: F401
from .hookspecs import hookimpl  # noqa: F401
from .registry import (  # noqa: F401
    all_estimators,
    available,
    get,
    list_plugins,
    load_plugins,
    make,
)

__version__ = "0.1.0"

#: The public names loaded on first use, by the module that defines them.
_LAZY = {
    "._config": ("config_context", "get_config", "set_config"),
    "._progress": ("log_to_stderr",),
    ".algorithms": ("elmjec_sweep", "emmc_sweep", "uselm_embedding"),
    ".base": ("BaseELM", "Reduction"),
    ".neighbors": ("KNNGraphTransformer",),
    ".sweep": ("sweep",),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name):
    # a public name is imported from its module on first use; a subpackage or module
    # (elmscale.testing, elmscale.plot...) on first use of the attribute; an estimator
    # class from the built-in plugins that register it; ``__all__`` lists them all
    if name == "__all__":
        return sorted({*_NAMES, *_builtin_estimators()})
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
        value = importlib.import_module(f".{name}", __name__)
    elif not name.startswith("_") and name in _builtin_estimators():
        value = _builtin_estimators()[name]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def _builtin_estimators():
    from .registry import builtin_algorithms

    return builtin_algorithms()


def __dir__():
    return sorted(set(globals()) | set(_WHERE) | set(_builtin_estimators()))


class _Package(types.ModuleType):
    """The package module. ``elmscale.sweep`` is a function of the module of the same name:
    importing that module sets the package's attribute to the module (the import system
    does), which here keeps the function."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _WHERE.get(name) == f".{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


#: The public names besides the estimator classes (``__all__`` adds those).
_NAMES = (
    "BaseELM",
    "KNNGraphTransformer",
    "PluginLoadError",
    "PluginLoadWarning",
    "Reduction",
    "UnknownPluginError",
    "__version__",
    "all_estimators",
    "available",
    "config_context",
    "elmjec_sweep",
    "emmc_sweep",
    "get",
    "get_config",
    "hookimpl",
    "list_plugins",
    "load_plugins",
    "log_to_stderr",
    "make",
    "set_config",
    "sweep",
    "uselm_embedding",
)
