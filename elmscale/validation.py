"""Parameter constraints for estimators written on :class:`elmscale.BaseELM`.

An estimator lists its parameters in ``_parameter_constraints`` as scikit-learn does; the
constraint types are re-exported here so that a plugin does not import them from
scikit-learn's private ``sklearn.utils._param_validation``::

    from numbers import Integral, Real
    from elmscale.validation import Interval, StrOptions

    _parameter_constraints = {
        **elmscale.BaseELM._parameter_constraints,
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "solver": [StrOptions({"auto", "primal", "dual"})],
        "activation": [Registered("activation"), callable],
    }

Besides types and these classes, a constraint may be one of scikit-learn's strings:
``"boolean"``, ``"random_state"``, ``"array-like"``, ``"sparse matrix"``, ``callable`` or
None. :class:`Registered` accepts a name of the plugin registry. ``fit_context`` is
scikit-learn's decorator that checks the constraints before ``fit`` runs (``BaseELM.fit``
carries it; an estimator not written on BaseELM puts ``@fit_context(
prefer_skip_nested_validation=True)`` on its own ``fit``).
"""

from . import registry
from .utils._sklearn import (
    HasMethods,
    Hidden,
    Interval,
    InvalidParameterError,
    Options,
    RealNotInt,
    StrOptions,
    fit_context,
)


class Registered(StrOptions):
    """A name registered for ``kind``, or an alias of one: whatever
    :func:`elmscale.registry.get` resolves. The error message lists the registered names."""

    def __init__(self, kind):
        self.kind = kind
        super().__init__(set())

    @property
    def options(self):
        if getattr(self, "_initialised", False):
            return set(registry.available(self.kind))
        self._initialised = True  # StrOptions.__init__ reads it once: no registry at import
        return set()

    @options.setter
    def options(self, value):  # StrOptions.__init__ assigns it; the registry is the truth
        pass

    def is_satisfied_by(self, val):
        return registry.is_registered(self.kind, val)

    def __str__(self):
        return (
            f"a registered {self.kind} name among {sorted(self.options)} (run `elmscale plugins`)"
        )


__all__ = [
    "HasMethods",
    "Hidden",
    "Interval",
    "InvalidParameterError",
    "Options",
    "RealNotInt",
    "Registered",
    "StrOptions",
    "fit_context",
]
