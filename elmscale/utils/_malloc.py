"""glibc allocator settings for processes that run elmscale's blocks.

Every task of a fit allocates and frees large temporaries (a block of H, the rows a search
task gathers, a filter step's product). With glibc's defaults each thread allocates from an
arena of its own, and blocks above the mmap threshold are mapped on allocation and unmapped
on release, so each temporary is faulted in page by page again: in a threaded fit the
kernel's page-fault work can rival the arithmetic. One arena, no mmap for large blocks and
no trimming let freed blocks be reused as they are. The price is memory: the process keeps
its peak heap instead of returning it to the system.

The settings apply to threads that allocate for the first time after they are made, so they
belong at the start of a process: :func:`tune_malloc` in a program of one's own (the
``elmscale`` command calls it), :data:`MALLOC_ENV` in the environment of dask workers
(``distributed.nanny.pre-spawn-environ``) or of a whole job.

Dask workers get one setting without being asked (:mod:`elmscale.utils._worker_malloc`, the
``worker_mmap_threshold`` setting). Their nanny sets ``MALLOC_TRIM_THRESHOLD_`` so that freed
memory goes back to the system, and setting it switches off glibc's adaptive thresholds:
every block above 128 KiB (a product's rows, a mask, an index array) is then mapped on
allocation and unmapped on release, and a task spends about as long faulting its
temporaries in as computing with them. :func:`set_mmap_threshold` sets what glibc's
adaptive rule would reach for such blocks, at most its largest: blocks up to 32 MiB come
from the heap, and the heap is trimmed once twice that is free at its top. Freed blocks are
then reused, and no result changes. Freed blocks between blocks still in use stay in the
heap, though, and a worker's resident memory can then reach dask's spill threshold with
nothing held that spilling would free: as a worker's memory nears the point where dask would
start spilling, the same setting gives those free pages back (:func:`trim_heap`).
"""

import ctypes
import ctypes.util
import sys

#: the settings as environment variables (read by glibc when a process starts)
MALLOC_ENV = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1),
}

# mallopt parameters of glibc's <malloc.h>
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -3, -4, -8


def _glibc(function):
    """glibc's ``function`` through ctypes, or None elsewhere than Linux with glibc."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name or "libc.so.6"), function)
    except (OSError, AttributeError):
        return None


def tune_malloc():
    """Apply :data:`MALLOC_ENV`'s settings to this process with glibc's ``mallopt``.

    Call it before the process starts threads (dask's thread pool among them): threads
    that already own an arena keep it. Returns True when all three settings took effect,
    False elsewhere than Linux with glibc (nothing is changed there)."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1))
    return all(mallopt(param, value) == 1 for param, value in settings)


def set_mmap_threshold(nbytes):
    """Set this process's mmap threshold (glibc's ``M_MMAP_THRESHOLD``) to ``nbytes`` and its
    trim threshold to twice that, as glibc's adaptive rule pairs them: blocks up to
    ``nbytes`` come from the heap and are reused once freed. Returns True when both took
    effect, False elsewhere than Linux with glibc."""
    mallopt = _glibc("mallopt")
    settings = ((_M_MMAP_THRESHOLD, int(nbytes)), (_M_TRIM_THRESHOLD, 2 * int(nbytes)))
    return mallopt is not None and all(mallopt(p, v) == 1 for p, v in settings)


def trim_heap():
    """Give the free memory inside this process's heaps back to the system (glibc's
    ``malloc_trim(0)``: every arena's free pages, not only those at its top, which is all
    the trim threshold reaches). Returns True when memory was released, False when none was
    or elsewhere than Linux with glibc."""
    malloc_trim = _glibc("malloc_trim")
    return malloc_trim is not None and malloc_trim(0) == 1


__all__ = ["MALLOC_ENV", "set_mmap_threshold", "trim_heap", "tune_malloc"]
