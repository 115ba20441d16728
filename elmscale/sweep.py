"""Fit a parameter grid with one reduction per distinct data-dependent setting."""

from sklearn.base import clone
from sklearn.model_selection import ParameterGrid

from .base import BaseELM, _differ


def sweep(estimator, X, grid, y=None, *, scoring=None, errors="raise", checkpoint=None):
    """Fit ``estimator`` for every setting of ``grid``, reducing the data once per group.

    The settings are grouped by the values of the estimator's ``reduce_params`` (hidden
    layer, graph and whatever else its :meth:`~elmscale.base.BaseELM.reduce` reads); each
    group costs one :meth:`~elmscale.base.BaseELM.reduce` (one Gram pass for US-ELM, SS-ELM,
    ELM-JEC, EMMC and the supervised ELMs) and one small :meth:`~elmscale.base.BaseELM.solve`
    per setting. A grid over ``lam`` and ``n_components`` of US-ELM, ``C`` of EMMC or ``lam``
    and ``gamma`` of ELM-JEC therefore reads the data once. Every result equals
    ``clone(estimator).set_params(**setting).fit(X, y)``.

    Parameters
    ----------
    estimator : BaseELM
        The parameters not in the grid.
    X : array-like or dask array (n_samples, n_features)
    grid : dict of lists, or list of such dicts
        As ``sklearn.model_selection.ParameterGrid``.
    y : array-like or None
        Targets for the supervised and semi-supervised estimators.
    scoring : callable or None
        ``scoring(fitted, X, y)`` (a scikit-learn scorer); None returns the fitted estimators.
    errors : {"raise", "return"}
        What a setting whose solve raises ``ValueError`` gives: the error is raised, or
        returned in place of its result.
    checkpoint : str or None
        A folder (local path or fsspec URL) that keeps the reductions
        (:mod:`elmscale.checkpoint`): a sweep run again, or a sweep after a ``fit`` of the
        estimator with the same folder, reads them instead of passing over the data. With
        several groups, group i uses the sub-folder ``<checkpoint>/<i>``.

    Returns
    -------
    list of (dict, result)
        Each setting, in grid order, with its fitted estimator, its score, or the ValueError
        its solve raised (``errors="return"``).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> import elmscale
    >>> X, _ = load_iris(return_X_y=True)
    >>> base = elmscale.USELM(n_clusters=3, n_hidden=100, graph="exact", random_state=0)
    >>> fits = elmscale.sweep(base, X, {"lam": [0.01, 1.0], "n_components": [2, 3]})
    >>> [(setting["lam"], model.embedding_.shape[1]) for setting, model in fits]
    [(0.01, 2), (0.01, 3), (1.0, 2), (1.0, 3)]
    """
    if not isinstance(estimator, BaseELM):
        raise TypeError(
            "estimator must be an elmscale estimator (a BaseELM with reduce and "
            f"solve), got {type(estimator).__name__}"
        )
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
    if scoring is not None and not callable(scoring):
        raise TypeError(f"scoring must be a callable(estimator, X, y) or None, got {scoring!r}")
    settings = list(ParameterGrid(grid))
    models = [clone(estimator).set_params(**setting) for setting in settings]
    for model in models:  # every setting is checked before any data is read
        model._validate_params()
    results = [None] * len(models)
    groups = _reduction_groups(models)
    for i, members in enumerate(groups):
        where = checkpoint if len(groups) == 1 or checkpoint is None else f"{checkpoint}/{i}"
        reduction = models[members[0]].reduce(X, y, checkpoint=where)
        reduction.n_solves = len(members)
        try:
            for i in members:
                try:
                    fitted = models[i].solve(reduction)
                except ValueError as exc:
                    if errors == "raise":
                        raise
                    results[i] = exc
                    continue
                results[i] = fitted if scoring is None else scoring(fitted, X, y)
        finally:
            reduction.release()
    return list(zip(settings, results, strict=True))


def _reduction_groups(models):
    """The models' indices, grouped by equal ``reduce_key`` (first appearance first)."""
    groups = []  # (key, indices of the models that share it)
    for i, model in enumerate(models):
        key = model.reduce_key()
        for other, members in groups:
            if not any(_differ(key[n], other[n]) for n in key):
                members.append(i)
                break
        else:
            groups.append((key, [i]))
    return [members for _, members in groups]


__all__ = ["sweep"]
