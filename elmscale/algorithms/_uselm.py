"""US-ELM: unsupervised ELM (Huang, Song, Gupta and Wu 2014, Algorithm 2)."""

import functools
import logging
import math
from numbers import Integral, Real

import dask
import dask.array as da
import numpy as np

from ..base import BaseELM
from ..cluster import (
    cluster_means,
    majority_vote,
    nearest_center,
    refine_labels,
    refined_starts,
    restart_labels,
)
from ..gram import hidden_stats
from ..graph import (
    TrainingReference,
    cut_and_modularity,
    input_order,
    smoothed_graph_if_kept,
)
from ..hidden import apply_scaling
from ..mixins import DataNodesMixin, EmbeddingClusterMixin, GraphMixin
from ..solvers import sign_flip, uselm_dual, uselm_primal
from ..utils._random import draw_seed
from ..validation import Interval, StrOptions
from ._embedding import resolve_n_components, unit_rows

logger = logging.getLogger(__name__)

#: ``smoothing="auto"`` filters the inputs of data sets of at least this many rows ...
SMOOTHING_MIN_SAMPLES = 1000
#: ... with this many lazy random-walk steps, ...
SMOOTHING_STEPS = 8
#: ... unless the filtered rows keep less than this share of the variance (no filtering then)
SMOOTHING_MIN_VARIANCE = 0.25
#: the filter's steps run in float32 whatever the compute dtype: a step averages rows, and
#: float32's relative rounding is far below what it changes; half the bytes of float64
SMOOTHING_DTYPE = np.float32
#: ``n_components="auto"`` clusters in n_clusters and in ceil(this * n_clusters) dimensions
#: and keeps the narrow partition when its cut on the kNN graph is lower and its modularity
#: higher, ...
WIDE_COMPONENTS_RATIO = 1.5
#: ... or when its cut is lower and its clusters lose less than this share of their edge
#: weight on average (normalised cut / n_clusters), whatever the modularity says
SEPARATE_PIECES_CUT = 0.01
#: k-means's refined starts whose inertia is within this share of the least are equally
#: good optima of k-means's objective; of them the partition of lowest normalised cut after
#: the votes is kept (:class:`_LowestCutAmongBest`)
INERTIA_MARGIN = 0.01
#: rows of k-means's samples (``init_sample``): data of more rows gives each of the
#: ``n_init`` starts its own sample; below ``SMOOTHING_MIN_SAMPLES`` rows each start is one
#: scikit-learn fit on all rows; in between, one scikit-learn fit on all rows keeps its
#: start of least inertia (:meth:`USELM._kmeans_draws`)
KMEANS_SAMPLE_ROWS = 20_000
#: ``refine_rounds="auto"``: this many rounds of neighbour-majority votes from
#: ``SMOOTHING_MIN_SAMPLES`` rows on, none below, where a cluster can be no larger than a
#: row's neighbourhood (ORL: 10 faces per person) and the votes erase it
REFINE_ROUNDS = 3


def uselm_embedding(hth, htlh, lam, n_components):
    """US-ELM output weights from the two reduced matrices H^T H and H^T L H (eqs. 20-22).

    The function half of :class:`USELM`, for users who compute the matrices themselves, e.g.
    to sweep ``lam`` and ``n_components`` over one Gram pass. Returns ``(beta, gamma)``.
    """
    return uselm_primal(hth, htlh, lam, n_components)


def _smoothed(graph, steps, layer, min_variance):
    """The graph filter's stage: ``(graph_f, kept)``, the graph over the filtered rows (None
    when a step keeps less than ``min_variance`` of X's variance) and the share kept after
    the last step taken (:func:`elmscale.graph.smoothed_graph_if_kept`)."""
    graph_f, kept, _ = smoothed_graph_if_kept(
        graph, steps, min_variance, layer.scale, dtype=SMOOTHING_DTYPE
    )
    return graph_f, kept


def _voted_labels(found, centers, row_normalize):
    """Labels of a block of :meth:`USELM._from_training_rows` with votes: the embedding's
    columns give each row's nearest centre, its own vote; the next ``len(centers)`` columns
    count its neighbours' labels, the last its equal training rows. A row equal to training
    rows takes their label (the most common among them), as the fit gave it."""
    n_clusters = centers.shape[0]
    E, votes = found[:, : -n_clusters - 1], found[:, -n_clusters - 1 : -1]
    equal = found[:, -1] > 0
    own = nearest_center(unit_rows(E) if row_normalize else E, centers)
    return np.where(equal, np.argmax(votes, axis=1), majority_vote(votes, own))


class _LowestCutAmongBest:
    """How USELM keeps one of k-means's refined starts: of those whose inertia is within
    :data:`INERTIA_MARGIN` of the least, the partition of lowest normalised cut on the graph
    after ``rounds`` of neighbour-majority votes. Inertia alone can prefer, by a fraction of
    a percent, a partition that merges two clusters and splits a third; the cut, the score
    that also chooses between embeddings, ranks it lower. :meth:`choose_among` weighs the
    candidates of several k-means runs (one per candidate width) in the same passes: their
    votes and one pass of the cut over all of them. The kept partitions' voted labels are in
    ``voted``, their normalised cuts and modularities in ``scores``, one per run."""

    def __init__(self, graph, n_clusters, rounds):
        self.graph, self.n_clusters, self.rounds = graph, n_clusters, rounds
        self.voted = self.scores = None

    def __call__(self, inertia, labels):
        """``choose`` for :func:`elmscale.cluster.kmeans` (one run)."""
        (best,) = self._lowest_cut([inertia], lambda nears: labels(nears[0]))
        self.voted, self.scores = self.voted[0], self.scores[0]
        return best

    def choose_among(self, runs):
        """The index kept of each :class:`~elmscale.cluster.Restarts` in ``runs`` (on the rows
        of one embedding); a run of one start has one candidate, scored all the same (a fit's
        blocking round trips then do not depend on how many starts land near the least
        inertia)."""
        inertias = [run.inertia() if run.n_starts > 1 else np.zeros(1) for run in runs]
        return self._lowest_cut(inertias, lambda nears: restart_labels(runs, nears))

    def _lowest_cut(self, inertias, labels):
        """The index kept of each run, from the inertia of its optima; ``labels(nears)``
        gives the candidates' labels, every run's side by side."""
        nears = [np.flatnonzero(i <= i.min() * (1 + INERTIA_MARGIN)) for i in inertias]
        voted = refine_labels(self.graph, labels(nears), self.n_clusters, self.rounds)
        # held apart: the cut's pass and the fit's later graphs read the same keys
        partitions = dask.persist(*[voted[:, j] for j in range(voted.shape[1])])
        cut, q = cut_and_modularity(self.graph, list(partitions), self.n_clusters)
        kept, self.voted, self.scores = [], [], []
        offsets = np.cumsum([0] + [len(near) for near in nears])
        for near, lo, hi in zip(nears, offsets[:-1], offsets[1:], strict=True):
            best = lo + int(np.argmin(cut[lo:hi]))
            kept.append(int(near[best - lo]))
            self.voted.append(partitions[best])
            self.scores.append((cut[best], q[best]))
        return kept


def _narrow_or_wide(cut, q, n_clusters):
    """Index of the partition ``n_components="auto"`` keeps, of the narrow (0) and the wide
    (1) one: the narrow when both label-free scores prefer it, a lower normalised cut
    (Shi and Malik 2000) and a higher modularity (Newman and Girvan 2004). The two disagree
    where a partition merges two clusters and splits a third (the cut can drop, the
    modularity does not), and there the wider embedding, which separates touching clusters
    with more of the graph's smooth directions, is the safer side, unless the narrow
    partition's clusters lose less than :data:`SEPARATE_PIECES_CUT` of their edge weight on
    average. Then the graph falls into nearly separate pieces that the narrow partition
    follows, and the modularity's preference is its null term's: ``sum_j (vol(A_j) /
    vol(V))^2`` is lower for clusters of more equal volume, so between two partitions that
    both keep almost all edge weight inside their clusters it favours the more balanced one,
    however many more edges that one cuts."""
    if cut[0] >= cut[1]:
        return 1
    return 0 if q[0] > q[1] or cut[0] < SEPARATE_PIECES_CUT * n_clusters else 1


def _dual_stats(features, graph):
    """The dual problem's data, gathered: H and the dense Laplacian."""
    H, L = dask.compute(features.H, dask.delayed(graph.laplacian)())
    return {"H": np.asarray(H, dtype=np.float64), "L": L.toarray()}


class USELM(GraphMixin, DataNodesMixin, EmbeddingClusterMixin, BaseELM):
    """Unsupervised Extreme Learning Machine: spectral embedding through a random hidden
    layer, then k-means (Huang et al. 2014, Algorithm 2).

    The embedding is ``E = H beta`` where beta solves ``(I + lam H^T L H) v = gamma H^T H v``
    (eq. 20) for the ``n_components`` smallest gamma after the trivial first one, each column
    scaled so that ``||H v|| = 1`` (eq. 22). When ``n_hidden`` exceeds the number of samples
    the dual problem (eqs. 23-24) is solved instead. Unlike spectral embedding, the model
    embeds unseen points: by ``x -> h(x) beta`` without the graph filter, and from the
    embedding of their nearest training rows with it (``transform``).

    Parameters
    ----------
    n_clusters : int or None, default=8
        Clusters found by k-means on the embedding; None only embeds (no ``labels_``).
    n_components : int or "auto", default="auto"
        Embedding dimension n_o. "auto" with ``n_clusters`` set solves eq. 20 once for
        ``ceil(1.5 n_clusters)`` columns, runs k-means on the first ``n_clusters`` of them
        and on all of them (each partition then refined, ``refine_rounds``), and keeps the
        narrow partition when it has both the lower normalised cut and the higher
        modularity on the kNN graph (:func:`elmscale.graph.cut_and_modularity`, Newman and
        Girvan 2004; no labels), or the lower cut and clusters that keep more than 99 % of
        their edge weight (the graph falls into nearly separate pieces, which the narrow
        partition follows), the wide one otherwise. Eq. 20 finds the graph's smooth
        directions only approximately in the span of H, and on data whose classes touch
        (digits written alike) k-means separates them better with a few more of those
        directions; where it does not, both scores say so. A partition that merges two
        classes and splits a third can cut fewer edges (the cut alone flipped with the seed
        on MNIST), but it keeps less edge weight inside its clusters than their volumes
        predict. The choice is ``n_components_``.
        "auto" without ``n_clusters`` embeds in 2 dimensions.
    n_hidden : int, default=1000
        Hidden nodes n_h.
    lam : float, default=0.01
        Weight of the manifold term (the paper's lambda). The defaults (lam=0.01,
        normalized=True, scaling="minmax") had the best mean accuracy over the seven Table V
        datasets without tuning (benchmarks/RESULTS.md).
    activation : str or callable, default="sigmoid"
        Activation of the ``n_hidden - n_rbf`` nodes drawn by the engine: a registered
        activation name (``elmscale.available("activation")``) or a callable.
    rbf_fraction : float in [0, 1], default=0.0
        Share of the hidden nodes that are Gaussian nodes centred on data rows, n_rbf =
        round(rbf_fraction * n_hidden) nodes ``exp(-||x' - c||^2 / (rbf_width m)^2)`` with c
        a random row of the scaled X and m the median distance between the centres (a
        Nystrom-style basis whose span follows the data's density). 0 gives a plain layer of
        ``activation`` nodes; 1 makes every node such a Gaussian (``activation`` is then not
        used). ``rbf_fraction=1, lam=100, n_components=2 * n_clusters`` is the MNIST preset
        of benchmarks/RESULTS.md.
    rbf_width : float > 0, default=1.0
        Width of those nodes in units of the median pairwise distance m.
    data_nodes : str or NodeFamily, default="gaussian-rows"
        Family of the n_rbf nodes fitted on a sample of rows: a name registered through
        ``register_hidden_layers`` (``elmscale.available("hidden")``) or an object with the
        methods of :class:`elmscale.hidden.NodeFamily`. "gaussian-rows" gives the Gaussian
        nodes above; another family takes ``rbf_width`` as its own width.
    smoothing : int >= 0 or "auto", default="auto"
        Steps t of the graph filter applied to the rows of X before the hidden layer: each
        row is replaced by ``((I + P) / 2)^t x``, P the kNN graph's weights with rows scaled
        to sum to one (each step averages a row with the mean of its neighbours; see
        :func:`elmscale.graph.smooth_rows`). The filtered rows vary slowly along the graph,
        so the hidden layer's span holds the graph's smooth directions, which eq. 20 then
        finds. "auto" takes 8 steps from 1,000 samples on and none below, where a
        neighbourhood is a large part of a cluster; the choice was made leaving one data set
        out (benchmarks/RESULTS.md, "Quality without labels"). It stops, and filters
        nothing, at the first step whose rows keep less than a quarter of X's variance
        (:func:`elmscale.graph.retained_variance`): neighbourhoods no better than random
        (noise-like data), where averaging erases the features. The steps compute in
        float32 whatever ``compute_dtype`` is (averages of rows, far above float32's
        rounding). The embedding of the fit
        (``embedding_``, ``labels_``) is that of the filtered rows; ``transform`` and
        ``predict`` embed a row by the filter's out-of-sample step, the weighted mean of
        ``embedding_`` over its nearest training rows, so that on the training rows they
        give ``embedding_`` and ``labels_`` back up to the rows at cluster borders.
    graph : "auto", str or callable, default="auto"
        kNN backend (``elmscale.available("graph")``). "auto" takes "exact" up to 10,000
        samples (faster and exact there) and "cells", the distributed search, above.
    n_neighbors : int, default=10
    weights : {"binary", "heat", "fuzzy"}, default="binary"
        Edge weights: ones, the heat kernel of width ``sigma``, or UMAP's fuzzy memberships
        (each row's edges weighed by its local density, the two directions joined by the
        fuzzy union; see :func:`elmscale.graph.knn_graph`).
    sigma : float or None, default=None
        Heat-kernel width; None uses the mean kNN distance.
    normalized : bool, default=True
        Use the normalised Laplacian D^-1/2 L D^-1/2.
    scaling : {"standard", "minmax"} or None, default="minmax"
        Per-feature scaling of X (to [-1, 1] for "minmax") before the graph and the hidden
        layer; fitted in one pass, applied inside each task.
    solver : {"auto", "primal", "dual"}, default="auto"
        "auto" takes the dual when n_hidden > n_samples.
    row_normalize : bool, default=True
        Run k-means on the embedding's rows scaled to unit length (as Ng, Jordan and Weiss's
        spectral clustering does with the Laplacian's eigenvectors): points of one cluster lie
        along one direction of the embedding at different distances from the origin, which
        plain k-means splits. ``embedding_`` and ``transform`` stay unscaled;
        ``cluster_centers_`` and ``predict`` are in the scaled space.
    n_init : int, default=10
        k-means restarts. Where the embedding has more rows than one start sample (20,000),
        each restart starts from k-means++ on its own random sample of rows and all of them
        are refined on all rows, where the least inertia decides: the best start on one
        sample can be a poor optimum on all rows, and with few refined starts that optimum
        can decide the partition.
    refine_rounds : int >= 0 or "auto", default="auto"
        Rounds of neighbour-majority votes on the kNN graph after k-means
        (:func:`elmscale.cluster.refine_labels`): each row takes the label most common among
        its graph neighbours and itself, which moves k-means's straight borders to where the
        graph is thin. ``cluster_centers_`` are then the means of the refined clusters.
        0 keeps k-means's labels. "auto" takes 3 rounds where the fit filtered its rows
        (``smoothing_steps_`` > 0: from 1,000 samples on, where the neighbourhoods keep
        the data's variance) and none otherwise: below 1,000 samples a cluster can be as
        small as a neighbourhood, and where averaging over neighbourhoods erases the data
        (noise-like classes, ringnorm) voting over them erases classes too.
    cache : "auto" or bool, default="auto"
        Keep H's blocks in worker memory between passes (see ``HiddenFeatures``).
    random_state : int, RandomState or None
        Seeds A, b, the approximate graph and k-means.

    Attributes
    ----------
    hidden_layer_ : RandomHiddenLayer
    output_weights_ : ndarray (n_hidden, n_components)
        beta.
    eigenvalues_ : ndarray (n_components,)
        gamma of the kept eigenvectors.
    smoothing_steps_ : int
        Steps of the graph filter applied to X (``smoothing`` resolved).
    n_components_ : int
        Columns of the embedding (``n_components`` resolved).
    embedding_ : ndarray or dask array (n_samples, n_components)
    labels_ : ndarray or dask array (n_samples,)
    cluster_centers_ : ndarray (n_clusters, n_components)
    inertia_ : float
    refine_rounds_ : int
        Rounds of neighbour-majority votes that refined ``labels_`` (``refine_rounds``
        resolved); with votes, ``predict`` casts the same vote among a row's nearest
        training rows.
    reference_ : elmscale.graph.TrainingReference or None
        What ``transform`` and ``predict`` search for a new row's nearest training rows when
        the fit filtered its rows (``smoothing_steps_`` > 0; None otherwise): every training
        row where they fit in 32 MiB, else a uniform sample of as many, each with its
        embedding and label, and every training row's 64-bit key with its label where those
        fit in 16 MiB (``predict`` of a training row is then a lookup). NumPy and of bounded
        size whatever N: the fitted model and the model loaded from a file hold the same
        one and answer alike, and nothing of the input is kept.
    n_features_in_ : int
    timings_ : dict
        Wall seconds of the fit's stages (hidden, graph, smoothing when the graph filter
        runs, gram, solve, embed_cluster).

    Notes
    -----
    Cost: one pass over X for the graph, one for the Gram matrices H^T H and H^T L H (each
    chunk rebuilds its block of H and the hidden rows of its cross-chunk neighbours from X),
    then O(n_hidden^3) on the client and a few passes of k-means over the N x n_components
    embedding. Client memory is O(n_hidden^2); what crosses the network is the graph's edge
    lists, the halo rows of X and the n_hidden^2 partials. ``lam``, ``n_components``,
    ``n_clusters``, ``row_normalize`` and ``n_init`` do not enter the reduction
    (``reduce``: hidden layer, graph, H^T H and H^T L H): ``elmscale.sweep`` fits a grid
    over them with one Gram pass, and ``reduce(X).graph`` is the kNN graph of the fit.
    With the graph filter, ``transform`` and ``predict`` search the rows of ``reference_``
    exactly for each new row's ``n_neighbors`` nearest, one task per chunk of new rows:
    O(n_query m d) work for m <= N reference rows. Pickling the model stores
    ``reference_`` (at most 48 MiB) and ``embedding_`` and ``labels_``, which a model
    saved without them (``elmscale fit --save``) does not need to answer alike.

    ``row_normalize=True`` is the default because, chosen on all benchmark sets but one, it
    scored better on the left-out set on most sets, which a wider grid over the hidden layer,
    lam and n_components did not (``git show 2abc8e5:benchmarks/quality/bench_quality.py``, modes
    ``uselm-grid`` then ``lodo``; RESULTS.md "How the defaults were chosen"). The other levers
    stay options for data like MNIST, where they help.

    References
    ----------
    G. Huang, S. Song, J. N. D. Gupta and C. Wu, "Semi-supervised and unsupervised extreme
    learning machines", IEEE Transactions on Cybernetics 44(12), 2014.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from elmscale import USELM
    >>> X, y = load_iris(return_X_y=True)
    >>> model = USELM(n_clusters=3, n_hidden=200, graph="exact", random_state=0).fit(X)
    >>> model.n_components_, model.embedding_.shape  # "auto": 3 or 5 columns, by the cut
    (5, (150, 5))
    >>> sorted(set(model.labels_.tolist()))
    [0, 1, 2]
    """

    _parameter_constraints = {
        **BaseELM._parameter_constraints,
        **GraphMixin._graph_constraints,
        "n_clusters": [Interval(Integral, 1, None, closed="left"), None],
        "n_components": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "lam": [Interval(Real, 0, None, closed="left")],
        "solver": [StrOptions({"auto", "primal", "dual"})],
        **DataNodesMixin._data_node_constraints,
        "smoothing": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "row_normalize": ["boolean"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "refine_rounds": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
    }
    reduce_params = (
        "n_hidden",
        "activation",
        "rbf_fraction",
        "rbf_width",
        "data_nodes",
        "smoothing",
        "graph",
        "n_neighbors",
        "weights",
        "sigma",
        "normalized",
        "scaling",
        "solver",
        "cache",
        "random_state",
    )
    supports_checkpoint = True

    def __init__(
        self,
        n_clusters=8,
        *,
        n_components="auto",
        n_hidden=1000,
        lam=0.01,
        activation="sigmoid",
        rbf_fraction=0.0,
        rbf_width=1.0,
        data_nodes="gaussian-rows",
        smoothing="auto",
        graph="auto",
        n_neighbors=10,
        weights="binary",
        sigma=None,
        normalized=True,
        scaling="minmax",
        solver="auto",
        row_normalize=True,
        n_init=10,
        refine_rounds="auto",
        cache="auto",
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.n_components = n_components
        self.n_hidden = n_hidden
        self.lam = lam
        self.activation = activation
        self.rbf_fraction = rbf_fraction
        self.rbf_width = rbf_width
        self.data_nodes = data_nodes
        self.smoothing = smoothing
        self.graph = graph
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.sigma = sigma
        self.normalized = normalized
        self.scaling = scaling
        self.solver = solver
        self.row_normalize = row_normalize
        self.n_init = n_init
        self.refine_rounds = refine_rounds
        self.cache = cache
        self.random_state = random_state

    def check_params_vs_input(self, Xd):
        super().check_params_vs_input(Xd)
        N = Xd.shape[0]
        self._n_components = self._component_choices(N)[-1]
        self._solver = self.resolve_solver(N)
        if self.smoothing == "auto":
            self._smoothing = SMOOTHING_STEPS if N >= SMOOTHING_MIN_SAMPLES else 0
        else:
            self._smoothing = self.smoothing

    def _component_choices(self, n_samples):
        """The embedding dimensions to choose between: ``(n_clusters, wide)`` for "auto"
        (the wide one kept below n_samples and n_hidden), else the one given."""
        if self.n_components != "auto" or self.n_clusters is None:
            auto = self.n_clusters if self.n_clusters is not None else 2
            return (resolve_n_components(self.n_components, auto, n_samples, self.n_hidden),)
        c = resolve_n_components("auto", self.n_clusters, n_samples, self.n_hidden)
        wide = min(math.ceil(WIDE_COMPONENTS_RATIO * c), n_samples - 1, self.n_hidden - 1)
        return (c, wide) if wide > c else (c,)

    def reduce_hidden(self, reduction, y):
        """The kNN graph, the graph-filtered rows (``smoothing``), then H^T H and H^T L H in
        one pass (primal), or H and the dense Laplacian (dual, n_hidden > n_samples: both
        are no larger than H^T H would be)."""
        graph = reduction.graph = reduction.stage(
            "graph", lambda: self.build_graph(reduction.X, reduction.rng)
        )
        self.lap("graph")
        steps = self._smoothing
        if steps:
            min_variance = SMOOTHING_MIN_VARIANCE if self.smoothing == "auto" else 0.0
            graph_f, kept = reduction.stage(
                "smoothing", lambda: _smoothed(graph, steps, self.hidden_layer_, min_variance)
            )
            if graph_f is None:
                logger.info(
                    "smoothing: a step keeps %.3f of the variance (< %g): rows not filtered",
                    kept,
                    min_variance,
                )
                steps = 0
            else:
                logger.info("smoothing: %d steps keep %.3f of the variance", steps, kept)
                # the same edges; the unfiltered rows it held are read no more, and go
                graph = reduction.graph = graph_f
                reduction.features = self.hidden_features(
                    graph_f.X, output_order=input_order(graph)
                )
            self.lap("smoothing")
        reduction.fitted["smoothing_steps_"] = steps
        # new rows are embedded from their nearest training rows when the fit filtered them
        # (see ``transform``): the solve keeps a bounded reference of them, weighted as the
        # graph's edges
        reduction.fitted["_graph_sigma"] = graph.sigma
        features = reduction.features
        if self._solver == "primal":
            reduction.stats = reduction.stage(
                "gram",
                lambda: hidden_stats(
                    features, ("hth", "htlh"), graph=graph, partial_sums=reduction.partial_sums()
                ),
            )
        else:
            reduction.stats = reduction.stage("gram", lambda: _dual_stats(features, graph))
        self.lap("gram")

    def solve_reduced(self, reduction, rng):
        """Solve eq. 20 (or its dual, eqs. 23-24), embed and cluster X; with
        ``n_components="auto"``, keep the dimension whose partition cuts the graph least."""
        stats = reduction.stats
        if self._solver == "primal":
            beta, gamma = uselm_embedding(stats["hth"], stats["htlh"], self.lam, self._n_components)
        else:
            H = stats["H"]
            U, gamma = uselm_dual(H @ H.T, stats["L"], self.lam, self._n_components)
            beta = sign_flip(H.T @ U)
        self.lap("solve")
        E = reduction.features.project(beta, reuse=reduction.n_solves > 1)
        E = E.persist() if reduction.was_dask else E.compute()
        n = self._n_components
        if self.n_clusters is not None:
            n = self._cluster(E, reduction, rng)
        self.n_components_ = n
        self.output_weights_ = beta[:, :n]
        self.eigenvalues_ = gamma[:n]
        self.embedding_ = E[:, :n] if n < E.shape[1] else E
        self.reference_ = None
        if self.smoothing_steps_:
            self.reference_ = self._training_reference(reduction, rng)
        self.lap("embed_cluster")

    def _training_reference(self, reduction, rng):
        """The :class:`~elmscale.graph.TrainingReference` new rows are extended from: the
        training rows (or a sample) with their embedding and labels, drawn after every other
        random number of the fit."""
        clustered = self.n_clusters is not None
        layer = self.hidden_layer_
        return TrainingReference.from_fit(
            reduction.X,
            self.embedding_,
            self.labels_ if clustered else None,
            self.n_clusters if clustered else 0,
            functools.partial(apply_scaling, offset=layer.offset, scale=layer.scale),
            draw_seed(rng),
            rows_in_process=reduction.X_in_process,
        )

    def _vote_rounds(self, reduction):
        """``refine_rounds`` resolved: "auto" is :data:`REFINE_ROUNDS` from
        ``SMOOTHING_MIN_SAMPLES`` rows on where the fit filtered its rows, else none (where
        the filter found the neighbourhoods too mixed to average the rows over, or was
        turned off, votes over the same neighbourhoods would erase classes likewise)."""
        if self.refine_rounds != "auto":
            return self.refine_rounds
        filtered = reduction.fitted["smoothing_steps_"] > 0
        return REFINE_ROUNDS if filtered and reduction.n_samples >= SMOOTHING_MIN_SAMPLES else 0

    def _kmeans_draws(self, n_samples):
        """How many of k-means's starts the chooser weighs (``sample_draws``): each of the
        ``n_init`` starts on its own sample of :data:`KMEANS_SAMPLE_ROWS` rows where the rows
        outnumber one, and on all rows below ``SMOOTHING_MIN_SAMPLES``, where no votes
        follow; in between one scikit-learn fit on all rows, its start of least inertia.
        Chosen on the shared sets, each left out in turn, over ten seeds: there the starts
        weighed by their cut lowered the worst seed (a lower cut with a merged and a split
        class), on the small sets they raised mean and worst seed."""
        if SMOOTHING_MIN_SAMPLES <= n_samples <= KMEANS_SAMPLE_ROWS:
            return 1
        return self.n_init

    def _cluster(self, E, reduction, rng):
        """k-means on the embedding's rows (unit length with ``row_normalize``; the starts of
        :meth:`_kmeans_draws`, all refined on all rows) in each
        dimension of :meth:`_component_choices`, all with one seed, each partition then
        sharpened by ``refine_rounds`` rounds of neighbour-majority votes on the graph
        (:func:`elmscale.cluster.refine_labels`); of the starts within
        :data:`INERTIA_MARGIN` of the least inertia, the one of lowest cut after the votes
        is kept (:class:`_LowestCutAmongBest`). The narrow partition is kept when it has
        both the lower normalised cut and the higher modularity on the graph, or the lower
        cut of a graph in nearly separate pieces, else the wide one (:func:`_narrow_or_wide`);
        its centres are the means of its clusters. Returns its dimension. One path for NumPy
        and dask input alike, so both give the same labels (no step depends on the
        chunking)."""
        seed = draw_seed(rng)
        if not reduction.was_dask:
            E = da.from_array(E, chunks=(reduction.X.chunks[0], E.shape[1]))
        choices = self._component_choices(reduction.n_samples)
        graph, k = reduction.graph, self.n_clusters
        rounds = self._vote_rounds(reduction)
        runs = []
        for n in choices:
            # held once: k-means and the clusters' means read the same blocks instead of
            # each submitting the getitem and scaling tasks under the same keys in its own
            # (differently fused) graph, which a distributed scheduler refuses
            En = (unit_rows(E[:, :n]) if self.row_normalize else E[:, :n]).persist()
            run = refined_starts(
                En,
                k,
                n_init=self.n_init,
                random_state=seed,
                init_sample=KMEANS_SAMPLE_ROWS,
                sample_draws=self._kmeans_draws(reduction.n_samples),
            )
            runs.append((En, run))
        chooser = _LowestCutAmongBest(graph, k, rounds)
        kept = chooser.choose_among([run for _, run in runs])
        fits = []
        for (En, run), index, voted in zip(runs, kept, chooser.voted, strict=True):
            if rounds:  # the voted partition and its clusters' means; k-means's own unused
                centers, inertia = cluster_means(En, voted, k)
                fits.append((centers, voted, inertia))
            else:
                fits.append(run.finish(index)[:3])
        best = 0
        if len(fits) > 1:
            cut, q = (np.array(column) for column in zip(*chooser.scores, strict=True))
            best = _narrow_or_wide(cut, q, k)
            logger.info(
                "n_components: normalised cuts %s, modularity %s for %s",
                np.round(cut, 4),
                np.round(q, 4),
                choices,
            )
        centers, labels, inertia = fits[best]
        self.labels_ = labels.persist() if reduction.was_dask else labels.compute()
        self.refine_rounds_ = rounds
        self.cluster_centers_ = centers
        self.inertia_ = inertia
        return choices[best]

    def embed_rows(self, Xd):
        """The lazy embedding of the rows of Xd (``transform``).

        Without the graph filter (``smoothing_steps_`` 0) a row's embedding is ``h(x) beta``,
        the map the fit applied. With it, the fit embedded filtered rows, each an average
        over its graph neighbourhood, which a new row does not have; its embedding is then
        the weighted mean of the embedding over its ``n_neighbors`` nearest rows of
        ``reference_``, weighted as the graph's edges: the out-of-sample step of the filter
        (:mod:`elmscale.graph._reference`). A row equal to a reference row takes that row's
        embedding (as the Nystrom extension reproduces the function at the rows it was
        computed on): where the reference holds every training row, ``transform`` of the
        training rows gives ``embedding_`` back."""
        if getattr(self, "reference_", None) is None:
            return self.project(Xd, self.output_weights_)
        return self.reference_.extend(Xd, self.n_neighbors, **self._extension())

    def _extension(self):
        """How a new row weighs its nearest reference rows: as the graph's edges, in the
        scaling the graph was searched in."""
        layer = self.hidden_layer_
        return {
            "weights": self.weights,
            "sigma": self._graph_sigma,
            "transform": functools.partial(apply_scaling, offset=layer.offset, scale=layer.scale),
        }

    def label_rows(self, Xd):
        """The cluster of each row of Xd (``predict``): the nearest of ``cluster_centers_``
        to its embedding (:meth:`transform`, in the space k-means clustered). Where the fit
        refined its labels by neighbour-majority votes (``refine_rounds_`` > 0), a row's
        label is the same vote cast by its nearest reference rows' labels and, weighted as
        a row's own label, its nearest centre; a training row takes its label in
        ``labels_`` (by key, or as a reference row at distance 0), so that ``predict`` on
        the training rows gives ``labels_`` back (where k-means's nearest centre would undo
        the votes' moves)."""
        if not getattr(self, "refine_rounds_", 0) or getattr(self, "reference_", None) is None:
            return super().label_rows(Xd)
        return self.reference_.extend(
            Xd,
            self.n_neighbors,
            n_labels=self.n_clusters,
            finish=functools.partial(
                _voted_labels, centers=self.cluster_centers_, row_normalize=self.row_normalize
            ),
            **self._extension(),
        )

    def to_cluster_space(self, E):
        """The rows of E scaled to unit length with ``row_normalize`` (the space k-means
        clustered and ``cluster_centers_`` live in), else E."""
        return unit_rows(E) if self.row_normalize else E
