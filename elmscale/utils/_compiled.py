"""Compiled loops where NumPy and SciPy are the bottleneck, each beside the NumPy path it replaces:
here the Gram pass's sparse products; the kNN graph's in :mod:`elmscale.graph._join_compiled`
and :mod:`elmscale.graph._select_compiled`, compiled by the same :func:`jit`.

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


def jit(function):
    """``function`` compiled as every kernel of the package is (cached on disk, without the
    GIL, on the calling thread), or ``function`` itself where numba is absent."""
    return function if numba is None else numba.njit(cache=True, nogil=True)(function)


_csr_rows_axpy_compiled = jit(_csr_rows_axpy)


def compiled_available(compiled=True):
    """Whether the compiled kernels run: asked for (``compiled``, the ``compiled`` setting
    of :func:`~elmscale.config_context`) and numba importable."""
    return bool(compiled) and numba is not None


def laplacian_rows(diagonal, H, V_local, V_halo, halo_pieces, *, compiled=True):
    """``diag(diagonal) H - V_local H - V_halo [piece_1; piece_2; ...]`` for one block of rows.

    ``V_local`` (rows x len(H)) and ``V_halo`` (rows x halo rows) are CSR matrices; the
    halo's rows arrive as consecutive pieces (an iterable, consumed once), piece k holding the
    halo rows that ``V_halo``'s next ``len(piece_k)`` columns refer to. The result has H's
    dtype. ``compiled=False`` (or no numba) multiplies with SciPy instead.
    """
    dtype = H.dtype
    if not (compiled and numba is not None):
        VH = V_local.astype(dtype) @ H
        add_rows_product(VH, V_halo, halo_pieces, compiled=False)
        np.subtract(diagonal.astype(dtype)[:, None] * H, VH, out=VH)
        return VH
    out = np.multiply(H, diagonal.astype(dtype)[:, None])
    H = np.ascontiguousarray(H)
    _csr_rows_axpy_compiled(
        V_local.indptr,
        V_local.indices,
        V_local.data.astype(dtype, copy=False),
        H,
        0,
        dtype.type(-1),
        out,
    )
    return add_rows_product(out, V_halo, halo_pieces, sign=-1)


def add_rows_product(out, V, pieces, *, sign=1, compiled=True):
    """``out += sign * V [piece_1; piece_2; ...]`` in place (``sign`` 1 or -1), for a CSR
    matrix ``V`` (rows of ``out`` x the pieces' rows) and ``pieces`` (an iterable, consumed
    once) holding its columns' rows in consecutive ranges. The pieces are never stacked and,
    compiled, no product is held beside ``out``: one task's halo can hold several times its
    own rows.
    ``compiled=False`` (or no numba) adds one SciPy product per piece. Returns ``out``."""
    dtype, lo = out.dtype, 0
    if compiled and numba is not None:
        data, sign = V.data.astype(dtype, copy=False), dtype.type(sign)
        for piece in pieces:
            piece = np.ascontiguousarray(piece, dtype=dtype)
            _csr_rows_axpy_compiled(V.indptr, V.indices, data, piece, lo, sign, out)
            lo += piece.shape[0]
    else:
        V = V.astype(dtype)
        for piece in pieces:
            hi = lo + piece.shape[0]
            product = V[:, lo:hi] @ piece
            if sign == 1:
                out += product
            else:
                out -= product
            lo = hi
    _check_halo_width(lo, V)
    return out


def _check_halo_width(n_rows, V_halo):
    if n_rows != V_halo.shape[1]:
        raise ValueError(f"halo pieces hold {n_rows} rows, the graph block needs {V_halo.shape[1]}")
