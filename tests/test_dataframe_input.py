"""Data read from disk as a user reads it: a dask DataFrame from ``read_parquet``, its feature
columns selected, fits and predicts on a multi-process LocalCluster exactly like the
equivalent dask array with the same row chunks.

The column selection is the case that matters: dask's ``read_parquet`` fuses the partitions of
a projection that reads few columns in some graphs and not in others, so that
``to_dask_array(lengths=True)`` fails on it (dask/dask#12411) and two conversions of the same
frame can give the scheduler one key with two different tasks."""

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_blobs

from elmscale.utils._dask import frame_to_array

from ._estimators import NAMES, assert_same_results, make, on_cluster, outputs, targets

pytestmark = pytest.mark.distributed

X, Y = make_blobs(300, n_features=4, centers=3, cluster_std=1.5, random_state=0)
COLUMNS = [f"f{i}" for i in range(X.shape[1])]


@pytest.fixture(scope="module")
def parquet_folder(tmp_path_factory):
    """X's columns, an unrelated wide block of columns and the label column, in 6 files."""
    path = tmp_path_factory.mktemp("data") / "table.parquet"
    table = pd.DataFrame(X, columns=COLUMNS)
    for i in range(30):  # the selection below reads 4 of 35 columns
        table[f"other{i}"] = np.arange(len(X), dtype=np.float64) * i
    table["label"] = Y
    dd.from_pandas(table, npartitions=6, sort=False).to_parquet(path, write_index=False)
    return path


def _frame(path):
    return dd.read_parquet(path)[COLUMNS]


def test_a_selection_of_columns_is_fused_so_the_test_covers_it(parquet_folder):
    """The premise: dask's own conversion fails on the selected columns (when it stops
    failing, this test says so), elmscale's gives one block per file."""
    assert frame_to_array(_frame(parquet_folder)).chunks[0] == (50,) * 6
    with pytest.raises(ValueError, match="lengths"):
        _frame(parquet_folder).to_dask_array(lengths=True)


@pytest.mark.parametrize("name", NAMES)
def test_parquet_frame_fits_and_predicts_like_the_dask_array(name, parquet_folder, dask_client):
    frame = _frame(parquet_folder)
    Xd = da.from_array(X, chunks=(frame_to_array(frame).chunks[0], X.shape[1]))
    t = targets(name, Y)
    with on_cluster(dask_client):
        if t is None:
            from_array = make(name).fit(Xd)
            from_frame = make(name).fit(frame)
        else:
            if name == "SSELM":  # the same rows unlabelled as in `targets`
                labels = dd.from_pandas(pd.Series(t, name="label"), npartitions=5)
            else:  # the label column of the files, as `targets` types it
                labels = dd.read_parquet(parquet_folder)["label"].astype(t.dtype)
            from_array = make(name).fit(Xd, t)
            from_frame = make(name).fit(frame, labels)
        expected = outputs(from_array, X)
        got = outputs(from_frame, _frame(parquet_folder))
    assert list(from_frame.feature_names_in_) == COLUMNS
    assert_same_results(expected, got, f"{name} from Parquet", rtol=1e-9)
