"""The in-cell search of the cells kNN graph: the selection kernels, block by block and end to end.

1. Blocks: a cell's queries against its rows (500 x 3,000 by default, d = 50, the queries
   among the rows), each query asking for m = k + 1 = 11 proposals as a 10-NN graph's
   search does, on one thread. Per kernel, the time per 1M query rows of the
   proposals: the float32 product alone (the floor), the NumPy selection of an earlier
   revision (``--old-rev``, read with ``git show``), today's NumPy selection, and faiss-cpu's
   ``faiss.knn`` through plugins/elmscale-faiss. Kernels alternate within each repeat and
   the median over repeats is printed; every kernel's proposals must give the same k nearest
   by exact float64 distance (then index) as a dense search of the block, or the run stops.
2. The cells graph on an N x 50 Gaussian mixture (benchmarks' ``_mixture.py``), on dask's
   synchronous scheduler with one BLAS thread: the cells and the shuffle into cell order
   once (common to all kernels), then ``CellSearch.search`` with the built-in and the faiss
   kernel, alternated; the graphs must be equal.

It prints the CPU model and the BLAS libraries (threadpoolctl) the timings ran on. Keep runs
short on a shared machine: ``--n 0`` (blocks only) takes well under a minute, ``--blocks 0``
the graph part alone.

    python -m benchmarks.scale.bench_select [--repeats 5] [--blocks 20] [--n 100000]
"""

import argparse
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from benchmarks._mixture import mixture_numpy
from elmscale.graph import CellSearch, Operands, propose

HERE = Path(__file__).resolve().parent
ROOT = next(p for p in (HERE, *HERE.parents) if (p / "pyproject.toml").exists())
#: the last revision with the selection by argpartition of values and then of columns
OLD_REV = "a588545"


def old_selection(rev):
    """elmscale/graph/_select.py as it was at ``rev``, as a module."""
    src = subprocess.run(
        ["git", "show", f"{rev}:elmscale/graph/_select.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType(f"select_{rev}")
    exec(compile(src, f"{rev}:elmscale/graph/_select.py", "exec"), module.__dict__)
    return module


def faiss_kernel():
    """plugins/elmscale-faiss's kernel (installed, or from the checkout), or None without
    faiss-cpu."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return None
    try:
        import elmscale_faiss
    except ImportError:
        sys.path.insert(0, str(ROOT / "plugins" / "elmscale-faiss" / "src"))
        import elmscale_faiss
    return elmscale_faiss.propose


def mixture(n, d, seed=0):
    return mixture_numpy(n, n_features=d, seed=seed)[0]


def blocks(n_blocks, nq, nr, d):
    """(Q, R, q_ids, r_ids) per block: ``nr`` consecutive mixture rows, the first ``nq`` the
    queries, centred on the block's mean as a search task centres its rows."""
    X = mixture(n_blocks * nr, d, seed=1)
    out = []
    for b in range(n_blocks):
        rows = X[b * nr : (b + 1) * nr]
        center = rows.mean(axis=0)
        ids = np.arange(b * nr, (b + 1) * nr)
        out.append((Operands(rows[:nq], center, np.float32), Operands(rows, center, np.float32)))
        out[-1] += (ids[:nq], ids)
    return out


def dense_knn(Q, R, q_ids, r_ids, k, cand=None):
    """The k nearest references per query by (exact float64 distance, id), among the
    candidate columns ``cand`` (all when None)."""
    if cand is None:
        cand = np.broadcast_to(np.arange(len(r_ids)), (len(q_ids), len(r_ids)))
    out = []
    for lo in range(0, len(q_ids), 50):  # bounds the (50, columns, d) differences
        cols = cand[lo : lo + 50]
        q = Q.rows[lo : lo + 50, None, :].astype(np.float64)
        d2 = ((q - R.rows[np.maximum(cols, 0)].astype(np.float64)) ** 2).sum(-1)
        ids = np.where(cols >= 0, r_ids[np.maximum(cols, 0)], -1)
        d2[(cols < 0) | (ids == q_ids[lo : lo + 50, None])] = np.inf
        order = np.lexsort((ids, d2), axis=1)[:, :k]
        out.append(np.take_along_axis(ids, order, axis=1))
    return np.concatenate(out)


def time_blocks(kernels, data, k, repeats):
    """Median seconds per 1M query rows of each kernel, alternating kernels per repeat:
    (CPU time of this thread, wall time). Every kernel runs on the calling thread, so on a
    busy machine the CPU time is the steadier figure."""
    times = {name: [] for name in kernels}
    rows = sum(len(b[2]) for b in data)
    for _ in range(repeats):
        for name, kernel in kernels.items():
            c0, t0 = time.thread_time(), time.perf_counter()
            for Q, R, q_ids, r_ids in data:
                kernel(Q, R, q_ids, r_ids, k + 1)
            times[name].append((time.thread_time() - c0, time.perf_counter() - t0))
    return {name: np.median(t, axis=0) / rows * 1e6 for name, t in times.items()}


def check_blocks(kernels, data, k):
    """Every kernel's proposals hold each query's k nearest of the whole block."""
    for Q, R, q_ids, r_ids in data[:2]:
        ref = dense_knn(Q, R, q_ids, r_ids, k)
        for name, kernel in kernels.items():
            if name == "gemm":
                continue
            cols, _ = kernel(Q, R, q_ids, r_ids, k + 1)
            got = dense_knn(Q, R, q_ids, r_ids, k, cand=cols)
            if not np.array_equal(got, ref):
                raise AssertionError(f"{name}: proposals miss neighbours")


def end_to_end(kernels, n, d, k, repeats):
    """Seconds of the cells graph on an n x d mixture: the cells and the shuffle of rows into
    cell order once (they do not depend on the kernel), then the search with each kernel,
    alternated (median CPU and wall seconds; the synchronous scheduler runs every task on
    this thread)."""
    import dask
    import dask.array as da

    X = da.from_array(mixture(n, d), chunks=(25_000, d))
    times = {name: [] for name in kernels}
    graphs = {}
    with dask.config.set(scheduler="sync"):
        t0 = time.perf_counter()
        part = CellSearch().partition(X, random_state=0)
        Xo = part.order.apply(X).persist()
        shared = time.perf_counter() - t0
        for _ in range(repeats):
            for name, kernel in kernels.items():
                c0, t0 = time.thread_time(), time.perf_counter()
                graphs[name] = dask.compute(*CellSearch(kernel=kernel).search(part, Xo, k))
                times[name].append((time.thread_time() - c0, time.perf_counter() - t0))
    first = next(iter(graphs.values()))
    for name, g in graphs.items():
        if not all(np.array_equal(a, b) for a, b in zip(g, first, strict=True)):
            raise AssertionError(f"{name}: a different graph")
    return shared, {name: np.median(t, axis=0) for name, t in times.items()}


def machine():
    """The CPU model (lscpu) and each loaded BLAS: library, version, kernel architecture."""
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = [ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if "Model name" in ln]
    blas = [
        f"{i['internal_api']} {i.get('version')} {i.get('architecture', '')} "
        f"({Path(i['filepath']).name})"
        for i in threadpool_info()
        if i["user_api"] == "blas"
    ]
    return (model or ["?"])[0], blas


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=20, help="blocks per kernel and repeat")
    parser.add_argument("--nq", type=int, default=500)
    parser.add_argument("--nr", type=int, default=3000)
    parser.add_argument("-d", type=int, default=50)
    parser.add_argument("-k", type=int, default=10, help="neighbours (k + 1 proposals)")
    parser.add_argument("--n", type=int, default=100_000, help="rows end to end (0: skip)")
    parser.add_argument("--old-rev", default=OLD_REV)
    args = parser.parse_args(argv)

    old = old_selection(args.old_rev)
    fk = faiss_kernel()
    kernels = {
        "gemm": lambda Q, R, q_ids, r_ids, m: np.matmul(Q.query, R.reference.T),
        f"numpy {args.old_rev}": lambda Q, R, q_ids, r_ids, m: old.proposals(
            Q.query, R.reference, q_ids, r_ids, m
        ),
        "numpy": propose,
    }
    if fk is not None:
        kernels["faiss"] = fk
        fk(*blocks(1, 2, 20, 3)[0], 2)  # configures faiss: its BLAS path, one thread
    model, blas = machine()
    print(f"CPU: {model}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    for line in blas:
        print(f"BLAS: {line}")
    with threadpool_limits(1):
        if args.blocks:
            data = blocks(args.blocks, args.nq, args.nr, args.d)
            check_blocks(kernels, data, args.k)
            per_m = time_blocks(kernels, data, args.k, args.repeats)
            print(
                f"\nproposals on {args.nq} x {args.nr} blocks, d = {args.d}, m = {args.k + 1}, "
                f"one thread: seconds per 1M query rows (median of {args.repeats}, alternated)"
                "\n  kernel              CPU    wall"
            )
            for name, (cpu, wall) in per_m.items():
                print(f"  {name:<16} {cpu:6.2f}  {wall:6.2f}")
        if args.n:
            shared, search = end_to_end(
                {"built-in": None, **({"faiss": fk} if fk else {})},
                args.n,
                args.d,
                args.k,
                args.repeats,
            )
            print(
                f"\nthe cells graph (CellSearch()) on a {args.n} x {args.d} mixture, k = {args.k}, "
                f"sync scheduler, one thread: cells + shuffle into cell order {shared:.2f} s "
                f"once, then the search, seconds (median of {args.repeats}, alternated; equal "
                "graphs)\n  kernel              CPU    wall"
            )
            for name, (cpu, wall) in search.items():
                print(f"  {name:<16} {cpu:6.2f}  {wall:6.2f}")


if __name__ == "__main__":
    main()
