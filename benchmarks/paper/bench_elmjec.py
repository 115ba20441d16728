"""ELM-JEC benchmarks: the Table 4 protocol and one-Gram-pass sweeps against fits from scratch.

    python -m benchmarks.paper.bench_elmjec table [--grid full|reduced] [--runs 10] [--datasets ...]
    python -m benchmarks.paper.bench_elmjec sweep   [--dataset segment]
    python -m benchmarks.paper.bench_elmjec report  (markdown from the JSON lines)

``table``, per set: ELM-JEC's (lam, gamma, n_o) chosen on the grid with seed 0 (one Gram pass,
``elmscale.sweep``), then refitted with seeds 1..R; with ``--paper-runs N`` also the paper's
selection (the whole grid with seeds 1..N, the best mean); ELM-JEC at its defaults, k-means on
the min-max scaled features, and US-ELM with (lam, n_o) chosen on seed 0, each over seeds 1..R.
Every run is on one core; its numbers are appended as a JSON line to ``--out`` (default:
benchmarks/results/elmjec_raw.jsonl).
"""

import argparse
import json
import os
import warnings

import numpy as np

from benchmarks._common import blas_info, clustering_accuracy, results_file, utc_now
from benchmarks.paper import _protocol as protocol

PAPER = {
    "iris": 97.20,
    "ecoli": 62.23,
    "diabetes": 74.26,
    "segment": 68.95,
    "coil20": 80.79,
    "orl": 58.38,
}
POW = [2.0**p for p in range(-4, 5)]
N_O = [2, 4, 8, 16, 32]


def acc(y, model):
    """Clustering accuracy (%) of a fitted model, None for a failed fit."""
    if isinstance(model, Exception):
        return None
    return 100.0 * clustering_accuracy(y, model.labels_)


def n_hidden_for(name, args):
    """The paper's n_h (1000 for iris, 2000 otherwise), or ``--n-hidden``."""
    return args.n_hidden or (1000 if name == "iris" else 2000)


def grid_for(kind, c):
    n_o = min(max(c, 2), 32)
    if kind == "full":
        return {"lam": POW, "gamma": POW, "n_components": N_O}
    if kind == "tiny":
        return {"lam": [0.25, 1.0, 4.0], "gamma": [0.0625, 1.0], "n_components": [n_o]}
    # reduced: every other power of two, and n_o in {2, c, 32-capped}
    every_other = [2.0**p for p in (-4, -2, 0, 2, 4)]
    return {"lam": every_other, "gamma": every_other, "n_components": sorted({2, n_o, 8})}


def elmjec(n_hidden, c, seed, **kw):
    from elmscale import ELMJEC

    # n_basis=None: the paper's Algorithm 1 as written, beta in the whole range of H~^T
    params = dict(graph="exact", n_neighbors=5, weights="binary", scaling="minmax", n_basis=None)
    return ELMJEC(n_clusters=c, n_hidden=n_hidden, random_state=seed, **{**params, **kw})


def uselm(n_hidden, X, c, seed, **kw):
    from elmscale import USELM

    solver = "dual" if X.shape[0] < n_hidden / 2 else "primal"
    params = dict(graph="exact", n_neighbors=5, scaling="minmax", solver=solver)
    return USELM(c, n_hidden=n_hidden, random_state=seed, **params, **kw)


def select(row, X, y, c, n_h, grid):
    """ELM-JEC's setting chosen on the grid with seed 0 (one Gram pass); ``(setting, sweep)``."""
    from elmscale import sweep

    fits, wall, cpu = protocol.timed_call(sweep, elmjec(n_h, c, 0), X, grid, errors="return")
    scores = [(acc(y, m), s) for s, m in fits if not isinstance(m, Exception)]
    best_acc0, best = max(scores, key=lambda t: t[0])
    row.update(select_seconds=wall, select_cpu_seconds=cpu, n_settings=len(fits))
    row.update(n_no_positive=sum(isinstance(m, Exception) for _, m in fits))
    row.update(best_setting=best, select_acc_seed0=best_acc0)
    row["grid_scores"] = [
        [s, acc(y, m), getattr(m, "n_iter_", None), getattr(m, "n_components_", None)]
        for s, m in fits
    ]
    print(f"[{row['dataset']}] grid of {len(fits)} in {wall:.1f}s (cpu {cpu:.1f}s); best {best}")
    return best, fits


def paper_selection(row, X, y, c, n_h, grid, settings, runs):
    """The paper's protocol: the whole grid with seeds 1..runs (one sweep per seed, equal to
    fitting each setting from scratch), the best of the per-setting means."""
    from elmscale import sweep

    def one_seed(seed):
        return [acc(y, m) for _, m in sweep(elmjec(n_h, c, seed), X, grid, errors="return")]

    A, wall, cpu = protocol.timed_call(lambda: [one_seed(s) for s in range(1, runs + 1)])
    A = np.array(A, dtype=np.float64)
    means = A.mean(axis=0)
    j = int(np.nanargmax(means))
    row.update(paper_runs=runs, paper_best_setting=settings[j], paper_best_acc=A[:, j].tolist())
    row.update(paper_means=means.tolist(), paper_seconds=wall, paper_cpu_seconds=cpu)
    print(f"[{row['dataset']}] paper protocol: best mean {means[j]:.2f} at {settings[j]}")
    return A


def select_uselm(row, X, y, c, n_h, grid):
    """US-ELM's lam (2^-4..2^4) and n_o (the paper's n_o grid with ``full``) chosen on seed 0."""
    lams = POW if grid != "tiny" else [0.25, 1.0, 4.0]
    n_os = N_O if grid == "full" else [c]
    settings = [{"lam": lam, "n_components": n_o} for n_o in n_os for lam in lams]

    def scores():
        return [acc(y, uselm(n_h, X, c, 0, **s).fit(X)) for s in settings]

    found, wall, _ = protocol.timed_call(scores)
    best = settings[int(np.argmax(found))]
    row.update(uselm_setting=best, uselm_select_seconds=wall)
    return best


def run_table(args):
    """One JSON line per set: the columns of the module docstring's ``table``."""
    for name, X, y in protocol.present(protocol.dataset_names(args)):
        row = table_row(name, X, y, args)
        for key in ("elmjec_acc", "default_acc", "kmeans_acc", "uselm_acc"):
            print(f"[{name}] {key}: {np.mean(row[key]):.2f} +- {np.std(row[key]):.2f}")
        protocol.append_lines(args.out, [row])


def table_row(name, X, y, args):
    from sklearn.cluster import KMeans

    from benchmarks.quality.bench_quality import minmax

    c, n_h, seeds = len(np.unique(y)), n_hidden_for(name, args), range(1, args.runs + 1)
    row = dict(dataset=name, n=X.shape[0], d=X.shape[1], c=c, n_hidden=n_h, grid=args.grid)
    row.update(runs=args.runs, date=utc_now(), loadavg_start=os.getloadavg())
    grid = grid_for(args.grid, c)
    best, fits = select(row, X, y, c, n_h, grid)
    if args.paper_runs:  # the runs at the seed-0 selection are read from the same sweeps
        settings = [s for s, _ in fits]
        A = paper_selection(row, X, y, c, n_h, grid, settings, args.paper_runs)
        row.update(elmjec_acc=A[: args.runs, settings.index(best)].tolist(), elmjec_iters=None)
    else:
        runs, wall, cpu = protocol.timed_call(
            lambda: [elmjec(n_h, c, s, **best).fit(X) for s in seeds]
        )
        row.update(elmjec_acc=[acc(y, m) for m in runs], elmjec_iters=[m.n_iter_ for m in runs])
        row.update(elmjec_seconds_per_fit=wall / args.runs)
        row.update(elmjec_cpu_seconds_per_fit=cpu / args.runs)
    row["default_acc"] = [acc(y, elmjec(n_h, c, s).fit(X)) for s in seeds]
    kmeans = [KMeans(c, n_init=10, random_state=s).fit(minmax(X)) for s in seeds]
    row["kmeans_acc"] = [acc(y, m) for m in kmeans]
    us_best = select_uselm(row, X, y, c, n_h, args.grid)
    row["uselm_acc"] = [acc(y, uselm(n_h, X, c, s, **us_best).fit(X)) for s in seeds]
    row["loadavg_end"] = os.getloadavg()
    return row


def run_sweep(args):
    """Wall time of one grid through elmscale.sweep (one Gram pass) against fitting every
    setting from scratch."""
    from elmscale import sweep

    ((name, X, y),) = protocol.present([args.dataset])
    c, n_h = len(np.unique(y)), n_hidden_for(args.dataset, args)
    grid = {"lam": [0.25, 1.0, 4.0], "gamma": [0.0625, 0.25, 1.0], "n_components": [2, 8]}
    fits, t_sweep, c_sweep = protocol.timed_call(sweep, elmjec(n_h, c, 0), X, grid, errors="return")

    def from_scratch():
        same = 0
        for setting, fitted in fits:
            try:
                alone = elmjec(n_h, c, 0, **setting).fit(X)
            except ValueError:
                same += isinstance(fitted, Exception)
                continue
            same += bool(np.array_equal(alone.labels_, fitted.labels_))
        return same

    same, t_scratch, c_scratch = protocol.timed_call(from_scratch)
    res = dict(dataset=name, n_settings=len(fits), sweep_seconds=t_sweep)
    res.update(scratch_seconds=t_scratch, sweep_cpu_seconds=c_sweep)
    res.update(scratch_cpu_seconds=c_scratch, identical_labels=same)
    res.update(loadavg=os.getloadavg(), date=utc_now())
    print(json.dumps(res), flush=True)
    if args.out:
        protocol.append_lines(args.out, [{"sweep": res}])
    return res


def run_report(args):
    """Markdown tables from the JSON lines written by the other modes (the last table row per
    dataset and grid)."""
    rows, sweeps = {}, []
    for line in open(args.out):
        rec = json.loads(line)
        if "sweep" in rec:
            sweeps.append(rec["sweep"])
        else:
            rows[(rec["dataset"], rec["grid"])] = rec
    columns = ["dataset", "n x d, c", "paper ELM-JEC", "ELM-JEC (seed-0 selection, runs 1..R)"]
    columns += ["selected (lam, gamma, n_o)", "ELM-JEC paper selection (best R-run mean)"]
    columns += ["ELM-JEC defaults", "k-means", "US-ELM (selected lam, n_o)", "grid, R"]
    columns += ["grid time (wall / CPU)"]
    print(protocol.markdown(columns, [report_row(r) for r in rows.values()]))
    for s in sweeps:
        print(
            f"\nsweep {s['dataset']}: {s['n_settings']} settings, one Gram pass "
            f"{s['sweep_seconds']:.1f} s, from scratch {s['scratch_seconds']:.1f} s "
            f"({s['scratch_seconds'] / s['sweep_seconds']:.1f}x), identical labels "
            f"{s['identical_labels']}/{s['n_settings']}"
        )


def report_row(r):
    ms = lambda v: f"{np.mean(v):.2f} +- {np.std(v):.2f}"  # noqa: E731
    st = lambda b: f"({b['lam']:g}, {b['gamma']:g}, {b['n_components']})"  # noqa: E731
    paper_sel = "-"
    if "paper_best_acc" in r:
        paper_sel = f"{ms(r['paper_best_acc'])} at {st(r['paper_best_setting'])}"
    us = r["uselm_setting"]
    return [
        r["dataset"],
        f"{r['n']} x {r['d']}, {r['c']}",
        f"{PAPER[r['dataset']]:.2f}",
        ms(r["elmjec_acc"]),
        st(r["best_setting"]),
        paper_sel,
        ms(r["default_acc"]),
        ms(r["kmeans_acc"]),
        f"{ms(r['uselm_acc'])} (lam={us['lam']:g}, n_o={us['n_components']})",
        f"{r['grid']} ({r['n_settings']}), {r['runs']}",
        f"{r['select_seconds']:.0f} / {r['select_cpu_seconds']:.0f} s",
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("what", choices=["table", "sweep", "report"])
    p.add_argument("--out", default=str(results_file("elmjec_raw.jsonl")))
    protocol.datasets_option(p, PAPER)
    p.add_argument("--grid", choices=["full", "reduced", "tiny"], default="reduced")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument(
        "--paper-runs",
        type=int,
        default=0,
        help="also the paper's selection: sweep the grid with seeds 1..N, best mean",
    )
    p.add_argument("--dataset", default="segment")
    p.add_argument("--n-hidden", type=int, default=0, help="override the paper's n_h (0: keep)")
    args = p.parse_args(argv)
    print("BLAS:", blas_info(), flush=True)
    with protocol.one_core(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"table": run_table, "sweep": run_sweep, "report": run_report}[args.what](args)


if __name__ == "__main__":
    main()
