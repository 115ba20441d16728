"""The ``elmscale`` command: ``elmscale plugins [--verbose]`` and ``elmscale info``."""

import argparse
import importlib.metadata
import json
import platform
import sys

from . import registry
from .exceptions import PluginLoadError, PluginLoadWarning

INFO_PACKAGES = ("elmscale", "numpy", "scipy", "scikit-learn", "dask", "distributed",
                 "pynndescent", "pluggy", "numba", "threadpoolctl")


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
        {"plugin": f.plugin, "entry_point": f.entry_point, "distribution": f.distribution,
         "error": f.error, **({"traceback": f.traceback} if verbose else {})}
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
            where = ", ".join(x for x in (f"entry point {f['entry_point']!r}"
                                          if f["entry_point"] else "", f["distribution"]) if x)
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
            {k: lib.get(k) for k in ("internal_api", "version", "threading_layer",
                                      "architecture", "num_threads", "filepath")}
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
        details = ", ".join(f"{k}={lib[k]}" for k in ("version", "threading_layer",
                                                       "architecture", "num_threads")
                            if lib.get(k) is not None)
        print(f"{lib['internal_api']:<15}{details}", file=out)
        print(f"{'':<15}{lib['filepath']}", file=out)


def main(argv=None, out=None):
    """Entry point of the ``elmscale`` command; returns the exit status."""
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="elmscale", description="Extreme Learning Machines on Dask: plugins and setup.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_plugins = sub.add_parser(
        "plugins", help="list plugins and what each registered",
        description="List the loaded plugins (built-ins and the entry points of the group "
                    "'elmscale'), what each registered, and the plugins that failed.")
    p_plugins.add_argument("-v", "--verbose", action="store_true",
                           help="show descriptions, and tracebacks of failed plugins")
    p_plugins.add_argument("--json", action="store_true", help="print JSON")
    p_info = sub.add_parser("info", help="versions of elmscale and its dependencies, BLAS",
                            description="Versions of elmscale and its dependencies, and the "
                                        "BLAS in use (via threadpoolctl).")
    p_info.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)

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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
