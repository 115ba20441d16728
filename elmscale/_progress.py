"""Seeing what a fit is doing: the ``elmscale`` logger switched on in one line, and a
per-stage progress display of dask tasks.

elmscale logs its choices and per-iteration figures through ``logging.getLogger("elmscale.*")``
and never prints. :func:`log_to_stderr` shows them::

    import elmscale
    elmscale.log_to_stderr()          # INFO: stages, iterations, choices; "DEBUG" for more

:class:`StageProgress` groups dask tasks by the prefix of their key names
(``elmscale-graph-...``, ``elmscale-gram-...``, ``elmscale-kmeans-...``, and the names of the
dask operations around them, see STAGES) and reports, per stage, how many tasks have
finished. It reads the keys from a dask callback on the local schedulers and from the
scheduler's task prefixes on a distributed cluster, whose dashboard shows the same names.
"""

import logging
import sys
import threading
import time

from dask.callbacks import Callback
from dask.utils import key_split

LOGGER_NAME = "elmscale"

#: Scheduler states of a task still to run.
PENDING = ("waiting", "queued", "processing", "no-worker")

#: Stages shown by :class:`StageProgress`: (label, key-name prefixes), matched in order. The
#: prefixes are elmscale's own task names and those of the dask operations its estimators and
#: the command line run, so that every task of a built-in estimator has a stage; a task of
#: any other name is shown under its own prefix.
STAGES = (
    (
        "read",
        (
            "read-csv",
            "read-parquet",
            "read_parquet",
            "read",
            "len",
            "from-zarr",
            "npy-rows",
            "original-npy-rows",
            "from-value",
            "from-dask-array",
            "features",
            "array",
            "ndarray",
            "getitem",
            "to_string_dtype",
            "reset_index",
        ),
    ),
    (
        "prepare",
        (
            "elmscale-input",
            "elmscale-scale",
            "chunk_min",
            "chunk_max",
            "mean_agg",
            "var",
            "truediv",
            "sub",
            "center_rows",
            "encode",
            "one_hot",
            "take_weight",
            "bincount",
            "count_codes",
            "astype",
            "target",
        ),
    ),
    (
        "graph",
        (
            "elmscale-graph",
            "block_candidates",
            "merge_candidates",
            "edge_counts",
            "halo_counts",
            "assemble_block",
            "reverse_edges",
            "normalise_block",
            "laplacian",
        ),
    ),
    (
        "gram",
        (
            "elmscale-gram",
            "elmscale-hidden",
            "RandomHiddenLayer",
            "MixedHiddenLayer",
            "NodeFamilyLayer",
        ),
    ),
    ("embed", ("elmscale-embed", "unit_rows", "nystrom_extension", "nearest_rows")),
    (
        "k-means",
        (
            "elmscale-kmeans",
            "elmscale-refine",
            "argmax_label",
            "n_changed",
            "labels_key",
            "sum_keys",
        ),
    ),
    (
        "write",
        (
            "to-csv",
            "to-parquet",
            "toparquet",
            "to_frame",
            "store-map",
            "to-zarr",
            "store",
        ),
    ),
    # the gathering of a compute's results
    ("collect", ("finalize",)),
)


def log_to_stderr(level="INFO", stream=None):
    """Show elmscale's log records on stderr (or ``stream``) at ``level`` and above.

    Idempotent: calling it again changes the level without adding a second handler.
    Returns the handler.
    """
    logger = logging.getLogger(LOGGER_NAME)
    handler = next((h for h in logger.handlers if getattr(h, "_elmscale", False)), None)
    if handler is None:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler._elmscale = True
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
        )
        logger.addHandler(handler)
    level = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(level, int):
        raise ValueError(f"level must be a logging level such as 'INFO' or 'DEBUG', got {level!r}")
    handler.setLevel(level)
    logger.setLevel(level)
    return handler


def stage_of(prefix):
    """The stage label of a task-name prefix (``key_split`` of a key): one of STAGES, else
    the prefix itself."""
    for label, prefixes in STAGES:
        if prefix.startswith(prefixes):
            return label
    return prefix


class StageProgress:
    """Report finished dask tasks per stage while the ``with`` block runs.

    Parameters
    ----------
    client : distributed.Client or None
        With a client, a thread polls the scheduler's task prefixes every ``interval``
        seconds; without, a dask callback counts tasks of the local schedulers.
    stream : file, default sys.stderr
    interval : float, default 1.0
        Seconds between two reports (a report is printed only when a count changed).

    ``counts`` maps each stage to ``[finished, total]`` tasks seen; the lines look like
    ``progress: read 4/4, graph 12/12, gram 30/40``. On a cluster, finished counts every
    task that reached memory or erred since the display started (the scheduler's
    cumulative counts, which survive the task being forgotten) and total adds the tasks
    still to run, so the totals are reached when the work is done.
    """

    def __init__(self, client=None, stream=None, interval=1.0):
        self.client = client
        self.stream = stream or sys.stderr
        self.interval = interval
        self.counts = {}
        self._lock = threading.Lock()
        self._last = None
        self._stop = threading.Event()
        self._baseline = {}

    # -- reporting ---------------------------------------------------------------------------
    def line(self):
        with self._lock:
            parts = [f"{s} {done}/{total}" for s, (done, total) in self.counts.items() if total]
        return "progress: " + ", ".join(parts) if parts else ""

    def _report(self, force=False):
        text = self.line()
        if text and (force or text != self._last):
            print(text, file=self.stream, flush=True)
            self._last = text

    # -- local schedulers: a dask callback ---------------------------------------------------
    def _start_state(self, dsk, state):
        with self._lock:
            for key in state["ready"] + list(state["waiting"]):
                c = self.counts.setdefault(stage_of(key_split(key)), [0, 0])
                c[1] += 1

    def _posttask(self, key, result, dsk, state, worker_id):
        with self._lock:
            c = self.counts.setdefault(stage_of(key_split(key)), [0, 0])
            c[0] += 1
        now = time.monotonic()
        if now - self._t >= self.interval:
            self._t = now
            self._report()

    # -- distributed: the scheduler's task prefixes --------------------------------------------
    @staticmethod
    def _prefix_states(dask_scheduler=None):
        """Per task prefix: the tasks finished so far (cumulative) and those still to run."""
        return {
            name: (
                tp.state_counts["memory"] + tp.state_counts["erred"],
                sum(tp.states[s] for s in PENDING),
            )
            for name, tp in dask_scheduler.task_prefixes.items()
        }

    def _poll(self):
        states = self.client.run_on_scheduler(StageProgress._prefix_states)
        counts = {}
        for name, (done, pending) in states.items():
            done -= self._baseline.get(name, (0, 0))[0]
            if done or pending:
                c = counts.setdefault(stage_of(name), [0, 0])
                c[0] += done
                c[1] += done + pending
        with self._lock:
            self.counts = counts

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - a display must never break the fit
                return
            self._report()

    def __enter__(self):
        self._t = time.monotonic()
        if self.client is None:
            self._callback = Callback(start_state=self._start_state, posttask=self._posttask)
            self._callback.__enter__()
        else:
            self._baseline = self.client.run_on_scheduler(StageProgress._prefix_states)
            self._thread = threading.Thread(target=self._run, daemon=True, name="elmscale-progress")
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.client is None:
            self._callback.__exit__(*exc)
        else:
            self._stop.set()
            self._thread.join()
            try:
                self._poll()
            except Exception:  # noqa: BLE001
                pass
        self._report(force=True)
        return False
