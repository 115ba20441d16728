"""Fingerprints: what a stage's result depends on, as a flat dict of short strings.

The data's fingerprint holds its shape, dtype, row chunks and one content hash per chunk,
computed on the workers (BLAKE2b over the chunk's bytes: a pass at memory speed, and nothing
but 32 hex digits per chunk reaches the client). The parameters' fingerprint holds one
string per parameter. Two fingerprints are compared field by field, so that a refused
checkpoint can say which field changed.
"""

import hashlib
import pickle
import types

import dask
import numpy as np

from ._store import digest


def _chunk_hash(block):
    block = np.ascontiguousarray(block)
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{block.dtype.str}{block.shape}".encode())
    if block.dtype.hasobject:  # e.g. string labels: their values, not their addresses
        h.update(pickle.dumps(block.tolist()))
    elif block.size:
        h.update(memoryview(block).cast("B"))
    return h.hexdigest()


def content_hashes(array):
    """One content hash per row chunk of a dask array (or one for a NumPy array)."""
    if not hasattr(array, "to_delayed"):
        return [_chunk_hash(np.asarray(array))]
    blocks = array.to_delayed(optimize_graph=False).ravel()
    hashes = dask.delayed(_chunk_hash, pure=True)
    return list(dask.compute(*[hashes(b) for b in blocks]))


def data_fingerprint(X, name="data"):
    """Shape, dtype, row chunks and per-chunk content hashes of ``X``, under ``name.*``."""
    fields = {
        f"{name}.shape": str(tuple(int(n) for n in X.shape)),
        f"{name}.dtype": str(np.dtype(X.dtype)),
    }
    if hasattr(X, "chunks"):
        fields[f"{name}.chunks"] = str(tuple(int(n) for n in X.chunks[0]))
    for i, h in enumerate(content_hashes(X)):
        fields[f"{name}.content.{i}"] = h
    return fields


def describe(value):
    """A parameter value as a string that is equal for equal values in any process."""
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return repr(value.item() if isinstance(value, np.generic) else value)
    if isinstance(value, np.random.RandomState):
        return f"RandomState({state_digest(value)})"
    if isinstance(value, np.ndarray):
        return f"array({value.shape}, {value.dtype}, {_chunk_hash(value)})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, (types.FunctionType, type)):
        return f"{value.__module__}.{value.__qualname__}"
    text = repr(value)
    if " at 0x" in text:  # the default repr names the address: hash the object instead
        from dask.base import tokenize

        return f"{type(value).__qualname__}({tokenize(value)})"
    return text


def state_digest(rng):
    """A digest of a RandomState's state."""
    _, keys, pos, has_gauss, cached = rng.get_state()
    return digest(np.ascontiguousarray(keys).tobytes() + f"{pos},{has_gauss},{cached}".encode())


def param_fingerprint(params):
    """``param.<name>`` -> :func:`describe` of each value."""
    return {f"param.{name}": describe(value) for name, value in params.items()}


def differences(stored, current):
    """Human-readable descriptions of the fields that differ, most telling first: the
    parameters, then the data, then the random state."""
    changed = sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))
    if any(k.startswith(("param.", "estimator")) for k in changed):
        changed = [k for k in changed if k.startswith(("param.", "estimator"))]
    elif any(".content." not in k and k.startswith(("data.", "y.")) for k in changed):
        changed = [k for k in changed if ".content." not in k]
    notes, contents = [], {}
    for key in changed:
        old, new = stored.get(key, "absent"), current.get(key, "absent")
        head, _, rest = key.partition(".")
        if head == "param":
            notes.append(f"parameter {rest} (checkpoint: {old}, this fit: {new})")
        elif rest.startswith("content."):
            contents.setdefault(head, []).append(int(rest[8:]))
        elif head in ("data", "y"):
            what = "chunking" if rest == "chunks" else rest
            notes.append(f"{_data_name(head)} {what} (checkpoint: {old}, this fit: {new})")
        elif key == "rng":
            notes.append("the random state at the start of the stage")
        else:
            notes.append(f"{key} (checkpoint: {old}, this fit: {new})")
    for head, chunks in contents.items():
        chunks.sort()
        shown = ", ".join(map(str, chunks[:5])) + (", ..." if len(chunks) > 5 else "")
        plural = "s" if len(chunks) > 1 else ""
        notes.append(f"{_data_name(head)} content of row chunk{plural} {shown}")
    return notes


def _data_name(head):
    return "data" if head == "data" else "target y"
