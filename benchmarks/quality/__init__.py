"""Quality without labels: the estimators against their peers, across seeds, at 1M, revisions."""
