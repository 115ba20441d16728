"""elmscale-celm: C-ELM-FS, k-means in the ELM feature space, as an elmscale plugin.

This module is what the entry point ``celm = "elmscale_celm"`` names: elmscale imports it
and calls its ``@elmscale.hookimpl`` functions with a ``register`` callback. It registers

- the algorithm ``"c-elm"`` (aliases ``"celm"``, ``"c-elm-fs"``): :class:`CELM`;
- the activation ``"softplus"``: :func:`softplus`.

After ``pip install elmscale-celm``::

    >>> import elmscale
    >>> model = elmscale.make("c-elm", n_clusters=3, random_state=0)  # doctest: +SKIP
"""

from elmscale import hookimpl

from ._activations import softplus
from ._celm import CELM, elm_feature_kmeans

__version__ = "0.1.0"
__all__ = ["CELM", "elm_feature_kmeans", "register_activations", "register_algorithms", "softplus"]


@hookimpl
def register_algorithms(register):
    register(
        "c-elm",
        CELM,
        aliases=("celm", "c-elm-fs"),
        description="k-means in the ELM feature space (C-ELM-FS)",
    )


@hookimpl
def register_activations(register):
    register("softplus", softplus, description="log(1 + exp(z)), a smooth ReLU")
