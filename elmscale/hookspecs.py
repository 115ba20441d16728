"""The plugin API: one hook per kind of extension.

Every hook receives a ``register`` callback with the signature
``register(name, obj, *, aliases=(), description="")``. Built-in algorithms, activations,
hidden-node families, graph backends and kernels register through these same hooks.
Third-party packages expose a module under the entry-point group ``elmscale``::

    [project.entry-points.elmscale]
    fancy = "elmscale_fancy"

and implement any of the hooks in it with ``@elmscale.hookimpl``.
"""

import pluggy

hookspec = pluggy.HookspecMarker("elmscale")
hookimpl = pluggy.HookimplMarker("elmscale")


@hookspec
def register_algorithms(register):
    """Register estimator classes: ``register("us-elm", USELM)``.

    ``obj`` must be a scikit-learn estimator class (``get_params``, ``fit``); it is built by
    ``elmscale.make(name, **params)``. Check it with ``elmscale.testing.check_algorithm``.
    """


@hookspec
def register_activations(register):
    """Register hidden-node activations: ``register("sigmoid", sigmoid)``.

    ``obj`` is a stateless callable mapping a NumPy array of pre-activations to an array of the
    same shape and dtype (it may work in place and return its argument). Its optional attribute
    ``node`` says how pre-activations are formed: ``"additive"`` (default, ``X A + b``) or
    ``"rbf"`` (``b * ||x - a||``). ``elmscale.hidden.activation`` sets it.
    """


@hookspec
def register_hidden_layers(register):
    """Register hidden-node families fitted on the data: ``register("gaussian-rows", obj)``.

    ``obj`` follows :class:`elmscale.hidden.NodeFamily`: ``fit(sample, n_nodes, rng, *,
    width)`` sees a small random sample of X's scaled rows once, on the client, and returns a
    dict of small picklable parameters; ``transform(rows, params)`` maps a block of scaled
    rows to the nodes' outputs (rows x n_nodes, in the rows' dtype), so that the workers
    rebuild H block by block. Estimators with ``data_nodes=`` (``rbf_fraction`` of the nodes)
    take its name. Check it with ``elmscale.testing.check_node_family``.

    One concept goes by the names its places gave it, all kept for compatibility: this hook
    registers a *node family*, looked up as the registry kind ``"hidden"``
    (``elmscale.available("hidden")``, ``elmscale.get("hidden", name)``), written to the
    protocol :class:`elmscale.hidden.NodeFamily` and chosen by an estimator's ``data_nodes``
    parameter.
    """


@hookspec
def register_graph_backends(register):
    """Register kNN graph backends: ``register("exact", exact_knn)``.

    ``obj(X, n_neighbors, *, random_state)`` takes a dask array chunked by rows only and returns
    ``(indices, distances)``: dask arrays of shape ``(n_samples, n_neighbors)`` chunked like
    X's rows, holding each row's neighbours by global row index (the row itself excluded),
    nearest first. A backend whose search partitions the rows anyway may also offer that
    partition as the locality order the Gram pass uses: ``provides_order = True`` and the
    methods ``partition(X, *, random_state)`` and ``search(partition, X_ordered,
    n_neighbors)`` of :class:`elmscale.graph.CellSearch`.
    """


@hookspec
def register_kernels(register):
    """Register kernels for kernel ELMs: ``register("rbf", RBFKernel)``.

    ``obj`` is a class implementing ``elmscale.kernels.Kernel``: ``__call__(X, Y)`` evaluates a
    block (float64, exact mode), ``diagonal(X)`` gives K(x_i, x_i), and optionally
    ``factor(sample, *, n_samples, n_components, method, random_state)`` returns a
    ``KernelFactor`` (K ~ alpha I + Phi Phi^T, or a closed form) for the scalable mode; the
    inherited default is Nystrom on the sample. A kernel built on squared distances may set
    ``shares_distances = True`` and accept ``distances=`` (an ``elmscale.kernels.DistanceCache``)
    in ``__call__`` and ``factor``. Check it with ``elmscale.testing.check_kernel``.
    """
