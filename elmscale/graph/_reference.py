"""What a fitted model keeps of its training rows for the out-of-sample step, in a fixed size.

A fit that filtered its rows on the kNN graph embeds a new row through its nearest training
rows (:mod:`elmscale.graph._extend`): the weighted mean of their embedding, and their vote for
its cluster. Searching all N training rows for that makes a model hold (or name) all of X,
makes saving it store all of X, and makes ``predict`` cost O(n_query N d). A
:class:`TrainingReference` holds instead, in at most :data:`REFERENCE_BYTES`:

- **the reference rows**: every training row (float32) where they fit, else a uniform sample
  of as many as fit stored as one byte per value (:class:`ScalarQuantizer`, faiss's 8-bit
  scalar quantiser), each with its embedding and label; new rows search these exactly, the
  query itself not quantised (asymmetric distances, as faiss computes them). Where all rows
  fit, the extension is the one over all training rows; a sample of m rows extends the same
  smooth function from m of its values (the Nystrom extension from a subset, Williams and
  Seeger, NIPS 2001);
- **the training rows' labels by key** where they fit in :data:`LOOKUP_BYTES`: a 64-bit key of
  every training row (:func:`row_keys`), sorted, with the row's label, so that ``predict`` of
  a training row is a lookup that gives ``labels_`` back, with no search.

The reference is NumPy and small: it is the same object in the fitted model and in the model
loaded from a file, so both give the same answers; it crosses to the workers once per call,
and nothing with N rows reaches the client beyond these bounded arrays.
"""

import functools
import uuid

import dask
import numpy as np

from ..utils._dask import distributed_client
from ..utils._random import splitmix64
from ._backends import _block_candidates
from ._extend import _weighted_mean

#: bytes of training rows (float32, scaled as the graph searched them) with their embedding
#: and label that a model keeps for the out-of-sample step
REFERENCE_BYTES = 32 * 2**20
#: bytes of training-row keys and labels a model keeps so that ``predict`` of a training row
#: is a lookup: every key where N rows fit, none otherwise
LOOKUP_BYTES = 16 * 2**20
#: training rows whose keys recognise the training data (:meth:`TrainingReference.is_training_data`)
PROBE_ROWS = 64
#: rows :func:`row_keys` converts at once
KEY_ROWS = 4096
#: the seed of :func:`row_keys`'s multipliers: the same keys in every process and version
_MULTIPLIER_SEED = 0x5EED_E1A5


@functools.cache
def _multipliers(n_features):
    """Odd 64-bit multipliers, one per column, fixed for all models and processes."""
    rng = np.random.default_rng([_MULTIPLIER_SEED, n_features])
    return rng.integers(0, 2**63, size=n_features, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def row_keys(X):
    """A 64-bit key per row of a NumPy block: equal rows (as float64 values, with -0.0 equal
    to 0.0) have equal keys, whatever their dtype or the file they came from.

    The key is ``mix(sum_j mix(bits(x_j)) * w_j mod 2^64)`` with fixed odd multipliers
    ``w_j``: each value's bits are mixed first (a float's low mantissa bits are often all
    zero, and a product only carries low bits upwards), then weighed by its column. Both
    mixing and an odd multiplier are invertible modulo 2^64, so two rows that differ in one
    column never collide; rows that differ in several collide with probability about 2^-64.
    Computed :data:`KEY_ROWS` rows at a time."""
    X = np.asarray(X)
    w = _multipliers(X.shape[1])
    out = np.empty(X.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for lo in range(0, X.shape[0], KEY_ROWS):
            # + 0.0 turns -0.0 into 0.0 (and makes a float64 copy to mix in place)
            bits = splitmix64((X[lo : lo + KEY_ROWS].astype(np.float64) + 0.0).view(np.uint64))
            bits *= w
            out[lo : lo + KEY_ROWS] = splitmix64(bits.sum(axis=1, dtype=np.uint64))
    return out


def reference_size(n_samples, n_features, n_values, n_labels):
    """How many training rows the reference holds, whether they are quantised, and whether
    every row's key fits :data:`LOOKUP_BYTES`: all rows as float32 where they fit
    :data:`REFERENCE_BYTES`, else as many 8-bit rows as fit."""
    per_value_row = 8 * n_values + 8
    quantized = n_samples * (4 * n_features + per_value_row) > REFERENCE_BYTES
    per_row = (1 if quantized else 4) * n_features + per_value_row
    m = int(min(n_samples, max(REFERENCE_BYTES // per_row, 1)))
    label_bytes = np.min_scalar_type(max(n_labels - 1, 0)).itemsize if n_labels else 0
    keyed = n_labels > 0 and n_samples * (8 + label_bytes) <= LOOKUP_BYTES
    return m, quantized, keyed


class ScalarQuantizer:
    """One byte per value: each column's range [lo, hi] of the rows it was fitted on cut into
    255 equal steps (faiss's ``QT_8bit``). Decoding gives the step's value; a distance
    between a float row and decoded rows is off by at most half a step per column."""

    def __init__(self, rows):
        self.lo = rows.min(axis=0).astype(np.float32)
        span = rows.max(axis=0).astype(np.float32) - self.lo
        self.step = np.where(span > 0, span / 255, 1).astype(np.float32)

    def encode(self, rows):
        codes = np.rint((rows - self.lo) / self.step)
        return np.clip(codes, 0, 255).astype(np.uint8)

    def decode(self, codes):
        return codes * self.step + self.lo


class TrainingReference:
    """The training rows a model extends its embedding and labels from (see the module).

    Attributes
    ----------
    rows : float32 or uint8 ndarray (m, n_features)
        The reference rows, scaled as the graph was searched; their codes where
        ``quantizer`` is set.
    quantizer : ScalarQuantizer or None
    values : float64 ndarray (m, n_values)
        Their embedding.
    labels : int64 ndarray (m,) or None
        Their labels.
    keys, key_labels : ndarray (n_samples,) or None
        Every training row's :func:`row_keys`, sorted, and its label; None where they do not
        fit :data:`LOOKUP_BYTES` (or without labels).
    n_samples : int
        Training rows of the fit.
    probe : (ndarray, ndarray)
        :data:`PROBE_ROWS` evenly spaced row positions of the training data and their keys:
        :meth:`is_training_data` recognises the same rows in the same order by them.
    """

    #: reference rows decoded at once in a search (bounds a task's memory)
    DECODE_ROWS = 8192

    def __init__(self, rows, values, labels, keys, key_labels, n_samples, probe, quantizer=None):
        self.rows, self.values, self.labels = rows, values, labels
        self.probe = probe
        self.quantizer = quantizer
        self._token = uuid.uuid4().hex
        self.keys, self.key_labels = keys, key_labels
        self.n_samples = int(n_samples)

    @classmethod
    def from_fit(cls, X, embedding, labels, n_labels, transform, seed, rows_in_process=None):
        """The reference of a fit on the dask array X (rows), its embedding and labels (dask
        arrays or NumPy; ``labels`` None without clusters).
        ``transform`` scales a block as the graph was searched; ``seed`` draws the sample.
        The sampled rows and every row's key are read in one pass over X, or from
        ``rows_in_process`` (the NumPy rows X was made from), never computed back from X."""
        n, d = X.shape
        m, quantized, keyed = reference_size(
            n, d, embedding.shape[1], n_labels if labels is not None else 0
        )
        take = slice(None)
        if m < n:
            take = np.sort(np.random.default_rng(seed).choice(n, m, replace=False))
        source = X if rows_in_process is None else rows_in_process
        positions = _probe_positions(n)
        parts = {"rows": source[take], "values": embedding[take], "probe": source[positions]}
        if labels is not None:
            parts["labels"] = labels[take]
            if keyed:
                parts["key_labels"] = labels
                if rows_in_process is None:
                    parts["keys"] = X.map_blocks(
                        row_keys, drop_axis=1, dtype=np.uint64, meta=np.empty((0,), np.uint64)
                    )
        lazy = [name for name, part in parts.items() if dask.is_dask_collection(part)]
        found = dict(parts)
        found.update(zip(lazy, dask.compute(*(parts[name] for name in lazy)), strict=True))
        if keyed and rows_in_process is not None:
            found["keys"] = row_keys(rows_in_process)
        rows = np.asarray(transform(np.asarray(found["rows"])), dtype=np.float32)
        quantizer = None
        if quantized:
            quantizer = ScalarQuantizer(rows)
            rows = quantizer.encode(rows)
        keys = key_labels = ref_labels = None
        if labels is not None:
            ref_labels = np.asarray(found["labels"], dtype=np.int64)
        if "keys" in found:
            order = np.argsort(found["keys"], kind="stable")
            keys = np.ascontiguousarray(found["keys"][order])
            key_labels = np.asarray(found["key_labels"])[order]
            key_labels = key_labels.astype(np.min_scalar_type(n_labels - 1))
        values = np.asarray(found["values"], dtype=np.float64)
        probe = (positions, row_keys(np.asarray(found["probe"])))
        return cls(rows, values, ref_labels, keys, key_labels, n, probe, quantizer)

    def is_training_data(self, X):
        """Whether X (NumPy or dask) holds the training rows in the fit's order: as many
        rows, and the same rows at :data:`PROBE_ROWS` evenly spaced positions (one small
        read, not a pass over X)."""
        import dask

        positions, keys = self.probe
        if X.shape[0] != self.n_samples:
            return False
        (rows,) = dask.compute(X[positions])
        return bool(np.array_equal(row_keys(np.asarray(rows)), keys))

    @property
    def nbytes(self):
        arrays = (self.rows, self.values, self.labels, self.keys, self.key_labels)
        return sum(a.nbytes for a in arrays if a is not None)

    def lookup(self, X_block):
        """The label of each row of X_block that is a training row (by key), -1 for others."""
        out = np.full(X_block.shape[0], -1, dtype=np.int64)
        if self.keys is None or not len(self.keys):
            return out
        keys = row_keys(X_block)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        found = self.keys[at] == keys
        out[found] = self.key_labels[at[found]]
        return out

    def neighbour_values(self, X_block, k, weights, sigma, transform, n_labels=0):
        """For each row of X_block: the weighted mean of the embedding of its k nearest
        reference rows (weighted as the graph's edges), and with ``n_labels`` each label's
        count among them and how many reference rows equal the row, as
        :func:`elmscale.graph.neighbour_mean` returns them. A row equal to reference rows
        takes their values alone."""
        Q = np.asarray(transform(X_block), dtype=np.float32)
        values = self.values
        if n_labels:
            values = np.hstack([values, self.labels[:, None].astype(np.float64)])
        if self.quantizer is None:
            found = [_block_candidates(Q, self.rows, None, 0, k, values=values, dtype=np.float32)]
        else:
            step = self.DECODE_ROWS
            found = [
                _block_candidates(
                    Q,
                    self.quantizer.decode(self.rows[lo : lo + step]),
                    None,
                    lo,
                    k,
                    values=values[lo : lo + step],
                    dtype=np.float32,
                )
                for lo in range(0, len(self.rows), step)
            ]
        return _weighted_mean(weights, sigma, n_labels, min(k, len(self.rows)), *found)

    def extend(self, X, n_neighbors, *, weights, sigma, transform, finish=None, n_labels=0):
        """:meth:`neighbour_values` of each row of the dask array X, one task per chunk with
        the reference as one shared input; with ``finish`` (a function of a block of those
        values giving labels) the labels instead, where training rows found by
        :meth:`lookup` take theirs without a search."""
        ref = self._on_workers()
        args = (ref, n_neighbors, weights, sigma, transform, n_labels, finish)
        if finish is None:
            width = self.values.shape[1] + (n_labels + 1 if n_labels else 0)
            shape = {"chunks": (X.chunks[0], (width,)), "dtype": np.float64}
            shape["meta"] = np.empty((0, 0), np.float64)
        else:
            shape = {"drop_axis": 1, "dtype": np.int64, "meta": np.empty((0,), np.int64)}
        return X.map_blocks(_extend_block, *args, **shape)

    def _on_workers(self):
        """The reference as the tasks take it: scattered once to every worker of the active
        distributed client (kept for the client's later calls), else one delayed object in
        the graph."""
        client = distributed_client()
        if client is None:
            return dask.delayed(self, pure=True, traverse=False)
        held = getattr(self, "_scattered", None)
        if held is None or held[0] != client.id or held[1].status != "finished":
            held = (client.id, client.scatter(self, broadcast=True, hash=False))
            self._scattered = held
        return held[1]

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_scattered", None)  # a future of this process's client
        return state

    def __dask_tokenize__(self):
        # one token per reference, made once (and kept through pickling) rather than a hash
        # of its arrays at every call
        return type(self).__name__, self._token


def _probe_positions(n_samples):
    return np.unique(np.linspace(0, n_samples - 1, min(PROBE_ROWS, n_samples)).astype(np.int64))


def _extend_block(X_block, reference, k, weights, sigma, transform, n_labels, finish):
    """:meth:`TrainingReference.extend` of one block."""
    if finish is None:
        return reference.neighbour_values(X_block, k, weights, sigma, transform, n_labels)
    labels = reference.lookup(X_block)
    search = labels < 0
    if search.any():
        found = reference.neighbour_values(X_block[search], k, weights, sigma, transform, n_labels)
        labels[search] = finish(found)
    return labels


__all__ = ["REFERENCE_BYTES", "LOOKUP_BYTES", "ScalarQuantizer", "TrainingReference", "row_keys"]
