"""Locality ordering: permute rows so that kNN neighbours share row chunks.

With rows in arbitrary order almost every neighbour of a chunk's rows lives in another chunk,
and each Gram task would rebuild ~k times its own number of hidden rows for its "halo".
Sorting rows by their coarse cell (:mod:`elmscale.graph._cells`, cells numbered so that
nearby cells are consecutive) puts most neighbours in the same chunk, so the halo shrinks to
the cells' borders. The distributed kNN search uses the same cells, so
one assignment serves both.

The permutation is applied on the cluster: per chunk, each row's destination is computed from
the (n_chunks x n_cells) table of cell counts, summed and prefix-summed on the cluster; rows
(d numbers each) then move between chunks in one exchange
(:mod:`elmscale.graph._exchange`). Within a cell, rows keep their original order.
Sums over rows (every Gram matrix) do not depend on the order, so it stays internal to a fit.
"""

import math

import dask
import dask.array as da
import numpy as np

from ..utils._dask import is_compact_view, moved_rows
from ._cells import assign_cells, fit_cells_on_workers
from ._exchange import exchange
from ._tasks import PREFIX, task

#: rows per cell of the locality order when no kNN search shares its cells
ROWS_PER_CELL = 2000


def _counts(cells, n_cells):
    """One row of the (n_chunks x n_cells) table: the chunk's rows in each cell."""
    return np.bincount(cells, minlength=n_cells)[None, :]


def _destinations(cells, base):
    """Global destination of each row: its cell's base for this chunk + rank within it."""
    base = np.ravel(base)
    order = np.argsort(cells, kind="stable")
    ranks = np.empty(len(cells), dtype=np.int64)
    sorted_cells = cells[order]
    first = np.searchsorted(sorted_cells, sorted_cells, side="left")
    ranks[order] = np.arange(len(cells)) - first
    return base[cells] + ranks


def _piece(rows, dest, lo, hi):
    m = (dest >= lo) & (dest < hi)
    return rows[m], dest[m] - lo


def _place(n, shape, dtype, pieces):
    out = np.empty((n, *shape), dtype=dtype)
    for rows, pos in pieces:
        out[pos] = rows
    return out


class RowOrder:
    """A permutation of X's rows held on the cluster; ``apply`` moves any row-aligned dask
    array (X, targets, weights, labels) into the new order, keeping the row chunks.

    ``dest_blocks[s]`` holds the new global position of each row of source chunk s (delayed);
    ``pairs[b]`` lists the source chunks that send rows to chunk b. Rows move between the
    ``chunks`` the order was built on; ``outer_chunks``, a refinement of them (each chunk a
    run of consecutive outer chunks), is the chunking ``apply`` takes and returns when given:
    the outer chunks are joined before the move and split after it, so the all-to-all move
    (:func:`~elmscale.graph._exchange.exchange`: about n_chunks x n_workers tasks) runs on
    the coarser chunks.
    """

    def __init__(self, dest_blocks, chunks, pairs, outer_chunks=None):
        self.dest_blocks = dest_blocks
        self.chunks = tuple(chunks)
        self.pairs = pairs
        self.outer_chunks = None if outer_chunks is None else tuple(outer_chunks)
        if self.outer_chunks is not None and not _refines(self.outer_chunks, self.chunks):
            raise ValueError(f"chunks {self.outer_chunks} do not refine {self.chunks}")

    def with_outer_chunks(self, outer_chunks):
        """The same order, taking and returning arrays chunked by ``outer_chunks``."""
        return RowOrder(self.dest_blocks, self.chunks, self.pairs, outer_chunks)

    @property
    def input_chunks(self):
        """The row chunks ``apply`` takes and returns."""
        return self.outer_chunks or self.chunks

    @property
    def starts(self):
        return np.concatenate([[0], np.cumsum(self.chunks)]).astype(np.int64)

    def apply(self, A):
        if A is None:
            return None
        if is_compact_view(A):  # the rows move as they are held
            return moved_rows(A, self.apply)
        if tuple(A.chunks[0]) != self.input_chunks:
            raise ValueError(
                f"array must be chunked like X's rows {self.input_chunks}, got {A.chunks[0]}"
            )
        if self.outer_chunks is not None and self.outer_chunks != self.chunks:
            return (
                self.with_outer_chunks(None)
                .apply(A.rechunk({0: self.chunks}))
                .rechunk({0: self.outer_chunks})
            )
        if A.ndim > 1 and len(A.chunks[1]) > 1:
            A = A.rechunk({1: -1})
        starts = self.starts
        blocks = A.to_delayed(optimize_graph=False).ravel()
        pieces = exchange(
            f"{PREFIX}-order",
            _piece,
            list(zip(blocks, self.dest_blocks, strict=True)),
            [
                [(s, (int(starts[b]), int(starts[b + 1]))) for s in self.pairs[b]]
                for b in range(len(self.chunks))
            ],
            nbytes=[n * A.dtype.itemsize * int(np.prod(A.shape[1:])) for n in self.chunks],
        )
        out = [
            da.from_delayed(
                task("order-place", _place, n, A.shape[1:], A.dtype, pieces[b]),
                (n, *A.shape[1:]),
                dtype=A.dtype,
            )
            for b, n in enumerate(self.chunks)
        ]
        return da.concatenate(out)

    def inverse(self, positions):
        """The order that moves rows back: ``positions`` holds, in this order's rows (chunked
        like them), each row's original global position, e.g. ``self.apply(arange(N))``."""
        if tuple(positions.chunks[0]) != self.chunks:
            positions = positions.rechunk({0: self.chunks})
        dest = positions.to_delayed(optimize_graph=False).ravel().tolist()
        # chunk t of this order sends back to the chunks that sent to it
        pairs = _sources_per_destination(self.pairs, len(self.chunks))
        return RowOrder(dest, self.chunks, pairs, self.outer_chunks)


def _refines(fine, coarse):
    """Whether every boundary between ``coarse`` chunks is one between ``fine`` chunks."""
    fine_bounds = set(np.cumsum(fine).tolist())
    return sum(fine) == sum(coarse) and set(np.cumsum(coarse).tolist()) <= fine_bounds


def merge_chunks(chunks, min_rows):
    """Consecutive ``chunks`` joined into runs of at least ``min_rows`` rows (the last run
    may be shorter); a chunk is never split, so the result is refined by ``chunks``."""
    merged, rows = [], 0
    for n in chunks:
        rows += n
        if rows >= min_rows:
            merged.append(rows)
            rows = 0
    if rows:
        merged.append(rows)
    return tuple(merged)


def _destination_chunks(dest, starts):
    """The chunks (between ``starts``) that rows with global positions ``dest`` land in."""
    return np.unique(np.searchsorted(starts, dest, side="right") - 1)


def _sources_per_destination(destinations, n_chunks):
    """``pairs[b]``: the source chunks, ascending, whose rows land in chunk b, from each
    source's list of destination chunks."""
    pairs = [[] for _ in range(n_chunks)]
    for s, targets in enumerate(destinations):
        for b in targets:
            pairs[int(b)].append(s)
    return pairs


def order_by_cells(cells, n_cells):
    """A :class:`RowOrder` sorting rows by cell (``cells``: each row's cell, a row-chunked
    dask array), and the number of rows in each cell.

    The (n_chunks x n_cells) counts stay on the cluster: the client receives their column
    sums (n_cells numbers) and each chunk's list of destination chunks. A row of cell c
    moves to ``cell_start[c]`` + the rows of c in earlier chunks (an exclusive prefix sum
    over chunks, dask's cumulative sum) + its rank among its chunk's rows of c.
    """
    chunk_sizes = tuple(int(n) for n in cells.chunks[0])
    cells = list(dask.persist(*cells.to_delayed(optimize_graph=False).ravel()))
    counts = da.concatenate(
        [
            da.from_delayed(task("order-counts", _counts, c, n_cells), (1, n_cells), np.int64)
            for c in cells
        ]
    ).persist()
    sizes = counts.sum(axis=0).compute()
    # cell c occupies [cell_start[c], cell_start[c+1]); within it, chunk by chunk
    cell_start = np.concatenate([[0], np.cumsum(sizes)])[:-1]
    base = (
        da.cumsum(counts, axis=0, method="blelloch") - counts + da.from_array(cell_start, chunks=-1)
    )
    dest = list(
        dask.persist(
            *[
                task("order-destinations", _destinations, c, b)
                for c, b in zip(cells, base.to_delayed(optimize_graph=False).ravel(), strict=True)
            ]
        )
    )
    starts = dask.delayed(np.concatenate([[0], np.cumsum(chunk_sizes)]), pure=True)
    destinations = dask.compute(
        *[task("order-targets", _destination_chunks, d, starts) for d in dest]
    )
    pairs = _sources_per_destination(destinations, len(chunk_sizes))
    return RowOrder(dest, chunk_sizes, pairs), sizes


def locality_order(X, *, rows_per_cell=None, random_state=0):
    """A :class:`RowOrder` sorting X's rows by coarse cell, cells fitted on a sample of rows
    on the workers. ``rows_per_cell`` defaults to ``ROWS_PER_CELL``, or an eighth of a row
    chunk when chunks are smaller: a chunk then holds whole cells and few cut ones."""
    if rows_per_cell is None:
        rows_per_cell = max(1, min(ROWS_PER_CELL, int(np.median(X.chunks[0])) // 8))
    n_cells = max(1, math.ceil(X.shape[0] / rows_per_cell))
    centers, _ = fit_cells_on_workers(X, n_cells, random_state)
    return order_by_cells(assign_cells(X, centers, 1)[:, 0], len(centers))[0]
