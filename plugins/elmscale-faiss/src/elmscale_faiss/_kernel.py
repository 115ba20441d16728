"""The in-cell search kernel on faiss-cpu's ``faiss.knn``.

faiss proposes each query's nearest references from a float32 product of the centred rows
(its BLAS path: ``|a|^2 + |b|^2 - 2 a.b``, clamped at 0), whose rounding stays within the
error bound elmscale's selection assumes; elmscale then recomputes the candidates' distances
exactly and ranks them by (distance, global index). The graph is therefore the built-in
kernel's, neighbour for neighbour and tie for tie.
"""

import faiss
import numpy as np
from elmscale.graph import CellSearch
from threadpoolctl import ThreadpoolController

#: query rows from which faiss uses BLAS for L2 search; its default (128,000) sends cell-sized
#: blocks to a scalar loop
BLAS_THRESHOLD = 20


def configure():
    """One thread per call (dask already runs one task per worker thread: more would
    oversubscribe the cores) and BLAS for cell-sized blocks. These are process-wide faiss
    settings: its OpenMP threads, its L2 search's BLAS threshold, and the thread count of the
    OpenBLAS that faiss-cpu's wheels bundle (loaded with faiss, so a BLAS limit set before,
    such as elmscale's per-task one, does not reach it)."""
    global _blas_pinned
    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
    if faiss.omp_get_max_threads() != 1:
        faiss.omp_set_num_threads(1)
    if not _blas_pinned:
        for lib in ThreadpoolController().lib_controllers:
            if lib.user_api == "blas" and "faiss" in lib.filepath:
                lib.set_num_threads(1)
        _blas_pinned = True


_blas_pinned = False


def propose(Q, R, q_ids, r_ids, m, bound=None):
    """The kernel protocol of :class:`elmscale.graph.CellSearch`: per query row of ``Q``,
    the m rows of ``R`` of smallest proposed squared distance (at most ``bound[i]`` when
    given), never the row with the query's own id. Returns ``(cols, g)`` (nq, m), padded
    with (-1, inf)."""
    nq, nr = len(q_ids), len(r_ids)
    cols = np.full((nq, m), -1, dtype=np.int64)
    g = np.full((nq, m), np.inf)
    if nq == 0 or nr == 0:
        return cols, g
    if Q.rows.dtype != np.float32 or R.rows.dtype != np.float32:
        raise TypeError(
            f"the faiss kernel proposes from float32 rows, got {Q.rows.dtype} and {R.rows.dtype}"
        )
    configure()
    want = min(m + 1, nr)  # one more, in case the query itself is among them
    dist, nbr = faiss.knn(np.ascontiguousarray(Q.rows), np.ascontiguousarray(R.rows), want)
    nbr = nbr.astype(np.int64, copy=False)
    own = r_ids[np.maximum(nbr, 0)] == np.asarray(q_ids)[:, None]
    drop = own.copy()
    if want > m:  # no own row among them: the (m + 1)-th is surplus
        drop[~own.any(axis=1), -1] = True
    order = np.argsort(drop, axis=1, kind="stable")  # kept entries first, in faiss's order
    nbr = np.take_along_axis(nbr, order, axis=1)
    dist = np.take_along_axis(dist, order, axis=1).astype(np.float64)
    drop = np.take_along_axis(drop, order, axis=1)
    if bound is not None:
        drop |= dist > np.asarray(bound, dtype=np.float32)[:, None]
    nbr[drop] = -1
    dist[drop] = np.inf
    width = min(want, m)
    cols[:, :width], g[:, :width] = nbr[:, :width], dist[:, :width]
    return cols, g


def cell_search(**params):
    """:class:`elmscale.graph.CellSearch` with the faiss kernel; ``params`` are its other
    parameters (``rows_per_cell``, ``n_probes``, ``n_refine``)."""
    return CellSearch(kernel=propose, **params)
