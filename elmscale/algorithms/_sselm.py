"""SS-ELM: semi-supervised ELM (Huang, Song, Gupta and Wu 2014, Section V, Algorithm 1)."""

import logging
import numbers
from numbers import Integral, Real

import dask
import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import matrix_power as sparse_matrix_power
from sklearn.base import ClassifierMixin

from ..base import BaseELM
from ..gram import hidden_stats
from ..mixins import GraphMixin
from ..solvers import ridge_solve
from ..validation import Interval, StrOptions
from ._elm import _ClassifierOutputsMixin, _one_hot, _take_weight, encode_targets

logger = logging.getLogger(__name__)


def sselm_output_weights(hth, hty, htlh, lam):
    """SS-ELM output weights in the primal (eq. 16):
    ``beta = (I + H^T C H + lam H^T L H)^-1 H^T C Y~``.

    ``hth = H^T C H`` and ``hty = H^T C Y~`` are the weighted Gram terms (C = diag(c_i),
    c_i = C0 / N_{t_i} for labelled points and 0 for unlabelled ones; Y~ the one-hot targets,
    zero rows for unlabelled points); ``htlh`` is ``H^T L H`` or ``H^T L^2 H``. The system
    matrix is symmetric positive definite (identity plus two PSD terms) and is solved by
    Cholesky in float64. ``htlh=None`` or ``lam=0`` drops the manifold term; with equal c_i = C
    this is exactly the supervised ELM of eq. 7, since
    ``(I + C H^T H)^-1 C H^T Y = (H^T H + I/C)^-1 H^T Y``.

    This is the function half of :class:`SSELM`: the three matrices do not depend on C0
    (up to a factor) or lam, so a parameter grid costs one pass over the data.
    """
    A = np.asarray(hth, dtype=np.float64)
    if htlh is not None and lam != 0:
        A = A + lam * np.asarray(htlh, dtype=np.float64)
    return ridge_solve(A, hty, 1.0)


def sselm_dual_output_weights(H, Y, c, L, lam):
    """SS-ELM output weights in the dual (eq. 17), for n_hidden > n_samples:
    ``beta = H^T (I + C H H^T + lam L H H^T)^-1 C Y~``.

    ``L`` is the (dense or sparse) Laplacian, already raised to the wanted power; ``c`` the
    diagonal of C. The N x N system is not symmetric; it is solved by LU (N is small here,
    since n_hidden > N). It equals eq. 16 because
    ``(I + H^T M H) H^T = H^T (I + M H H^T)`` with ``M = C + lam L``.
    """
    H = np.asarray(H, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    N = H.shape[0]
    K = H @ H.T
    M = np.diag(c)
    if L is not None and lam != 0:
        L = L.toarray() if hasattr(L, "toarray") else np.asarray(L, dtype=np.float64)
        M = M + lam * L
    U = sla.solve(np.eye(N) + M @ K, c[:, None] * Y, check_finite=False)
    return H.T @ U


def _unlabelled(block):
    """True where a label is -1 (scikit-learn's mark for unlabelled samples). Labels held as
    strings (dtype U/S) are all labelled: use dtype object with -1 to mix strings and -1."""
    block = np.asarray(block)
    if block.dtype.kind in "biuf":
        return block == -1
    if block.dtype.kind == "O":
        return np.array(
            [
                isinstance(v, numbers.Number) and not isinstance(v, bool) and v == -1
                for v in block.ravel()
            ],
            dtype=bool,
        ).reshape(block.shape)
    return np.zeros(block.shape, dtype=bool)


class SSELM(GraphMixin, _ClassifierOutputsMixin, ClassifierMixin, BaseELM):
    """Semi-supervised Extreme Learning Machine (Huang et al. 2014, Algorithm 1).

    ``fit(X, y)`` takes labels with ``-1`` for unlabelled rows (scikit-learn's
    semi-supervised convention). The output weights minimise
    ``1/2 ||beta||^2 + 1/2 sum_i C_i ||y_i - h(x_i) beta||^2 + lam/2 Tr(beta^T H^T L^p H beta)``
    (eq. 14) with ``C_i = C0 / N_{t_i}`` for a labelled point of class t_i (so each class has
    total weight C0, however unbalanced the labelled set) and 0 for unlabelled points. L is the
    Laplacian of a kNN graph built on labelled and unlabelled points together; p is
    ``laplacian_power``. The solution is eq. 16 (``n_hidden <= n_samples``) or its dual, eq. 17.

    Parameters
    ----------
    n_hidden : int, default=1000
        Hidden nodes n_h.
    C0 : float, default=1.0
        Weight of the labelled fit; sample i of class t gets ``C0 / N_t``.
    lam : float, default=0.01
        Weight of the manifold term (the paper's lambda). ``lam=0`` skips the graph.
    activation : str or callable, default="sigmoid"
    graph : "auto", str or callable, default="auto"
        kNN backend (``elmscale.available("graph")``); "auto" takes exact search up to
        10,000 samples and the distributed cell search ("cells") above.
    n_neighbors : int, default=10
        k of the kNN graph (clipped to n_samples - 1).
    weights : {"binary", "heat", "fuzzy"}, default="heat"
        Edge weights; heat is ``exp(-||xi - xj||^2 / (2 sigma^2))``, fuzzy UMAP's
        memberships (see :func:`elmscale.graph.knn_graph`).
    sigma : float or None, default=None
        Heat-kernel width; None uses the mean kNN distance (in the scaled space).
    normalized : bool, default=True
        Use the normalised Laplacian ``I - D^-1/2 W D^-1/2``.
    laplacian_power : int >= 1, default=2
        p in ``L^p``. The paper defers these graph settings to the Laplacian SVM setups
        (Melacci and Belkin 2011), which use powers of a normalised Laplacian; with p = 1 the
        validation-chosen lam tends to switch the manifold term off (see Notes). The SS-ELM
        authors' G50C demo uses ``n_neighbors=50, weights="binary", normalized=True,
        laplacian_power=5``. Any p works with both solvers. The dual raises the gathered
        sparse L (N x N, small there) to the power p. The blockwise primal pass computes
        p = 1 and 2 from X alone (cross-chunk neighbours' hidden rows are rebuilt from their
        rows of X); for p > 2 it builds ``L^q H`` (q = p // 2) chunk by chunk on the cluster
        and ships its cross-chunk halo rows, n_hidden numbers per row, ``(p - 1) // 2`` times
        (see :func:`elmscale.gram.hidden_stats`; the bytes are logged).
    scaling : {"standard", "minmax"} or None, default="standard"
        Per-feature scaling of X before the graph and the hidden layer.
    solver : {"auto", "primal", "dual"}, default="auto"
        "auto" takes the dual (eq. 17) when n_hidden > n_samples.
    cache : "auto" or bool, default=False
        Keep H's blocks in worker memory; fit makes one pass over H, so False.
    random_state : int, RandomState or None
        Seeds the hidden layer and the approximate graph.

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
        The labels seen among the labelled samples, sorted.
    hidden_layer_ : RandomHiddenLayer
    output_weights_ : ndarray (n_hidden, n_classes)
        beta.
    class_counts_ : ndarray (n_classes,)
        N_t, labelled samples per class.
    n_labelled_ : int
    n_features_in_ : int

    Notes
    -----
    Cost: one pass over X for the scaling, one for the graph, one for the three reduced
    matrices H^T C H, H^T C Y~ and H^T L^p H (each chunk rebuilds its block of H and the
    hidden rows of its cross-chunk neighbours from X; ``L^2`` is ``(LH)^T (LH)``; the
    C-weighted terms take only the labelled rows, as C is 0 on the others), then an
    O(n_hidden^3) Cholesky solve on the client: US-ELM's graph and Gram pass, without its
    graph filter and embedding pass. Client memory O(n_hidden^2). A primal fit with
    ``laplacian_power`` p > 2 adds one pass over X and ``(p - 1) // 2`` exchanges of
    halo rows of ``L^j H`` between chunks, and holds up to two N x n_hidden arrays on the
    cluster while it does.

    Bad input: labels of the wrong length, no labelled sample, or labelled samples of a
    single class raise ``ValueError``. A class with a single labelled sample is accepted: the
    balancing gives that sample the weight C0, the total of every other class. String labels
    work; to mark unlabelled samples among strings use dtype object and ``-1``. NaN in X
    raises ``ValueError`` (for dask input at the first computation that touches it).

    With ``lam=0`` and equal C_i the problem is the supervised ELM (eq. 16 reduces to eq. 7).

    References
    ----------
    G. Huang, S. Song, J. N. D. Gupta and C. Wu, "Semi-supervised and unsupervised extreme
    learning machines", IEEE Transactions on Cybernetics 44(12), 2014.
    S. Melacci and M. Belkin, "Laplacian support vector machines trained in the primal",
    JMLR 12, 2011.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_moons
    >>> from elmscale import SSELM
    >>> X, y = make_moons(300, noise=0.05, random_state=0)
    >>> y_semi = np.full_like(y, -1)
    >>> y_semi[[0, 1, 2, 3, 4, 5]] = y[[0, 1, 2, 3, 4, 5]]
    >>> model = SSELM(n_hidden=200, C0=10.0, lam=1e4, activation="tanh", random_state=0)
    >>> model = model.fit(X, y_semi)
    >>> model.n_labelled_
    6
    >>> bool(model.score(X, y) > 0.9)
    True
    """

    _parameter_constraints = {
        **BaseELM._parameter_constraints,
        **GraphMixin._graph_constraints,
        "C0": [Interval(Real, 0, None, closed="neither")],
        "lam": [Interval(Real, 0, None, closed="left")],
        "laplacian_power": [Interval(Integral, 1, None, closed="left")],
        "solver": [StrOptions({"auto", "primal", "dual"})],
    }

    #: scikit-learn estimator checks that cannot pass, and why
    _expected_failed_checks = {
        "check_classifiers_classes": "its binary case uses the labels {-1, 1}; -1 marks "
        "unlabelled samples (scikit-learn's semi-supervised convention), so one class is left",
    }

    def __init__(
        self,
        n_hidden=1000,
        *,
        C0=1.0,
        lam=0.01,
        activation="sigmoid",
        graph="auto",
        n_neighbors=10,
        weights="heat",
        sigma=None,
        normalized=True,
        laplacian_power=2,
        scaling="standard",
        solver="auto",
        cache=False,
        random_state=None,
    ):
        self.n_hidden = n_hidden
        self.C0 = C0
        self.lam = lam
        self.activation = activation
        self.graph = graph
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.sigma = sigma
        self.normalized = normalized
        self.laplacian_power = laplacian_power
        self.scaling = scaling
        self.solver = solver
        self.cache = cache
        self.random_state = random_state

    #: lam only weighs the graph term in the solve (but see ``reduce_key``)
    solve_params = ("lam",)

    supports_checkpoint = True

    def reduce_key(self):
        # lam only scales the graph term, but lam=0 skips the graph and its pass
        return {**super().reduce_key(), "lam > 0": self.lam > 0}

    def check_params_vs_input(self, Xd):
        super().check_params_vs_input(Xd)
        self._solver = self.resolve_solver(Xd.shape[0])
        self._laplacian_power = int(self.laplacian_power)

    def reduce_hidden(self, reduction, y):
        """Encode the labels, build the graph on all samples and reduce H^T C H, H^T C Y~ and
        H^T L^p H in one pass (primal), or gather H, Y~, C and L^p (dual)."""
        Xd = reduction.X
        if y is None:
            raise ValueError(
                "SSELM requires y to be passed, but the target y is None "
                "(mark unlabelled samples with -1)"
            )
        classes, codes, counts = encode_targets(y, Xd, unlabelled=_unlabelled)
        if len(classes) == 0:
            raise ValueError("SSELM needs labelled samples: every label in y is -1 (unlabelled)")
        if len(classes) < 2:
            raise ValueError(
                f"SSELM needs labelled samples of at least 2 classes in y; got 1 "
                f"class: {classes.tolist()}"
            )
        reduction.fitted.update(
            classes_=classes, class_counts_=counts, n_labelled_=int(counts.sum())
        )
        c = len(classes)
        # C_i = C0 / N_{t_i} for labelled samples, 0 for unlabelled ones (eq. 15)
        weight = codes.map_blocks(_take_weight, self.C0 / counts, dtype=np.float64)
        Y = codes.map_blocks(
            _one_hot, c, new_axis=1, chunks=(codes.chunks[0], (c,)), dtype=np.float64
        )
        graph = None
        if self.lam > 0:
            # k clipped to n_samples - 1; the dual gathers L in the rows' own order, so it
            # asks for no locality ordering
            graph = reduction.stage(
                "graph",
                lambda: self.build_graph(
                    Xd,
                    reduction.rng,
                    n_neighbors=min(self.n_neighbors, Xd.shape[0] - 1),
                    order=False if self._solver == "dual" else "auto",
                ),
            )
        reduction.graph = graph
        features = reduction.features
        if self._solver == "primal":
            terms = ("hth", "hty") + (("htlh",) if graph is not None else ())
            reduction.stats = reduction.stage(
                "gram",
                lambda: hidden_stats(
                    features,
                    terms,
                    Y=Y,
                    sample_weight=weight,
                    graph=graph,
                    laplacian_power=self._laplacian_power,
                    partial_sums=reduction.partial_sums(),
                ),
            )
        else:  # n_hidden > N: H (N x n_hidden) and L (N x N) are small
            lap = dask.delayed(graph.laplacian)() if graph is not None else None
            H, Yc, cw, L = dask.compute(features.H, Y, weight, lap)
            if L is not None and self._laplacian_power > 1:
                L = sparse_matrix_power(L, self._laplacian_power)
            reduction.stats = {"H": H, "Y": Yc, "c": cw, "L": L}

    def solve_reduced(self, reduction, rng):
        """Solve eq. 16 (or eq. 17 in the dual) for this estimator's lam."""
        stats = reduction.stats
        if self._solver == "primal":
            beta = sselm_output_weights(stats["hth"], stats["hty"], stats.get("htlh"), self.lam)
        else:
            beta = sselm_dual_output_weights(
                stats["H"], stats["Y"], stats["c"], stats["L"], self.lam
            )
        self.output_weights_ = beta
        logger.info(
            "SSELM: %s solve, n_hidden=%d, n_samples=%d, labelled=%d",
            self._solver,
            self.n_hidden,
            reduction.n_samples,
            self.n_labelled_,
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags


__all__ = ["SSELM", "sselm_dual_output_weights", "sselm_output_weights"]
