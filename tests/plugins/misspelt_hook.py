"""A plugin with a misspelt hook name: ``register_algorithm`` (the hook is
``register_algorithms``). pluggy accepts it at registration; ``check_pending`` catches it."""

from sklearn.cluster import KMeans

import elmscale


@elmscale.hookimpl
def register_algorithm(register):
    register("kmeans", KMeans)
