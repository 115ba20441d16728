"""The consensus of k-means's restarts as USELM's partition, scored against today's choice.

    python -m benchmarks.quality.bench_consensus --datasets all --seeds 10
    python -m benchmarks.quality.bench_consensus --summary

k-means on a spectral embedding reaches many local optima, and which one a seed reaches
moves ACC by up to 15 points (usps). A cluster ensemble keeps what the optima agree on:
here the consensus is k-means on the rows' one-hot label vectors over the optima (Topchy,
Jain and Punch, IEEE TPAMI 27(12), 2005: the median partition under category utility).
Per (set, seed): USELM's defaults up to the embedding (one ``reduce``, the wide solve), then
for each candidate width its ten k-means starts each refined on all rows
(``sample_draws=n_init``: every distinct optimum) and scikit-learn's best of ten on all
rows (what USELM keeps between 1,000 and 20,000 rows), each voted as the estimator votes
and scored by normalised cut and modularity on the fit's graph; then the consensus of the
optima of the wide width ("wide"; "wide5": those within 5 % of the least inertia), of
both widths ("both") and of the narrow one, voted and scored alike. Rules then pick one
partition from the label-free scores alone; labels only score. One JSON line per (set,
seed) in ``--out``; an interrupted run resumes. The summary is
:func:`benchmarks._common.rule_tables`: each rule's mean (worst) ACC per set, then each set
left out in turn.
"""

import argparse
import time

import numpy as np

from benchmarks._common import RESULTS_DIR, rule_tables
from benchmarks.quality.bench_quality import score
from benchmarks.quality.bench_seeds import LARGE, record_arguments, recorded_fits

#: USELM's margin of the least inertia among k-means's optima, and its narrow-or-wide rule
INERTIA_MARGIN, SEPARATE_PIECES_CUT = 0.01, 0.01


def _unit(E):
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    return E / np.where(norms > 0, norms, 1.0)


def _consensus(P, k):
    from sklearn.cluster import KMeans

    if P.shape[1] == 1:
        return P[:, 0]
    onehot = np.concatenate([np.eye(k, dtype=np.float32)[P[:, j]] for j in range(P.shape[1])], 1)
    return KMeans(k, n_init=10, random_state=0).fit_predict(onehot).astype(np.int64)


def fit_one(name, X, y, seed):
    import dask.array as da

    import elmscale
    from elmscale.cluster import refine_labels, refined_starts
    from elmscale.graph import cut_and_modularity

    c, t0 = len(np.unique(y)), time.perf_counter()
    base = elmscale.USELM(c, random_state=seed)
    reduction = base.reduce(X)
    sizes = base._component_choices(X.shape[0])
    model = elmscale.USELM(c, n_components=sizes[-1], refine_rounds=0, random_state=seed)
    E = np.asarray(model.solve(reduction).embedding_)
    rounds = 3 if reduction.fitted["smoothing_steps_"] and X.shape[0] >= 1000 else 0
    graph, chunks = reduction.graph, reduction.X.chunks[0]

    def scored(labels):
        voted = refine_labels(graph, labels, c, rounds) if rounds else labels
        cols = [voted[:, j] for j in range(voted.shape[1])] if voted.ndim == 2 else [voted]
        cut, q = cut_and_modularity(graph, cols, c)
        V = np.asarray(voted.compute()).reshape(X.shape[0], -1)
        return V, [
            dict(cut=float(a), mod=float(b), acc=score(y, V[:, j])[0])
            for j, (a, b) in enumerate(zip(cut, q, strict=True))
        ]

    rec = dict(set=name, seed=seed, n=X.shape[0], k=c, sizes=list(sizes), cands=[], cons={})
    optima = {}
    for n in sizes:
        En = da.from_array(_unit(E[:, :n]), chunks=(chunks, n))
        for draws, kind in ((model.n_init, "each"), (1, "sk")):
            run = refined_starts(En, c, n_init=model.n_init, random_state=seed, sample_draws=draws)
            inertia = run.inertia() if run.n_starts > 1 else [run.finish(0)[2]]
            V, scores = scored(run.labels(list(range(len(run.centers)))))
            for s, i in zip(scores, inertia, strict=True):
                rec["cands"].append(dict(s, width=n, kind=kind, inertia=float(i)))
            if kind == "each":
                optima[n] = (V, np.asarray(inertia, dtype=float))
    wide = sizes[-1]
    near = optima[wide][1] <= optima[wide][1].min() * 1.05
    pools = {
        "wide": optima[wide][0],
        "wide5": optima[wide][0][:, near],
        "both": np.concatenate([optima[n][0] for n in sizes], axis=1),
        "narrow": optima[sizes[0]][0],
    }
    for key, P in pools.items():
        labels = da.from_array(_consensus(P.astype(np.int64), c), chunks=(chunks,))
        rec["cons"][key] = scored(labels)[1][0]
    reduction.release()
    rec["seconds"] = time.perf_counter() - t0
    return rec


def _narrow_or_wide(narrow, wide, k):
    """USELM's rule (``_narrow_or_wide``) on two scored partitions."""
    if narrow["cut"] >= wide["cut"]:
        return wide
    return (
        narrow if narrow["mod"] > wide["mod"] or narrow["cut"] < SEPARATE_PIECES_CUT * k else wide
    )


def _kept(rec, width):
    """The partition USELM keeps of one width: scikit-learn's best of ten on all rows between
    1,000 and 20,000 rows, else the lowest cut within 1 % of the least inertia."""
    cands = [c for c in rec["cands"] if c["width"] == width]
    if 1000 <= rec["n"] <= 20000:
        return next(c for c in cands if c["kind"] == "sk")
    each = [c for c in cands if c["kind"] == "each"]
    least = min(c["inertia"] for c in each)
    return min(
        (c for c in each if c["inertia"] <= least * (1 + INERTIA_MARGIN)), key=lambda c: c["cut"]
    )


def pick(rec, rule):
    kept = [_kept(rec, n) for n in rec["sizes"]]
    if len(kept) == 1:
        return kept[0]
    narrow, wide = kept
    k, cons = rec["k"], rec["cons"]
    if rule == "today":
        return _narrow_or_wide(narrow, wide, k)
    if rule in ("wide", "wide5", "both"):
        return cons[rule]
    if rule == "today's wide or consensus, lower cut":
        return _narrow_or_wide(narrow, min(wide, cons["wide"], key=lambda c: c["cut"]), k)
    if rule == "narrow or wide consensus":
        return _narrow_or_wide(narrow, cons["wide"], k)
    if rule == "consensus of each width, narrow or wide":
        return _narrow_or_wide(cons["narrow"], cons["wide"], k)
    raise ValueError(rule)


RULES = (
    "today",
    "wide",
    "wide5",
    "both",
    "today's wide or consensus, lower cut",
    "narrow or wide consensus",
    "consensus of each width, narrow or wide",
)


def summary(records):
    sets = list(dict.fromkeys(r["set"] for r in records))

    def acc(rule, name):
        return np.array([pick(r, rule)["acc"] for r in records if r["set"] == name])

    lines = rule_tables(RULES, sets, acc, "today")
    large = [s for s in sets if s in LARGE]
    lines.append("")
    lines.append(
        "| rule | mean ACC, sets >= 1,000 rows | sets whose worst seed is > 3 below the mean |"
    )
    lines.append("|---|---|---|")
    for rule in RULES:
        a = [acc(rule, s) for s in large]
        gaps = [s for s, x in zip(large, a, strict=True) if 100 * (x.mean() - x.min()) > 3]
        lines.append(
            f"| {rule} | {100 * np.mean([x.mean() for x in a]):.1f} | {', '.join(gaps) or '-'} |"
        )
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    record_arguments(p, RESULTS_DIR / "quality_consensus.jsonl")
    args = p.parse_args(argv)
    print(summary(recorded_fits(args, fit_one)))


if __name__ == "__main__":
    main()
