"""scikit-learn parameter constraints that ask the plugin registry."""

from sklearn.utils._param_validation import StrOptions

from .. import registry


class Registered(StrOptions):
    """A name registered for ``kind``; the error message lists what is installed."""

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
        return isinstance(val, str) and val in self.options

    def __str__(self):
        return (
            f"a registered {self.kind} name among {sorted(self.options)} (run `elmscale plugins`)"
        )
