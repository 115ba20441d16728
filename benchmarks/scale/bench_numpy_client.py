"""NumPy input under a distributed client against dask's threads: one US-ELM fit of the same
NumPy array on each, alternated, the labels compared and dask's large-graph warnings counted.

    python -m benchmarks.scale.bench_numpy_client --dataset mnist --rounds 2

Both run in this process: the threaded scheduler on this machine's cores, and a LocalCluster of
2 worker processes x 1 thread (``--workers``), on which elmscale scatters the NumPy rows to
the workers once instead of putting them in every task graph. Reported per round: the wall
seconds of each fit, the ratio cluster / threads, the large-graph warnings, the load average,
and for the cluster the bytes the workers sent each other (and the client) during the fit,
per stage of ``timings_`` (a host's speed drifts; what crosses between processes does not);
at the end the adjusted Rand index between the two fits' labels.
"""

import argparse
import os
import time
import warnings

import numpy as np

from benchmarks._common import load_dataset, machine_info, utc_now


def _sent_bytes(dask_worker):
    return dask_worker.transfer_outgoing_bytes_total


class StageBytes:
    """Bytes the workers of ``client`` sent, per stage of the fit's ``timings_``: read at
    each stage's end through the estimator's ``lap``."""

    def __init__(self, client):
        self.client, self.stages, self._last = client, {}, None

    def total(self):
        return sum(self.client.run(_sent_bytes).values())

    def __enter__(self):
        import elmscale.base

        self._cls, self._lap = elmscale.base.BaseELM, elmscale.base.BaseELM.lap
        self._last = self.total()

        def lap(model, name):
            now = self.total()
            self.stages[name] = self.stages.get(name, 0) + now - self._last
            self._last = now
            self._lap(model, name)

        self._cls.lap = lap
        return self

    def __exit__(self, *exc):
        self._cls.lap = self._lap
        self.stages["rest"] = self.total() - self._last


def fit_seconds(X, seed):
    import elmscale

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        model = elmscale.USELM(n_clusters=10, random_state=seed).fit(X)
        seconds = time.perf_counter() - t0
    large = [str(w.message).splitlines()[0] for w in caught if "large graph" in str(w.message)]
    return seconds, np.asarray(model.labels_), large


def main(argv=None):
    import dask
    from distributed import Client, LocalCluster
    from sklearn.metrics import adjusted_rand_score

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(f"# {utc_now()} {machine_info()}", flush=True)
    X, _ = load_dataset(args.dataset)
    times, labels = {"threads": [], "cluster": []}, {}
    with LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        client = Client(cluster, set_as_default=False)
        for rnd in range(args.rounds):
            for kind in ("threads", "cluster"):
                if kind == "threads":
                    with dask.config.set(scheduler="threads"):
                        seconds, labels[kind], large = fit_seconds(X, args.seed)
                else:
                    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
                        with StageBytes(client) as sent:
                            seconds, labels[kind], large = fit_seconds(X, args.seed)
                times[kind].append(seconds)
                moved = ""
                if kind == "cluster":
                    per_stage = ", ".join(f"{k} {v / 1e6:.0f}" for k, v in sent.stages.items())
                    moved = f", sent {sum(sent.stages.values()) / 1e6:.0f} MB ({per_stage})"
                print(
                    f"round {rnd} {kind}: {seconds:.1f} s, large-graph warnings {len(large)}, "
                    f"load {os.getloadavg()[0]:.2f}{moved}",
                    flush=True,
                )
        client.close()
    ratios = [c / t for c, t in zip(times["cluster"], times["threads"], strict=True)]
    print(f"cluster / threads per round: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"ARI threads vs cluster: {adjusted_rand_score(labels['threads'], labels['cluster'])}")


if __name__ == "__main__":
    main()
