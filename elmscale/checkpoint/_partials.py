"""Partial sums of a Gram pass kept as they are computed, so a killed pass resumes.

:func:`elmscale.gram.hidden_stats` hands each task's partial sum to :meth:`PartialSums.wrap`.
A worker writes the partial to the stage's ``partials`` folder as soon as it has it, under a
name that says which row chunks it sums and carries its size and checksum (no manifest is
needed, so a pass killed at any moment leaves only complete, verifiable files). When the pass
runs again, the partials found there are read instead of computed: the same float64 arrays,
summed in the same tree, give the same result to the last bit. The folder is deleted once the
stage's result is written.
"""

import pickle

import dask

from ._store import CheckpointCorruptError, digest


def _write(store, folder, first, last, part):
    data = pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
    store.write(f"{folder}/{first}-{last}.{len(data)}.{digest(data)}.pkl", data)
    return part


def _read(store, relpath, size, checksum):
    data = store.read(relpath, [checksum, size])
    try:
        return pickle.loads(data)
    except Exception as exc:  # noqa: BLE001 - whatever unpickling raises, the file is bad
        raise CheckpointCorruptError(
            f"checkpoint file {store.where(relpath)} cannot be read: {exc}"
        ) from None


class PartialSums:
    """The partial sums of one Gram pass of a stage, in ``store``'s ``folder``."""

    def __init__(self, store, folder):
        self.store, self.folder = store, folder
        self.found = {}
        for name in store.listdir(folder):
            parts = name.split(".")
            if len(parts) == 4 and parts[3] == "pkl":
                self.found[parts[0]] = (name, int(parts[1]), parts[2])

    def wrap(self, group, part):
        """The task summing row chunks ``group`` (consecutive): read from its file when a
        previous pass wrote it (``part`` is then not computed), else ``part`` followed by
        its write."""
        first, last = int(group[0]), int(group[-1])
        found = self.found.get(f"{first}-{last}")
        if found is not None:
            name, size, checksum = found
            read = dask.delayed(_read, pure=True)
            return read(self.store, f"{self.folder}/{name}", size, checksum)
        return dask.delayed(_write, pure=True)(self.store, self.folder, first, last, part)


__all__ = ["PartialSums"]
