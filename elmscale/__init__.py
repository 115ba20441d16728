"""elmscale: unsupervised and semi-supervised Extreme Learning Machines on Dask."""

from ._config import config_context, get_config, set_config
from ._progress import log_to_stderr
from .algorithms import (
    ELMJEC,
    EMMC,
    SSELM,
    TUMKELM,
    USELM,
    ELMClassifier,
    ELMRegressor,
    elmjec_sweep,
    emmc_sweep,
    uselm_embedding,
)
from .base import BaseELM, Reduction
from .exceptions import PluginLoadError, PluginLoadWarning, UnknownPluginError
from .hookspecs import hookimpl
from .neighbors import KNNGraphTransformer
from .registry import available, get, list_plugins, load_plugins, make
from .sweep import sweep

__version__ = "0.1.0"


def __getattr__(name):
    # elmscale.testing is for plugin authors' tests: imported on first use, not with elmscale
    if name == "testing":
        import importlib

        return importlib.import_module(".testing", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BaseELM",
    "ELMClassifier",
    "ELMJEC",
    "ELMRegressor",
    "EMMC",
    "KNNGraphTransformer",
    "PluginLoadError",
    "PluginLoadWarning",
    "Reduction",
    "SSELM",
    "TUMKELM",
    "USELM",
    "UnknownPluginError",
    "__version__",
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
]
