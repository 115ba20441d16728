"""The ``elmscale`` command: ``elmscale fit``, ``elmscale predict`` and ``elmscale transform``
(clustering, classifying or embedding a file from the shell), ``elmscale plugins
[--verbose]`` and ``elmscale info``.

Exit status: 0 on success, 2 for a usage error or bad input (unknown algorithm or
parameter, an invalid value, a file that cannot be read or written, a scheduler that cannot
be reached), 1 for any other failure. Errors are one line on stderr; ``--debug`` shows the
traceback instead."""

import argparse
import ast
import contextlib
import copy
import difflib
import importlib.metadata
import json
import os
import pickle
import platform
import sys
import time
import warnings

from . import registry
from .exceptions import PluginLoadError, PluginLoadWarning, UnknownPluginError
from .utils._malloc import tune_malloc

INFO_PACKAGES = (
    "elmscale",
    "numpy",
    "scipy",
    "scikit-learn",
    "dask",
    "distributed",
    "pynndescent",
    "pluggy",
    "numba",
    "threadpoolctl",
)


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def plugins_report(verbose=False):
    """What ``elmscale plugins`` prints, as a dict (also its ``--json`` output)."""
    reg = registry.get_registry()
    reg.load_plugins()
    plugins = reg.list_plugins()
    if verbose:
        for p in plugins:
            p["descriptions"] = {
                kind: {n: reg.entry(kind, n).description for n in names}
                for kind, names in p["registered"].items()
            }
    failures = [
        {
            "plugin": f.plugin,
            "entry_point": f.entry_point,
            "distribution": f.distribution,
            "error": f.error,
            **({"traceback": f.traceback} if verbose else {}),
        }
        for f in reg.failures
    ]
    return {"plugins": plugins, "failures": failures}


def _print_plugins(report, verbose, out):
    for p in report["plugins"]:
        source = p["distribution"] or "?"
        if p.get("entry_point"):
            source += f", entry point {p['entry_point']!r}"
        print(f"{p['name']}  ({source})", file=out)
        for kind, names in p["registered"].items():
            if verbose:
                for n in names:
                    desc = p["descriptions"][kind][n]
                    print(f"    {kind:<10} {n}{'  - ' + desc if desc else ''}", file=out)
            else:
                print(f"    {kind:<10} {', '.join(names)}", file=out)
        if not p["registered"]:
            print("    (registered nothing)", file=out)
    if report["failures"]:
        print(f"\n{len(report['failures'])} plugin problem(s):", file=out)
        for f in report["failures"]:
            where = ", ".join(
                x
                for x in (
                    f"entry point {f['entry_point']!r}" if f["entry_point"] else "",
                    f["distribution"],
                )
                if x
            )
            print(f"  {f['plugin']}{f' ({where})' if where else ''}: {f['error']}", file=out)
            if verbose:
                for line in f["traceback"].rstrip().splitlines():
                    print(f"      {line}", file=out)
        if not verbose:
            print("run `elmscale plugins --verbose` for the tracebacks", file=out)


def info_report():
    """What ``elmscale info`` prints, as a dict."""
    report = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {name: _version(name) for name in INFO_PACKAGES},
    }
    try:
        import numpy  # noqa: F401 - load the BLAS libraries so threadpoolctl sees them
        import scipy.linalg  # noqa: F401
        from threadpoolctl import threadpool_info

        report["blas"] = [
            {
                k: lib.get(k)
                for k in (
                    "internal_api",
                    "version",
                    "threading_layer",
                    "architecture",
                    "num_threads",
                    "filepath",
                )
            }
            for lib in threadpool_info()
        ]
    except ImportError:
        report["blas"] = None
    return report


def _print_info(report, out):
    print(f"{'python':<15}{report['python']}  ({report['platform']})", file=out)
    for name, version in report["versions"].items():
        print(f"{name:<15}{version or 'not installed'}", file=out)
    if report["blas"] is None:
        print(f"{'blas':<15}unknown (pip install threadpoolctl to see the BLAS in use)", file=out)
        return
    if not report["blas"]:
        print(f"{'blas':<15}no thread pools found", file=out)
    for lib in report["blas"]:
        details = ", ".join(
            f"{k}={lib[k]}"
            for k in ("version", "threading_layer", "architecture", "num_threads")
            if lib.get(k) is not None
        )
        print(f"{lib['internal_api']:<15}{details}", file=out)
        print(f"{'':<15}{lib['filepath']}", file=out)


class UsageError(ValueError):
    """A command line the user must change (exit status 2)."""


# -- elmscale fit / predict --------------------------------------------------------------------
def parse_value(text):
    """A parameter value from the command line: a Python literal (``3``, ``0.1``, ``None``,
    ``True``, ``[1, 2]``) when it parses as one, else the string itself (``exact``)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def make_estimator(algorithm, params):
    """The registered algorithm built with ``params`` (``["name=value", ...]``), each value
    checked by the estimator's own ``_parameter_constraints`` before any data is read."""
    from .utils._sklearn import validate_parameter_constraints

    try:
        cls = registry.get("algorithm", algorithm)
    except UnknownPluginError as exc:
        raise UsageError(str(exc)) from None
    estimator = cls()
    valid = sorted(estimator.get_params(deep=False))
    values = {}
    for item in params or ():
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--param expects NAME=VALUE, got {item!r}")
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(
                f"{algorithm} has no parameter {name!r}{hint}; valid: {', '.join(valid)}"
            )
        values[name] = parse_value(text)
    estimator.set_params(**values)
    constraints = getattr(estimator, "_parameter_constraints", None)
    if constraints:
        validate_parameter_constraints(
            {k: v for k, v in constraints.items() if k in values},
            estimator.get_params(deep=False),
            caller_name=cls.__name__,
        )
    return estimator


@contextlib.contextmanager
def _dask(args, err):
    """The client for the command: a LocalCluster of ``--workers`` processes, the scheduler
    at ``--scheduler``, or None for dask's local scheduler; closed on exit."""
    security = _security(args)
    if not (args.scheduler or args.workers):
        yield None
        return
    import logging

    from distributed import Client, LocalCluster

    cluster = None
    if args.workers:
        # the workers' own logs would repeat, as tracebacks, the errors reported here in one
        # line; the dashboard (plain HTTP, no login) stays on the loopback interface
        with _sigint_ignored():
            cluster = LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.WARNING if args.debug else logging.CRITICAL,
            )
        client = Client(cluster)
    else:
        try:
            client = Client(args.scheduler, timeout="15s", security=security)
        except (OSError, TimeoutError, ValueError) as exc:
            raise UsageError(
                f"cannot connect to the scheduler at {args.scheduler!r}: {exc}"
            ) from None
    # a computation given up (Ctrl-C, an error) leaves the client's pending gather to
    # asyncio, which logs it with a traceback, and closing the cluster in the middle of a
    # computation makes distributed log each interrupted task: the command's one line says it
    levels = {name: logging.getLogger(name).level for name in ("asyncio", "distributed", "tornado")}
    try:
        info = client.scheduler_info()
        print(
            f"dask: {client.scheduler.address} with {len(info.get('workers', {}))} worker(s); "
            f"dashboard {dashboard_link(client, info)}",
            file=err,
        )
        if not args.debug:
            logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        yield client
    except KeyboardInterrupt:
        if not args.debug:
            for name in ("distributed", "tornado"):
                logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        raise
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


#: the client's TLS files: option, as `dask scheduler` and `dask worker` name theirs
TLS_FILES = {"tls_ca_file": "--tls-ca-file", "tls_cert": "--tls-cert", "tls_key": "--tls-key"}


def _security(args):
    """The ``distributed.Security`` for ``--scheduler``: mutual TLS with the ``--tls-*``
    files (encryption required), or None to let dask's configuration decide
    (``distributed.comm.tls.*``). Options that cannot work are a usage error before
    connecting: TLS files without a ``tls://`` scheduler, a file that cannot be read, or a
    ``tls://`` scheduler with neither the files nor dask's TLS configuration."""
    files = {flag: getattr(args, name, None) for name, flag in TLS_FILES.items()}
    tls_address = str(args.scheduler or "").startswith("tls://")
    if not any(files.values()):
        if tls_address and not _tls_configured():
            raise UsageError(
                f"--scheduler {args.scheduler} needs the cluster's certificates: "
                "--tls-ca-file, --tls-cert and --tls-key (the files given to `dask "
                "scheduler`'s options of those names), or dask's distributed.comm.tls "
                "configuration"
            )
        return None
    if not tls_address:
        raise UsageError("--tls-ca-file, --tls-cert and --tls-key need --scheduler tls://...")
    for flag in ("--tls-ca-file", "--tls-cert"):
        if not files[flag]:
            raise UsageError(f"{flag} is needed with the other --tls-* options")
    for flag, path in files.items():
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise UsageError(f"{flag} {path!r}: cannot read it ({exc.strerror})") from None
    from distributed.security import Security

    return Security(
        tls_ca_file=files["--tls-ca-file"],
        tls_client_cert=files["--tls-cert"],
        tls_client_key=files["--tls-key"],
        require_encryption=True,
    )


def _tls_configured():
    """Whether dask's configuration gives the client TLS files or a security loader."""
    import dask

    get = dask.config.get
    return bool(
        (
            get("distributed.comm.tls.ca-file", None)
            and get("distributed.comm.tls.client.cert", None)
        )
        or get("distributed.client.security-loader", None)
    )


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while the local cluster starts its worker processes, which inherit
    that: Ctrl-C reaches every process of the shell's foreground job, and only this one
    should handle it (by closing the cluster) rather than each worker printing its own
    KeyboardInterrupt traceback. A no-op outside the main thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def dashboard_link(client, info):
    """The dashboard's address, or why there is none: the scheduler serves it only when
    bokeh is installed where the scheduler runs."""
    if "dashboard" not in info.get("services", {}):
        return "not served (the scheduler needs bokeh: pip install 'elmscale[cli]')"
    return client.dashboard_link


def saveable(model):
    """A shallow copy of ``model`` without its dask-array attributes (training labels or
    embedding held on a cluster): what predict and transform need is small and NumPy."""
    import dask

    out = copy.copy(model)
    for name, value in list(vars(out).items()):
        if dask.is_dask_collection(value):
            delattr(out, name)
    return out


def save_model(model, path, data=None):
    """Pickle ``saveable(model)`` to ``path``; load it only from a source you trust.

    With ``data`` (what the model was fitted on, from ``_cli_io.read_data``) the copy
    remembers its feature columns, so that predict and transform read the same ones from a
    file with more: ``feature_names_in_``, as scikit-learn records a DataFrame's columns, or
    ``feature_positions_in_`` for a file without column names (.npy, .zarr, a headerless
    .csv)."""
    out = saveable(model)
    if data is not None:
        import numpy as np

        if data.by_position:
            out.feature_positions_in_ = np.array([int(c) for c in data.names])
        else:
            out.feature_names_in_ = np.array(data.names, dtype=object)
    with open(path, "wb") as f:
        pickle.dump(out, f, protocol=pickle.HIGHEST_PROTOCOL)


def load_model(path):
    if not os.path.exists(path):
        raise UsageError(f"model file {path!r} does not exist")
    try:
        with open(path, "rb") as f:
            model = pickle.load(f)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means "not a model"
        raise UsageError(
            f"cannot load the model {path!r} (a file written by `elmscale fit --save`): {exc}"
        ) from None
    if not hasattr(model, "predict"):
        raise UsageError(f"{path!r} holds a {type(model).__name__}, not a fitted estimator")
    return model


def _columns(text):
    return None if text is None else [c.strip() for c in text.split(",") if c.strip()]


def _model_input(args, model):
    """The features of INPUT for a saved model: ``--columns``/``--drop-columns``, else the
    columns the model was fitted on (by name, or by position for files without names)."""
    from ._cli_io import read_data

    fitted = (
        getattr(model, "feature_names_in_", None),
        getattr(model, "feature_positions_in_", None),
    )
    data = read_data(
        args.input,
        _columns(args.columns),
        header=args.header,
        drop=_columns(args.drop_columns),
        fitted=fitted,
    )
    return data.X


@contextlib.contextmanager
def _selected_by_name():
    """The columns were chosen by the model's names: scikit-learn's warning that the (dask
    array) input has no names has nothing to tell."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="X does not have valid feature names")
        yield


def _is_classifier(estimator):
    from sklearn.base import is_classifier

    return is_classifier(estimator)


def _takes_unlabelled(estimator):
    """Whether ``estimator`` reads -1 targets as unlabelled rows (semi-supervised)."""
    from .algorithms._sselm import SSELM

    return isinstance(estimator, SSELM)


def _check_fit_args(args, estimator):
    """The target and the checkpoint of ``elmscale fit``, checked against the estimator
    before any data is read."""
    supervised = estimator.__sklearn_tags__().target_tags.required
    if supervised and args.target is None:
        empty = "; empty values mark unlabelled rows" if _takes_unlabelled(estimator) else ""
        raise UsageError(
            f"{args.algorithm} needs targets: name the target column with --target COLUMN{empty}"
        )
    if args.target is not None and not supervised:
        raise UsageError(f"{args.algorithm} is unsupervised: drop --target")
    if args.checkpoint and not getattr(estimator, "supports_checkpoint", False):
        raise UsageError(f"{args.algorithm} keeps no checkpoint: drop --checkpoint")
    if args.checkpoint and estimator.get_params(deep=False).get("random_state", 0) is None:
        raise UsageError(
            "--checkpoint needs a seed: add -p random_state=0 (any integer), so that a "
            "resumed fit draws the hidden layer of the stages it keeps"
        )


def _check_rows(estimator, n_rows, args):
    """Too few rows for the parameters, said of the data: the rows the parameters the user
    can see need (``n_clusters``, ``n_neighbors`` + 1, ``n_components`` + 1, where
    ``n_components="auto"`` stands for ``n_clusters``), before the estimator's own checks
    speak of values derived from them."""
    needs = []
    params = estimator.get_params(deep=False)
    for name, more in (("n_clusters", 0), ("n_neighbors", 1), ("n_components", 1)):
        value = params.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            needs.append((value + more, f"{name}={value}"))
    k = params.get("n_clusters")
    if params.get("n_components") == "auto" and isinstance(k, int) and not isinstance(k, bool):
        needs.append((k + 1, f"n_clusters={k} with n_components='auto'"))
    if needs and n_rows < max(needs)[0]:
        least, why = max(needs)
        raise UsageError(
            f"input {args.input!r} has {n_rows} row(s); {args.algorithm} needs at least "
            f"{least} for {why}"
        )


def _check_files(args, **outputs):
    """Input and outputs of a command, checked before anything heavy is imported, a cluster
    starts or data is read (``save``: any extension)."""
    from ._cli_io import OUTPUT_KINDS, PLOT_KINDS, check_input, check_output

    check_input(args.input)
    for option, path in outputs.items():
        if path:
            kinds = {"plot": PLOT_KINDS, "save": None}.get(option, OUTPUT_KINDS)
            check_output(path, f"--{option}", kinds)


def _run_fit(args, out, err):
    from ._cli_io import read_data, write_array

    _check_files(args, labels=args.labels, embedding=args.embedding, plot=args.plot, save=args.save)
    target = _target(args.target, args.input)
    estimator = make_estimator(args.algorithm, args.param)
    _check_fit_args(args, estimator)
    # connect first: counting the rows of a table (its chunk sizes) runs on the cluster
    with _dask(args, err) as client:
        data = read_data(
            args.input,
            _columns(args.columns),
            target=target,
            unlabelled=_takes_unlabelled(estimator),
            header=args.header,
            drop=_columns(args.drop_columns),
            classes=_is_classifier(estimator),
        )
        X = data.X
        _check_rows(estimator, X.shape[0], args)
        print(
            f"{args.algorithm}: {X.shape[0]} rows x {X.shape[1]} columns in "
            f"{X.numblocks[0]} chunk(s) from {args.input}{_header_note(data)}",
            file=err,
        )
        t0 = time.perf_counter()
        with _progress(args, client, err), _read_once(data, client, err) as (X, y):
            kw = {} if args.checkpoint is None else {"checkpoint": args.checkpoint}
            estimator.fit(X, **kw) if y is None else estimator.fit(X, y, **kw)
            print(f"fitted in {time.perf_counter() - t0:.1f} s", file=err)
            if args.labels:
                write_array(_fitted_labels(estimator, X, args), args.labels, "label")
                print(f"labels: {args.labels}", file=out)
            if args.embedding:
                write_array(_embedding(estimator, X, args), args.embedding, _prefix(estimator))
                print(f"embedding: {args.embedding}", file=out)
            if args.plot:
                _plot(estimator, X, args.plot)
                print(f"plot: {args.plot}", file=out)
        if args.save:
            save_model(estimator, args.save, data)
            print(f"model: {args.save}", file=out)
    return 0


#: the share of this machine's available memory that the local scheduler may hold the parsed
#: input in; a larger input is copied once to a temporary Zarr folder instead
READ_ONCE_MEMORY_SHARE = 0.25


@contextlib.contextmanager
def _read_once(data, client, err):
    """The input (X and the target, if any) as the fit's passes read it: parsed from the
    file once. A fit reads X in several passes (scaling, the graph, the Gram pass,
    k-means); a lazily read .csv or Parquet file would be parsed again by each. On a
    cluster the fit keeps X in the workers' memory itself
    (:func:`elmscale.utils._dask.in_worker_memory`); with dask's local scheduler the parsed
    rows are kept in this process's memory where they take at most
    :data:`READ_ONCE_MEMORY_SHARE` of the available memory, else written once to a
    temporary Zarr folder, deleted after the fit. The progress lines say which."""
    import dask

    X, y = data.X, data.y
    if client is not None:
        print("input: kept in the workers' memory after one read", file=err)
        yield X, y
        return
    import psutil

    available = psutil.virtual_memory().available
    if X.nbytes <= READ_ONCE_MEMORY_SHARE * available:
        print(f"input: read once into this process's memory ({_mib(X.nbytes)})", file=err)
        yield dask.persist(X, y) if y is not None else (X.persist(), None)
        return
    import tempfile

    import dask.array as da

    with tempfile.TemporaryDirectory(prefix="elmscale-input-") as folder:
        print(f"input: copied once to {folder} ({_mib(X.nbytes)}, Zarr)", file=err)
        parts = {"X": X} if y is None else {"X": X, "y": y}
        paths = {name: os.path.join(folder, f"{name}.zarr") for name in parts}
        # one computation writes both, so that the file is parsed once for them
        dask.compute(*(da.to_zarr(a, paths[name], compute=False) for name, a in parts.items()))
        copies = {name: da.from_zarr(path) for name, path in paths.items()}
        yield copies["X"], copies.get("y")


def _mib(n_bytes):
    return f"{n_bytes / 2**20:,.0f} MiB"


def _header_note(data):
    """How the first line of a .csv was read, for the line that counts the rows."""
    if data.header is False:
        return " (no header line: columns named by position 0, 1, ...)"
    if data.header and data.names and all(n.isdigit() for n in data.names):
        # pandas' names of an array's columns; a first data row 0, 1, 2, ... reads the same
        return " (first line 0, 1, ... read as column names; --no-header if it is data)"
    return ""


def _target(target, path):
    """``--target`` as read_data takes it: a name, or a position for .npy/.zarr input."""
    if target is None or not str(path).rstrip("/").lower().endswith((".npy", ".zarr")):
        return target
    try:
        return int(target)
    except ValueError:
        raise UsageError(
            f"--target for .npy/.zarr input is a column position (an integer), got {target!r}"
        ) from None


def _fitted_labels(estimator, X, args):
    """The clusters of the training rows, or the predictions of a supervised model on them
    (for SS-ELM, the labels it gives the unlabelled rows)."""
    if hasattr(estimator, "labels_"):
        return estimator.labels_
    if args.target is not None:
        return predictions(estimator, X)
    raise UsageError(
        f"{args.algorithm} with these parameters gives no labels (e.g. n_clusters=None); "
        "drop --labels"
    )


def predictions(model, X):
    """``model.predict(X)``; class names held as Python objects become fixed-width strings,
    which every output format stores."""
    import numpy as np

    labels = model.predict(X)
    classes = getattr(model, "classes_", None)
    if labels.dtype == object and classes is not None:
        labels = labels.astype(np.asarray(classes).astype(str).dtype)
    return labels


def _embedding(estimator, X, args):
    if hasattr(estimator, "embedding_"):
        return estimator.embedding_
    if hasattr(estimator, "transform"):
        return estimator.transform(X)
    raise UsageError(f"{args.algorithm} has no embedding; drop --embedding")


def _prefix(model):
    return type(model).__name__.lower()


def _run_predict(args, out, err):
    from ._cli_io import write_array

    _check_files(args, labels=args.labels)
    model = load_model(args.model)
    with _dask(args, err) as client:
        X = _model_input(args, model)
        with _progress(args, client, err), _selected_by_name():
            write_array(predictions(model, X), args.labels, "label")
        print(f"labels: {args.labels}", file=out)
    return 0


def _run_transform(args, out, err):
    from ._cli_io import write_array

    _check_files(args, embedding=args.embedding)
    model = load_model(args.model)
    if not hasattr(model, "transform"):
        raise UsageError(f"{args.model!r} holds a {type(model).__name__}, which has no embedding")
    with _dask(args, err) as client:
        X = _model_input(args, model)
        with _progress(args, client, err), _selected_by_name():
            write_array(model.transform(X), args.embedding, _prefix(model))
        print(f"embedding: {args.embedding}", file=out)
    return 0


def _plot(estimator, X, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import plot

    fig, ax = plt.subplots(figsize=(5, 4.5))
    # the fit's rows: drawn from its embedding_ and labels_, not embedded again
    plot.embedding(estimator, None if hasattr(estimator, "embedding_") else X, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class _progress:
    """The log switch and the per-stage task display for the duration of a command."""

    def __init__(self, args, client, err):
        self.args, self.client, self.err = args, client, err

    def __enter__(self):
        from ._progress import StageProgress, log_to_stderr

        self.handler = None
        self.display = None
        if self.args.quiet:
            return self
        self.handler = log_to_stderr("DEBUG" if self.args.verbose else "INFO", self.err)
        self.display = StageProgress(self.client, stream=self.err).__enter__()
        return self

    def __exit__(self, *exc):
        import logging

        if self.display is not None:
            self.display.__exit__(*exc)
        if self.handler is not None:
            logging.getLogger("elmscale").removeHandler(self.handler)
        return False


def _add_fit_parser(sub, algorithm_help=None):
    """The ``fit`` subcommand; ``algorithm_help`` (the parameters of the algorithm named on
    the command line) closes its ``--help``."""
    from ._cli_io import INPUT_KINDS, OUTPUT_KINDS

    kinds_in, kinds_out = ", ".join(INPUT_KINDS), ", ".join(OUTPUT_KINDS)
    example = (
        "example: elmscale fit us-elm data.parquet --param n_clusters=10 "
        "--labels labels.parquet --save model.pkl --plot embedding.png"
    )
    p = sub.add_parser(
        "fit",
        help="fit an algorithm to a file; write labels, embedding, model, plot",
        description=f"Fit a registered algorithm (`elmscale plugins`) to INPUT ({kinds_in}; "
        "a .parquet folder too), read lazily with dask, and write the outputs by "
        f"extension ({kinds_out}) with the rows in INPUT's order.",
        epilog=algorithm_help
        or f"{example}\n\n`elmscale fit ALGORITHM --help` lists the algorithm's parameters.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("algorithm", help="registered algorithm name, e.g. us-elm")
    p.add_argument("input", help="data file or folder")
    p.add_argument(
        "-p",
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="estimator parameter; several may follow one -p, e.g. -p n_clusters=10 graph=exact",
    )
    p.add_argument(
        "--target",
        metavar="COLUMN",
        help="the target column of a supervised algorithm (a name, or a position for "
        ".npy/.zarr), left out of the features; for ss-elm an empty value marks an "
        "unlabelled row",
    )
    _add_io_options(p)
    p.add_argument(
        "--labels",
        metavar="OUT",
        help="write the cluster labels (a supervised algorithm: its predictions)",
    )
    p.add_argument("--embedding", metavar="OUT", help="write the embedding")
    p.add_argument("--save", metavar="MODEL", help="save the fitted model (a pickle)")
    p.add_argument("--plot", metavar="PNG", help="draw the embedding (needs matplotlib)")
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="keep each costly stage of the fit in DIR (a folder or fsspec URL the workers "
        "share); run the same command again to resume a fit that was stopped",
    )
    return p


def _add_model_parser(sub, name, output, help, description):
    """``predict`` and ``transform``: a saved model applied to INPUT, one output."""
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("model", help="model file written by `elmscale fit --save`")
    p.add_argument("input", help="data file or folder")
    p.add_argument(
        f"--{output}", metavar="OUT", required=True, help=f"write the {output} (by extension)"
    )
    _add_io_options(p)
    return p


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of workers, got {text!r}")
    return value


def _add_io_options(p):
    pick = p.add_mutually_exclusive_group()
    pick.add_argument(
        "--columns",
        help="comma-separated feature columns (names for .csv and .parquet, positions for "
        ".npy, .zarr and a .csv without a header line); default: all but the target (predict "
        "and transform: the columns the model was fitted on)",
    )
    pick.add_argument(
        "--drop-columns",
        metavar="COLUMNS",
        help="comma-separated columns left out of the features (names or positions likewise)",
    )
    header = p.add_mutually_exclusive_group()
    header.add_argument(
        "--header",
        dest="header",
        action="store_const",
        const=True,
        default=None,
        help="the first line of the .csv is a header (default: decided from the line: a "
        "line of numbers is data, except 0,1,2,... as pandas writes)",
    )
    header.add_argument(
        "--no-header",
        dest="header",
        action="store_const",
        const=False,
        help="the first line of the .csv is data; columns are named by position 0, 1, ...",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on the dask scheduler at ADDRESS, e.g. tcp://host:8786",
    )
    where.add_argument(
        "--workers",
        type=_positive_int,
        metavar="N",
        help="start a local cluster of N worker processes (N >= 1)",
    )
    tls = p.add_argument_group(
        "TLS",
        "mutual TLS with a scheduler at tls://...: the certificates the cluster was started "
        "with (deploy/tls/make-certs.sh makes them); without these options dask's "
        "distributed.comm.tls configuration applies",
    )
    tls.add_argument("--tls-ca-file", metavar="PEM", help="the cluster's certificate authority")
    tls.add_argument("--tls-cert", metavar="PEM", help="this client's certificate")
    tls.add_argument("--tls-key", metavar="PEM", help="its private key (default: in --tls-cert)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or log lines")
    p.add_argument("-v", "--verbose", action="store_true", help="debug log lines")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")


def split_params(argv):
    """``argv`` with every value after ``-p``/``--param`` given its own flag: the values
    that follow one flag are the first token and then those of the form NAME=VALUE, so
    ``-p n_clusters=3 us-elm data.csv`` leaves the positionals to themselves."""
    out, taking = [], False
    for token in argv:
        if token in ("-p", "--param"):
            taking = "first"
            continue
        if taking == "first" or (taking and _is_assignment(token)):
            out += ["--param", token]
            taking = True
            continue
        taking = False
        out.append(token)
    if taking == "first":
        out.append("--param")  # argparse reports the missing value
    return out


def _is_assignment(token):
    name, sep, _ = token.partition("=")
    return bool(sep) and name.isidentifier()


def _algorithm_help(argv):
    """The parameter listing of the algorithm in ``elmscale fit ALGORITHM --help``, or None."""
    if not argv or argv[0] != "fit" or not {"-h", "--help"} & set(argv):
        return None
    from ._cli_help import algorithm_help

    names = set(registry.available("algorithm"))
    name = next((t for t in argv[1:] if t in names), None)
    return None if name is None else algorithm_help(name, registry.get("algorithm", name))


def main(argv=None, out=None, err=None):
    """Entry point of the ``elmscale`` command; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = argparse.ArgumentParser(
        prog="elmscale",
        description="Extreme Learning Machines on Dask: cluster a file, "
        "list plugins, show the setup.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    argv = split_params(sys.argv[1:] if argv is None else [str(a) for a in argv])
    _add_fit_parser(sub, _algorithm_help(argv))
    _add_model_parser(
        sub,
        "predict",
        "labels",
        help="label a file with a model saved by `elmscale fit --save`",
        description="Label INPUT with a saved model; rows keep INPUT's order.",
    )
    _add_model_parser(
        sub,
        "transform",
        "embedding",
        help="embed a file with a model saved by `elmscale fit --save`",
        description="Write the embedding of INPUT by a saved model (new data too); rows "
        "keep INPUT's order.",
    )
    p_plugins = sub.add_parser(
        "plugins",
        help="list plugins and what each registered",
        description="List the loaded plugins (built-ins and the entry points of the group "
        "'elmscale'), what each registered, and the plugins that failed.",
    )
    p_plugins.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show descriptions, and tracebacks of failed plugins",
    )
    p_plugins.add_argument("--json", action="store_true", help="print JSON")
    p_info = sub.add_parser(
        "info",
        help="versions of elmscale and its dependencies, BLAS",
        description="Versions of elmscale and its dependencies, and the "
        "BLAS in use (via threadpoolctl).",
    )
    p_info.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)

    if args.command in RUNNERS:
        return _run_command(args, out, err)
    if args.command == "plugins":
        import warnings

        try:
            with warnings.catch_warnings():
                # the failures are part of the listing below; do not print them twice
                warnings.simplefilter("ignore", category=PluginLoadWarning)
                report = plugins_report(verbose=args.verbose)
        except PluginLoadError as exc:  # ELMSCALE_STRICT_PLUGINS=1
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(report, indent=2), file=out)
        else:
            _print_plugins(report, args.verbose, out)
        return 1 if report["failures"] else 0  # a broken plugin fails CI
    report = info_report()
    if args.json:
        print(json.dumps(report, indent=2), file=out)
    else:
        _print_info(report, out)
    return 0


class _Discard:
    def write(self, text):
        return len(text)

    def flush(self):
        pass


def _run_command(args, out, err):
    """Run fit, predict or transform; user errors become one line on stderr and exit status
    2."""
    from ._cli_io import InputError, missing_dependency, one_line

    run = RUNNERS[args.command]
    # progress and notes go to stderr, which --quiet silences; errors always reach it
    info = _Discard() if args.quiet else err
    if args.debug:
        return run(args, out, info)

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"warning: {message}", file=err)

    with warnings.catch_warnings():
        warnings.showwarning = show
        try:
            return run(args, out, info)
        except (UsageError, InputError) as exc:
            print(f"error: {exc}", file=err)
            return 2
        except (ValueError, TypeError) as exc:  # the estimators' messages on bad input
            print(f"error: {one_line(exc)}", file=err)
            return 2
        except KeyboardInterrupt:
            print("interrupted", file=err)
            return 130
        except Exception as exc:  # noqa: BLE001 - one line; --debug shows the traceback
            missing = missing_dependency(exc) if isinstance(exc, ImportError) else None
            if missing is not None:  # an optional module that a step needs
                print(f"error: {missing}", file=err)
                return 2
            name = type(exc).__name__
            print(f"error: {name}: {one_line(exc)} (--debug shows the traceback)", file=err)
            return 1


#: The commands that read a file, by name.
RUNNERS = {"fit": _run_fit, "predict": _run_predict, "transform": _run_transform}


def run():
    """The ``elmscale`` console script: :func:`main` in a process whose allocator reuses
    freed blocks (:func:`elmscale.utils.tune_malloc`, set before any thread starts)."""
    tune_malloc()
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
