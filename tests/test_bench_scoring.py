"""The scale benchmarks score on the workers: the same accuracy as from gathered labels."""

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from benchmarks._common import accuracy_from_contingency, clustering_accuracy, dask_contingency


def test_dask_contingency_gives_the_accuracy_of_the_gathered_labels(rng):
    y = rng.randint(0, 4, size=1_000)
    # 6 clusters, one of them (3) empty, chunked otherwise than y
    labels = np.where(rng.rand(1_000) < 0.7, y, rng.choice([0, 1, 2, 4, 5], size=1_000))
    labels[labels == 3] = 4
    C = dask_contingency(da.from_array(y, chunks=300), da.from_array(labels, chunks=170))
    assert C.shape == (6, 4) and C.sum() == 1_000 and not C[3].any()
    assert accuracy_from_contingency(C) == pytest.approx(clustering_accuracy(y, labels), abs=0)


def test_dask_contingency_takes_a_series_and_numpy_labels(rng):
    y = rng.randint(0, 3, size=400)
    labels = (y + 1) % 3
    series = dd.from_pandas(pd.Series(y), npartitions=3)
    assert accuracy_from_contingency(dask_contingency(series, labels)) == 1.0


def test_dask_contingency_refuses_negative_labels():
    with pytest.raises(ValueError, match="non-negative"):
        dask_contingency(da.from_array(np.array([0, 1, -1]), chunks=2), np.array([0, 1, 1]))
