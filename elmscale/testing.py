"""Contract checks for plugin authors.

Call them from your plugin's tests; each returns None when the object meets elmscale's
protocol for its kind and raises ``AssertionError`` saying what is wrong otherwise::

    from elmscale.testing import (
        check_activation, check_algorithm, check_graph_backend, check_kernel,
        check_node_family)

    def test_contracts():
        check_activation(softplus)
        check_algorithm(CELM)
        check_graph_backend(my_knn)
        check_kernel(MyKernel, reference=lambda X, Y: ...)
        check_node_family(MyNodes(), reference=lambda rows, params: ...)

The protocols are those documented in ``elmscale.hookspecs``.
"""

import inspect

import dask.array as da
import numpy as np

from . import registry

__all__ = [
    "check_activation",
    "check_algorithm",
    "check_graph_backend",
    "check_kernel",
    "check_node_family",
]


def _resolve(kind, obj):
    return registry.get(kind, obj) if isinstance(obj, str) else obj


def _label(obj):
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)


def _fail(label, message):
    raise AssertionError(f"{label}: {message}")


# -- activations -----------------------------------------------------------------------------
def check_activation(func, *, random_state=0):
    """Check the activation protocol of ``register_activations``.

    ``func`` (a callable or a registered name) must: carry a valid ``node`` attribute
    (``"additive"`` or ``"rbf"``; missing means additive); map a float32 and a float64 NumPy
    block to an ndarray of the same shape and dtype; give finite output for moderate finite
    input; be stateless (the same block twice gives the same result) and row-wise (a block cut
    in two gives the two halves of the whole result: elmscale chunks by rows); and pickle with
    cloudpickle, since workers receive it inside the task graph.
    """
    func = _resolve("activation", func)
    label = f"activation {_label(func)}"
    if not callable(func):
        _fail(label, f"must be callable, got {type(func).__name__}")
    node = getattr(func, "node", "additive")
    if node not in ("additive", "rbf"):
        _fail(
            label,
            f"attribute node must be 'additive' or 'rbf', got {node!r} "
            "(set it with @elmscale.hidden.activation(node))",
        )
    rng = np.random.RandomState(random_state)
    Z64 = rng.uniform(-6.0, 6.0, size=(13, 7))
    if node == "rbf":
        Z64 = np.abs(Z64)  # b * ||x - a|| is never negative
    for dtype in (np.float64, np.float32):
        Z = Z64.astype(dtype)
        out = func(Z.copy())
        if not isinstance(out, np.ndarray):
            _fail(label, f"must return a NumPy array, got {type(out).__name__}")
        if out.shape != Z.shape:
            _fail(label, f"changed the shape: {Z.shape} in, {out.shape} out")
        if out.dtype != Z.dtype:
            _fail(
                label,
                f"changed the dtype: {Z.dtype} in, {out.dtype} out (compute in the "
                "input's dtype, e.g. with out=Z)",
            )
        if not np.isfinite(out).all():
            _fail(label, f"gave non-finite values for finite {Z.dtype} input in [-6, 6]")
        again = func(Z.copy())
        if not np.array_equal(out, again):
            _fail(label, "is not stateless: the same input gave two different outputs")
        halves = np.concatenate([func(Z[:6].copy()), func(Z[6:].copy())])
        if not np.allclose(halves, out, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=0):
            _fail(
                label,
                "is not row-wise: a block cut in two rows-wise gives a different "
                "result from the whole block",
            )
    _check_picklable(label, func)


def _check_picklable(label, obj):
    try:
        import cloudpickle

        cloudpickle.loads(cloudpickle.dumps(obj))
    except Exception as exc:  # noqa: BLE001
        _fail(label, f"cannot be pickled for the workers: {type(exc).__name__}: {exc}")


# -- hidden-node families --------------------------------------------------------------------
def check_node_family(
    family, *, reference=None, n_samples=150, n_features=4, n_nodes=7, random_state=0
):
    """Check the hidden-node family protocol of ``register_hidden_layers``.

    ``family`` (an object or a registered name) is fitted as an estimator fits it
    (:func:`elmscale.hidden.fit_node_family`: a random sample of the standardised rows of a
    small row-chunked dask array). It must have ``fit`` and ``transform``; ``fit`` must
    return a dict and be a function of the random state (two fits from equal states give
    equal nodes); ``transform`` must give a finite array of shape ``(rows, n_nodes)`` in the
    rows' dtype for float64 and float32 blocks, and be row-wise (a block cut in two gives the
    two halves of the whole result: elmscale chunks by rows); the fitted layer must pickle
    with cloudpickle, since workers receive it inside the task graph. ``reference``, a plain
    NumPy function ``(scaled_rows, params) -> H``, must agree with the layer on float64 rows
    to a relative 1e-10.
    """
    from .hidden import apply_scaling, fit_node_family, fit_scaling

    family = _resolve("hidden", family)
    label = f"hidden-node family {family!r}"
    for method in ("fit", "transform"):
        if not callable(getattr(family, method, None)):
            _fail(label, f"has no method {method}")
    rng = np.random.RandomState(random_state)
    X = rng.standard_normal((n_samples, n_features)) * rng.uniform(0.5, 3.0, n_features)
    Xd = da.from_array(X, chunks=((n_samples // 3, n_samples - n_samples // 3), n_features))
    offset, scale = fit_scaling(Xd, "standard")
    layers = []
    for _ in range(2):
        try:
            layers.append(
                fit_node_family(
                    family,
                    Xd,
                    n_nodes,
                    1.0,
                    np.random.RandomState(random_state),
                    offset=offset,
                    scale=scale,
                )
            )
        except (TypeError, ValueError) as exc:
            _fail(label, f"{type(exc).__name__}: {exc}")
    layer, again = layers
    for dtype in (np.float64, np.float32):
        Xs = apply_scaling(X.astype(dtype), offset, scale)
        H = _check_node_block(label, family, Xs, layer.params, n_nodes)
        if not np.array_equal(H, again(X.astype(dtype))):
            _fail(label, "is not a function of the random state: two fits from one state differ")
        k = n_samples // 2
        halves = np.concatenate([layer(X[:k].astype(dtype)), layer(X[k:].astype(dtype))])
        if not np.allclose(halves, H, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-7):
            _fail(
                label,
                "transform is not row-wise: a block cut in two gives a different result "
                "from the whole block",
            )
    if reference is not None:
        H = layer(X)
        expected = np.asarray(reference(apply_scaling(X, offset, scale), layer.params))
        if expected.shape != H.shape or not _close(H, expected, 1e-10):
            _fail(label, "transform differs from the reference")
    _check_picklable(label, layer)


def _check_node_block(label, family, Xs, params, n_nodes):
    try:
        H = family.transform(Xs.copy(), params)
    except Exception as exc:  # noqa: BLE001
        _fail(label, f"transform raised {type(exc).__name__}: {exc}")
    if not isinstance(H, np.ndarray):
        _fail(label, f"transform must return a NumPy array, got {type(H).__name__}")
    if H.shape != (Xs.shape[0], n_nodes):
        _fail(label, f"transform has shape {H.shape}, expected {(Xs.shape[0], n_nodes)}")
    if H.dtype != Xs.dtype:
        _fail(label, f"transform changed the dtype: {Xs.dtype} rows in, {H.dtype} out")
    if not np.isfinite(H).all():
        _fail(label, "transform gave non-finite values for finite rows")
    return H


# -- graph backends --------------------------------------------------------------------------
def _brute_force(X, k):
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(d2, np.inf)
    idx = np.argsort(d2, axis=1, kind="stable")[:, :k]
    return idx, np.sqrt(np.take_along_axis(d2, idx, axis=1))


def check_graph_backend(
    backend,
    *,
    n_samples=180,
    n_features=4,
    n_neighbors=6,
    chunks=(50, 70, 60),
    min_recall=0.9,
    random_state=0,
):
    """Check the graph-backend protocol of ``register_graph_backends``.

    ``backend(X, n_neighbors, *, random_state)`` (a callable or a registered name) is run on
    a small dask array with uneven row chunks. It must return ``(indices, distances)``: dask
    arrays of shape ``(n_samples, n_neighbors)`` whose row chunks are X's, integer indices in
    range, the row itself excluded, no repeated neighbour in a row, distances non-negative,
    sorted nearest first and equal to the true distances to the neighbours returned, and
    recall@k against exact brute force at least ``min_recall`` (1.0 for an exact backend).
    """
    backend = _resolve("graph", backend)
    label = f"graph backend {_label(backend)}"
    if sum(chunks) != n_samples:
        raise ValueError(f"chunks {chunks} must add up to n_samples={n_samples}")
    rng = np.random.RandomState(random_state)
    centres = rng.uniform(-5, 5, size=(3, n_features))
    X = centres[rng.randint(3, size=n_samples)] + rng.standard_normal((n_samples, n_features))
    Xd = da.from_array(X, chunks=(tuple(chunks), (n_features,)))
    k = n_neighbors
    result = backend(Xd, k, random_state=random_state)
    if not (isinstance(result, tuple) and len(result) == 2):
        _fail(label, f"must return a tuple (indices, distances), got {type(result).__name__}")
    for what, arr in zip(("indices", "distances"), result, strict=True):
        if not isinstance(arr, da.Array):
            _fail(label, f"{what} must be a dask array, got {type(arr).__name__}")
        if arr.shape != (n_samples, k):
            _fail(label, f"{what} has shape {arr.shape}, expected {(n_samples, k)}")
        if arr.chunks[0] != Xd.chunks[0]:
            _fail(
                label,
                f"{what} row chunks {arr.chunks[0]} are not X's {Xd.chunks[0]}: "
                "the graph must stay aligned with X's row blocks",
            )
    idx, dist = (np.asarray(a) for a in da.compute(*result))
    if not np.issubdtype(idx.dtype, np.integer):
        _fail(label, f"indices must be integers, got dtype {idx.dtype}")
    if idx.min() < 0 or idx.max() >= n_samples:
        _fail(label, f"indices out of range [0, {n_samples}): min {idx.min()}, max {idx.max()}")
    rows = np.arange(n_samples)[:, None]
    if (idx == rows).any():
        _fail(
            label,
            f"{int((idx == rows).any(axis=1).sum())} rows list themselves as a "
            "neighbour: the row itself must be excluded",
        )
    srt = np.sort(idx, axis=1)
    if (srt[:, 1:] == srt[:, :-1]).any():
        _fail(label, "a row lists the same neighbour twice")
    if (dist < 0).any() or not np.isfinite(dist).all():
        _fail(label, "distances must be finite and non-negative")
    if (np.diff(dist, axis=1) < -1e-9 * (1 + dist[:, 1:])).any():
        _fail(label, "distances must be sorted, nearest first")
    true_d = np.sqrt(((X[:, None, :] - X[idx]) ** 2).sum(axis=2))
    if not np.allclose(dist, true_d, rtol=1e-4, atol=1e-6):
        worst = float(np.abs(dist - true_d).max())
        _fail(
            label,
            f"distances are not the Euclidean distances to the neighbours returned "
            f"(largest error {worst:.3g})",
        )
    exact, _ = _brute_force(X, k)
    recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(idx, exact, strict=True)])
    if recall < min_recall:
        _fail(label, f"recall@{k} against brute force is {recall:.3f} < {min_recall}")


# -- kernels ---------------------------------------------------------------------------------
def _close(a, b, rtol):
    """``a`` equals ``b`` to ``rtol`` relative to b's largest entry (kernel values near zero
    are compared at the scale of the matrix, not their own)."""
    scale = max(float(np.abs(b).max()), np.finfo(np.float64).tiny) if np.size(b) else 1.0
    return np.abs(np.asarray(a) - b).max(initial=0.0) <= rtol * scale


def _check_block(label, kernel, X, Y, what):
    try:
        K = kernel(X, Y)
    except Exception as exc:  # noqa: BLE001
        _fail(label, f"{what} raised {type(exc).__name__}: {exc}")
    if not isinstance(K, np.ndarray):
        _fail(label, f"{what} must return a NumPy array, got {type(K).__name__}")
    if K.shape != (X.shape[0], Y.shape[0]):
        _fail(label, f"{what} has shape {K.shape}, expected {(X.shape[0], Y.shape[0])}")
    if K.dtype != np.float64:
        _fail(label, f"{what} must be float64 (whatever the input's dtype), got {K.dtype}")
    if not np.isfinite(K).all():
        _fail(label, f"{what} gave non-finite values for finite input")
    return K


def _factor_of_all_rows(kernel, X, **kwargs):
    """The kernel's factor on a sample holding every row of X (Nystrom preferred)."""
    n = X.shape[0]
    return kernel.factor(
        X.copy(),
        n_samples=n,
        n_components=n,
        method="nystrom",
        random_state=np.random.RandomState(0),
        **kwargs,
    )


def _check_factor(label, kernel, X, rtol):
    """The factor on a sample holding every row: K(X, X) = alpha I + Phi Phi^T."""
    from .kernels import KernelFactor

    n = X.shape[0]
    try:
        f = _factor_of_all_rows(kernel, X)
    except Exception as exc:  # noqa: BLE001
        _fail(label, f"factor() raised {type(exc).__name__}: {exc}")
    if not isinstance(f, KernelFactor):
        _fail(
            label, f"factor() must return an elmscale.kernels.KernelFactor, got {type(f).__name__}"
        )
    m = f.n_components
    P = np.asarray(f.features(X))
    if P.shape != (n, m):
        _fail(
            label,
            f"factor().features(X) has shape {P.shape}, expected {(n, m)} (n_components columns)",
        )
    if not np.isfinite(P).all() or not np.isfinite(f.alpha):
        _fail(label, "factor() gave non-finite features or alpha")
    halves = np.concatenate([f.features(X[: n // 2]), f.features(X[n // 2 :])])
    if not _close(halves, P, 1e-10):
        _fail(
            label,
            "factor().features is not row-wise: a block cut in two gives a "
            "different result from the whole block",
        )
    dense = f.alpha * np.eye(n) + P @ P.T
    K = kernel(X, X)
    if not _close(dense, K, rtol):
        worst = float(np.abs(dense - K).max())
        _fail(
            label,
            f"factor() on a sample holding every row must represent K exactly: "
            f"alpha I + Phi Phi^T differs from kernel(X, X) by {worst:.3g} (the scalable "
            f"mode would use a different kernel)",
        )
    if not _close(f.diagonal(X), np.diag(dense), 1e-10):
        _fail(label, "factor().diagonal(X) is not alpha + the row norms of Phi squared")
    return f


def _kernel_instance(kernel, params):
    """A registered name or a class built with ``params``, or an instance as it is."""
    obj = _resolve("kernel", kernel)
    if isinstance(obj, type):
        try:
            return obj(**(params or {}))
        except Exception as exc:  # noqa: BLE001
            _fail(
                f"kernel {_label(obj)}",
                f"could not be built with {params or {}}: {type(exc).__name__}: {exc}",
            )
    if params:
        raise TypeError("params is for a kernel class or registered name; got an instance")
    return obj


def _check_shared_distances(label, kernel, X, Y, K, factor):
    """A kernel declaring ``shares_distances`` gives the same blocks and factor with a
    DistanceCache, read or filled."""
    from .kernels import DistanceCache

    cache = DistanceCache()
    for _ in range(2):  # the second call reads the cache
        if not np.array_equal(kernel(X, Y, distances=cache), K):
            _fail(label, "kernel(X, Y, distances=cache) differs from kernel(X, Y)")
    shared = _factor_of_all_rows(kernel, X, distances=cache)
    if type(shared) is not type(factor) or not np.array_equal(
        shared.features(X), factor.features(X)
    ):
        _fail(label, "factor(..., distances=cache) differs from factor(...)")


def check_kernel(
    kernel, *, params=None, reference=None, n_samples=40, n_features=3, rtol=1e-8, random_state=0
):
    """Check the kernel protocol of ``register_kernels``.

    ``kernel`` is a registered name, a kernel class (built with ``params``) or an instance.
    On small random data (uniform in [-1, 1], as after TUMK-ELM's default scaling) the
    block ``kernel(X, Y)`` must be a finite float64 NumPy array of shape
    ``(len(X), len(Y))`` for float64 and float32 input, leave its inputs unchanged, be
    row-wise (elmscale evaluates row blocks), symmetric (``K(Y, X) = K(X, Y)^T``) and
    positive semi-definite (eigenvalues of ``K(X, X)`` not below ``-1e-8`` times the
    largest), with ``diagonal(X)`` equal to the diagonal of ``K(X, X)``; ``reference``, a
    plain NumPy function ``(X, Y) -> K``, must agree with the block to ``rtol``.
    ``factor(...)`` on a sample holding every row must return a
    :class:`~elmscale.kernels.KernelFactor` that represents ``K(X, X)`` exactly
    (``alpha I + Phi Phi^T``, dense, to ``rtol``) with row-wise ``features`` and the
    matching ``diagonal``. A kernel declaring ``shares_distances`` must give the same
    blocks and factors with a :class:`~elmscale.kernels.DistanceCache`. Kernel and factor
    must pickle with cloudpickle, since workers receive them inside the task graph.
    """
    kernel = _kernel_instance(kernel, params)
    label = f"kernel {kernel!r}"
    if not callable(kernel):
        _fail(label, f"must be callable as kernel(X, Y), got {type(kernel).__name__}")
    rng = np.random.RandomState(random_state)
    X = rng.uniform(-1, 1, size=(n_samples, n_features))
    Y = rng.uniform(-1, 1, size=(n_samples // 2 + 3, n_features))
    X_before, Y_before = X.copy(), Y.copy()
    K = _check_block(label, kernel, X, Y, "kernel(X, Y)")
    if not (np.array_equal(X, X_before) and np.array_equal(Y, Y_before)):
        _fail(label, "kernel(X, Y) modified its input")
    _check_block(
        label, kernel, X.astype(np.float32), Y.astype(np.float32), "kernel(X, Y) of float32 input"
    )
    if reference is not None:
        ref = np.asarray(reference(X, Y), dtype=np.float64)
        if ref.shape != K.shape or not _close(K, ref, rtol):
            worst = float(np.abs(K - ref).max()) if ref.shape == K.shape else "shape"
            _fail(
                label,
                f"kernel(X, Y) differs from the reference computation (largest error {worst})",
            )
    cut = n_samples // 3
    if not _close(np.concatenate([kernel(X[:cut], Y), kernel(X[cut:], Y)]), K, 1e-12):
        _fail(
            label,
            "is not row-wise: a block cut in two gives a different result from the whole block",
        )
    if not _close(kernel(Y, X), K.T, 1e-12):
        _fail(label, "is not symmetric: kernel(Y, X) differs from kernel(X, Y).T")
    KX = _check_block(label, kernel, X, X, "kernel(X, X)")
    top = np.linalg.eigvalsh(0.5 * (KX + KX.T))
    if top[0] < -1e-8 * max(abs(top[-1]), 1e-300):
        _fail(
            label,
            f"is not positive semi-definite: K(X, X) has eigenvalue {top[0]:.3g} "
            f"(largest {top[-1]:.3g}); TUMK-ELM's eigenvectors and Nystrom factors need a "
            "PSD kernel",
        )
    if not callable(getattr(kernel, "diagonal", None)):
        _fail(label, "has no diagonal(X) (subclass elmscale.kernels.Kernel)")
    diag = np.asarray(kernel.diagonal(X), dtype=np.float64)
    if diag.shape != (n_samples,) or not _close(diag, np.diag(KX), rtol):
        _fail(label, "diagonal(X) differs from the diagonal of kernel(X, X)")
    if not hasattr(kernel, "factor"):
        _fail(
            label,
            "has no factor() (subclass elmscale.kernels.Kernel: its default is "
            "Nystrom on the landmark sample)",
        )
    factor = _check_factor(label, kernel, X, rtol)
    if getattr(kernel, "shares_distances", False):
        _check_shared_distances(label, kernel, X, Y, K, factor)
    _check_picklable(label, kernel)
    _check_picklable(f"{label} factor", factor)
    import cloudpickle

    if not np.array_equal(cloudpickle.loads(cloudpickle.dumps(kernel))(X, Y), K):
        _fail(label, "gives a different block after a pickle round trip")


# -- algorithms ------------------------------------------------------------------------------
_FAST = {
    "n_clusters": 3,
    "n_hidden": 40,
    "graph": "exact",
    "n_neighbors": 5,
    "n_init": 2,
    "random_state": 0,
}


SKLEARN_CHECKS = (
    "check_no_attributes_set_in_init",
    "check_parameters_default_constructible",
    "check_get_params_invariance",
    "check_set_params",
    "check_dont_overwrite_parameters",
    "check_estimators_overwrite_params",
    "check_fit_score_takes_y",
    "check_n_features_in",
    "check_estimators_pickle",
)


def _sklearn_basics(name, estimator, skip_checks):
    from sklearn.utils import estimator_checks as ec

    unknown = set(skip_checks) - set(SKLEARN_CHECKS)
    if unknown:
        raise ValueError(
            f"skip_checks: unknown checks {sorted(unknown)}; choose among {list(SKLEARN_CHECKS)}"
        )
    for check in SKLEARN_CHECKS:
        if check in skip_checks:
            continue
        try:
            getattr(ec, check)(name, estimator)
        except AssertionError as exc:
            raise AssertionError(f"algorithm {name}: scikit-learn's {check} failed: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - report which check, whatever the error
            if type(exc).__name__ == "SkipTest":
                continue
            raise AssertionError(
                f"algorithm {name}: scikit-learn's {check} raised {type(exc).__name__}: {exc}"
            ) from exc


def check_algorithm(
    cls,
    *,
    params=None,
    X=None,
    y=None,
    sklearn_checks=True,
    skip_checks=(),
    reduce_checks=True,
    sweep_values=None,
):
    """Check the algorithm protocol of ``register_algorithms``.

    ``cls`` (a class or a registered name) must be a scikit-learn estimator class:
    ``get_params``/``set_params``/``clone`` round-trip, ``__init__`` only stores its
    arguments, ``fit`` returns ``self``, records ``n_features_in_``, leaves X unchanged and
    only adds attributes ending in ``_``; ``labels_`` (clusterers), ``predict`` and
    ``transform`` give one row per sample; output follows input (NumPy in, NumPy out; dask in,
    dask out); and a wrong number of features at predict/transform time is a ``ValueError``.
    With ``sklearn_checks`` a few of scikit-learn's own estimator checks run too (listed in
    ``SKLEARN_CHECKS``; name any that cannot apply in ``skip_checks``, e.g.
    ``"check_dont_overwrite_parameters"``, which sets ``n_clusters=1``).

    With ``reduce_checks``, an estimator written on :class:`elmscale.BaseELM` with a
    ``reduce_params`` list must declare in it every parameter its ``reduce_hidden`` reads:
    for each other parameter, a second value is taken from ``sweep_values`` (a dict) or
    from its ``_parameter_constraints`` (the other boolean, another string option, a
    number moved within its interval), and re-solving one reduction with it
    (:func:`elmscale.sweep`) must give the fitted attributes of a fresh fit with it.

    ``params`` override small, fast settings (``n_clusters=3``, ``n_hidden=40``,
    ``graph="exact"``, ... for the parameters the class has); ``X`` defaults to 90 points in
    4-D in 3 blobs; pass ``y`` (or ``y="blobs"``, the blob labels) for supervised and
    semi-supervised estimators.
    """
    from sklearn.base import clone

    cls = _resolve("algorithm", cls)
    label = f"algorithm {_label(cls)}"
    est, fast = _check_construction(label, cls, params)
    X, y = _default_data(X, y)
    _check_fit(label, est, fast, X, y)
    _check_predictions(label, est, X, y)
    if reduce_checks:
        _check_reduce_params(label, est, X, y, sweep_values or {})
    if sklearn_checks:
        _sklearn_basics(_label(cls), clone(est), skip_checks)


def _check_construction(label, cls, params):
    """Build ``cls`` with the fast settings; check ``__init__``, ``get_params`` and clone."""
    from sklearn.base import clone

    if not isinstance(cls, type):
        _fail(label, f"must be a class, got {type(cls).__name__}")
    for method in ("get_params", "set_params", "fit"):
        if not callable(getattr(cls, method, None)):
            _fail(label, f"has no {method}() (subclass sklearn.base.BaseEstimator)")
    signature = inspect.signature(cls.__init__)
    names = [p for p in signature.parameters if p != "self"]
    variadic = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    if any(signature.parameters[p].kind in variadic for p in names):
        _fail(label, "__init__ must list its parameters explicitly (no *args/**kwargs)")
    fast = {k: v for k, v in _FAST.items() if k in names}
    fast.update(params or {})
    try:
        est = cls(**fast)
    except Exception as exc:  # noqa: BLE001
        _fail(label, f"could not be built with {fast}: {type(exc).__name__}: {exc}")
    got = est.get_params(deep=False)
    if sorted(got) != sorted(names):
        _fail(label, f"get_params() keys {sorted(got)} differ from __init__'s {sorted(names)}")
    for key, value in fast.items():
        if got[key] is not value and got[key] != value:
            _fail(
                label,
                f"__init__ changed parameter {key}: passed {value!r}, "
                f"get_params() gives {got[key]!r}",
            )
    extra = sorted(set(vars(est)) - set(names))
    if extra:
        _fail(label, f"__init__ must only store its arguments; it also set {extra}")
    if clone(est).get_params(deep=False).keys() != got.keys():
        _fail(label, "clone() did not reproduce the parameters")
    return est, fast


def _default_data(X, y):
    """90 points in 4-D in 3 blobs unless X is given; ``y="blobs"`` their labels."""
    if X is None:
        rng = np.random.RandomState(0)
        centres = np.array([[0, 0, 0, 0], [6, 6, 0, 0], [0, 6, 6, 0]], dtype=float)
        X = np.repeat(centres, 30, axis=0) + rng.standard_normal((90, 4))
        if isinstance(y, str) and y == "blobs":
            y = np.repeat(np.arange(3), 30)
    return np.asarray(X, dtype=np.float64), y


def _fit(est, X, y):
    return est.fit(X) if y is None else est.fit(X, y)


def _check_fit(label, est, fast, X, y):
    """``fit`` returns self, leaves X and the parameters alone, sets ``n_features_in_`` and
    only public attributes ending in ``_``."""
    X_before = X.copy()
    got = est.get_params(deep=False)
    before = set(vars(est))
    fitted = _fit(est, X, y)
    if fitted is not est:
        _fail(label, f"fit() must return self, got {type(fitted).__name__}")
    if not np.array_equal(X, X_before):
        _fail(label, "fit() modified its input X")
    if getattr(est, "n_features_in_", None) != X.shape[1]:
        _fail(
            label,
            f"fit() must set n_features_in_ = {X.shape[1]}, got "
            f"{getattr(est, 'n_features_in_', None)!r}",
        )
    new = sorted(
        a for a in set(vars(est)) - before if not a.endswith("_") and not a.startswith("_")
    )
    if new:
        _fail(label, f"fit() set public attributes without a trailing underscore: {new}")
    if est.get_params(deep=False).keys() != got.keys() or any(
        est.get_params(deep=False)[k] is not got[k] for k in fast
    ):
        _fail(label, "fit() changed the estimator's parameters")


def _check_predictions(label, est, X, y):
    """One row per sample from ``labels_``, ``predict`` and ``transform``, NumPy for NumPy
    and dask for dask; a ValueError for the wrong number of features."""
    from sklearn.base import clone

    n = X.shape[0]
    if hasattr(est, "labels_"):
        _check_rows(label, "labels_", est.labels_, n, np.ndarray)
    X_dask = da.from_array(X, chunks=((30, 35, 25), (X.shape[1],)))
    for method in ("predict", "transform"):
        if not callable(getattr(est, method, None)):
            continue
        _check_rows(label, f"{method}(numpy)", getattr(est, method)(X), n, np.ndarray)
        _check_rows(label, f"{method}(dask)", getattr(est, method)(X_dask), n, da.Array)
        try:
            getattr(est, method)(X[:, :-1])
        except ValueError:
            pass
        except Exception as exc:  # noqa: BLE001
            _fail(
                label,
                f"{method}() with the wrong number of features raised "
                f"{type(exc).__name__} instead of ValueError: {exc}",
            )
        else:
            _fail(label, f"{method}() accepted X with the wrong number of features")
    dask_fit = _fit(clone(est), X_dask, y)
    if hasattr(dask_fit, "labels_"):
        _check_rows(label, "labels_ after fit(dask)", dask_fit.labels_, n, da.Array)


_NO_VALUE = object()


def _check_reduce_params(label, est, X, y, sweep_values):
    """Every parameter outside ``reduce_params``, changed and re-solved on one reduction,
    gives what a fresh fit gives."""
    from sklearn.base import clone

    from .base import BaseELM
    from .sweep import sweep

    if not isinstance(est, BaseELM) or est.reduce_params is None:
        return
    params = est.get_params(deep=False)
    unknown = sorted(set(est.reduce_params) - set(params))
    if unknown:
        _fail(label, f"reduce_params names {unknown}, which are not parameters")
    for name in sorted(set(params) - set(est.reduce_params)):
        other = sweep_values.get(name, _other_value(type(est), name, params[name]))
        if other is _NO_VALUE:
            continue
        try:
            fresh = _fit(clone(est).set_params(**{name: other}), X, y)
        except ValueError:  # not a setting these data allow
            continue
        resolved = sweep(clone(est), X, {name: [params[name], other]}, y)[1][1]
        differs = _differing_attributes(fresh, resolved)
        if differs:
            _fail(
                label,
                f"{name}={other!r} re-solved on a reduction made with {name}="
                f"{params[name]!r} (elmscale.sweep) gives other {differs} than a fresh fit: "
                f"{name} is not in reduce_params, but reduce_hidden reads it",
            )


def _other_value(cls, name, value):
    """A second valid value of a parameter from its constraints, or ``_NO_VALUE``."""
    from numbers import Integral, Real

    from .validation import Interval, StrOptions

    for constraint in getattr(cls, "_parameter_constraints", {}).get(name, ()):
        if constraint == "boolean" and isinstance(value, bool):
            return not value
        if isinstance(constraint, StrOptions) and isinstance(value, str):
            others = sorted(constraint.options - {value})
            if value in constraint.options and others:
                return others[0]
        if isinstance(constraint, Interval) and isinstance(value, Real | Integral):
            if isinstance(value, bool):
                continue
            for candidate in (value * 2, value + 1, value / 2, value - 1, 1):
                if constraint.type is Integral:
                    candidate = int(candidate)
                if candidate != value and constraint.is_satisfied_by(candidate):
                    return candidate
    return _NO_VALUE


def _differing_attributes(a, b):
    """Names of the fitted array and number attributes that differ between two fits."""
    names = sorted(
        n
        for n in set(vars(a)) & set(vars(b))
        if n.endswith("_") and not n.startswith("_") and n != "timings_"
    )
    differs = []
    for n in names:
        va, vb = getattr(a, n), getattr(b, n)
        if isinstance(va, da.Array | np.ndarray | float | int | np.number):
            va, vb = np.asarray(va), np.asarray(vb)
            if va.shape != vb.shape:
                differs.append(n)
            elif va.dtype.kind in "biuf" and vb.dtype.kind in "biuf":
                if not np.allclose(va, vb, rtol=1e-6, atol=1e-9, equal_nan=True):
                    differs.append(n)
            elif not np.array_equal(va, vb):
                differs.append(n)
    return differs


def _check_rows(label, what, value, n, kind):
    if not isinstance(value, kind):
        _fail(
            label,
            f"{what} must be a {kind.__module__.split('.')[0]} array (output follows "
            f"input), got {type(value).__name__}",
        )
    if value.shape[0] != n:
        _fail(label, f"{what} has {value.shape[0]} rows, expected one per sample ({n})")
