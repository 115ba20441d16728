"""Input validation, random seeds and dask helpers shared by the estimators."""

from ._dask import tree_sum
from ._malloc import MALLOC_ENV, tune_malloc
from ._random import draw_seed
from ._validation import (
    as_row_chunked,
    check_features,
    is_dask_collection,
    validate_data,
)

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
