"""All-to-all exchanges between row chunks in O(n_chunks x n_workers) tasks.

Building the graph moves pieces of blocks between chunks several times: rows into cell
order, reverse edges, the rows of the cells a search task probes, halo rows. Sent one task
per (source, destination) pair, an exchange in which every chunk sends to every other has
n_chunks^2 tasks, and the scheduler spends about a millisecond on each. Here the
destinations are split into groups, one per worker of the distributed client (a single group
on a local scheduler):

- each source runs one *pack* task (keyed ``<stage>-...``) per group it sends to, holding
  its pieces for all of the group's destinations;
- each destination runs one *unpack* task that picks its pieces out of the packs; the unpack
  tasks of a group prefer that group's worker, so every pack crosses the network once;
- when a piece depends on what the destination asks for (``wants``: the halo indices of a
  graph block, ...), the asks of a group travel to the sources as one *wants* task.

An exchange thus has at most n_chunks x n_groups + n_chunks + n_groups tasks, and each
destination receives exactly the pieces the pairwise exchange would have given it, in the
same order.

In one process (no distributed client, or a single worker) nothing crosses a network, and
packs would only hold every destination's pieces until the last unpack has run: each
destination's unpack task then reads its sources whole (the blocks themselves, not copies)
and takes its pieces itself, so only the pieces of destinations being worked on exist.

An unpack task holds its group's whole packs, so a group receiving more than a worker can
hold would fail on a worker with a memory limit however small the chunks. When the caller
knows what each destination receives (``nbytes``), a worker's destinations are split further
into runs that receive at most the ``exchange_bytes`` setting each (at least one destination
per run): the groups then grow with the data moved, not with the chunk count.
"""

import dask

from .._config import get_config
from ..utils import _dask


def worker_groups(n_destinations, nbytes=None):
    """Destinations ``0..n-1`` split into consecutive groups, one per worker of the current
    distributed client: ``[(worker address or None, [destinations...]), ...]``. Without a
    client, or with one worker, a single group without a worker. With ``nbytes`` (bytes each
    destination receives) and a distributed client, each group is cut further into runs
    receiving at most the ``exchange_bytes`` setting (:func:`split_by_bytes`)."""
    workers = cluster_workers()
    n_groups = max(1, min(len(workers), n_destinations))
    if n_groups == 1:
        groups = [(None, list(range(n_destinations)))]
    else:
        groups = [
            (
                workers[g],
                list(range(g * n_destinations // n_groups, (g + 1) * n_destinations // n_groups)),
            )
            for g in range(n_groups)
        ]
    if nbytes is None or not workers:  # a local scheduler's unpacks share its memory
        return groups
    budget = get_config()["exchange_bytes"]
    return [(w, run) for w, group in groups for run in split_by_bytes(group, nbytes, budget)]


def destination_workers(n_destinations):
    """Per destination ``0..n-1`` of an exchange, the worker its unpack task prefers
    (:func:`worker_groups`' consecutive split), or None without a distributed client. A task
    that reads a destination's pieces runs best there: placed elsewhere, it pulls its own
    rows or its pieces across the network (:func:`near`)."""
    out = [None] * n_destinations
    for worker, group in worker_groups(n_destinations):
        for b in group:
            out[b] = worker
    return out


def near(worker):
    """``dask.annotate`` preferring ``worker`` (others allowed), or no annotation."""
    if worker is None:
        return dask.annotate()
    return dask.annotate(workers=[worker], allow_other_workers=True)


def split_by_bytes(destinations, nbytes, budget):
    """Consecutive runs of ``destinations`` whose ``nbytes`` sum to at most ``budget`` (a
    destination that alone receives more forms a run of its own)."""
    runs, total = [], 0
    for b in destinations:
        if runs and total + nbytes[b] <= budget:
            runs[-1].append(b)
            total += nbytes[b]
        else:
            runs.append([b])
            total = nbytes[b]
    return runs


def cluster_workers():
    """The sorted worker addresses of the default distributed client, or ``[]``
    (:func:`elmscale.utils._dask.cluster_worker_info`)."""
    return sorted(_dask.cluster_worker_info())


def _pack(take, items, wants, *source):
    """One source's pieces for one group: ``take(*source, [wants[i],] *args)`` per item
    ``(i, args)`` (``i``: the destination's place in the group). The source's objects come
    last, as arguments of their own: dask keeps persisted results that a task reads alive
    only when they are not nested in a container argument."""
    if wants is None:
        return [take(*source, *args) for _, args in items]
    return [take(*source, wants[i], *args) for i, args in items]


def _pieces(where, take, wanted, n_packs, objects):
    """One destination's pieces, in its order, one at a time: ``packs[p][j]`` for each
    ``(p, j)`` and, for each ``(None, (first, n_objects, args))``, ``take`` on a source read
    whole: the ``n_objects`` objects from ``first`` on among those after the ``n_packs``
    packs."""
    packs, sources = objects[:n_packs], objects[n_packs:]
    for p, j in where:
        if p is not None:
            yield packs[p][j]
            continue
        first, n_objects, args = j
        source = sources[first : first + n_objects]
        yield take(*source, *args) if wanted is None else take(*source, wanted, *args)


def _unpack(where, take, wanted, n_packs, *objects):
    """One destination's pieces, as a tuple (:func:`_pieces`)."""
    return tuple(_pieces(where, take, wanted, n_packs, objects))


class PiecesOnRead:
    """One destination's pieces in one process, each taken from its source when iterated
    (:func:`exchange`'s ``deferred``). The local scheduler runs a destination's unpack
    task whenever its sources are ready, often long before the task that reads it; this
    object costs nothing until that task iterates it, and then one piece exists at a time
    unless the reader keeps them. It holds references to the sources, which a process keeps
    anyway, and is iterated by its reader once or more, each time taking the pieces again."""

    __slots__ = ("_where", "_take", "_wanted", "_n_packs", "_objects")

    def __init__(self, where, take, wanted, n_packs, objects):
        self._where, self._take, self._wanted = where, take, wanted
        self._n_packs, self._objects = n_packs, objects

    def __iter__(self):
        return _pieces(self._where, self._take, self._wanted, self._n_packs, self._objects)

    def __len__(self):
        return len(self._where)


def _unpack_on_read(where, take, wanted, n_packs, *objects):
    """One destination's pieces, taken when its reader iterates them (:class:`PiecesOnRead`)."""
    return PiecesOnRead(where, take, wanted, n_packs, objects)


def _collect(*wants):
    return wants


#: a destination that asks more than this share of a source chunk's rows reads the whole
#: chunk (:func:`whole_sources`): data of high intrinsic dimension, whose kNN graph links
#: every chunk with most others
WHOLE_CHUNK_SHARE = 0.5


def whole_sources(rows, source_rows, share=None):
    """Per destination, the sources it reads whole (:func:`exchange`'s ``whole``): those it
    asks more than ``share`` (default :data:`WHOLE_CHUNK_SHARE`) of the rows of.

    ``rows[b]``: ``{source: rows destination b asks of it}``; ``source_rows[s]``: the rows
    source s holds. Cut into pieces, a source's rows cross the network once per destination;
    read whole, the chunk crosses once per worker, shared by the destinations there. In one
    process :func:`exchange` reads every source whole, whatever this gives."""
    share = WHOLE_CHUNK_SHARE if share is None else share
    return [{s for s, n in asked.items() if n > share * source_rows[s]} for asked in rows]


def exchange(
    stage,
    take,
    sources,
    requests,
    wants=None,
    *,
    make=None,
    nbytes=None,
    whole=None,
    deferred=False,
):
    """Move pieces of the ``sources`` to destinations with one pack task per (source,
    destination group) and one unpack task per destination.

    Parameters
    ----------
    stage : str
        Names the tasks: ``<stage>`` (packs), ``<stage>-unpack`` and ``<stage>-wants``.
    take : callable
        ``take(*sources[s], *args)``, or ``take(*sources[s], wants[b], *args)`` when ``wants``
        is given: the piece of source s for destination b.
    sources : list of tuple
        Per source chunk, the (delayed) objects ``take`` reads.
    requests : list of list of (int, tuple)
        Per destination, ``(s, args)`` for every piece it receives, in the order it wants
        them.
    wants : list or None
        Per destination, a (delayed) object passed to ``take``.
    make : callable, optional
        ``make(name, fn, *args)`` -> delayed call; default
        :func:`elmscale.utils._dask.task` (unique keys).
    nbytes : sequence of int, optional
        Per destination, about how many bytes it receives: bounds what one unpack task
        holds (:func:`worker_groups`); the pieces of ``whole`` sources excluded.
    whole : list of set, optional
        Per destination, the sources its unpack task reads whole and cuts its pieces from
        itself (:func:`whole_sources`), instead of receiving them in a pack; in one process
        every source.
    deferred : bool
        Without a distributed client, each destination receives a :class:`PiecesOnRead`,
        which takes its pieces only when the destination's reader iterates it: what the
        local scheduler holds of an exchange is then the pieces of the tasks running, not
        those of every destination whose unpack it happened to run first. For readers that
        only iterate their pieces. On a cluster the pieces are a tuple as always (an object
        holding its sources would be spilled or moved with them).

    Returns
    -------
    list of delayed tuple
        Per destination, its pieces in the order of its requests (``()`` for a destination
        without any; a :class:`PiecesOnRead` of them where ``deferred`` applies).
    """
    make = make or _dask.task
    out = [None] * len(requests)
    groups = worker_groups(len(requests), nbytes)
    unpack = _unpack
    if all(worker is None for worker, _ in groups):
        # one process: every destination takes its pieces from the sources themselves, so no
        # pack holds pieces for destinations whose tasks have not run
        whole = [{s for s, _ in request} for request in requests]
        if deferred and not cluster_workers():
            unpack = _unpack_on_read
    for worker, group in groups:
        group_wants = None
        if wants is not None:
            group_wants = make(f"{stage}-wants", _collect, *[wants[b] for b in group])
        items, where = _group_plan(group, requests, whole)
        packs = {
            s: make(stage, _pack, take, items[s], group_wants, *sources[s]) for s in sorted(items)
        }
        with near(worker):
            for b in group:
                if b not in where:
                    out[b] = ()
                    continue
                out[b] = _unpack_task(make, stage, take, where[b], packs, sources, wants, b, unpack)
    return out


def _group_plan(group, requests, whole):
    """``(items, where)`` of one destination group: per source, the ``(place in group,
    args)`` of the pieces its pack holds; per destination, ``(source, index in its pack,
    None)`` for a piece it receives, ``(source, None, args)`` for one it cuts from a source
    it reads whole."""
    items, where = {}, {}
    for i, b in enumerate(group):
        for s, args in requests[b]:
            if whole is not None and s in whole[b]:
                where.setdefault(b, []).append((s, None, tuple(args)))
                continue
            items.setdefault(s, []).append((i, tuple(args)))
            where.setdefault(b, []).append((s, len(items[s]) - 1, None))
    return items, where


def _unpack_task(make, stage, take, where, packs, sources, wants, b, unpack=_unpack):
    """Destination b's unpack task: its packs, then the objects of the sources it reads
    whole, each an argument of its own (see :func:`_pack`)."""
    used = sorted({s for s, j, _ in where if j is not None})
    at = {s: p for p, s in enumerate(used)}
    read = sorted({s for s, j, _ in where if j is None})
    first, objects = {}, []
    for s in read:
        first[s] = len(objects)
        objects.extend(sources[s])
    order = [
        (at[s], j) if j is not None else (None, (first[s], len(sources[s]), args))
        for s, j, args in where
    ]
    wanted = None if wants is None or not read else wants[b]
    return make(
        f"{stage}-unpack",
        unpack,
        order,
        take,
        wanted,
        len(used),
        *[packs[s] for s in used],
        *objects,
    )
