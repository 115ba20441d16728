"""The label-free choices of USELM's clustering step, scored on the same fits: which partition
``n_components="auto"`` keeps (normalised cut, modularity, both, always one size) and how many
rounds of neighbour-majority votes follow k-means, per set over seeds 0..S-1.

    python -m benchmarks.quality.bench_seed_rules --datasets all --seeds 10
    python -m benchmarks.quality.bench_seed_rules --summary

One ``reduce`` per (set, seed) with USELM's defaults, one solve for the wide embedding
(``ceil(1.5 c)`` columns); then, for each of the two candidate sizes, the estimator's own
k-means (``elmscale.cluster.kmeans``, its ``n_init``, ``sample_draws`` and unit rows) and
``elmscale.cluster.refine_labels`` for 0, 1 and 3 rounds, each partition's normalised cut and
modularity on the fit's graph (``elmscale.graph.cut_and_modularity``), and its ACC / NMI
(labels score, never choose). A rule picks one of the two partitions from the cut and the
modularity alone. One JSON line per (set, seed) in ``--out``; an interrupted run resumes.
The summary prints every rule's mean (worst) ACC per set, then each set left out in turn:
the rule of best mean of (mean + worst) / 2 over the other sets, scored on the left-out one.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks._common import RESULTS_DIR, command_line
from benchmarks.quality.bench_quality import score
from benchmarks.quality.bench_seeds import LARGE, SMALL, _data

ROUNDS = (0, 1, 3)
#: k-means's samples of starts, as USELM draws them
SAMPLE_DRAWS = 4


def fit_one(name, X, y, seed):
    """The record of one (set, seed): per size and rounds, ACC, NMI, cut and modularity."""
    import dask.array as da

    import elmscale
    from elmscale.cluster import kmeans, refine_labels
    from elmscale.graph import cut_and_modularity

    c = len(np.unique(y))
    t0 = time.perf_counter()
    base = elmscale.USELM(c, random_state=seed)
    reduction = base.reduce(X)
    sizes = base._component_choices(X.shape[0])
    model = elmscale.USELM(c, n_components=sizes[-1], refine_rounds=0, random_state=seed)
    E = np.asarray(model.solve(reduction).embedding_)
    chunks = reduction.X.chunks[0]
    graph = reduction.graph
    rec = dict(set=name, seed=seed, n=X.shape[0], sizes=list(sizes))
    for n in sizes:
        norms = np.linalg.norm(E[:, :n], axis=1, keepdims=True)
        U = E[:, :n] / np.where(norms > 0, norms, 1.0)  # row_normalize's unit rows
        En = da.from_array(U, chunks=(chunks, n))
        _, labels, _, _ = kmeans(
            En, c, n_init=model.n_init, random_state=seed, sample_draws=SAMPLE_DRAWS
        )
        parts = [refine_labels(graph, labels, c, r) for r in ROUNDS]
        cut, q = cut_and_modularity(graph, parts, c)
        for r, p, cu, qu in zip(ROUNDS, parts, cut, q, strict=True):
            acc, mi = score(y, np.asarray(p.compute()))
            rec[f"{n}_r{r}"] = dict(acc=acc, nmi=mi, cut=float(cu), mod=float(qu))
    reduction.release()
    rec["seconds"] = time.perf_counter() - t0
    return rec


def _pick(rec, rule, rounds):
    """The ACC rule ``rule`` gives with ``rounds`` rounds of votes (``"auto"``: 3 from 1,000
    rows, as the estimator)."""
    if rounds == "auto":
        rounds = 3 if rec["n"] >= 1000 else 0
    sizes = rec["sizes"]
    cands = [rec[f"{n}_r{rounds}"] for n in sizes]
    if len(cands) == 1 or rule == "narrow":
        return cands[0]["acc"]
    narrow, wide = cands
    if rule == "wide":
        return wide["acc"]
    if rule == "cut":
        return (narrow if narrow["cut"] < wide["cut"] else wide)["acc"]
    if rule == "modularity":
        return (narrow if narrow["mod"] > wide["mod"] else wide)["acc"]
    if rule == "both":  # the narrow one only when cut and modularity agree on it
        return (narrow if narrow["cut"] < wide["cut"] and narrow["mod"] > wide["mod"] else wide)[
            "acc"
        ]
    raise ValueError(rule)


RULES = [
    (rule, rounds)
    for rounds in (0, 1, 3, "auto")
    for rule in ("cut", "modularity", "both", "wide", "narrow")
]


def summary(records):
    """Per rule and set: mean (worst) ACC %; then each set left out in turn."""
    sets = list(dict.fromkeys(r["set"] for r in records))

    def acc(rule, name):
        return np.array([_pick(r, *rule) for r in records if r["set"] == name])

    lines = [
        "| rule | rounds | " + " | ".join(f"{s} ({len(acc(RULES[0], s))})" for s in sets) + " |",
        "|---|---" + "|---" * len(sets) + "|",
    ]
    for rule in RULES:
        cells = [acc(rule, s) for s in sets]
        lines.append(
            f"| {rule[0]} | {rule[1]} | "
            + " | ".join(f"{100 * c.mean():.1f} ({100 * c.min():.1f})" for c in cells)
            + " |"
        )
    lines += ["", "| left out | rule chosen on the others | its mean (worst) | cut, 0 rounds |"]
    lines.append("|---|---|---|---|")
    for out in sets:
        others = [s for s in sets if s != out]

        def merit(rule, others=others):
            return np.mean([(acc(rule, s).mean() + acc(rule, s).min()) / 2 for s in others])

        best = max(RULES, key=merit)
        got, old = acc(best, out), acc(("cut", 0), out)
        lines.append(
            f"| {out} | {best[0]}, {best[1]} | {100 * got.mean():.1f} ({100 * got.min():.1f}) "
            f"| {100 * old.mean():.1f} ({100 * old.min():.1f}) |"
        )
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="all", help="comma list, or large / small / all")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..S-1")
    p.add_argument("--out", default=str(RESULTS_DIR / "quality_seed_rules.jsonl"))
    p.add_argument("--summary", action="store_true", help="only print the summary of --out")
    args = p.parse_args(argv)
    groups = {"large": LARGE, "small": SMALL, "all": LARGE + SMALL}
    names = [n for item in args.datasets.split(",") for n in groups.get(item, (item,))]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = [json.loads(line) for line in out.open()] if out.is_file() else []
    print(command_line(), flush=True)
    if not args.summary:
        done = {(r["set"], r["seed"]) for r in records}
        for name in names:
            todo = [s for s in range(args.seeds) if (name, s) not in done]
            if not todo:
                continue
            X, y, _, _ = _data(name, False)
            for seed in todo:
                rec = fit_one(name, X, y, seed)
                with out.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                records.append(rec)
                print(name, seed, f"{rec['seconds']:.1f} s", flush=True)
    print(summary([r for r in records if r["set"] in names]))


if __name__ == "__main__":
    main()
