"""The allocator setting dask workers get: a worker plugin that raises glibc's mmap
threshold (:func:`~elmscale.utils._malloc.set_mmap_threshold`, why in
:mod:`elmscale.utils._malloc`) and gives the heap's free pages back as the worker's memory
nears dask's spill threshold, registered once per client. Apart from ``_malloc`` because
it imports distributed, which ``import elmscale`` does not."""

import time

from distributed.diagnostics.plugin import WorkerPlugin
from tornado.ioloop import PeriodicCallback

from .._config import get_config
from ._malloc import set_mmap_threshold, trim_heap

#: how often a worker compares its resident memory with the trim point (dask's memory
#: monitor looks every 100 ms by default)
TRIM_CHECK_MS = 200
#: the trim point, as a share of the memory at which dask stops spilling (its ``target``
#: fraction, else its ``spill`` fraction, of the worker's memory limit)
TRIM_SHARE = 0.9
#: the shortest time between two trims, seconds: a worker whose memory is in use gains
#: nothing from trimming again and again
TRIM_EVERY_S = 1.0


def trim_point(memory_manager):
    """Resident bytes above which a worker gives its heap's free pages back, or None for a
    worker without a memory limit or with spilling off."""
    limit = memory_manager.memory_limit
    fraction = memory_manager.memory_target_fraction or memory_manager.memory_spill_fraction
    if not limit or not fraction:
        return None
    return TRIM_SHARE * fraction * limit


class MmapThreshold(WorkerPlugin):
    """Sets each worker's mmap threshold to ``nbytes``, on the workers there are and on
    those that join later; the worker's ``elmscale_mmap_threshold`` is then ``nbytes``, or
    None where it did not take effect (not glibc). Where it did and the worker spills, the
    worker's resident memory is checked every :data:`TRIM_CHECK_MS` and the heap's free
    pages are given back (:func:`~elmscale.utils._malloc.trim_heap`) above
    :func:`trim_point`, before dask would spill what the worker holds to make room for
    memory that is free; ``elmscale_heap_trims`` counts the trims."""

    idempotent = True

    def __init__(self, nbytes):
        self.nbytes = int(nbytes)
        self.name = f"elmscale-mmap-threshold-{self.nbytes}"
        self._trimmer = None
        self._last_trim = 0.0

    def setup(self, worker):
        applied = set_mmap_threshold(self.nbytes)
        worker.elmscale_mmap_threshold = self.nbytes if applied else None
        worker.elmscale_heap_trims = 0
        point = trim_point(worker.memory_manager) if applied else None
        if point is not None:
            self._trimmer = PeriodicCallback(lambda: self._trim(worker, point), TRIM_CHECK_MS)
            self._trimmer.start()

    def _trim(self, worker, point):
        now = time.monotonic()
        if now - self._last_trim >= TRIM_EVERY_S and worker.monitor.get_process_memory() > point:
            self._last_trim = now
            trim_heap()
            worker.elmscale_heap_trims += 1

    def teardown(self, worker):
        if self._trimmer is not None:
            self._trimmer.stop()


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
