"""A plugin whose import fails, like one with a missing dependency."""

raise ImportError("simulated: elmscale_broken needs the package 'notinstalled'")
