"""Reproductions of the papers' tables, one script per estimator."""
