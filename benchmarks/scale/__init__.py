"""Speed and scale: the kNN graph, the Gram pass, every estimator at 1M+, faults, the CLI."""
