"""Peak memory of a fit on NumPy input with no cluster: dask's threads in this process.

    python -m benchmarks.scale.bench_numpy_memory --copies 5

The input is MNIST-70k (pixels / 255) stacked ``--copies`` times with N(0, ``--noise``) added,
float32, as a user holds it in memory (350,000 x 784, 1.1 GB for 5 copies). One
``USELM(n_clusters=10, random_state=0)`` fit (``--fit`` to change it) runs on dask's threaded
scheduler; a thread samples this process's RSS every 50 ms. Printed: the input's bytes, the
RSS before the fit (the input and the imports), the peak during it, the peak over the input's
size, the fit's seconds and stages with the peak RSS in each, ACC against the stacked labels,
and the machine.
"""

import argparse
import json
import threading
import time

import numpy as np

from benchmarks._common import clustering_accuracy, load_dataset, machine_info, utc_now


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PeakRSS:
    """The largest RSS of this process seen while the block runs, sampled every ``every`` s;
    ``samples`` keeps (seconds since the start, RSS) for :meth:`stage_peaks`."""

    def __init__(self, every=0.05):
        self.every, self.peak, self._stop = every, 0, threading.Event()
        self.samples, self._t0 = [], time.perf_counter()

    def _watch(self):
        while not self._stop.is_set():
            rss = _rss_bytes()
            self.peak = max(self.peak, rss)
            self.samples.append((time.perf_counter() - self._t0, rss))
            self._stop.wait(self.every)

    def stage_peaks(self, timings):
        """Peak RSS per stage of a fit's ``timings_`` (stages back to back from the start,
        in their order): which stage holds the most."""
        peaks, start = {}, 0.0
        for stage, seconds in timings.items():
            inside = [r for t, r in self.samples if start <= t < start + seconds]
            peaks[stage] = max(inside, default=0)
            start += seconds
        return peaks

    def __enter__(self):
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--copies", type=int, default=5)
    p.add_argument("--noise", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fit", default="USELM(n_clusters=10, random_state=0)")
    args = p.parse_args(argv)

    import elmscale

    X0, y0 = load_dataset("mnist")
    rng = np.random.default_rng(args.seed)
    X = np.concatenate([X0.astype(np.float32) / 255] * args.copies)
    X += rng.normal(0, args.noise, X.shape).astype(np.float32)
    y = np.tile(y0, args.copies)
    del X0
    before = _rss_bytes()
    model = eval(args.fit, {name: getattr(elmscale, name) for name in elmscale.__all__})
    with PeakRSS() as peak:
        t0 = time.perf_counter()
        model.fit(X)
        seconds = time.perf_counter() - t0
    timings = getattr(model, "timings_", {})
    print(
        json.dumps(
            {
                "benchmark": "numpy_memory",
                "when": utc_now(),
                "machine": machine_info(),
                "fit": args.fit,
                "shape": list(X.shape),
                "input_bytes": X.nbytes,
                "rss_before_fit": before,
                "peak_rss": peak.peak,
                "peak_over_input": round(peak.peak / X.nbytes, 2),
                "seconds": round(seconds, 1),
                "timings": {k: round(v, 1) for k, v in timings.items()},
                "stage_peak_rss": peak.stage_peaks(timings),
                "acc": round(float(clustering_accuracy(y, model.labels_)), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
