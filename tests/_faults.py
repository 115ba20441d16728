"""Fault injection on a LocalCluster whose scheduler runs in this process, for the fault
tests (``tests/test_faults.py``).

- :class:`KillOnTask`: a scheduler plugin that SIGKILLs the worker process the scheduler hands
  the n-th task of a given name to, as it hands it over; the nanny then starts a new worker
  and the scheduler recomputes what was lost from the task graph.
- :func:`graph_in_input_order`: a kNN graph's weights gathered to the client with its rows
  and columns in the input's row order, so that graphs built in any row order (or rebuilt
  after a fault) compare entry by entry;
- :func:`fit_under_fault`: a graph-based fit (``reduce`` then ``solve``) whose worker is
  killed as the first unpack task of one of the graph's exchanges is handed over.
"""

import os
import signal
import time

import numpy as np
import scipy.sparse as sp
from dask.utils import key_split
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.exceptions import WorkerStartTimeoutError


class KillOnTask(SchedulerPlugin):
    """SIGKILL the worker process that the scheduler hands the ``nth`` task named ``prefix``
    (``dask.utils.key_split`` of its key; counted over all workers) to, as it hands it over.

    ``pids`` maps worker addresses to process ids (all on this host). ``killed`` records
    ``(key, worker address)``; ``done_at_kill`` counts, per task name in ``watch``, the tasks
    already in memory at the kill, which shows how far an exchange had got."""

    name = "kill-on-task"

    def __init__(self, scheduler, prefix, nth, pids, watch=()):
        self.scheduler, self.prefix, self.nth, self.pids = scheduler, prefix, nth, pids
        self.watch = tuple(watch)
        self.count, self.killed, self.done_at_kill = 0, None, {}

    def transition(self, key, start, finish, *args, **kwargs):
        if finish != "processing" or self.killed or key_split(key) != self.prefix:
            return
        self.count += 1
        if self.count == self.nth:
            worker = self.scheduler.tasks[key].processing_on.address
            self.done_at_kill = self._in_memory()
            self.killed = (key, worker)
            os.kill(self.pids[worker], signal.SIGKILL)

    def _in_memory(self):
        counts = dict.fromkeys(self.watch, 0)
        for key, ts in self.scheduler.tasks.items():
            name = key_split(key)
            if name in counts and ts.state == "memory":
                counts[name] += 1
        return counts


def graph_in_input_order(graph):
    """The graph's W (the normalised ``D^-1/2 W D^-1/2`` of a normalised graph) as a scipy
    CSR matrix on the client, rows and columns in the input's row order, column indices
    sorted in each row. For inputs of moderate size: every edge is gathered."""
    import dask
    import dask.array as da

    blocks = dask.compute(*graph.blocks)
    W = sp.vstack([blk.global_csr(graph.n_samples) for blk in blocks]).tocoo()
    if graph.order is None:
        original = np.arange(graph.n_samples)
    else:  # the input row each of the graph's rows holds
        rows = da.from_array(np.arange(graph.n_samples), chunks=(graph.order.input_chunks,))
        original = np.asarray(graph.order.apply(rows).compute())
    out = sp.csr_matrix((W.data, (original[W.row], original[W.col])), shape=W.shape)
    out.sort_indices()
    return out


def same_graph(A, B):
    """Whether two CSR matrices from :func:`graph_in_input_order` are equal to the last bit:
    the same neighbours per row, in the same order, with the same weights."""
    return (
        A.shape == B.shape
        and np.array_equal(A.indptr, B.indptr)
        and np.array_equal(A.indices, B.indices)
        and np.array_equal(A.data, B.data)
    )


#: the graph's exchanges (:mod:`elmscale.graph._exchange`) by name: (the name of its pack
#: tasks, the name of the first tasks that read the packs). ``order``: the rows' shuffle into
#: the cells' order, whose unpack tasks dask fuses with the placing of the rows; ``reverse``:
#: the reverse edges that symmetrise the graph.
GRAPH_EXCHANGES = {
    "order": ("elmscale-graph-order", "elmscale-graph-order-place"),
    "reverse": ("elmscale-graph-reverse", "elmscale-graph-reverse-unpack"),
}


def fit_under_fault(client, model, X, exchange=None, *, back_within=120):
    """``model.reduce(X)`` then ``model.solve`` on ``client``'s LocalCluster (its scheduler in
    this process), SIGKILLing a worker at the first task reading the packs of the graph's
    ``exchange``
    (a key of :data:`GRAPH_EXCHANGES`; None: undisturbed): every pack of that worker's group
    is then computed, about half of them on the worker killed. Waits for the nanny's new
    worker. Returns ``(graph in input order, labels, record)``; ``record`` says which task
    was killed, how many of the exchange's tasks were in memory then, whether the killed
    worker was replaced, and whether a new worker came back within ``back_within`` seconds
    (``worker_back``: a nanny can restart its worker and then close for good, a race of
    distributed's, dask/distributed#7312; the fit has finished by then either way)."""
    scheduler = client.cluster.scheduler
    plugin = None
    n_workers = len(client.scheduler_info()["workers"])
    if exchange is not None:
        pack, unpack = GRAPH_EXCHANGES[exchange]
        plugin = KillOnTask(scheduler, unpack, 1, client.run(os.getpid), watch=(pack, unpack))
        scheduler.add_plugin(plugin)
    t0 = time.perf_counter()
    try:
        reduction = model.reduce(X)
        graph = graph_in_input_order(reduction.graph)
        ordered = reduction.graph.order is not None
        model.solve(reduction)
        labels = np.asarray(model.labels_)
        reduction.release()
    finally:
        if plugin is not None:
            scheduler.remove_plugin(name=KillOnTask.name)
    record = {"fault": exchange, "wall_s": round(time.perf_counter() - t0, 2), "ordered": ordered}
    if plugin is not None:
        record["killed_task"] = plugin.killed and plugin.killed[0]
        record["in_memory_at_kill"] = plugin.done_at_kill
        record["worker_replaced"] = bool(
            plugin.killed and plugin.killed[1] not in client.scheduler_info()["workers"]
        )
    try:
        client.wait_for_workers(n_workers, timeout=back_within)
        record["worker_back"] = True
    except WorkerStartTimeoutError:
        record["worker_back"] = False
    return graph, labels, record
