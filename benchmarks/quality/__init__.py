"""Quality without labels: the estimators against their peers, assignment studies, revisions."""
