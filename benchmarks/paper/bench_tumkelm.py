"""TUMK-ELM benchmarks: the paper's Tables 2-5 protocol over seeds and seconds per fit.

Tables protocol (Xiang et al. 2018): the 15 base kernels (linear; polynomial of degree 2, 3, 4;
Gaussian of width 1e-10 ... 1e10), C = 1; ACC (Hungarian matching), NMI, purity and seconds on
iris and wine (scikit-learn), Frogs, Shuttle (its 14,500-row test part, ``is_test``) and
Segment (../shared/datasets), for both feature forms and both assignments.

    python -m benchmarks.paper.bench_tumkelm repeats --datasets iris,wine --seeds 10   # mean +- std
    python -m benchmarks.paper.bench_tumkelm timing --json benchmarks/results/tumkelm_timing.jsonl

BLAS is pinned to one thread per dask thread (set before NumPy is imported), except for
``timing``, which measures what a user gets: BLAS at its default threads, as TUMKELM finds it
(it pins BLAS itself while dask's threads compute).
"""

import os
import sys

if sys.argv[1:2] != ["timing"]:
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks._common import (  # noqa: E402
    blas_info,
    clustering_accuracy,
    load_dataset,
    median_of_repeats,
    nmi,
    peak_memory_mb,
    purity,
)
from benchmarks.paper import _protocol as protocol  # noqa: E402

PAPER_ACC = {"iris": 0.8933, "wine": 0.9719, "frogs": 0.6687, "shuttle": 0.3410, "segment": 0.5571}
PAPER_SECONDS = {"frogs": 1.55, "shuttle": 6.79}
SETS = ("iris", "wine", "segment", "frogs", "shuttle")

# Frogs (Anuran Calls, UCI) is labelled at three levels; the .npz holds the species
# (10, in alphabetical order). Genus (8) and family (4) follow from the species: the paper
# does not say which level (or how many clusters) its Frogs row uses.
FROGS_LEVELS = {
    "genus": np.array([0, 0, 1, 2, 3, 3, 4, 5, 6, 7]),  # Adenomera x2, Ameerega,
    # Dendropsophus (HylaMinuta), Hypsiboas x2, Leptodactylus, Osteocephalus, Rhinella, Scinax
    "family": np.array([0, 0, 1, 2, 2, 2, 0, 2, 3, 2]),  # Leptodactylidae, Dendrobatidae,
    # Hylidae, Bufonidae
}


def load(name):
    """(X float64, y): ``frogs_genus`` and ``frogs_family`` are Frogs with the genus or family
    of each species as the label; Shuttle is its test part, as in the paper."""
    level = name.removeprefix("frogs_")
    if level in FROGS_LEVELS:
        X, y = load("frogs")
        return X, FROGS_LEVELS[level][y]
    X, y = load_dataset(name, rows="test" if name == "shuttle" else None)
    return np.asarray(X, dtype=np.float64), y


def run_one(X, y, **params):
    """One fit of ``TUMKELM(c, **params)``: its scores, seconds and what it selected."""
    from elmscale import TUMKELM

    model, seconds, cpu = protocol.timed_call(TUMKELM(len(np.unique(y)), **params).fit, X)
    labels = np.asarray(model.labels_)
    return {
        "acc": clustering_accuracy(y, labels),
        "nmi": nmi(y, labels),
        "purity": purity(y, labels),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "n_iter": model.n_iter_,
        "n_computed": model.n_computed_,
        "selected_iter": getattr(model, "selected_iter_", None),
        "mode": model.mode_,
        "loss_history": model.history_.tolist(),
        "weights": np.round(model.kernel_weights_, 4).tolist(),
        "factors": [f"{f.kind}:{f.n_components}" for f in (model.factors_ or [])],
    }


SUMMED = ("acc", "nmi", "purity", "cpu_seconds", "seconds", "n_iter", "loadavg")


def repeats(args):
    """Every configuration over ``--seeds`` seeds (random_state = 0 .. seeds-1): mean +- std
    of ACC, NMI, purity, CPU seconds; a markdown table at the end."""
    out, rows = [], []
    for name, X, y in protocol.present(protocol.dataset_names(args), load):
        configs = itertools.product(
            args.modes.split(","),
            args.scalings.split(","),
            args.forms.split(","),
            args.assignments.split(","),
        )
        for mode, scaling, form, assignment in configs:
            if mode == "exact" and X.shape[0] > args.exact_max:
                print(f"skip exact on {name}: N = {X.shape[0]} > --exact-max", file=sys.stderr)
                continue
            config = dict(mode=mode, scaling=scaling, form=form, assignment=assignment)
            runs = [repeat_one(name, X, y, seed, config, args) for seed in range(args.seeds)]
            out += runs
            row = dict(dataset=name, n=X.shape[0], **config, seeds=args.seeds)
            for key in SUMMED:
                v = np.array([r[key] for r in runs], dtype=np.float64)
                row[key] = float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0
            print(json.dumps(row), flush=True)
            rows.append(row)
    columns = ["dataset", "N", "mode", "scaling", "form", "assignment", "ACC", "NMI", "purity"]
    columns += ["cpu s", "wall s", "iters", "load", "paper ACC"]
    print("\n" + protocol.markdown(columns, [repeats_row(r) for r in rows]))
    return out


def repeat_one(name, X, y, seed, config, args):
    """One seed of one configuration of :func:`repeats`: its record."""
    r = run_one(
        X,
        y,
        mode=config["mode"],
        feature_form=config["form"],
        assignment=config["assignment"],
        C=1.0,
        n_landmarks=args.landmarks,
        max_iter=args.max_iter,
        scaling=None if config["scaling"] == "none" else config["scaling"],
        select=args.select,
        random_state=seed,
    )
    r.update(dataset=name, n=X.shape[0], seed=seed, **config, select=args.select)
    r.update(landmarks=args.landmarks, max_iter=args.max_iter, protocol="repeats")
    r["loadavg"] = os.getloadavg()[0]
    brief = ("dataset", "mode", "form", "assignment", "seed", "acc", "cpu_seconds", "n_iter")
    print(json.dumps({key: r[key] for key in brief}), file=sys.stderr, flush=True)
    return r


def repeats_row(r):
    scores = [f"{r[k][0]:.4f} +- {r[k][1]:.4f}" for k in ("acc", "nmi", "purity")]
    return [
        *(r[k] for k in ("dataset", "n", "mode", "scaling", "form", "assignment")),
        *scores,
        f"{r['cpu_seconds'][0]:.2f}",
        f"{r['seconds'][0]:.2f}",
        f"{r['n_iter'][0]:.1f}",
        f"{r['loadavg'][0]:.1f}",
        f"{PAPER_ACC.get(r['dataset'], float('nan')):.4f}",
    ]


def mixture(n, d=10, k=10, seed=0):
    """A labelled Gaussian mixture: k centres drawn N(0, 3^2 I) in d dimensions, unit
    within-cluster covariance, equal weights (float64)."""
    rng = np.random.RandomState(seed)
    centres = rng.normal(scale=3.0, size=(k, d))
    y = rng.randint(0, k, n)
    return centres[y] + rng.normal(size=(n, d)), y


def gram_floor(n, m, repeats):
    """Median seconds of one float64 ``Phi.T @ Phi`` for an n x m ``Phi`` (BLAS at its default
    threads): the one product every scalable fit with m factor columns must do. Timed in the
    same run as the fits, it makes their ratio comparable across hosts and loads."""
    Phi = np.random.default_rng(0).standard_normal((n, m))
    return median_of_repeats(lambda: Phi.T @ Phi, repeats=max(repeats, 3), warmup=1)[0]


def timing(args):
    """Seconds per fit for an idle machine: the sets at every default (NumPy input,
    ``mode="auto"``: exact up to 1,000 points, scalable above), median of ``--repeats`` fits
    after one warm-up fit, against a same-size ``Phi^T Phi`` when scalable; then the scalable
    mode on the ``--scale-n``-point mixture (dask input, 25,000-row chunks), one fit per
    assignment. Prints a markdown table; ``--json`` appends one line per fit."""
    import dask.array as da

    from elmscale import TUMKELM

    out, rows = [], []
    for name, X, y in protocol.present(protocol.dataset_names(args), load):
        TUMKELM(len(np.unique(y)), mode=args.mode, random_state=0).fit(X[:1000])  # warm-up
        runs = [
            _stamped(
                run_one(X, y, mode=args.mode, random_state=0), dataset=name, n=len(X), repeat=rep
            )
            for rep in range(args.repeats)
        ]
        if runs[0]["mode"] == "scalable":
            M = sum(int(f.split(":")[1]) for f in runs[0]["factors"])
            floor = gram_floor(X.shape[0], M, args.repeats)
            for r in runs:
                r.update(n_columns=M, gram_floor_seconds=floor)
        out += runs
        rows.append((name, X.shape[0], runs[0]["mode"], "argmax", runs))
    if args.scale_n:
        X, y = mixture(args.scale_n, seed=0)
        Xd = da.from_array(X, chunks=(25_000, X.shape[1]))
        for assignment in ("argmax", "kmeans"):
            r = run_one(Xd, y, mode="scalable", assignment=assignment, random_state=0)
            r["peak_rss_gb"] = peak_memory_mb() / 1024
            out.append(_stamped(r, dataset="mixture", n=args.scale_n, assignment=assignment))
            rows.append(("mixture (10-d, 10 clusters)", args.scale_n, "scalable", assignment, [r]))
    columns = ["dataset", "N", "mode", "assignment", "fits", "wall s (median)", "cpu s (median)"]
    columns += ["iterations (computed)", "ACC", "load (1 min)", "paper s", "M"]
    columns += ["Phi^T Phi floor s", "fit / floor"]
    print("\n" + protocol.markdown(columns, [timing_row(*row) for row in rows]))
    return out


def _stamped(r, **fields):
    """A timing record with its fields and the load average, printed."""
    r.update(fields, protocol="timing", loadavg=os.getloadavg())
    print(json.dumps({k: v for k, v in r.items() if k != "loss_history"}), flush=True)
    return r


def timing_row(name, n, mode, assignment, runs):
    wall = statistics.median(r["seconds"] for r in runs)
    first = runs[0]
    floor = ["-", "-", "-"]
    if "gram_floor_seconds" in first:
        f = first["gram_floor_seconds"]
        floor = [first["n_columns"], f"{f:.3f}", f"{wall / f:.1f}"]
    return [
        name,
        f"{n:,}",
        mode,
        assignment,
        len(runs),
        f"{wall:.3f}",
        f"{statistics.median(r['cpu_seconds'] for r in runs):.3f}",
        f"{first['n_iter']} ({first['n_computed']})",
        f"{first['acc']:.4f}",
        f"{runs[-1]['loadavg'][0]:.2f}",
        PAPER_SECONDS.get(name, "-"),
        *floor,
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("repeats", help="Tables protocol over several seeds, mean +- std")
    r.add_argument("--modes", default="exact")
    r.add_argument("--exact-max", type=int, default=10_000)
    r.add_argument("--forms", default="distance,value")
    r.add_argument("--assignments", default="argmax,kmeans")
    r.add_argument("--scalings", default="minmax", help="comma list of minmax, standard, none")
    r.add_argument("--seeds", type=int, default=10)
    r.add_argument("--select", default="last", choices=["last", "lowest_loss"])
    g = sub.add_parser("timing", help="seconds per fit (idle machine): Frogs, Shuttle, 100k")
    g.add_argument("--mode", default="auto", choices=["auto", "scalable", "exact"])
    g.add_argument("--repeats", type=int, default=3)
    g.add_argument("--scale-n", type=int, default=100_000, help="0 to skip")
    for q in (r, g):
        protocol.datasets_option(q, SETS)
        q.add_argument("--landmarks", type=int, default=100)
        q.add_argument("--max-iter", type=int, default=20)
        q.add_argument("--json", default=None, help="append the results to this file")
    args = p.parse_args(argv)
    print(json.dumps({"blas": blas_info(), "argv": sys.argv[1:]}), flush=True)
    results = {"repeats": repeats, "timing": timing}[args.cmd](args)
    if args.json:
        protocol.append_lines(args.json, results)
    return results


if __name__ == "__main__":
    main()
