"""Helpers shared by the benchmark scripts of every folder under ``benchmarks/``.

- :func:`load_dataset` reads ``<repo>/../shared/datasets/<name>.npz`` (or a scikit-learn
  bundled set) and raises :class:`DatasetMissing` when the file is absent, so a script can
  skip that dataset cleanly;
- clustering scores: :func:`clustering_accuracy` (best one-to-one label matching by the
  Hungarian method), :func:`nmi`, :func:`purity`;
- the environment of a timing: :func:`blas_info` (threadpoolctl), :func:`machine_info`,
  :func:`run_info`, :func:`load_average`, :func:`peak_memory_mb` (``resource.getrusage``);
- timing: :func:`timed` (a context manager) and :func:`median_of_repeats`;
- :func:`local_cluster`: the LocalCluster (processes x 1 thread) the scale benchmarks time on,
  :func:`cluster_arguments`, the command-line options of the mixture fits on it, and
  :func:`log_header`, what a run prints first;
- :func:`results_file`: a path in ``benchmarks/results/``, where raw results go (git ignores it).

Import it from any script with ``from benchmarks._common import ...``: the scripts are run from
the repository root as modules (``python -m benchmarks.scale.bench_graph``), which puts the root
on ``sys.path``.
"""

import contextlib
import datetime
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
#: the real datasets (``<name>.npz`` with arrays X, y): ``$ELMSCALE_DATASETS`` when set, else
#: ``../shared/datasets`` next to the repository
DATASETS_DIR = Path(os.environ.get("ELMSCALE_DATASETS") or REPO_ROOT.parent / "shared" / "datasets")
#: where the scripts write their raw results (ignored by git)
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SKLEARN_SETS = ("iris", "wine", "digits", "breast_cancer")


class DatasetMissing(LookupError):
    """The dataset file is not there: skip the dataset, do not fail the run."""


def load_dataset(name, datasets_dir=None, rows=None):
    """``(X, y)`` of a benchmark dataset: X as stored (float32 for the npz files, float64 for
    scikit-learn's), y int64 in 0..c-1.

    ``name`` is a scikit-learn bundled set (``iris``, ``wine``, ``digits``, ``breast_cancer``)
    or the stem of an ``.npz`` file in ``datasets_dir`` (default :data:`DATASETS_DIR`).
    ``rows="train"`` or ``"test"`` keeps the rows the file marks so (its ``is_test`` array:
    mnist, usps, shuttle). Raises :class:`DatasetMissing` when the file does not exist.
    """
    if name in SKLEARN_SETS:
        from sklearn import datasets

        X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
        return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)
    path = Path(datasets_dir or DATASETS_DIR) / f"{name}.npz"
    if not path.is_file():
        raise DatasetMissing(f"dataset {name!r} not found at {path}")
    with np.load(path) as data:
        X, y = data["X"], data["y"]
        if rows is not None:
            if "is_test" not in data:
                raise ValueError(f"{name} marks no test rows (is_test): mnist, usps or shuttle")
            keep = np.asarray(data["is_test"], dtype=bool) == (rows == "test")
            X, y = X[keep], y[keep]
    return X, np.asarray(y, dtype=np.int64)


# -- clustering scores ---------------------------------------------------------------------
def _contingency(y_true, y_pred):
    y_true = np.asarray(y_true).ravel()
    y_pred = np.asarray(y_pred).ravel()
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true and y_pred differ in length: {y_true.shape} vs {y_pred.shape}")
    _, t = np.unique(y_true, return_inverse=True)
    _, p = np.unique(y_pred, return_inverse=True)
    C = np.zeros((p.max() + 1, t.max() + 1), dtype=np.int64)
    np.add.at(C, (p, t), 1)
    return C  # rows: predicted clusters, columns: classes


def clustering_accuracy(y_true, y_pred):
    """Fraction of points correctly labelled under the best one-to-one map of clusters to
    classes (the Hungarian method, ``scipy.optimize.linear_sum_assignment``). Clusters left
    unmatched (more clusters than classes) count as errors."""
    return accuracy_from_contingency(_contingency(y_true, y_pred))


def accuracy_from_contingency(C):
    """:func:`clustering_accuracy` from the table of counts of (cluster, class) pairs; rows
    or columns of zeros (labels absent from the data) change nothing."""
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(C, maximize=True)
    return float(C[rows, cols].sum() / C.sum())


def dask_contingency(y_true, y_pred):
    """The (cluster, class) counts of two row-aligned dask arrays of non-negative integers
    (a dask Series is converted), counted on the workers: only the small table reaches the
    client, where gathering both label arrays would hold 16 bytes per row and np.unique's
    sorts several times that. Rows: ``0..max(y_pred)``, columns: ``0..max(y_true)``."""
    import dask
    import dask.array as da

    if not isinstance(y_true, da.Array):
        y_true = y_true.to_dask_array(lengths=True)
    y_true = y_true.astype(np.int64)
    y_pred = da.asarray(y_pred).astype(np.int64).rechunk({0: y_true.chunks[0]})
    lows, highs = dask.compute([y_true.min(), y_pred.min()], [y_true.max(), y_pred.max()])
    if min(lows) < 0:
        raise ValueError(f"labels must be non-negative integers, got a minimum of {min(lows)}")
    n_classes, n_clusters = int(highs[0]) + 1, int(highs[1]) + 1
    pairs = y_pred * n_classes + y_true
    counts = da.bincount(pairs, minlength=n_clusters * n_classes).compute()
    return counts.reshape(n_clusters, n_classes)


def nmi(y_true, y_pred):
    """Normalised mutual information (arithmetic normalisation, scikit-learn's default)."""
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(y_true, y_pred))


def purity(y_true, y_pred):
    """Fraction of points whose cluster's majority class is their class."""
    C = _contingency(y_true, y_pred)
    return float(C.max(axis=1).sum() / C.sum())


# -- environment ---------------------------------------------------------------------------
def blas_info():
    """The BLAS libraries loaded in this process, one short string, e.g.
    ``"openblas 0.3.30 Haswell x1"`` (threadpoolctl; import numpy/scipy first)."""
    import scipy.linalg  # noqa: F401  (load scipy's BLAS too)
    from threadpoolctl import threadpool_info

    parts = []
    for lib in threadpool_info():
        if lib.get("user_api") != "blas":
            continue
        parts.append(
            f"{lib.get('internal_api')} {lib.get('version')} "
            f"{lib.get('architecture')} x{lib.get('num_threads')}"
        )
    out = "; ".join(dict.fromkeys(parts))
    core = os.environ.get("OPENBLAS_CORETYPE")
    return out + (f" (OPENBLAS_CORETYPE={core})" if core else "")


def machine_info():
    """A dict describing the machine and the software versions."""
    import dask
    import scipy
    import sklearn

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        mem_gib = float("nan")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "dask": dask.__version__,
        "blas": blas_info(),
    }


def utc_now():
    """The current UTC time as ``YYYY-MM-DD HH:MM UTC``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def command_line():
    """How this script was invoked, for the results file: ``python -m benchmarks.<folder>.<script>
    ...`` for a script of this folder, else the script's path relative to the repository."""
    script = Path(sys.argv[0]).resolve()
    if script.is_relative_to(REPO_ROOT) and script.suffix == ".py":
        module = ".".join(script.relative_to(REPO_ROOT).with_suffix("").parts)
        return " ".join(["python -m", module] + sys.argv[1:])
    return "python " + " ".join([os.path.relpath(sys.argv[0], REPO_ROOT)] + sys.argv[1:])


def run_info(**extra):
    """What every results record starts with: the date, the command and the machine."""
    return {"date": utc_now(), "command": command_line(), "machine": machine_info(), **extra}


def parse_value(text):
    """A parameter's value from the command line: a Python literal (``0.01``, ``'exact'``,
    ``None``) or ``true`` / ``false`` / ``none``; a bare word such as ``exact`` is refused
    (``ValueError``), as it is most often a string missing its quotes."""
    import ast

    words = {"true": True, "false": False, "none": None}
    if text.lower() in words:
        return words[text.lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"{text!r} is not a Python literal (quote a string)") from exc


def parse_params(items):
    """Estimator parameters from ``--set`` options: ``["lam=0.01,scaling=minmax", "k=5"]``
    (or one such string) -> ``{"lam": 0.01, "scaling": "minmax", "k": 5}``. A graph backend
    with options is written ``graph=CellSearch(n_probes=10:rows_per_cell=1000)``."""
    out = {}
    for item in [items] if isinstance(items, str) else items:
        for kv in filter(None, item.split(",")):
            key, sep, value = kv.partition("=")
            if not sep:
                raise ValueError(f"expected KEY=VALUE, got {kv!r}")
            cell_search = value.startswith("CellSearch(")
            out[key.strip()] = _cell_search(value) if cell_search else parse_value(value)
    return out


def make_estimator(text):
    """The estimator a ``--fit`` option spells, e.g. ``"USELM(n_clusters=10, random_state=0)"``,
    evaluated with elmscale's public names (and nothing else) in scope."""
    import elmscale

    return eval(text, {name: getattr(elmscale, name) for name in elmscale.__all__})


def _cell_search(text):
    """``"CellSearch(n_probes=10:n_refine=1)"`` -> that :class:`elmscale.graph.CellSearch`."""
    from elmscale.graph import CellSearch

    pairs = (kv.split("=", 1) for kv in text[len("CellSearch(") : -1].split(":") if kv)
    return CellSearch(**{k: parse_value(v) for k, v in pairs})


@contextlib.contextmanager
def revision_checkout(rev):
    """A temporary git worktree of revision ``rev`` of this repository (its path), removed
    after: a fresh interpreter started there imports that revision's ``elmscale``."""
    import subprocess
    import tempfile

    git = ["git", "-C", str(REPO_ROOT), "worktree"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkout"
        subprocess.run([*git, "add", "--detach", str(path), rev], check=True, capture_output=True)
        try:
            yield path
        finally:
            subprocess.run([*git, "remove", "--force", str(path)], capture_output=True)


def results_file(name):
    """``benchmarks/results/<name>``, the folder created if needed: the default place of a
    script's raw results, which git ignores (RESULTS.md quotes what they showed)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    return RESULTS_DIR / name


def load_average():
    """The machine's 1, 5 and 15 minute load averages, rounded: a timing's company."""
    return [round(x, 2) for x in os.getloadavg()]


def peak_memory_mb(children=False):
    """Peak resident memory of this process (or of its waited-for children) in MiB."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    rss = resource.getrusage(who).ru_maxrss
    # Linux reports KiB, macOS bytes
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


# -- timing --------------------------------------------------------------------------------
class RSSSampler:
    """Samples this process's RSS every ``interval`` s in a thread (the client process, which
    also runs a LocalCluster's scheduler unless it has a process of its own): ``(seconds
    since start, MB)`` pairs, to tell which stage of a fit raised the client's memory."""

    def __init__(self, interval=0.2):
        import threading

        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self.samples = []
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(
                (time.perf_counter() - self._t0, self._proc.memory_info().rss / 2**20)
            )
            self._stop.wait(self._interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def peak_by_stage(self, start, stages):
        """Peak MB within each stage; ``stages`` are (name, seconds) in order from ``start``
        (seconds since the sampler started)."""
        out, lo = {}, start
        for name, dt in stages:
            hi = lo + dt
            inside = [mb for t, mb in self.samples if lo <= t <= hi]
            out[name] = max(inside) if inside else None
            lo = hi
        out["before_fit"] = max((mb for t, mb in self.samples if t < start), default=None)
        return out


class Timer:
    """Holds the wall ``seconds`` and the process's ``cpu_seconds`` measured by :func:`timed`."""

    seconds = cpu_seconds = float("nan")


@contextlib.contextmanager
def timed(log=None, label=""):
    """``with timed() as t: ...`` then ``t.seconds`` (wall clock, ``perf_counter``) and
    ``t.cpu_seconds`` (``process_time``: every thread of this process). ``log`` (e.g.
    ``print``) is called with ``"<label>: <s> s"`` at the end."""
    t = Timer()
    start, cpu = time.perf_counter(), time.process_time()
    try:
        yield t
    finally:
        t.seconds = time.perf_counter() - start
        t.cpu_seconds = time.process_time() - cpu
        if log is not None:
            log(f"{label}: {t.seconds:.2f} s")


def median_of_repeats(func, repeats=5, warmup=0):
    """Run ``func()`` ``warmup`` times untimed, then ``repeats`` times; return
    ``(median_seconds, all_seconds, last_result)``."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    result = None
    for _ in range(warmup):
        result = func()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, result


# -- kNN graphs ----------------------------------------------------------------------------
def recall_rows(N, n_sample=2000, seed=0):
    """The rows :func:`recall_at_k` samples, sorted."""
    return np.sort(np.random.RandomState(seed).choice(N, min(n_sample, N), replace=False))


def recall_at_k(X, idx, k, n_sample=2000, seed=0):
    """recall@k of ``idx`` (N x k, dask; or its :func:`recall_rows`, a dask or NumPy array of
    n_sample x k) on sampled rows against float64 brute force."""
    import dask

    rows = recall_rows(X.shape[0], n_sample, seed)
    Q = np.asarray(X[rows].compute(), dtype=np.float64)
    got = np.asarray((idx if idx.shape[0] == len(rows) else idx[rows]).compute())

    def best(block, start, step=2_000):
        # in slices of rows: a (n_sample x chunk) float64 block would not fit a worker, and
        # a worker of 1.5 GB holds a (2,000 x 2,000) slice beside its share of X
        found = []
        for lo in range(0, block.shape[0], step):
            B = np.asarray(block[lo : lo + step], dtype=np.float64)
            d2 = (Q**2).sum(1)[:, None] + (B**2).sum(1)[None] - 2 * Q @ B.T
            cols = np.arange(start + lo, start + lo + B.shape[0])
            d2[rows[:, None] == cols[None]] = np.inf
            kk = min(k, B.shape[0])
            part = np.argpartition(d2, kk - 1, axis=1)[:, :kk]
            found.append((cols[part], np.take_along_axis(d2, part, 1)))
        ids = np.concatenate([f[0] for f in found], 1)
        d2 = np.concatenate([f[1] for f in found], 1)
        kk = min(k, ids.shape[1])
        part = np.argpartition(d2, kk - 1, axis=1)[:, :kk]
        return np.take_along_axis(ids, part, 1), np.take_along_axis(d2, part, 1)

    starts = np.concatenate([[0], np.cumsum(X.chunks[0])])
    parts = dask.compute(
        *[
            dask.delayed(best)(b, int(s))
            for b, s in zip(X.to_delayed().ravel(), starts[:-1], strict=True)
        ]
    )
    cand = np.concatenate([p[0] for p in parts], 1)
    d2 = np.concatenate([p[1] for p in parts], 1)
    exact = np.take_along_axis(cand, np.argsort(d2, 1)[:, :k], 1)
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(got, exact, strict=True)]))


@contextlib.contextmanager
def local_cluster(n_workers, worker_gb, dashboard_address=":0", scheduler_process=False):
    """A Client on a fresh LocalCluster of ``n_workers`` worker processes x 1 thread with
    ``worker_gb`` GiB each (None: distributed's share of the machine's memory): the setting
    every scale benchmark times on. The scheduler runs in
    this process, or with ``scheduler_process`` in one of its own (distributed's
    ``SubprocessCluster``), so that this process's peak memory is the client's alone."""
    from distributed import Client, LocalCluster
    from distributed.deploy.subprocess import SubprocessCluster

    memory = "auto" if worker_gb is None else f"{worker_gb}GiB"
    if scheduler_process:
        cluster = SubprocessCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            dashboard_address=dashboard_address,
            worker_kwargs={"memory_limit": memory},
        )
    else:
        cluster = LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            dashboard_address=dashboard_address,
            memory_limit=memory,
        )
    with cluster, Client(cluster) as client:
        client.wait_for_workers(n_workers)
        yield client


def cluster_arguments(parser, n=200_000, worker_gb=3, chunk_rows=None, n_hidden=None):
    """Add the options of a fit of the mixture (``_mixture.py``) on :func:`local_cluster` to an
    argparse parser: ``--n`` (or ``--n-samples``), ``--d`` (or ``--features``),
    ``--clusters``, ``--chunk-rows``, ``--n-hidden``, ``--workers``, ``--worker-gb``,
    ``--seed``; the defaults are the caller's."""
    parser.add_argument("--n", "--n-samples", dest="n", type=int, default=n)
    parser.add_argument("--d", "--features", dest="d", type=int, default=50)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--chunk-rows", type=int, default=chunk_rows, help="rows per chunk")
    parser.add_argument("--n-hidden", type=int, default=n_hidden, help="default: the estimator's")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-gb", type=float, default=worker_gb)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def log_header(args):
    """Print the date, the machine, the BLAS and the arguments of a run, each on a ``#`` line."""
    print(
        f"# {utc_now()} {machine_info()}\n# BLAS: {blas_info()}\n# args: {vars(args)}", flush=True
    )
