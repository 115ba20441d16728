"""Warnings and errors raised by elmscale."""


class ElmscaleWarning(UserWarning):
    """Base class of elmscale's warnings."""


class PluginLoadWarning(ElmscaleWarning):
    """A plugin failed to load or to register; it was skipped, the others still work."""


class DisconnectedGraphWarning(ElmscaleWarning):
    """The kNN graph has isolated points or several components."""


class UnknownPluginError(ValueError):
    """A name was looked up in the registry and is not registered."""


class PluginLoadError(RuntimeError):
    """A plugin failed to load while ``ELMSCALE_STRICT_PLUGINS=1``."""
