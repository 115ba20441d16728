"""elmscale: unsupervised and semi-supervised Extreme Learning Machines on Dask."""

from ._config import config_context, get_config, set_config
from .algorithms import USELM, uselm_embedding
from .hookspecs import hookimpl
from .registry import available, get, list_plugins, load_plugins, make

__version__ = "0.1.0"

__all__ = [
    "USELM",
    "__version__",
    "available",
    "config_context",
    "get",
    "get_config",
    "hookimpl",
    "list_plugins",
    "load_plugins",
    "make",
    "set_config",
    "uselm_embedding",
]
