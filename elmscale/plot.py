"""Figures of a fitted estimator (needs matplotlib: ``pip install 'elmscale[plot]'``).

Each function takes a fitted estimator, draws on ``ax`` (a new figure's axes when None) and
returns the matplotlib Axes, as scikit-learn's ``Display.plot`` does:

- :func:`embedding`: the first two embedding columns as a scatter coloured by cluster (the
  US-ELM paper's embeddings);
- :func:`history`: the objective or loss per iteration (ELM-JEC Fig. 1, EMMC's label
  changes) and, for TUMK-ELM, the kernel weights per iteration (Fig. 4);
- :func:`timings`: wall seconds per fit stage (``timings_``).

Large data are subsampled to ``max_points`` evenly spaced rows before anything reaches
the client.
"""

import numpy as np

__all__ = ["embedding", "history", "timings"]


def _axes(ax):
    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - exercised without matplotlib only
        raise ImportError("elmscale.plot needs matplotlib: pip install 'elmscale[plot]'") from None
    if ax is None:
        _, ax = plt.subplots()
    return ax


def _name(model):
    return type(model).__name__


def _every(n, max_points):
    return max(1, -(-n // max_points)) if max_points else 1


def embedding(model, X, *, labels=None, ax=None, max_points=20_000, **scatter_kw):
    """Scatter the first two embedding columns of X, coloured by ``labels`` (default: the
    model's clusters of X, ``predict(X)``).

    Parameters
    ----------
    model : fitted estimator with ``transform`` (USELM, ELMJEC, TUMKELM, ...) or
        ``decision_function`` (EMMC)
    X : array-like or dask array (n_samples, n_features)
        Points to embed (the training data or new points).
    labels : array-like (n_samples,) or None
        Colours, e.g. known classes; None uses ``predict(X)`` when the model has it.
    ax : matplotlib Axes or None
    max_points : int or None, default=20000
        Draw every k-th row so at most this many points are drawn (None: all).
    **scatter_kw
        Passed to ``ax.scatter``.

    Returns
    -------
    ax : matplotlib Axes
    """
    import dask

    ax = _axes(ax)
    step = _every(X.shape[0], max_points)
    Xs = X[::step]
    embed = getattr(model, "transform", None) or getattr(model, "decision_function", None)
    if embed is None:
        raise TypeError(
            f"{_name(model)} has neither transform nor decision_function: no embedding to draw"
        )
    E = embed(Xs)
    if labels is None and hasattr(model, "predict"):
        colours = model.predict(Xs)
    else:
        colours = None if labels is None else labels[::step]
    E, colours = dask.compute(E, colours)
    E = np.asarray(E, dtype=np.float64)
    if E.ndim == 1 or E.shape[1] == 1:
        E = np.column_stack([E.ravel(), np.zeros(E.shape[0])])
    kw = {"s": 6, "alpha": 0.8, "linewidths": 0}
    kw.update(scatter_kw)
    if colours is not None:
        kw.setdefault("cmap", "tab10")
        kw["c"] = np.asarray(colours)
    ax.scatter(E[:, 0], E[:, 1], **kw)
    ax.set_xlabel("embedding 1")
    ax.set_ylabel("embedding 2")
    shown = f"{E.shape[0]:,} of {X.shape[0]:,} points" if step > 1 else f"{E.shape[0]:,} points"
    ax.set_title(f"{_name(model)} embedding ({shown})")
    return ax


def history(model, ax=None):
    """Convergence per iteration: ELM-JEC's objective (eq. 6) and k-means term, TUMK-ELM's
    loss (eq. 10) with its kernel weights on a second axis, EMMC's changed labels.

    Returns
    -------
    ax : matplotlib Axes
        The objective's axes (TUMK-ELM's weights are on ``ax.figure.axes``' twin).
    """
    h = getattr(model, "history_", None)
    if h is None:
        raise ValueError(
            f"{_name(model)} has no history_: fit it first, or use an "
            "iterative estimator (ELMJEC, EMMC, TUMKELM)"
        )
    ax = _axes(ax)
    if isinstance(h, dict):  # ELM-JEC: arrays per key, row 0 the initialisation
        it = np.arange(len(h["objective"]))
        ax.plot(it, h["objective"], "o-", label="objective (eq. 6)")
        ax.plot(it, h["kmeans_objective"], "s--", label="k-means term")
        ax.set_ylabel("value")
        ax.legend(loc="best")
    elif isinstance(h, list):  # EMMC: one dict per iteration
        it = np.arange(1, len(h) + 1)
        ax.plot(it, [r["n_changed"] for r in h], "o-", label="labels changed")
        ax.plot(it, [r["n_moved"] for r in h], "s--", label="moved by the balance step")
        ax.set_ylabel("points")
        ax.legend(loc="best")
    else:  # TUMK-ELM: the loss, and the weights of each kernel
        it = np.arange(1, len(h) + 1)
        ax.plot(it, h, "ko-", label="loss (eq. 10)")
        ax.set_ylabel("loss (eq. 10)")
        weights = getattr(model, "weights_history_", None)
        if weights is not None:
            twin = ax.twinx()
            names = [
                repr(k).replace("Kernel", "")
                for k in getattr(model, "kernels_", range(weights.shape[1]))
            ]
            # kernels the updates dropped (weight 0 after the uniform start) in grey, one
            # legend entry for all of them
            later = weights[1:] if len(weights) > 1 else weights
            dropped = "dropped kernels"
            for q in range(weights.shape[1]):
                if later[:, q].max() > 0:
                    twin.plot(it, weights[:, q], ".-", label=names[q])
                else:
                    twin.plot(it, weights[:, q], "-", color="0.75", lw=0.8, label=dropped)
                    dropped = "_nolegend_"
            twin.set_ylabel("kernel weight")
            twin.legend(loc="upper right", fontsize="x-small")
            ax.set_zorder(twin.get_zorder() + 1)  # the loss above the weights
            ax.patch.set_visible(False)
    ax.set_xlabel("iteration")
    ax.set_title(f"{_name(model)} convergence")
    return ax


def timings(model, ax=None):
    """Horizontal bars of the wall seconds per fit stage (``timings_``).

    Returns
    -------
    ax : matplotlib Axes
    """
    t = getattr(model, "timings_", None)
    if not t:
        raise ValueError(
            f"{_name(model)} has no timings_ (fit it first; estimators that "
            "record stage timings have the attribute)"
        )
    ax = _axes(ax)
    names = list(t)
    ax.barh(names, [t[n] for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(f"{_name(model)} fit stages ({sum(t.values()):.2f} s)")
    return ax
