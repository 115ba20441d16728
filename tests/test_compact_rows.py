"""Rows a fit keeps in memory (X on the workers, the graph's ordered copy of X, the filtered
rows) are held in the fewest bytes that hold them exactly: X read as float32 and validated to
the float64 compute dtype is kept as float32, and every reader still sees float64 values
equal bit for bit to those a plain ``persist`` keeps."""

import dask
import dask.array as da
import numpy as np
import pytest

from elmscale.graph import _build, knn_graph
from elmscale.utils._dask import in_worker_memory, is_compact_view, persist_compact
from elmscale.utils._validation import as_row_chunked


def _stored(view):
    """The persisted array under a :func:`persist_compact` view."""
    (name,) = view.dask.dependencies[view.name]
    return da.Array(view.dask, name, view.chunks, view.dtype)


def _stored_dtypes(view):
    return [b.dtype for b in dask.compute(*_stored(view).to_delayed().ravel())]


def test_float32_values_are_held_as_float32_and_read_back_exactly(global_seed):
    rng = np.random.RandomState(global_seed)
    exact = rng.rand(300, 7).astype(np.float32).astype(np.float64)
    full = rng.rand(100, 7)  # float64 values that float32 would round
    X = da.from_array(np.vstack([exact, full]), chunks=((150, 150, 100), 7))
    view = persist_compact(X, "elmscale-test")
    assert is_compact_view(view) and view.dtype == np.float64
    assert _stored_dtypes(view) == [np.float32, np.float32, np.float64]
    np.testing.assert_array_equal(view.compute(), X.compute())
    assert view.compute().dtype == np.float64


def test_integers_below_float32s_range_are_held_as_float32():
    X = da.from_array(np.arange(60, dtype=np.float64).reshape(20, 3) * 1000, chunks=(10, 3))
    assert _stored_dtypes(persist_compact(X, "elmscale-test")) == [np.float32] * 2
    big = da.from_array(np.full((4, 2), 2.0**24 + 1), chunks=(4, 2))
    assert _stored_dtypes(persist_compact(big, "elmscale-test")) == [np.float64]


def test_a_view_can_be_read_as_another_dtype():
    X = da.from_array(np.linspace(0, 1, 40, dtype=np.float32).reshape(10, 4), chunks=(5, 4))
    view = persist_compact(X, "elmscale-test", dtype=np.float64)
    assert _stored_dtypes(view) == [np.float32] * 2 and view.dtype == np.float64
    np.testing.assert_array_equal(view.compute(), X.compute().astype(np.float64))


def test_the_graphs_ordered_rows_of_float32_input_are_held_as_float32(monkeypatch, global_seed):
    """knn_graph on float32 input validated to float64, in locality order: its X is the
    ordered copy at 4 bytes a value, equal to the float64 rows it reorders."""
    monkeypatch.setattr(_build, "ORDER_MIN_SAMPLES", 100)
    rng = np.random.RandomState(global_seed)
    X32 = rng.rand(900, 5).astype(np.float32)
    Xd, _ = as_row_chunked(da.from_array(X32, chunks=(300, 5)))
    assert Xd.dtype == np.float64
    graph = knn_graph(Xd, 6, order=True, random_state=0)
    assert is_compact_view(graph.X)
    assert set(_stored_dtypes(graph.X)) == {np.dtype(np.float32)}
    ordered = graph.X.compute()
    assert ordered.dtype == np.float64
    np.testing.assert_array_equal(graph.order.apply(Xd).compute(), ordered)


@pytest.mark.distributed
def test_x_kept_on_the_workers_holds_float32_input_in_float32(dask_client, global_seed):
    """A dask array of float32 rows, validated to float64 and kept on the workers for the
    fit, takes 4 bytes a value there; reading it gives the float64 of its values."""
    rng = np.random.RandomState(global_seed)
    X32 = rng.rand(2000, 12).astype(np.float32)
    Xd, _ = as_row_chunked(da.from_array(X32, chunks=(500, 12)))
    kept = in_worker_memory(Xd)
    assert is_compact_view(kept) and in_worker_memory(kept) is kept
    np.testing.assert_array_equal(kept.compute(), X32.astype(np.float64))
    stored = _stored(kept).name
    held = dask_client.run(
        lambda dask_worker: [
            (v.dtype.name, v.nbytes) for k, v in dask_worker.data.items() if stored in str(k)
        ]
    )
    pieces = [piece for pieces in held.values() for piece in pieces]
    assert len(pieces) == 4 and {d for d, _ in pieces} == {"float32"}
    assert sum(n for _, n in pieces) == X32.nbytes


def test_a_search_reading_scaled_rows_as_it_takes_them_finds_the_same_graph(
    monkeypatch, global_seed
):
    """The estimators' search scales the ordered rows as each task takes them; the graph is
    the one searched on the scaled array computed whole."""
    monkeypatch.setattr(_build, "ORDER_MIN_SAMPLES", 100)
    rng = np.random.RandomState(global_seed)
    X32 = (rng.rand(1500, 6) * [1, 5, 10, 1, 2, 3]).astype(np.float32)
    Xd, _ = as_row_chunked(da.from_array(X32, chunks=(250, 6)))
    scaling = (X32.min(axis=0).astype(np.float64), np.ptp(X32, axis=0).astype(np.float64))
    read = knn_graph(Xd, 7, order=True, scaling=scaling, random_state=0)
    monkeypatch.setattr(_build, "is_compact_view", lambda X: False)
    whole = knn_graph(Xd, 7, order=True, scaling=scaling, random_state=0)
    for got, want in ((read.indices, whole.indices), (read.distances, whole.distances)):
        np.testing.assert_array_equal(got.compute(), want.compute())


def test_column_major_blocks_are_held_row_major(global_seed):
    """A table's values arrive column-major (``DataFrame.to_numpy``); every reader of the
    held rows takes rows, so they are held row-major, with the same values."""
    rng = np.random.RandomState(global_seed)
    exact = np.asfortranarray(rng.randint(0, 255, (200, 9)).astype(np.float64))
    full = np.asfortranarray(rng.rand(200, 9))
    for values in (exact, full):
        X = da.from_array(values, chunks=(100, 9), asarray=False).map_blocks(np.asfortranarray)
        view = persist_compact(X, "elmscale-test")
        blocks = dask.compute(*_stored(view).to_delayed().ravel())
        assert all(b.flags.c_contiguous for b in blocks)
        np.testing.assert_array_equal(view.compute(), values)


def test_column_major_numpy_input_is_read_in_row_major_blocks(global_seed):
    """NumPy input in column-major order (a DataFrame's values) is chunked into row-major
    blocks; the caller's array is not touched."""
    X = np.asfortranarray(np.random.RandomState(global_seed).rand(300, 5))
    before = X.copy()
    Xd, _ = as_row_chunked(X)
    blocks = dask.compute(*Xd.to_delayed().ravel())
    assert all(b.flags.c_contiguous for b in blocks)
    np.testing.assert_array_equal(np.vstack(blocks), before)
    np.testing.assert_array_equal(X, before)
    assert X.flags.f_contiguous
