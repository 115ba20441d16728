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
modularity alone (``both|pieces<x``: the narrow partition when its cut is lower and its
modularity higher, or its cut is lower and below x per cluster: USELM's rule for x = 0.01).
Each partition's record also keeps label-free scores no rule uses yet: its agreement (ARI)
with k-means from a second seed, its cluster sizes, its silhouette on 3,000 rows (in its own
and in the wide embedding), k-means's inertia, and the solve's eigenvalues.
One JSON line per (set, seed) in ``--out``; an interrupted run resumes; ``--labels DIR`` also
saves each fit's partitions, labels and wide unit rows (``DIR/<set>_<seed>.npz``).
The summary prints every rule's mean (worst) ACC per set, then each set left out in turn:
the rule of best mean of (mean + worst) / 2 over the other sets, scored on the left-out one.
"""

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

from benchmarks._common import RESULTS_DIR, rule_tables
from benchmarks.quality.bench_quality import score
from benchmarks.quality.bench_seeds import record_arguments, recorded_fits

ROUNDS = (0, 1, 3)
#: the second k-means of each size (its agreement with the first, ``ari``) adds this to the seed
SECOND_SEED = 7919
#: silhouettes are computed on this many rows (the same rows for every partition)
SILHOUETTE_ROWS = 3000


def _unit(E):
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    return E / np.where(norms > 0, norms, 1.0)


def _silhouette(U, labels):
    from sklearn.metrics import silhouette_score

    if len(np.unique(labels)) < 2:
        return -1.0
    return float(silhouette_score(U, labels))


def fit_one(name, X, y, seed, labels_dir=None):
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
    rec["gamma"] = np.asarray(model.eigenvalues_, dtype=float).tolist()
    rec["steps"] = int(reduction.fitted["smoothing_steps_"])
    sample = np.random.RandomState(0).permutation(X.shape[0])[:SILHOUETTE_ROWS]
    Uw = _unit(E)
    saved = {"y": y}
    for n in sizes:
        U = _unit(E[:, :n])  # row_normalize's unit rows
        En = da.from_array(U, chunks=(chunks, n))
        runs = []
        for s in (seed, seed + SECOND_SEED):
            _, labels, inertia, _ = kmeans(
                En, c, n_init=model.n_init, random_state=s, sample_draws=model.n_init
            )
            runs.append(([refine_labels(graph, labels, c, r) for r in ROUNDS], inertia))
        parts, inertia = runs[0]
        cut, q = cut_and_modularity(graph, parts, c)
        for r, p, p2, cu, qu in zip(ROUNDS, parts, runs[1][0], cut, q, strict=True):
            lab, lab2 = np.asarray(p.compute()), np.asarray(p2.compute())
            saved[f"{n}_r{r}"] = lab
            acc, mi = score(y, lab)
            rec[f"{n}_r{r}"] = dict(
                acc=acc,
                nmi=mi,
                cut=float(cu),
                mod=float(qu),
                ari=float(adjusted_rand_score(lab, lab2)),
                counts=np.bincount(lab, minlength=c).tolist(),
                sil=_silhouette(U[sample], lab[sample]),
                sil_w=_silhouette(Uw[sample], lab[sample]),
                inertia=float(inertia) if r == 0 else None,
            )
    if labels_dir is not None:
        np.savez_compressed(
            Path(labels_dir) / f"{name}_{seed}.npz", U=Uw.astype(np.float32), **saved
        )
    reduction.release()
    rec["seconds"] = time.perf_counter() - t0
    return rec


def _pick(rec, rule, rounds):
    """The ACC rule ``rule`` gives with ``rounds`` rounds of votes (``"auto"``: 3 from 1,000
    rows, as the estimator)."""
    if rounds == "auto":
        rounds = 3 if rec.get("steps", rec["n"] >= 1000) else 0
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
    if rule.startswith("both|pieces<"):  # the lower cut, and a higher modularity or a cut
        x = float(rule.split("<")[1])  # per cluster below x (USELM's SEPARATE_PIECES_CUT)
        k = len(narrow["counts"])
        narrow_wins = narrow["cut"] < wide["cut"] and (
            narrow["mod"] > wide["mod"] or narrow["cut"] < x * k
        )
        return (narrow if narrow_wins else wide)["acc"]
    raise ValueError(rule)


#: "both", or the narrow partition whenever its cut is lower and below x per cluster
PIECES = tuple(f"both|pieces<{x:g}" for x in (0.003, 0.01, 0.03))

RULES = [
    (rule, rounds)
    for rounds in (0, 1, 3, "auto")
    for rule in ("cut", "modularity", "both", "wide", "narrow", *PIECES)
]


def summary(records):
    """Per rule and set: mean (worst) ACC %; then each set left out in turn
    (:func:`benchmarks._common.rule_tables`), beside the lowest cut without votes."""
    sets = list(dict.fromkeys(r["set"] for r in records))

    def acc(rule, name):
        return np.array([_pick(r, *rule) for r in records if r["set"] == name])

    return "\n".join(rule_tables(RULES, sets, acc, ("cut", 0), name=lambda r: f"{r[0]}, {r[1]}"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    record_arguments(p, RESULTS_DIR / "quality_seed_rules.jsonl")
    p.add_argument("--labels", help="also save each fit's partitions and unit rows here (.npz)")
    args = p.parse_args(argv)
    if args.labels:
        Path(args.labels).mkdir(parents=True, exist_ok=True)
    records = recorded_fits(args, lambda name, X, y, seed: fit_one(name, X, y, seed, args.labels))
    print(summary(records))


if __name__ == "__main__":
    main()
