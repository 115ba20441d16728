"""elmscale-landmarks: Gaussian hidden nodes on k-means landmarks of a sample of the rows.

This module is what the entry point ``landmarks = "elmscale_landmarks"`` names: elmscale
imports it and calls its ``@elmscale.hookimpl`` function with a ``register`` callback. It
registers the hidden-node family ``"landmarks"``: :class:`LandmarkGaussians`.

After ``pip install elmscale-landmarks``::

    >>> import elmscale
    >>> model = elmscale.USELM(10, rbf_fraction=1.0, data_nodes="landmarks")  # doctest: +SKIP
"""

from elmscale import hookimpl

from ._landmarks import LandmarkGaussians, landmarks

__version__ = "0.1.0"
__all__ = ["LandmarkGaussians", "landmarks", "register_hidden_layers"]


@hookimpl
def register_hidden_layers(register):
    register(
        "landmarks",
        LandmarkGaussians(),
        description="exp(-||x - c||^2 / (w m)^2) on k-means centres c of a sample of rows",
    )
