"""elmscale's benchmark scripts, grouped by purpose (see README.md in this folder).

Run them from the repository root as modules, e.g. ``python -m benchmarks.scale.bench_graph``.
"""
