"""Input validation, random seeds and dask helpers shared by the estimators.

The names load on first use (PEP 562), so that ``elmscale.utils._malloc``, which the
``elmscale`` command imports before anything else, does not bring scikit-learn and dask."""

import importlib

_LAZY = {
    "._dask": ("tree_sum",),
    "._malloc": ("MALLOC_ENV", "tune_malloc"),
    "._random": ("draw_seed",),
    "._validation": ("as_row_chunked", "check_features", "is_dask_collection", "validate_data"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_WHERE[name], __name__), name)
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "MALLOC_ENV",
    "as_row_chunked",
    "check_features",
    "draw_seed",
    "is_dask_collection",
    "tree_sum",
    "tune_malloc",
    "validate_data",
]
