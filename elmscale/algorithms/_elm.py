"""Supervised ELM: regression and classification (Huang, Song, Gupta and Wu 2014, eqs. 4-9;
Huang, Zhou, Ding and Zhang 2012)."""

import logging
import numbers
from numbers import Real

import dask
import dask.array as da
import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, column_or_1d

from ..base import BaseELM
from ..gram import hidden_stats
from ..solvers import ridge_solve
from ..utils._dask import frame_to_array
from ..utils._validation import is_dask_collection
from ..validation import Interval, StrOptions

logger = logging.getLogger(__name__)


# -- the maths, over reduced matrices ----------------------------------------------------------
def elm_output_weights(hth, hty, C):
    """ELM output weights in the primal (eq. 7): ``beta = (H^T H + I / C)^-1 H^T Y``.

    The function half of :class:`ELMRegressor` / :class:`ELMClassifier`, for users who
    compute the reduced matrices themselves (``hidden_stats(features, ["hth", "hty"])``), e.g.
    to sweep ``C`` over one pass of the data. With sample weights ``c_i`` pass the weighted
    matrices ``H^T C H`` and ``H^T C Y`` (weighted ELM). Returns ``beta`` (n_hidden x n_targets).
    """
    return ridge_solve(hth, hty, 1.0 / C)


def elm_dual_output_weights(H, Y, C, sample_weight=None):
    """ELM output weights in the dual (eqs. 8-9), for n_hidden > n_samples:
    ``beta = H^T (H H^T + I / C)^-1 Y``.

    With weights ``c_i`` (C = diag(c)) the weighted problem ``(H^T C H + I/C)^-1 H^T C Y`` is
    solved through its symmetric dual ``H^T S (S H H^T S + I/C)^-1 S Y`` with ``S = C^1/2``,
    which equals the primal solution exactly (push-through identity) and stays SPD when some
    weights are zero. H is n_samples x n_hidden, no larger than H^T H would be.
    """
    H = np.asarray(H, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if sample_weight is None:
        Hs, Ys = H, Y
        s = None
    else:
        s = np.sqrt(np.asarray(sample_weight, dtype=np.float64))
        Hs, Ys = H * s[:, None], Y * s[:, None]
    U = ridge_solve(Hs @ Hs.T, Ys, 1.0 / C)
    return Hs.T @ U


# -- targets -----------------------------------------------------------------------------------
def _check_y_length(y, n_samples):
    n = y.shape[0] if hasattr(y, "shape") and len(y.shape) else None
    if n is None or (isinstance(n, numbers.Number) and np.isnan(n)):
        raise ValueError("y must be a 1-D array of labels with known length")
    if n != n_samples:
        raise ValueError(f"y has {n} samples, but X has {n_samples} samples")


def _as_row_aligned(y, Xd):
    """y (NumPy or a dask array; callers convert dask frames first) as a dask array with
    X's row chunks."""
    if is_dask_collection(y):
        if y.ndim == 1:
            return y.rechunk((Xd.chunks[0],))
        return y.rechunk((Xd.chunks[0], -1))
    chunks = (Xd.chunks[0],) if y.ndim == 1 else (Xd.chunks[0], y.shape[1])
    return da.from_array(y, chunks=chunks)


def _one_hot(codes, n_classes):
    Y = np.zeros((codes.shape[0], n_classes), dtype=np.float64)
    keep = codes >= 0
    Y[np.flatnonzero(keep), codes[keep]] = 1.0
    return Y


def _take_weight(codes, class_weight):
    w = np.zeros(codes.shape[0], dtype=np.float64)
    keep = codes >= 0
    w[keep] = class_weight[codes[keep]]
    return w


def _encode(block, classes, unlabelled=None):
    """Integer codes of a block of labels (-1 for unlabelled rows)."""
    block = np.asarray(block).ravel()
    codes = np.full(block.shape[0], -1, dtype=np.int64)
    keep = np.ones(block.shape[0], dtype=bool) if unlabelled is None else ~unlabelled(block)
    if keep.any():
        vals = block[keep]
        pos = np.searchsorted(classes, vals)
        pos = np.minimum(pos, len(classes) - 1)
        if not np.all(classes[pos] == vals):
            raise ValueError(
                f"y contains labels not seen in fit: "
                f"{sorted(set(vals[classes[pos] != vals].tolist()))[:5]}"
            )
        codes[keep] = pos
    return codes


def _count_codes(codes, n_classes):
    return np.bincount(codes[codes >= 0], minlength=n_classes).astype(np.float64)


def encode_targets(y, Xd, *, unlabelled=None, classes=None):
    """Validate class labels and return ``(classes, codes, counts)``.

    ``codes`` is a dask int64 array chunked like X's rows (-1 for unlabelled rows, as decided
    by the callable ``unlabelled(block) -> bool mask``); ``counts`` the number of labelled
    samples of each class (NumPy). NumPy y is checked on the client with scikit-learn's
    ``check_classification_targets``; dask y is encoded blockwise and only the classes and the
    counts come back to the client.
    """
    if is_dask_collection(y):
        if hasattr(y, "to_dask_array"):
            y = frame_to_array(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D, got shape {y.shape}")
        _check_y_length(y, Xd.shape[0])
        yd = _as_row_aligned(y, Xd)
        if classes is None:
            labelled = yd if unlabelled is None else yd[~yd.map_blocks(unlabelled, dtype=bool)]
            classes = np.asarray(da.unique(labelled).compute())
        codes = yd.map_blocks(_encode, classes, unlabelled, dtype=np.int64)
        counts = (
            np.asarray(
                codes.map_blocks(
                    _count_codes, len(classes), chunks=(len(classes),), dtype=np.float64
                )
                .reshape(-1, len(classes))
                .sum(axis=0)
                .compute()
            )
            if len(classes)
            else np.zeros(0)
        )
        return classes, codes, counts
    y = column_or_1d(np.asarray(y), warn=True)
    _check_y_length(y, Xd.shape[0])
    mask = np.zeros(y.shape[0], dtype=bool) if unlabelled is None else unlabelled(y)
    check_classification_targets(y[~mask] if mask.any() else y)
    if classes is None:
        classes = np.unique(y[~mask])
    codes = _encode(y, classes, unlabelled)
    counts = _count_codes(codes, len(classes))
    return classes, da.from_array(codes, chunks=(Xd.chunks[0],)), counts


def _softmax(out):
    out = out - out.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def _decision(out):
    return out[:, 1] - out[:, 0] if out.shape[1] == 2 else out


def _argmax_label(out, classes):
    return classes[np.argmax(out, axis=1)]


# -- estimators --------------------------------------------------------------------------------
class _OutputWeightsMixin:
    """Shared by the supervised ELMs and SS-ELM: H's blocks, the ``H beta`` outputs."""

    def _outputs(self, X):
        """``H beta`` for X: lazy dask (n_samples x n_outputs) and whether X was dask."""
        check_is_fitted(self, "output_weights_")
        Xd, was_dask = self.validate_X(X, reset=False)
        # one pass, nothing to reuse: never cache H at prediction time
        out = self.project(Xd, self.output_weights_)
        return out, was_dask


class _ClassifierOutputsMixin(_OutputWeightsMixin):
    """decision_function / predict / predict_proba / score from one-hot ELM outputs."""

    def decision_function(self, X):
        """Network outputs ``h(x) beta``, one column per class (n_samples, n_classes); for two
        classes the difference ``o_1 - o_0`` (n_samples,), positive for ``classes_[1]``."""
        out, was_dask = self._outputs(X)
        c = len(self.classes_)
        if c == 2:
            D = out.map_blocks(
                _decision, drop_axis=1, dtype=out.dtype, meta=np.empty((0,), out.dtype)
            )
        else:
            D = out
        return self.as_output(D, was_dask)

    def predict(self, X):
        """The class of the largest output (argmax of ``h(x) beta``)."""
        out, was_dask = self._outputs(X)
        classes = self.classes_
        labels = out.map_blocks(
            _argmax_label,
            classes,
            drop_axis=1,
            dtype=classes.dtype,
            meta=np.empty((0,), dtype=classes.dtype),
        )
        return self.as_output(labels, was_dask)

    def predict_proba(self, X):
        """Softmax of the outputs, ``exp(o_k) / sum_j exp(o_j)``.

        ELM outputs approximate one-hot targets by least squares; they are not calibrated
        probabilities. The softmax gives a normalised score with the same argmax as
        ``predict`` (use ``CalibratedClassifierCV`` for calibrated probabilities).
        """
        out, was_dask = self._outputs(X)
        P = out.map_blocks(_softmax, dtype=np.float64)
        return self.as_output(P, was_dask)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        P = self.predict_proba(X)
        return da.log(P) if isinstance(P, da.Array) else np.log(P)

    def score(self, X, y, sample_weight=None):
        """Mean accuracy on (X, y); dask inputs are computed (one small vector)."""
        pred = self.predict(X)
        if isinstance(pred, da.Array) or is_dask_collection(y):
            pred, y = dask.compute(pred, y)
        return accuracy_score(y, pred, sample_weight=sample_weight)


class _BaseSupervisedELM(_OutputWeightsMixin, BaseELM):
    """The supervised ELMs' parameters, reduction (H^T W H, H^T W Y) and ridge solve;
    a subclass gives its targets (``_targets``)."""

    _parameter_constraints = {
        **BaseELM._parameter_constraints,
        "C": [Interval(Real, 0, None, closed="neither")],
        "solver": [StrOptions({"auto", "primal", "dual"})],
    }
    #: only the ridge solve reads C: a sweep over C reduces once
    solve_params = ("C",)

    def __init__(
        self,
        n_hidden=1000,
        *,
        C=1.0,
        activation="sigmoid",
        scaling="standard",
        solver="auto",
        cache=False,
        random_state=None,
    ):
        self.n_hidden = n_hidden
        self.C = C
        self.activation = activation
        self.scaling = scaling
        self.solver = solver
        self.cache = cache
        self.random_state = random_state

    def check_params_vs_input(self, Xd):
        super().check_params_vs_input(Xd)
        self._solver = self.resolve_solver(Xd.shape[0])

    def reduce_hidden(self, reduction, y):
        """The targets (``_targets``), then H^T W H and H^T W Y in one pass (primal), or H, Y
        and the weights W gathered (dual: n_hidden > N, so H is no larger than H^T H)."""
        Y, weight = self._targets(reduction, y)
        features = reduction.features
        if self._solver == "primal":
            reduction.stats = hidden_stats(features, ("hth", "hty"), Y=Y, sample_weight=weight)
        else:
            H, Yc, w = dask.compute(features.H, Y, weight)
            reduction.stats = {"H": H, "Y": Yc, "weight": w}

    def solve_reduced(self, reduction, rng):
        """beta for this estimator's C (eq. 7, or eqs. 8-9 in the dual)."""
        stats = reduction.stats
        if self._solver == "primal":
            beta = elm_output_weights(stats["hth"], stats["hty"], self.C)
        else:
            beta = elm_dual_output_weights(stats["H"], stats["Y"], self.C, stats["weight"])
        self.output_weights_ = beta
        logger.info(
            "%s: %s solve, n_hidden=%d, n_samples=%d",
            type(self).__name__,
            self._solver,
            self.n_hidden,
            reduction.n_samples,
        )


_DOC_COMMON = """
    n_hidden : int, default=1000
        Hidden nodes n_h.
    C : float, default=1.0
        The ELM trade-off; the ridge penalty is ``1 / C``.
    activation : str or callable, default="sigmoid"
        A registered activation name (``elmscale.available("activation")``) or a callable.
    scaling : {"standard", "minmax"} or None, default="standard"
        Per-feature scaling of X before the hidden layer (fitted in one pass).
    solver : {"auto", "primal", "dual"}, default="auto"
        "primal" solves eq. 7 from H^T H and H^T Y; "dual" solves eqs. 8-9 from H H^T (it
        gathers H, n_samples x n_hidden, on the client). "auto" takes the dual when
        n_hidden > n_samples.
    cache : "auto" or bool, default=False
        Keep H's blocks in worker memory (see ``HiddenFeatures``); fit makes a single pass, so
        caching only costs memory here.
    random_state : int, RandomState or None
        Seeds the hidden layer (A, b)."""


class ELMRegressor(RegressorMixin, _BaseSupervisedELM):
    __doc__ = (
        """Extreme Learning Machine regressor: ``y ~ h(x) beta`` with a random hidden
    layer ``h`` and ridge-regularised output weights (Huang et al. 2014, eqs. 4-9).

    Parameters
    ----------"""
        + _DOC_COMMON
        + """

    Attributes
    ----------
    hidden_layer_ : RandomHiddenLayer
    output_weights_ : ndarray (n_hidden, n_targets)
        beta.
    n_features_in_ : int

    Notes
    -----
    Cost of ``fit``: one pass over X for the scaling and one for H^T H and H^T Y (each chunk
    builds its block of H and adds its partial products), then an O(n_hidden^3) solve on the
    client; client memory O(n_hidden^2). NumPy input gives NumPy predictions, dask input lazy
    dask predictions.

    References
    ----------
    G.-B. Huang, H. Zhou, X. Ding and R. Zhang, "Extreme learning machine for regression and
    multiclass classification", IEEE Trans. SMC-B 42(2), 2012.
    G. Huang, S. Song, J. N. D. Gupta and C. Wu, "Semi-supervised and unsupervised extreme
    learning machines", IEEE Transactions on Cybernetics 44(12), 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from elmscale import ELMRegressor
    >>> rng = np.random.RandomState(0)
    >>> X = rng.uniform(-3, 3, size=(500, 1))
    >>> y = np.sin(X).ravel()
    >>> model = ELMRegressor(n_hidden=50, C=1e4, random_state=0).fit(X, y)
    >>> bool(model.score(X, y) > 0.99)
    True
    """
    )

    def _targets(self, reduction, y):
        """y as a float (N, n_targets) dask array chunked like X's rows; no weights."""
        if y is None:
            raise ValueError("ELMRegressor requires y to be passed, but the target y is None")
        if not is_dask_collection(y):  # numbers (object arrays of numbers too), finite
            y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y", estimator=self)
        elif hasattr(y, "to_dask_array"):  # dask Series or DataFrame: its length is lazy
            y = frame_to_array(y)
        if y.ndim not in (1, 2):
            raise ValueError(f"y must be 1-D or 2-D, got shape {y.shape}")
        _check_y_length(y, reduction.n_samples)
        reduction.fitted["_y_1d"] = y.ndim == 1
        Y = _as_row_aligned(y, reduction.X).astype(np.float64)
        return (Y[:, None] if Y.ndim == 1 else Y), None

    def predict(self, X):
        """``h(x) beta``: (n_samples,) for 1-D targets, else (n_samples, n_targets)."""
        out, was_dask = self._outputs(X)
        if self._y_1d:
            out = out[:, 0]
        return self.as_output(out, was_dask)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


class ELMClassifier(_ClassifierOutputsMixin, ClassifierMixin, _BaseSupervisedELM):
    __doc__ = (
        """Extreme Learning Machine classifier: one-hot targets, ridge-regularised
    output weights, argmax decision (Huang et al. 2014, eqs. 4-9).

    Labels may be any sortable values (integers, strings); ``classes_`` holds them sorted.

    Parameters
    ----------"""
        + _DOC_COMMON
        + """
    class_weight : dict, "balanced" or None, default=None
        Weighted ELM: sample i gets weight ``class_weight[y_i]`` in the least-squares term
        (``beta = (H^T W H + I/C)^-1 H^T W Y``). "balanced" uses
        ``n_samples / (n_classes * count(y_i))``; classes missing from a dict get 1.

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    hidden_layer_ : RandomHiddenLayer
    output_weights_ : ndarray (n_hidden, n_classes)
        beta.
    class_weight_ : ndarray (n_classes,)
        The weight used for each class.
    n_features_in_ : int

    Notes
    -----
    Targets are one-hot rows (1 for the class, 0 elsewhere). ``predict_proba`` is the softmax
    of the outputs, a normalised score rather than a calibrated probability. Cost of ``fit``:
    one pass over X for the scaling and one for H^T W H and H^T W Y, then an O(n_hidden^3)
    solve; the labels are encoded blockwise (only the classes and their counts reach the
    client for dask input).

    References
    ----------
    G.-B. Huang, H. Zhou, X. Ding and R. Zhang, "Extreme learning machine for regression and
    multiclass classification", IEEE Trans. SMC-B 42(2), 2012.
    W. Zong, G.-B. Huang and Y. Chen, "Weighted extreme learning machine for imbalance
    learning", Neurocomputing 101, 2013.
    G. Huang, S. Song, J. N. D. Gupta and C. Wu, "Semi-supervised and unsupervised extreme
    learning machines", IEEE Transactions on Cybernetics 44(12), 2014.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from elmscale import ELMClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> model = ELMClassifier(n_hidden=100, C=10.0, random_state=0).fit(X, y)
    >>> model.predict(X[:3])
    array([0, 0, 0])
    >>> bool(model.score(X, y) > 0.9)
    True
    """
    )

    _parameter_constraints = {
        **_BaseSupervisedELM._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }

    def __init__(
        self,
        n_hidden=1000,
        *,
        C=1.0,
        activation="sigmoid",
        class_weight=None,
        scaling="standard",
        solver="auto",
        cache=False,
        random_state=None,
    ):
        super().__init__(
            n_hidden,
            C=C,
            activation=activation,
            scaling=scaling,
            solver=solver,
            cache=cache,
            random_state=random_state,
        )
        self.class_weight = class_weight

    def _targets(self, reduction, y):
        """One-hot targets of y and, with ``class_weight``, the weight of each sample."""
        if y is None:
            raise ValueError("ELMClassifier requires y to be passed, but the target y is None")
        classes, codes, counts = encode_targets(y, reduction.X)
        if len(classes) < 2:
            raise ValueError(
                f"ELMClassifier needs samples of at least 2 classes in y; got 1 "
                f"class: {classes.tolist()}"
            )
        c = len(classes)
        if self.class_weight is None:
            cw = np.ones(c)
        elif isinstance(self.class_weight, str):  # "balanced"
            cw = counts.sum() / (c * counts)
        else:
            cw = np.array([float(self.class_weight.get(k, 1.0)) for k in classes.tolist()])
            if np.any(cw < 0) or not np.all(np.isfinite(cw)):
                raise ValueError("class_weight values must be finite and non-negative")
        reduction.fitted.update(classes_=classes, class_weight_=cw)
        Y = codes.map_blocks(
            _one_hot, c, new_axis=1, chunks=(codes.chunks[0], (c,)), dtype=np.float64
        )
        weight = (
            None
            if self.class_weight is None
            else codes.map_blocks(_take_weight, cw, dtype=np.float64)
        )
        return Y, weight


__all__ = ["ELMClassifier", "ELMRegressor", "elm_dual_output_weights", "elm_output_weights"]
