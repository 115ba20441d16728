"""elmscale's own algorithms, activations, graph backends and kernels, registered through the
same hooks as any third-party plugin. Every module in this package is loaded as a plugin
(``elmscale.registry.builtin_plugins``), so a new built-in is one new module here."""
