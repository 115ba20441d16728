"""Raises on import, as a plugin with a missing dependency would."""

raise ImportError("simulated: elmscale_broken_example needs the package 'notinstalled'")
