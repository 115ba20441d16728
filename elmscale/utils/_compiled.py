"""Compiled loops where NumPy and SciPy are the bottleneck, each beside the NumPy path it replaces.

The product of a sparse graph block with dense rows (``W H``: about 10-20 nonzeros per row,
rows of n_hidden numbers) is memory-bound; SciPy's CSR product adds one row of H at a time
with a loop its compiler does not vectorise, and a column slice of a CSR matrix copies it. The
kernel here streams each nonzero's row through SIMD registers straight into the output, takes
the rows of a column range without slicing, and starts from ``D H`` so that ``D H - W H`` needs
no temporary.

numba comes with pynndescent. Kernels are compiled on first use for the dtypes they meet and
cached on disk (``cache=True``: beside this module, or in numba's user cache directory when
that is read-only), so only the first process on a machine pays the compilation. They release
the GIL (``nogil``) so that dask's threads run them at once, and run on the calling thread
only (no numba thread pool to oversubscribe a worker's cores).
``config_context(compiled=False)`` selects the NumPy/SciPy path, which gives the same values
up to float rounding (the sums are taken in another order).
"""

import numpy as np

try:
    import numba
except ImportError:  # pragma: no cover - numba is installed with pynndescent
    numba = None


def _csr_rows_axpy(indptr, indices, data, B, col_lo, sign, out):
    """``out[i] += sign * sum_p data[p] * B[indices[p] - col_lo]`` over row i's nonzeros whose
    column lies in ``[col_lo, col_lo + len(B))``."""
    n_rows, width = out.shape
    n_b = B.shape[0]
    for i in range(n_rows):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p] - col_lo
            if 0 <= j < n_b:
                w = sign * data[p]
                for c in range(width):
                    out[i, c] += w * B[j, c]


_csr_rows_axpy_compiled = (
    numba.njit(cache=True, nogil=True, boundscheck=False)(_csr_rows_axpy) if numba else None
)


def compiled_available():
    """Whether the compiled kernels can run here (numba importable)."""
    return numba is not None


def laplacian_rows(diagonal, H, V_local, V_halo, halo_pieces, *, compiled=True):
    """``diag(diagonal) H - V_local H - V_halo [piece_1; piece_2; ...]`` for one block of rows.

    ``V_local`` (rows x len(H)) and ``V_halo`` (rows x halo rows) are CSR matrices; the
    halo's rows arrive as consecutive pieces (an iterable, consumed once), piece k holding the
    halo rows that ``V_halo``'s next ``len(piece_k)`` columns refer to. The result has H's
    dtype. ``compiled=False`` (or no numba) multiplies with SciPy instead.
    """
    dtype = H.dtype
    if not (compiled and numba is not None):
        return _laplacian_rows_scipy(diagonal, H, V_local, V_halo, halo_pieces)
    out = np.multiply(H, diagonal.astype(dtype)[:, None])
    kernel, minus = _csr_rows_axpy_compiled, dtype.type(-1)
    H = np.ascontiguousarray(H)
    kernel(
        V_local.indptr, V_local.indices, V_local.data.astype(dtype, copy=False), H, 0, minus, out
    )
    lo = 0
    data = V_halo.data.astype(dtype, copy=False)
    for piece in halo_pieces:
        piece = np.ascontiguousarray(piece, dtype=dtype)
        kernel(V_halo.indptr, V_halo.indices, data, piece, lo, minus, out)
        lo += piece.shape[0]
    _check_halo_width(lo, V_halo)
    return out


def _laplacian_rows_scipy(diagonal, H, V_local, V_halo, halo_pieces):
    """The NumPy/SciPy path of :func:`laplacian_rows`: ``V_local @ H`` plus one product per
    halo piece with the matching column slice of ``V_halo``, subtracted from ``D H``."""
    dtype = H.dtype
    VH = V_local.astype(dtype) @ H
    V_halo = V_halo.astype(dtype)
    lo = 0
    for piece in halo_pieces:
        hi = lo + piece.shape[0]
        VH += V_halo[:, lo:hi] @ piece
        lo = hi
    _check_halo_width(lo, V_halo)
    np.subtract(diagonal.astype(dtype)[:, None] * H, VH, out=VH)
    return VH


def _check_halo_width(n_rows, V_halo):
    if n_rows != V_halo.shape[1]:
        raise ValueError(f"halo pieces hold {n_rows} rows, the graph block needs {V_halo.shape[1]}")
