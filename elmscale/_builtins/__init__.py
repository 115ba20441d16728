"""elmscale's own algorithms, activations, graph backends and kernels, registered through the
same hooks as any third-party plugin (see ``elmscale.registry.BUILTIN_PLUGINS``)."""
