"""The compiled graph product equals dense NumPy and the SciPy path it replaces."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

from elmscale import config_context, get_config
from elmscale.gram import hidden_stats
from elmscale.graph import knn_graph
from elmscale.hidden import HiddenFeatures, RandomHiddenLayer
from elmscale.utils._compiled import add_rows_product, compiled_available, laplacian_rows

pytestmark = pytest.mark.skipif(not compiled_available(), reason="numba is not installed")


def _block(rng, n_rows, n_halo, width, dtype, index_dtype=np.int32, density=0.2):
    H = rng.standard_normal((n_rows, width)).astype(dtype)
    halo = rng.standard_normal((n_halo, width)).astype(dtype)
    W = sp.random(n_rows, n_rows + n_halo, density=density, random_state=rng, format="csr")
    W.indices, W.indptr = W.indices.astype(index_dtype), W.indptr.astype(index_dtype)
    diagonal = rng.uniform(1, 3, n_rows)
    return H, halo, W, diagonal


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("piece_rows", [1, 7, 40])
def test_laplacian_rows_equal_dense(rng, dtype, compiled, piece_rows):
    H, halo, W, diagonal = _block(rng, 30, 40, 9, dtype)
    pieces = (halo[lo : lo + piece_rows] for lo in range(0, 40, piece_rows))
    out = laplacian_rows(
        diagonal, H, W[:, :30].tocsr(), W[:, 30:].tocsr(), pieces, compiled=compiled
    )
    expected = diagonal[:, None] * H - W.toarray() @ np.vstack([H, halo]).astype(np.float64)
    assert out.dtype == dtype and out.shape == H.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * np.abs(expected).max())


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("piece_rows", [1, 7, 40])
def test_rows_product_added_in_place_equals_dense(rng, sign, compiled, piece_rows):
    """``out += sign * V [pieces]`` into ``out`` itself, whatever the pieces' sizes, and
    the pieces left as they were."""
    _, halo, W, _ = _block(rng, 30, 40, 9, np.float32)
    V = W[:, 30:].tocsr()
    start = rng.standard_normal((30, 9)).astype(np.float32)
    out = start.copy()
    kept = halo.copy()
    pieces = (halo[lo : lo + piece_rows] for lo in range(0, 40, piece_rows))
    assert add_rows_product(out, V, pieces, sign=sign, compiled=compiled) is out
    expected = start + sign * (V.toarray() @ halo.astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    np.testing.assert_array_equal(halo, kept)
    with pytest.raises(ValueError, match="halo pieces hold 39 rows"):
        add_rows_product(out, V, [halo[:39]], compiled=compiled)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_compiled_and_scipy_paths_agree(rng, index_dtype):
    H, halo, W, diagonal = _block(rng, 200, 500, 64, np.float32, index_dtype, density=0.03)
    V_local, V_halo = W[:, :200].tocsr(), W[:, 200:].tocsr()
    args = (diagonal, H, V_local, V_halo)
    fast = laplacian_rows(*args, (halo[:120], halo[120:]), compiled=True)
    slow = laplacian_rows(*args, (halo[:120], halo[120:]), compiled=False)
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-5 * np.abs(slow).max())


def test_no_halo_and_empty_rows(rng):
    H, _, W, diagonal = _block(rng, 12, 0, 5, np.float64)
    W = W[:, :12].tocsr()
    W.data[W.indptr[3] : W.indptr[5]] = 0  # rows without weight
    out = laplacian_rows(diagonal, H, W, sp.csr_matrix((12, 0)), iter(()), compiled=True)
    np.testing.assert_allclose(out, diagonal[:, None] * H - W @ H, rtol=1e-12)


def test_halo_pieces_must_cover_the_halo_columns(rng):
    H, halo, W, diagonal = _block(rng, 10, 20, 4, np.float64)
    with pytest.raises(ValueError, match="halo pieces hold 15 rows, the graph block needs 20"):
        laplacian_rows(diagonal, H, W[:, :10].tocsr(), W[:, 10:].tocsr(), [halo[:15]])


def test_inputs_are_not_changed(rng):
    H, halo, W, diagonal = _block(rng, 10, 20, 4, np.float32)
    copies = [a.copy() for a in (H, halo, W.data, diagonal)]
    laplacian_rows(diagonal, H, W[:, :10].tocsr(), W[:, 10:].tocsr(), [halo], compiled=True)
    for before, after in zip(copies, (H, halo, W.data, diagonal), strict=True):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("power", [1, 2, 3])
def test_gram_pass_agrees_with_and_without_compiled_kernels(rng, power):
    X = rng.standard_normal((300, 5))
    Xd = da.from_array(X, chunks=(70, 5))
    layer = RandomHiddenLayer.draw(5, 30, "sigmoid", 0)
    graph = knn_graph(Xd, 6, backend="exact", order=True, random_state=0)
    features = HiddenFeatures(Xd, layer, cache=False)
    runs = []
    for compiled in (True, False):
        with config_context(compiled=compiled):
            runs.append(hidden_stats(features, ("hth", "htlh"), graph=graph, laplacian_power=power))
    np.testing.assert_allclose(runs[0]["htlh"], runs[1]["htlh"], rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(runs[0]["hth"], runs[1]["hth"])


def test_setting_is_checked_and_restored():
    assert get_config()["compiled"] is True
    with config_context(compiled=False):
        assert get_config()["compiled"] is False
    assert get_config()["compiled"] is True
    with pytest.raises(TypeError, match="compiled must be True or False, got 'no'"):
        with config_context(compiled="no"):
            pass
