"""Checkpoints: each stage of a fit that costs a pass over the data, kept so a fit resumes.

``fit(X, checkpoint=PATH)`` (``elmscale fit ... --checkpoint DIR``) writes the input scaling
with the hidden layer, the kNN graph and its row order, the graph-filtered rows, the Gram pass's
reduction and each iteration of an iterative solve to the folder PATH (a local path, or an
fsspec URL that the client and the workers share) as the fit reaches them. A later fit with the
same PATH, data and parameters loads every stage found complete and computes the rest, and its
result is the same to the last bit as an uninterrupted fit's. A Gram pass keeps its partial sums
as the workers compute them, so a fit killed in the middle of the pass resumes it.

Each stage is keyed by a fingerprint of the data (shape, dtype, row chunks and a content hash
of every chunk, computed on the workers) and of the parameters it depends on; a stage written
by another fit is refused with :class:`CheckpointMismatchError` naming what changed, never
reused. Every file carries a checksum in its stage's manifest, so a damaged or truncated file
raises :class:`CheckpointCorruptError` naming it. N-row pieces (graph blocks, rows, labels)
are written and read by the workers that hold them, one file per row chunk; the client
writes only the small matrices.

The files hold pickles: load checkpoints only from folders you trust, as with any pickle.
"""

from ._checkpoint import Checkpoint, Iterations, NoIterations, open_checkpoint
from ._store import CheckpointCorruptError, CheckpointError, CheckpointMismatchError

__all__ = [
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointMismatchError",
    "Iterations",
    "NoIterations",
    "open_checkpoint",
]
