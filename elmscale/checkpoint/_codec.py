"""Writing a stage's result and reading it back, with N-row parts on the workers.

A result is any picklable value (the reduced matrices, a small object) in which dask arrays
and :class:`~elmscale.graph.KNNGraph` objects may appear inside tuples, lists and dicts.
Those are replaced by placeholders (:class:`Pieces`) and written per chunk by the workers that
hold them: a dask array as one ``.npy`` file per row chunk, a graph as one pickled
``GraphBlock`` per chunk plus its rows of X, its kNN lists and its row order. The rest, with
the placeholders in it, is pickled on the client: small. Reading reverses this lazily: each
piece becomes a delayed read on a worker, which checks the piece's checksum first.

Pieces are written once per checkpoint: a later stage whose result holds the same dask
objects as an earlier stage's (a graph-filtered graph shares its graph's blocks, kNN lists and
row order) refers to the earlier stage's files, and reading both stages reads those files
once (a read is a pure task of the file and its checksum). ``known`` maps the keys of the
objects written or read so far to their :class:`Pieces`.
"""

import dataclasses
import io
import pickle
from dataclasses import dataclass, field

import dask
import dask.array as da
import numpy as np

from ..graph import KNNGraph, RowOrder
from ._store import CheckpointError


def _encode(obj, fmt):
    if fmt == "npy":
        buf = io.BytesIO()
        np.save(buf, np.asarray(obj), allow_pickle=False)
        return buf.getvalue()
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _decode(data, fmt):
    if fmt == "npy":
        return np.load(io.BytesIO(data), allow_pickle=False)
    return pickle.loads(data)


def write_piece(store, relpath, obj, fmt):
    """On a worker: write one piece; returns its ``[checksum, size]``."""
    return store.write(relpath, _encode(obj, fmt))


def read_piece(store, relpath, expected, fmt):
    """On a worker: one piece, read and checked against its ``[checksum, size]``."""
    return _decode(store.read(relpath, expected), fmt)


@dataclass
class Pieces:
    """Placeholder of objects written one file per piece: ``folder/<i>.<fmt>``, each
    with its ``[checksum, size]``; ``shapes`` and ``dtype`` when they are row blocks of a
    dask array."""

    folder: str
    fmt: str
    n: int
    sums: list = field(default_factory=list)
    shapes: list | None = None
    dtype: str | None = None
    index: int | None = None  # a result's array: its place among the result's arrays

    def name(self, i):
        return f"{self.folder}/{i:05d}.{self.fmt}"

    def delayed(self, store):
        read = dask.delayed(read_piece, pure=True)
        return [read(store, self.name(i), self.sums[i], self.fmt) for i in range(self.n)]

    def array(self, store):
        blocks = [
            da.from_delayed(b, shape=tuple(s), dtype=np.dtype(self.dtype))
            for b, s in zip(self.delayed(store), self.shapes, strict=True)
        ]
        return da.concatenate(blocks)


@dataclass
class GraphPieces:
    """Placeholder of a KNNGraph: its blocks, rows and order as :class:`Pieces`, the rest
    as values; ``source`` is ``"input"`` (the fit's X), ``"self"`` (the graph's own rows,
    e.g. graph-filtered ones) or the index of the result's array the graph was built for."""

    blocks: Pieces
    X: Pieces | None
    indices: Pieces | None
    distances: Pieces | None
    order: tuple | None  # (dest Pieces, chunks, pairs, outer_chunks)
    params: dict
    source: object


def _keys(objects):
    """The dask keys of a list of delayed objects (None when one has no key)."""
    keys = tuple(getattr(o, "key", None) for o in objects)
    return keys if keys and None not in keys else None


def _array_keys(array):
    return _keys(array.to_delayed(optimize_graph=False).ravel().tolist())


class Encoder:
    """Replaces the dask arrays and graphs of a result with placeholders and collects the
    delayed writes of their pieces (:meth:`write` computes them and fills the checksums).
    Objects in ``known`` (keys -> :class:`Pieces` of earlier stages) are not written again;
    :meth:`write` adds this stage's pieces to it."""

    def __init__(self, store, stage, input_name, known=None):
        self.store, self.stage, self.input_name = store, stage, input_name
        self.known = {} if known is None else known
        self.arrays = {}  # name -> index among the result's arrays
        self.writes = []  # (Pieces, delayed writes)
        self.new = {}  # keys -> Pieces of this stage

    def encode(self, value):
        """``value`` with its dask arrays and graphs replaced by placeholders."""
        _map(value, self._register)  # a graph may name an array that comes after it
        return _map(value, self._leaf)

    def _register(self, value):
        if isinstance(value, da.Array):
            self.arrays.setdefault(value.name, len(self.arrays))
        return value

    def _leaf(self, value):
        if isinstance(value, da.Array):
            index = self.arrays[value.name]
            p = self.rows(value, f"array-{index}")
            if any(p is q for q, _ in self.writes):  # written by this stage: sums to come
                p.index = index
                return p
            return dataclasses.replace(p, index=index)
        if isinstance(value, KNNGraph):
            return self.graph(value, f"graph-{len(self.writes)}")
        return value

    def pieces(self, objects, folder, fmt, shapes=None, dtype=None):
        keys = _keys(objects)
        earlier = self.known.get(keys) or self.new.get(keys)
        if earlier is not None and earlier.fmt == fmt:
            return earlier
        p = Pieces(f"{self.stage}/{folder}", fmt, len(objects), shapes=shapes, dtype=dtype)
        write = dask.delayed(write_piece, pure=False)
        writes = [write(self.store, p.name(i), o, fmt) for i, o in enumerate(objects)]
        self.writes.append((p, writes))
        if keys is not None:
            self.new[keys] = p
        return p

    def rows(self, array, folder):
        if array.ndim > 1 and len(array.chunks[1]) > 1:
            array = array.rechunk({1: -1})
        shapes = [list(s) for s in _block_shapes(array)]
        blocks = array.to_delayed(optimize_graph=False).ravel().tolist()
        return self.pieces(blocks, folder, "npy", shapes, str(array.dtype))

    def graph(self, g, folder):
        if g.source_name == self.input_name:
            source = "input"
        elif g.source_name == g.X.name:
            source = "self"
        elif g.source_name in self.arrays:
            source = self.arrays[g.source_name]
        else:
            raise CheckpointError(
                "a checkpointed graph must be built on the fit's X or on an array of the "
                "same stage's result"
            )
        order = None
        if g.order is not None:
            o = g.order
            dest = self.pieces(list(o.dest_blocks), f"{folder}/order", "npy")
            order = (dest, list(o.chunks), [list(p) for p in o.pairs], o.outer_chunks)
        return GraphPieces(
            blocks=self.pieces(list(g.blocks), f"{folder}/blocks", "pkl"),
            # without a row order the graph's rows are its source's: not written twice
            X=None if g.order is None and source != "self" else self.rows(g.X, f"{folder}/X"),
            indices=None if g.indices is None else self.rows(g.indices, f"{folder}/indices"),
            distances=None
            if g.distances is None
            else self.rows(g.distances, f"{folder}/distances"),
            order=order,
            params={
                "n_neighbors": g.n_neighbors,
                "weights": g.weights,
                "normalized": g.normalized,
                "sigma": g.sigma,
            },
            source=source,
        )

    def write(self):
        """Run the workers' writes (one compute); returns the files written, by name."""
        sums = dask.compute([w for _, w in self.writes])[0]
        files = {}
        for (p, _), s in zip(self.writes, sums, strict=True):
            p.sums = [list(x) for x in s]
            files.update({p.name(i): x for i, x in enumerate(p.sums)})
        self.known.update(self.new)
        return files


def _map(value, leaf):
    """``value`` with ``leaf`` applied to everything but tuples, lists and dicts."""
    if type(value) in (tuple, list):
        return type(value)(_map(v, leaf) for v in value)
    if type(value) is dict:
        return {k: _map(v, leaf) for k, v in value.items()}
    return leaf(value)


def _block_shapes(array):
    rows = array.chunks[0]
    tail = tuple(int(sum(c)) for c in array.chunks[1:])
    return [(int(n), *tail) for n in rows]


class Decoder:
    """Rebuilds a result from its placeholders: persisted dask arrays and graphs whose
    pieces the workers read (and check) from the checkpoint. The objects it makes are added
    to ``known`` (keys -> :class:`Pieces`), so that a later stage holding them refers to
    their files."""

    def __init__(self, store, input_array, known=None):
        self.store, self.input = store, input_array
        self.known = {} if known is None else known
        self.arrays = {}

    def decode(self, value):
        """``value`` with its placeholders replaced by dask arrays and graphs."""
        value = _map(value, self._array)  # first the arrays a graph may be built on
        return _map(value, lambda v: self.graph(v) if isinstance(v, GraphPieces) else v)

    def _array(self, value):
        if not isinstance(value, Pieces):
            return value
        array = value.array(self.store).persist()
        self.arrays[value.index] = array
        self._remember(_array_keys(array), value)
        return array

    def _remember(self, keys, pieces):
        if keys is not None:
            self.known.setdefault(keys, dataclasses.replace(pieces, index=None))

    def graph(self, gp):
        rows = {
            name: None if p is None else p.array(self.store)
            for name, p in (("X", gp.X), ("indices", gp.indices), ("distances", gp.distances))
        }
        for name, p in (("X", gp.X), ("indices", gp.indices), ("distances", gp.distances)):
            if p is not None:
                self._remember(_array_keys(rows[name]), p)
        X = None if rows["X"] is None else rows["X"].persist()
        if gp.source == "self":
            source = X
        else:
            source = self.input if gp.source == "input" else self.arrays[gp.source]
            X = source if X is None else X
        order = None
        if gp.order is not None:
            dest, chunks, pairs, outer = gp.order
            order = RowOrder(dask.persist(*dest.delayed(self.store)), chunks, pairs, outer)
            self._remember(_keys(order.dest_blocks), dest)
        blocks = list(dask.persist(*gp.blocks.delayed(self.store)))
        self._remember(_keys(blocks), gp.blocks)
        return KNNGraph(
            blocks,
            X,
            indices=rows["indices"],
            distances=rows["distances"],
            order=order,
            source_name=source.name,
            **gp.params,
        )


__all__ = ["Decoder", "Encoder", "GraphPieces", "Pieces", "read_piece", "write_piece"]
