"""The allocator setting dask workers get: a worker plugin that raises glibc's mmap
threshold (:func:`~elmscale.utils._malloc.set_mmap_threshold`, why in
:mod:`elmscale.utils._malloc`), registered once per client. Apart from ``_malloc`` because
it imports distributed, which ``import elmscale`` does not."""

from distributed.diagnostics.plugin import WorkerPlugin

from .._config import get_config
from ._malloc import set_mmap_threshold


class MmapThreshold(WorkerPlugin):
    """Sets each worker's mmap threshold to ``nbytes``, on the workers there are and on
    those that join later; the worker's ``elmscale_mmap_threshold`` is then ``nbytes``, or
    None where it did not take effect (not glibc)."""

    idempotent = True

    def __init__(self, nbytes):
        self.nbytes = int(nbytes)
        self.name = f"elmscale-mmap-threshold-{self.nbytes}"

    def setup(self, worker):
        applied = set_mmap_threshold(self.nbytes)
        worker.elmscale_mmap_threshold = self.nbytes if applied else None


#: (client id, threshold) pairs registered: one round trip per client and setting
_registered = set()


def tune_workers(client):
    """Give the workers of ``client`` the ``worker_mmap_threshold`` setting (0 leaves them
    as they are): :class:`MmapThreshold` registered as a worker plugin, once per client and
    setting."""
    nbytes = get_config()["worker_mmap_threshold"]
    if not nbytes or (client.id, nbytes) in _registered:
        return
    plugin = MmapThreshold(nbytes)
    client.register_plugin(plugin, name=plugin.name)
    _registered.add((client.id, nbytes))
