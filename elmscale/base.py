"""BaseELM, the estimator template every elmscale estimator (and a plugin's) is written on.

A fit is two public steps. :meth:`BaseELM.reduce` validates X, draws the hidden layer and
calls the algorithm's :meth:`~BaseELM.reduce_hidden` hook, which reduces H to whatever the
solve needs (graph, ``hidden_stats`` results, an initial partition) and stores it in a
:class:`Reduction`. :meth:`BaseELM.solve` calls the algorithm's :meth:`~BaseELM.solve_reduced`
hook on that reduction. ``fit`` is ``solve(reduce(X, y))``; a parameter that only the solve
reads (``lam`` of US-ELM, ``C`` of EMMC) can change between solves of one reduction, which is
what :func:`elmscale.sweep` does.
"""

import inspect
import logging
import time
from numbers import Integral

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from . import registry
from .checkpoint import NoIterations, open_checkpoint
from .hidden import (
    HiddenFeatures,
    apply_scaling,
    draw_mixed_layer,
    fit_scaling,
    project_rows,
)
from .utils._dask import in_worker_memory
from .utils._persistence import restored_state, saved_state
from .utils._threads import blas_for_dask
from .utils._validation import in_process_rows, validate_data
from .validation import Interval, Registered, StrOptions, fit_context

logger = logging.getLogger(__name__)


class Reduction:
    """What :meth:`BaseELM.reduce` computed from the data: everything a solve needs.

    Attributes
    ----------
    X : dask array (n_samples, n_features)
        The validated input, chunked by rows.
    was_dask : bool
        Whether the user passed dask input (N-row results are then lazy dask arrays).
    features : elmscale.hidden.HiddenFeatures
        H of X, lazy or cached on the workers.
    rng : numpy.random.RandomState
        The estimator's random state while :meth:`BaseELM.reduce_hidden` runs; solves start
        from a copy of its state at the end of the reduction (:meth:`random_state`).
    graph : elmscale.graph.KNNGraph or None
        The kNN graph, when the algorithm built one.
    stats : dict
        The reduced matrices (``hidden_stats`` results, or what the algorithm stores).
    fitted : dict
        Fitted attributes set by the reduction (``n_features_in_``, ``hidden_layer_``,
        ``classes_``...), given to every estimator solved on it.
    key : dict
        The values of the parameters the reduction depends on
        (:meth:`BaseELM.reduce_key`); a solve checks that its estimator has the same.
    timings : dict
        Wall seconds of the reduction's stages.
    n_solves : int
        How many solves will read the reduction (:func:`elmscale.sweep` sets it): with one,
        a solve's single pass over H does not keep H on the workers for another.
    checkpoint : elmscale.checkpoint.Checkpoint or None
        Where :meth:`stage` keeps the reduction's stages (``fit(..., checkpoint=PATH)``).
    """

    def __init__(self, X, was_dask, rng, key):
        self.X = X
        self.was_dask = was_dask
        self.rng = rng
        self.key = key
        self.features = None
        self.graph = None
        self.stats = {}
        self.fitted = {}
        self.timings = {}
        self.n_solves = 1
        self.checkpoint = None
        self._rng_state = None
        #: the input's rows as this process holds them (NumPy input only; see
        #: :func:`~elmscale.utils._validation.in_process_rows`)
        self.X_in_process = None

    @property
    def n_samples(self):
        return self.X.shape[0]

    def random_state(self):
        """A new RandomState in the state the reduction left the estimator's in: each solve
        draws the same numbers as the fit that made the reduction would."""
        rng = np.random.RandomState()
        rng.set_state(self._rng_state)
        return rng

    def stage(self, name, compute):
        """``compute()``, the result of a stage that costs a pass over the data: loaded from
        the checkpoint when it holds it, else computed (and written to it). The result may
        hold small values, dask arrays and kNN graphs (:mod:`elmscale.checkpoint`); the
        random state ``rng`` is left as the computed stage leaves it."""
        if self.checkpoint is None:
            return compute()
        return self.checkpoint.stage(name, compute, rng=self.rng)

    def partial_sums(self):
        """What :func:`elmscale.gram.hidden_stats` takes as ``partial_sums`` inside
        :meth:`stage`, so that a Gram pass killed midway resumes (None without a
        checkpoint)."""
        return None if self.checkpoint is None else self.checkpoint.partial_sums()

    def iterations(self, name, estimator, rng):
        """The :class:`~elmscale.checkpoint.Iterations` of ``estimator``'s iterative solve:
        keyed by all its parameters but ``max_iter`` (raising it continues a finished
        fit). Nothing is kept without a checkpoint, or when several solves share the
        reduction (a sweep)."""
        if self.checkpoint is None or self.n_solves > 1:
            return NoIterations()
        params = estimator.get_params(deep=False)
        params.pop("max_iter", None)
        return self.checkpoint.iterations(name, params, rng)

    def release(self):
        """Drop the cached blocks of H and the graph from worker memory."""
        if self.features is not None:
            self.features.release()
        self.graph = None


class _Clock:
    """Wall seconds of consecutive stages."""

    def __init__(self):
        self.laps = {}
        self._last = time.perf_counter()
        self._hook_stage = None

    def lap(self, name, *, hook=True):
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._last
        self._last = now
        if hook:
            self._hook_stage = name

    def finish(self, default):
        """The time since the hook's last stage goes to that stage (``default`` if the hook
        named none)."""
        self.lap(self._hook_stage or default)


class BaseELM(BaseEstimator):
    """The template of elmscale's estimators: shared parameters, public fit steps and one
    ``fit`` that calls the algorithm's hooks.

    An algorithm subclasses ``BaseELM`` (mixins to the left), lists its parameters in
    ``_parameter_constraints`` and implements

    - ``solve_reduced(reduction, rng)`` (required): the algorithm's solve, from a
      :class:`Reduction`; sets the fitted attributes.
    - ``reduce_hidden(reduction, y)`` (optional): reduce H to what the solve needs (build
      ``reduction.graph`` with :meth:`build_graph`, store ``hidden_stats`` results in
      ``reduction.stats``, fitted attributes in ``reduction.fitted``).
    - ``reduce_params`` (optional class attribute): the parameters ``reduce_hidden`` reads;
      the others may change between solves of one reduction (:func:`elmscale.sweep`).
      None (the default) means every parameter. Where the solve reads fewer, name those
      instead as ``solve_params``: ``reduce_params`` is then every parameter of
      ``__init__`` but them, in its order.

    ``fit`` validates the parameters, then runs :meth:`reduce` (X through
    :meth:`validate_X`, :meth:`check_params_vs_input`, the random state, the hidden layer
    from :meth:`draw_hidden_layer`, H from :meth:`hidden_features`, then ``reduce_hidden``)
    and :meth:`solve` (``solve_reduced``), with BLAS on one thread per task while dask's
    threaded scheduler computes, and records ``timings_``. :meth:`as_output` gives NumPy
    back for NumPy input and dask for dask input. Pickling computes fitted dask attributes
    to NumPy and loading restores them as dask arrays with the same chunks
    (:func:`~elmscale.utils._persistence.saved_state`).
    """

    _parameter_constraints = {
        "n_hidden": [Interval(Integral, 1, None, closed="left")],
        "activation": [Registered("activation"), callable],
        "scaling": [StrOptions({"standard", "minmax"}), None],
        "cache": [StrOptions({"auto"}), "boolean"],
        "random_state": ["random_state"],
    }
    #: Parameters the reduction depends on; None: all of them.
    reduce_params = None
    #: Parameters only the solve reads: when set, ``reduce_params`` is all the others.
    solve_params = None
    #: Whether the hooks run their passes over the data through ``Reduction.stage``, so
    #: that ``fit(..., checkpoint=PATH)`` keeps them (``draw_hidden_layer``, a stage of its
    #: own, must then set no attribute but ``hidden_layer_``).
    supports_checkpoint = False

    def __getstate__(self):
        return saved_state(self, super().__getstate__())

    def __setstate__(self, state):
        super().__setstate__(restored_state(state))

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # a class that lists its own reduce_params keeps them
        if cls.solve_params is not None and "reduce_params" not in vars(cls):
            names = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
            unknown = sorted(set(cls.solve_params) - set(names))
            if unknown:
                raise TypeError(f"{cls.__name__}.solve_params names {unknown}, not parameters")
            cls.reduce_params = tuple(p for p in names if p not in cls.solve_params)

    # -- the template ----------------------------------------------------------------------
    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, checkpoint=None):
        """Reduce X (and y) and solve: ``self.solve(self.reduce(X, y))``. Returns self.

        ``checkpoint`` (a folder: local path or fsspec URL shared by client and workers)
        keeps each stage that costs a pass over the data as the fit reaches it; a fit of the
        same data and parameters with the same folder resumes from the last complete stage
        and gives the same result to the last bit (:mod:`elmscale.checkpoint`)."""
        reduction = self.reduce(X, y, checkpoint=checkpoint)
        try:
            return self.solve(reduction)
        finally:
            reduction.release()

    @fit_context(prefer_skip_nested_validation=True)
    def reduce(self, X, y=None, checkpoint=None):
        """The data-dependent first half of ``fit``: validate X, draw the hidden layer and
        run the algorithm's ``reduce_hidden`` hook. Returns a :class:`Reduction`, which
        :meth:`solve` turns into a fitted estimator for any setting of the parameters not
        in ``reduce_params``; its stages are kept in (or resumed from) the folder
        ``checkpoint``, if given."""
        with blas_for_dask():
            clock = _Clock()
            Xd, was_dask = self.validate_X(X, reset=True)
            self.check_params_vs_input(Xd)
            Xd = in_worker_memory(Xd)
            reduction = Reduction(
                Xd, was_dask, check_random_state(self.random_state), self.reduce_key()
            )
            if not was_dask:
                reduction.X_in_process = in_process_rows(X)
            if checkpoint is not None:
                reduction.checkpoint = self.open_checkpoint(checkpoint, Xd, y)
            # the input scaling is a pass over X: a stage (its result, the layer, is small)
            layer = self.hidden_layer_ = reduction.stage(
                "hidden", lambda: self.draw_hidden_layer(Xd, reduction.rng)
            )
            reduction.features = self.hidden_features(Xd)
            for name in ("n_features_in_", "feature_names_in_"):
                if hasattr(self, name):
                    reduction.fitted[name] = getattr(self, name)
            reduction.fitted["hidden_layer_"] = layer
            clock.lap("hidden", hook=False)
            self._clock = clock
            try:
                self.reduce_hidden(reduction, y)
            finally:
                del self._clock
            clock.finish("reduce")
            reduction._rng_state = reduction.rng.get_state()
            reduction.timings = dict(clock.laps)
        return reduction

    @fit_context(prefer_skip_nested_validation=True)
    def solve(self, reduction):
        """The second half of ``fit``: set the reduction's fitted attributes and run the
        algorithm's ``solve_reduced`` hook with this estimator's parameters. The reduction
        must come from an estimator with the same ``reduce_params`` values. Returns self."""
        if not isinstance(reduction, Reduction):
            raise TypeError(
                f"reduction must be a Reduction (from {type(self).__name__}"
                f".reduce), got {type(reduction).__name__}"
            )
        key = self.reduce_key()
        changed = sorted(
            name
            for name in set(key) | set(reduction.key)
            if _differ(key.get(name), reduction.key.get(name))
        )
        if changed:
            raise ValueError(
                "reduction was computed with other values of "
                + ", ".join(
                    f"{n} (reduction: {reduction.key.get(n)!r}, estimator: {key.get(n)!r})"
                    for n in changed
                )
                + f"; call {type(self).__name__}.reduce again with these parameters"
            )
        with blas_for_dask():
            clock = _Clock()
            for name, value in reduction.fitted.items():
                setattr(self, name, value)
            self.check_params_vs_input(reduction.X)
            self._clock = clock
            try:
                self.solve_reduced(reduction, reduction.random_state())
            finally:
                del self._clock
            clock.finish("solve")
        self.timings_ = {**reduction.timings, **clock.laps}
        logger.info(
            "%s fit: %s",
            type(self).__name__,
            ", ".join(f"{k} {v:.2f} s" for k, v in self.timings_.items()),
        )
        return self

    def open_checkpoint(self, url, Xd, y):
        """The checkpoint of a fit on Xd (and y) in the folder ``url``, keyed by the data and
        the ``reduce_params`` values."""
        if not self.supports_checkpoint:
            raise ValueError(
                f"{type(self).__name__} does not support checkpoint=: its fit keeps no "
                "stages (see elmscale.checkpoint)"
            )
        return open_checkpoint(url, self, Xd, y, self.reduce_key())

    # -- the hooks -------------------------------------------------------------------------
    def reduce_hidden(self, reduction, y):
        """Hook: reduce H (``reduction.features``) to what :meth:`solve_reduced` needs and
        store it in ``reduction``. The default stores nothing and ignores ``y``."""

    def solve_reduced(self, reduction, rng):
        """Hook: fit from ``reduction`` with this estimator's parameters; ``rng`` continues
        the random state where the reduction left it."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement solve_reduced(reduction, rng)"
        )

    def reduce_key(self):
        """The values of the parameters in ``reduce_params`` (all parameters when None):
        two estimators with equal keys can share a reduction."""
        params = self.get_params(deep=False)
        names = params if self.reduce_params is None else self.reduce_params
        return {name: params[name] for name in names}

    # -- the steps -------------------------------------------------------------------------
    def validate_X(self, X, *, reset):
        """X through :func:`elmscale.utils.validate_data`: ``(dask_array, was_dask)``, rows
        chunked, with ``n_features_in_`` and ``feature_names_in_`` recorded (``reset``) or
        checked against the fit."""
        return validate_data(self, X, reset=reset, n_hidden=self.n_hidden)

    def check_params_vs_input(self, Xd):
        """Checks of parameters against the data, run by ``reduce`` and again by ``solve``
        (where resolved values such as ``self._n_components`` belong): ``n_clusters``, when
        ``__init__`` has it, must not exceed the number of samples. Subclasses extend it."""
        n_clusters = self.get_params(deep=False).get("n_clusters")
        if n_clusters is not None and n_clusters > Xd.shape[0]:
            raise ValueError(f"n_clusters={n_clusters} must be <= n_samples={Xd.shape[0]}")

    def resolve_solver(self, n_samples):
        """``solver="auto"`` resolved: the dual problem when ``n_hidden > n_samples`` (its
        N x N system is then the smaller one), else the primal."""
        if self.solver == "auto":
            return "dual" if self.n_hidden > n_samples else "primal"
        return self.solver

    def draw_hidden_layer(self, Xd, rng):
        """Fit the input scaling (one pass), then draw A and b on the client from ``rng``.

        ``activation`` and the data nodes' family are resolved in the plugin registry here,
        once. The layer has ``n_hidden`` nodes of ``activation`` and, in their place, the nodes
        fitted on a sample of data rows that :meth:`data_node_params` asks for (none, unless
        the estimator uses :class:`elmscale.mixins.DataNodesMixin`). Sets and returns
        ``hidden_layer_``."""
        offset, scale = fit_scaling(Xd, self.scaling)
        fraction, width, nodes = self.data_node_params()
        self.hidden_layer_ = draw_mixed_layer(
            Xd,
            self.n_hidden,
            registry.resolve("activation", self.activation, "activation"),
            fraction,
            width,
            rng,
            offset=offset,
            scale=scale,
            nodes=registry.resolve("hidden", nodes, "data_nodes"),
        )
        return self.hidden_layer_

    def data_node_params(self):
        """``(rbf_fraction, rbf_width, data_nodes)`` of the nodes fitted on data rows that
        :meth:`draw_hidden_layer` adds (a share, a width, a registered family or a
        :class:`elmscale.hidden.NodeFamily`): none here."""
        return 0.0, 1.0, "gaussian-rows"

    def hidden_features(self, Xd, *, cache=None, output_order=None):
        """H of Xd through ``hidden_layer_``, lazy or cached on the workers (``cache``, by
        default the estimator's ``cache`` parameter). Predictions make one pass over H and
        pass ``cache=False``: caching would compute H at once, outside the caller's
        compute. ``output_order`` moves projections to the input's rows when Xd is held in
        another order (:class:`elmscale.hidden.HiddenFeatures`)."""
        if cache is None:
            cache = self.cache
        return HiddenFeatures(Xd, self.hidden_layer_, cache=cache, output_order=output_order)

    def project(self, Xd, weights, *, scaled_input=False):
        """``h(x) @ weights`` for the rows x of Xd, or ``x' @ weights`` of the scaled inputs
        x' with ``scaled_input``, as a lazy dask array chunked like Xd's rows: what a
        ``predict`` or ``transform`` returns (through :meth:`as_output`).

        Each task builds its block and multiplies it, and equal calls give equal task keys
        (:func:`elmscale.hidden.project_rows`), so predictions computed again and again on a
        distributed cluster do not meet the scheduler's "Detected different run_spec"
        warning that an expression such as ``self.scaled(Xd) @ weights`` can raise."""
        layer = self.hidden_layer_
        if scaled_input:
            layer = _Scaling(layer.offset, layer.scale)
        return project_rows(Xd, layer, weights)

    def scaled(self, Xd):
        """Xd in the hidden layer's scaled input space (lazy)."""
        layer = self.hidden_layer_
        return apply_scaling(Xd, layer.offset, layer.scale)

    @staticmethod
    def as_output(result, was_dask):
        """NumPy for NumPy input (computed with one BLAS thread per dask task), lazy dask for
        dask input."""
        if was_dask or not isinstance(result, da.Array):
            return result
        with blas_for_dask(result):
            return result.compute()

    def lap(self, name):
        """Close the current stage of a running ``reduce`` or ``solve`` under ``name`` in
        ``timings_`` (wall seconds since the previous stage)."""
        self._clock.lap(name)

    # -- fitted attributes shared by all ---------------------------------------------------
    @property
    def input_weights_(self):
        """A (n_features, n_hidden), in the scaled input space."""
        check_is_fitted(self, "hidden_layer_")
        return self.hidden_layer_.input_weights

    @property
    def biases_(self):
        """b (n_hidden,)."""
        check_is_fitted(self, "hidden_layer_")
        return self.hidden_layer_.biases

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


class _Scaling:
    """The input scaling as a layer for :func:`elmscale.hidden.project_rows`: small and
    picklable, unlike the estimator's bound ``scaled``."""

    def __init__(self, offset, scale):
        self.offset, self.scale = offset, scale

    def __call__(self, X_block):
        return apply_scaling(X_block, self.offset, self.scale)


def _differ(a, b):
    """Whether two parameter values differ. Arrays compare by value; two RandomState
    instances count as equal (a sweep solves clones of one estimator, whose random states
    are copies of one state)."""
    if a is b:
        return False
    if isinstance(a, np.random.RandomState) and isinstance(b, np.random.RandomState):
        return False
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return not np.array_equal(a, b)
    try:
        return not bool(a == b)
    except (TypeError, ValueError):
        return True


__all__ = ["BaseELM", "Reduction"]
