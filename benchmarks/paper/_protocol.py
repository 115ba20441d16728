"""What the papers' benchmarks share, so that each script keeps only what is its own (its table of
sets with the paper's figures, its grid, its fit):

- :func:`present`: the paper's sets whose data is here, a message for each one skipped;
- :func:`one_core`: dask's synchronous scheduler and BLAS pinned, for runs on a shared machine
  whose CPU seconds measure one core's work;
- :func:`timed_call`: one fit (or any call) with its wall and CPU seconds;
- :func:`mean_std`, :func:`markdown`: the cells and tables printed beside the paper's figures;
- :func:`datasets_option`, :func:`append_lines`, :func:`write_json`: the ``--datasets`` option
  and the result files.
"""

import contextlib
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks._common import DatasetMissing, load_dataset, timed


def present(names, load=None, log=None):
    """``(name, X, y)`` for each of ``names`` whose data is here; ``load(name)`` gives
    ``(X, y)`` (default: :func:`~benchmarks._common.load_dataset` in float64) or raises
    :class:`~benchmarks._common.DatasetMissing`, and a set skipped is said on ``log``."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    for name in names:
        try:
            X, y = (load or load_float64)(name)
        except DatasetMissing as exc:
            log(f"skip {name}: {exc}")
            continue
        yield name, X, y


def load_float64(name):
    X, y = load_dataset(name)
    return np.asarray(X, dtype=np.float64), y


@contextlib.contextmanager
def one_core(blas_threads=1):
    """dask's synchronous scheduler and every BLAS on ``blas_threads`` threads."""
    import dask
    import scipy.linalg  # noqa: F401  (load every BLAS before pinning them)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(blas_threads), dask.config.set(scheduler="sync"):
        yield


def timed_call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``: its result, wall seconds and CPU seconds (``model.fit``
    returns the fitted model)."""
    with timed() as t:
        result = fn(*args, **kwargs)
    return result, t.seconds, t.cpu_seconds


def mean_std(values, scale=1.0, digits=2, ddof=0):
    """``"mean +- std"`` of ``values`` times ``scale``; std 0 for a single value."""
    v = scale * np.asarray(values, dtype=np.float64)
    sd = v.std(ddof=ddof) if len(v) > ddof else 0.0
    return f"{v.mean():.{digits}f} +- {sd:.{digits}f}"


def markdown(header, rows):
    """A Markdown table of ``header`` (column titles) and ``rows`` (lists of cells)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def datasets_option(parser, default):
    """``--datasets``: names given comma-separated, space-separated, or both."""
    parser.add_argument(
        "--datasets",
        nargs="+",
        type=lambda text: [n for n in text.split(",") if n],
        default=[list(default)],
        help=f"default: {','.join(default)}",
    )


def dataset_names(args):
    """The flat list of ``--datasets`` (see :func:`datasets_option`)."""
    return [name for names in args.datasets for name in names]


def append_lines(path, records):
    """Append each record to ``path`` as one JSON line (the folder created if needed)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for record in records:
            f.write(json.dumps(record, default=float) + "\n")


def write_json(path, data):
    """``data`` to ``path`` as indented JSON."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, default=float))
