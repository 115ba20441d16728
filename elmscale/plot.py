"""Figures of a fitted estimator (needs matplotlib: ``pip install 'elmscale[plot]'``).

Each function takes a fitted estimator, draws on ``ax`` (a new figure's axes when None) and
returns the matplotlib Axes, as scikit-learn's ``Display.plot`` does:

- :func:`embedding`: the embedding laid out in the plane, by default a t-SNE layout of a sample
  (:func:`layout`) or a linear projection (:func:`project`), a scatter coloured by cluster
  with a legend (the US-ELM paper's embeddings);
- :func:`history`: the objective or loss per iteration (ELM-JEC Fig. 1, EMMC's label
  changes) and, for TUMK-ELM, the kernel weights per iteration (Fig. 4);
- :func:`timings`: wall seconds per fit stage (``timings_``).

Large data are subsampled to ``max_points`` evenly spaced rows before anything reaches
the client.
"""

import numpy as np

__all__ = ["embedding", "history", "layout", "project", "timings"]


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


#: nonlinear layouts of a sample (:func:`layout`), then the linear projections (:func:`project`)
LAYOUTS = ("tsne", "umap")
LINEAR = ("centres", "pca", "columns")
PROJECTIONS = ("auto", *LAYOUTS, *LINEAR)
#: rows drawn by default: a nonlinear layout costs superlinear time in the points it places, a
#: linear projection one product
MAX_POINTS = {"layout": 3_000, "linear": 20_000}
#: at most this many distinct integer labels get a legend (more: a colour bar)
LEGEND_MAX = 20


def _principal_directions(A, weights=None, n=2):
    """The n leading principal directions (columns) of the rows of A, weighted."""
    w = np.ones(len(A)) if weights is None else np.asarray(weights, dtype=np.float64)
    centred = A - (w @ A) / w.sum()
    _, _, vt = np.linalg.svd(centred * np.sqrt(w)[:, None], full_matrices=False)
    return vt[:n].T


def project(E, colours, projection):
    """The embedding E (n, d) in 2-D and the axis names.

    ``"centres"``: onto the two leading principal directions of the centres of the points of
    each colour, weighted by their counts (the plane that spreads the clusters apart most;
    with two clusters, the second direction is the points' leading principal direction
    orthogonal to the first); ``"pca"``: onto the points' two leading principal directions;
    ``"columns"``: the first two columns.
    """
    if E.shape[1] <= 2 or projection == "columns":
        E = E if E.shape[1] >= 2 else np.column_stack([E[:, 0], np.zeros(len(E))])
        return E[:, :2], ("embedding 1", "embedding 2")
    if projection == "centres" and colours is not None:
        values, inverse, counts = np.unique(colours, return_inverse=True, return_counts=True)
        if len(values) > 1:
            centres = np.zeros((len(values), E.shape[1]))
            np.add.at(centres, inverse, E)
            centres /= counts[:, None]
            V = _principal_directions(centres, counts, n=min(2, len(values) - 1))
            if V.shape[1] < 2:  # two clusters: the spread of the points orthogonal to it
                rest = E - np.outer(E @ V[:, 0], V[:, 0])
                V = np.column_stack([V, _principal_directions(rest, n=1)])
            return E @ V, ("between-cluster direction 1", "between-cluster direction 2")
    return E @ _principal_directions(E), ("principal direction 1", "principal direction 2")


def layout(E, method="tsne", *, random_state=0):
    """A nonlinear 2-D layout of the rows of E and the axis names.

    A linear projection of an embedding with many columns (``n_components``, often as many as
    clusters) puts most clusters on top of each other; a neighbour-preserving layout shows
    each cluster of the embedding as its own island. Distances between islands and their
    sizes carry little meaning; which points share an island does.

    Parameters
    ----------
    E : ndarray (n, d)
        The rows to lay out (a sample: the cost grows faster than n).
    method : {"tsne", "umap"}, default="tsne"
        ``"tsne"``: scikit-learn's :class:`~sklearn.manifold.TSNE` (Barnes-Hut) with PCA
        initialisation, 500 iterations and a perplexity of 30 (less for fewer than 91 rows);
        ``"umap"``: ``umap.UMAP`` (needs umap-learn; its first call in a process compiles with
        numba).
    random_state : int, RandomState or None, default=0
        Seeds the layout: one seed, one figure.

    Returns
    -------
    P : ndarray (n, 2)
    names : (str, str)
        The axis names.
    """
    E = np.asarray(E, dtype=np.float64)
    if method not in LAYOUTS:
        raise ValueError(f"method must be one of {LAYOUTS}, got {method!r}")
    if len(E) < 4:  # nothing to lay out: too few neighbours for either method
        return project(E, None, "pca")
    if method == "umap":
        try:
            from umap import UMAP
        except ImportError:
            raise ImportError(
                "projection='umap' needs umap-learn: pip install umap-learn "
                "(or use projection='tsne')"
            ) from None
        n_neighbors = min(15, len(E) - 1)
        # a seed makes umap-learn single-threaded anyway: say so, and it does not warn
        umap = UMAP(n_neighbors=n_neighbors, random_state=random_state, n_jobs=1)
        P = umap.fit_transform(E)
        return np.asarray(P, dtype=np.float64), ("UMAP 1", "UMAP 2")
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    # scikit-learn needs perplexity < n; 30 is its default and suits a few thousand points
    perplexity = min(30.0, (len(E) - 1) / 3)
    # 500 iterations (scikit-learn's default is 1,000): the first 250 exaggerate and pull the
    # clusters apart, the next 250 settle each island; more only polish inside the islands,
    # at the layout's full cost again
    tsne = TSNE(init="pca", perplexity=perplexity, max_iter=500, random_state=random_state)
    # one OpenMP thread: Barnes-Hut t-SNE synchronises its threads twice per iteration for a
    # little work each time, and on cores shared with dask workers (or other processes) the
    # waiting threads cost many times what the second thread adds
    with threadpool_limits(limits=1, user_api="openmp"):
        P = tsne.fit_transform(E)
    return P, ("t-SNE 1", "t-SNE 2")


def _colour_key(ax, points, colours, title):
    """A legend with one entry per label when there are few integer labels, else a colour
    bar."""
    values = np.unique(colours)
    if np.issubdtype(values.dtype, np.integer) and len(values) <= LEGEND_MAX:
        handles, _ = points.legend_elements(num=list(values))
        names = [str(v) for v in values]
        ax.legend(
            handles,
            names,
            title=title,
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            fontsize="small",
            markerscale=1.5,
        )
    else:
        ax.figure.colorbar(points, ax=ax, label=title)


def embedding(
    model,
    X=None,
    *,
    labels=None,
    projection="auto",
    ax=None,
    max_points="auto",
    random_state=0,
    **scatter_kw,
):
    """Scatter the embedding of X in 2-D, coloured by ``labels`` (default: the model's
    clusters of X, ``predict(X)``), with a legend (or a colour bar for many labels).

    The fit's own rows are not embedded again (a ``transform`` that searches the training
    rows would search for each): with X omitted, or X the training data in the fit's order
    (recognised by the model's ``reference_``), the drawn rows' ``embedding_`` and
    ``labels_`` are drawn, and of a dask embedding only those rows are computed.

    An embedding has more columns than two (``n_components``, often as many as clusters);
    no plane shows them all apart. The default lays out a sample of the embedding with
    t-SNE, so each cluster the model found appears as its own island; the linear projections
    keep the embedding's geometry (directions and distances) at the price of overlaps.

    Parameters
    ----------
    model : fitted estimator
        With ``transform`` (USELM, ELMJEC, TUMKELM, ...) or ``decision_function`` (EMMC).
    X : array-like, dask array (n_samples, n_features) or None, default=None
        Points to embed (the training data or new points); None: the training data, from
        the fit's ``embedding_`` and ``labels_``.
    labels : array-like (n_samples,) or None
        Colours, e.g. known classes; None uses ``predict(X)`` when the model has it.
    projection : {"auto", "tsne", "umap", "centres", "pca", "columns"}, default="auto"
        ``"auto"``: ``"tsne"``, or ``"columns"`` when the embedding has at most two columns;
        ``"tsne"``/``"umap"``: a nonlinear layout of the drawn rows (:func:`layout`);
        ``"centres"``: onto the two leading principal directions of the centres of the model's
        clusters (``predict``; of the ``labels`` for a model without it), weighted by their
        sizes, so that the plane is the same whatever the colours (``"pca"`` when there are
        neither); ``"pca"``: onto the points' two leading principal directions;
        ``"columns"``: the first two embedding columns.
    ax : matplotlib Axes or None
        Where to draw; None draws on a new figure.
    max_points : int, None or "auto", default="auto"
        Draw every k-th row so at most this many points are drawn (None: all); ``"auto"``:
        3,000 for a nonlinear layout (its cost grows faster than the points: t-SNE of 3,000
        points takes seconds), 20,000 for a linear projection.
    random_state : int, RandomState or None, default=0
        Seeds the nonlinear layout; the same seed draws the same figure.
    **scatter_kw
        Passed to ``ax.scatter``.

    Returns
    -------
    ax : matplotlib Axes
    """
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
    if max_points == "auto":
        max_points = MAX_POINTS["linear" if projection in LINEAR else "layout"]
    ax = _axes(ax)
    if X is None and getattr(model, "embedding_", None) is None:
        raise TypeError(f"{_name(model)} has no embedding_: give the points to embed, X")
    n_rows = (model.embedding_ if X is None else X).shape[0]
    step = _every(n_rows, max_points)
    E, clusters, colours = _drawn_rows(model, X, labels, step)
    predicted = labels is None and clusters is not None
    if projection == "auto":
        projection = "columns" if E.shape[1] <= 2 else "tsne"
    if projection in LAYOUTS:  # the same layout whatever the colours
        P, (xlabel, ylabel) = layout(E, projection, random_state=random_state)
    else:  # the model's clusters place the plane (the same whatever the colours), else labels
        P, (xlabel, ylabel) = project(E, colours if clusters is None else clusters, projection)
    _scatter(ax, P, colours, "cluster" if predicted else "label", scatter_kw)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    shown = f"{E.shape[0]:,} of {n_rows:,} points" if step > 1 else f"{E.shape[0]:,} points"
    how = {"tsne": ", t-SNE", "umap": ", UMAP"}.get(projection, "")
    ax.set_title(f"{_name(model)} embedding ({shown}{how})")
    return ax


def _scatter(ax, P, colours, what, scatter_kw):
    """The points P coloured by ``colours`` (None: one colour), with their key."""
    kw = {"s": 6, "alpha": 0.8, "linewidths": 0}
    kw.update(scatter_kw)
    if colours is not None:
        n_colours = len(np.unique(colours))
        kw.setdefault("cmap", "tab10" if n_colours <= 10 else "tab20" if n_colours <= 20 else None)
        kw["c"] = colours
    points = ax.scatter(P[:, 0], P[:, 1], **kw)
    if colours is not None:
        _colour_key(ax, points, colours, what)


def _drawn_rows(model, X, labels, step):
    """``(E, clusters, colours)`` of every ``step``-th row of X: its embedding (2-D float64),
    the model's clusters (None without ``predict``) and the colours (``labels`` of those
    rows, else the clusters), computed together. The training rows (X None or
    :func:`_is_training_data`) are taken from the fit's ``embedding_`` and ``labels_``, other
    rows embedded and predicted."""
    import dask

    if X is None or _is_training_data(model, X, step):
        E = model.embedding_[::step]
        clusters = getattr(model, "labels_", None)
        clusters = None if clusters is None else clusters[::step]
    else:
        Xs = X[::step]
        embed = getattr(model, "transform", None) or getattr(model, "decision_function", None)
        if embed is None:
            raise TypeError(
                f"{_name(model)} has neither transform nor decision_function: no embedding to draw"
            )
        E = embed(Xs)
        clusters = model.predict(Xs) if hasattr(model, "predict") else None
    colours = clusters if labels is None else labels[::step]
    E, clusters, colours = dask.compute(E, clusters, colours)
    E = np.asarray(E, dtype=np.float64).reshape(E.shape[0], -1)
    clusters = None if clusters is None else np.asarray(clusters)
    colours = None if colours is None else np.asarray(colours)
    return E, clusters, colours


def _is_training_data(model, X, step):
    """Whether X holds the model's training rows in the fit's order (with ``embedding_``):
    then their embedding is ``embedding_``'s rows (``transform`` gives a training row its
    own). The model's ``reference_`` recognises them by a few rows' keys, so the check
    costs a few rows, not a pass over X; a model without it embeds rows by a map, without
    a search, and is not checked."""
    reference = getattr(model, "reference_", None)
    if reference is None or getattr(model, "embedding_", None) is None:
        return False
    return reference.is_training_data(X)


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
