"""The checkpoint of one fit: its stages, found, checked, loaded or computed and written."""

import logging
import pickle
import posixpath
import re

import numpy as np

from ._codec import Decoder, Encoder
from ._fingerprint import data_fingerprint, differences, param_fingerprint, state_digest
from ._partials import PartialSums
from ._store import CheckpointMismatchError, Store, digest

logger = logging.getLogger(__name__)

_STAGE = re.compile(r"^(\d{2})-(.+)$")


class Checkpoint:
    """The stages of one fit in the folder ``url``.

    Stages are numbered in the order the fit reaches them (``01-hidden``, ``02-graph``,
    ``03-smoothing``, ``04-gram``; an iterative solve adds ``05-iteration-00001``...). Each is
    keyed by the fit's fingerprint (``base``: estimator, data, the parameters the reduction
    reads) and by what the stage adds (the random state at its start, an iteration's
    parameters). :meth:`stage` loads a stage whose manifest exists and whose key matches,
    refuses one whose key does not (:class:`CheckpointMismatchError` naming what changed), and
    computes and writes a missing one, after deleting every stage numbered after it (their
    inputs are being computed again: the longest prefix of complete stages is what a fit resumes
    from).

    Use :func:`open_checkpoint`, which computes the fingerprint.
    """

    def __init__(self, url, base, input_array):
        self.store = Store(url)
        self.base = base
        self.input = input_array
        self.fresh = False  # a stage was computed by this fit: the later ones are recomputed
        self._seq = 0
        self._partials = None
        self._pieces = {}  # keys of objects written or read -> their Pieces (written once)
        self._check_any()

    # -- stages ----------------------------------------------------------------------------
    def stage(self, name, compute, *, rng=None, key=None):
        """The result of stage ``name``: loaded when complete and matching, else
        ``compute()`` written. ``rng`` (a RandomState the stage draws from) enters the key
        and is left in the state the computed stage left it in; ``key`` adds fields."""
        self._seq += 1
        folder = f"{self._seq:02d}-{name}"
        key = {**(key or {}), **({"rng": state_digest(rng)} if rng is not None else {})}
        manifest = None if self.fresh else self.store.read_manifest(folder)
        if manifest is not None:
            self._check(folder, manifest, key)
            return self._load(folder, manifest, rng)
        self._start_fresh(self._seq, keep=folder)
        self._partials = (folder, digest(repr(sorted(key.items())).encode()), 0)
        try:
            value = compute()
        finally:
            self._partials = None
        self._save(folder, value, key, rng)
        return value

    def iterations(self, name, params, rng):
        """The :class:`Iterations` of an iterative solve whose steps depend on ``params``
        (a dict of values) and draw from ``rng``."""
        self._seq += 1
        key = {**param_fingerprint(params), "rng": state_digest(rng)}
        return Iterations(self, f"{self._seq:02d}-{name}-", key, rng)

    def partial_sums(self):
        """The :class:`PartialSums` of the next Gram pass of the stage being computed (each
        pass of a stage gets its own folder), or None outside a stage."""
        if self._partials is None:
            return None
        folder, key, count = self._partials
        self._partials = (folder, key, count + 1)
        return PartialSums(self.store, f"{folder}/partials-{count}-{key}")

    # -- the parts -------------------------------------------------------------------------
    def _check_any(self):
        """Refuse the folder at once when a stage in it was computed for another fit."""
        for folder in sorted(self.store.listdir("")):
            if _STAGE.match(folder):
                manifest = self.store.read_manifest(folder)
                if manifest is not None:
                    self._refuse(folder, differences(manifest["base"], self.base))
                    return

    def _check(self, folder, manifest, key):
        self._refuse(folder, differences(manifest["base"], self.base))
        self._refuse(folder, differences(manifest["key"], key))

    def _refuse(self, folder, changes):
        if changes:
            raise CheckpointMismatchError(
                f"checkpoint {self.store.where(folder)} was written by a fit with other data "
                f"or parameters: changed {'; '.join(changes)}. Use another checkpoint folder, "
                "or delete this stage's folder (and those after it) to compute them again"
            )

    def _start_fresh(self, seq, keep=None):
        """This fit computes stage ``seq`` and everything after it: delete those stages,
        except the partial sums in folder ``keep`` (the stage being computed), which a
        Gram pass killed before the stage was written left for it to reuse."""
        self.fresh = True
        for folder in self.store.listdir(""):
            m = _STAGE.match(folder)
            if not m or int(m.group(1)) < seq:
                continue
            if folder != keep:
                self.store.remove(folder)
                continue
            for name in self.store.listdir(folder):
                if not name.startswith("partials-"):
                    self.store.remove(posixpath.join(folder, name))

    def _load(self, folder, manifest, rng):
        data = self.store.read(posixpath.join(folder, "value.pkl"), manifest["value"])
        value = Decoder(self.store, self.input, self._pieces).decode(pickle.loads(data))
        if rng is not None:
            rng.set_state(_rng_state(manifest["rng"]))
        logger.info("checkpoint: %s loaded", self.store.where(folder))
        return value

    def _save(self, folder, value, key, rng):
        encoder = Encoder(self.store, folder, self.input.name, self._pieces)
        skeleton = encoder.encode(value)
        files = encoder.write()
        sums = self.store.write(posixpath.join(folder, "value.pkl"), pickle.dumps(skeleton))
        manifest = {"base": self.base, "key": key, "value": sums, "pieces": len(files)}
        if rng is not None:
            manifest["rng"] = _rng_json(rng)
        self.store.write_manifest(folder, manifest)
        for name in self.store.listdir(folder):
            if name.startswith("partials-"):
                self.store.remove(posixpath.join(folder, name))
        logger.info("checkpoint: %s written (%d pieces)", self.store.where(folder), len(files))


class Iterations:
    """The iterations of one solve: stages ``<prefix><n>``, each the state after step n."""

    def __init__(self, checkpoint, prefix, key, rng):
        self.checkpoint, self.prefix, self.key, self.rng = checkpoint, prefix, key, rng

    def resume(self, limit):
        """``(n, state)`` of the last complete iteration ``n <= limit`` whose key matches,
        with the random state restored to where it left it, or ``(0, None)``. Iterations
        after it are deleted; :meth:`save` writes the following ones."""
        ckpt, prefix = self.checkpoint, self.prefix
        seq = int(prefix[:2])
        if ckpt.fresh:
            ckpt._start_fresh(seq)
            return 0, None
        done = sorted(
            (int(d[len(prefix) :]), d)
            for d in ckpt.store.listdir("")
            if d.startswith(prefix) and d[len(prefix) :].isdigit()
        )
        for n, folder in reversed(done):
            manifest = ckpt.store.read_manifest(folder) if n <= limit else None
            if manifest is not None:
                ckpt._check(folder, manifest, self.key)
                for m, later in done:
                    if m > n:
                        ckpt.store.remove(later)
                return n, ckpt._load(folder, manifest, self.rng)
        ckpt._start_fresh(seq)
        return 0, None

    def save(self, n, state):
        """Write the state after iteration ``n``."""
        self.checkpoint._save(f"{self.prefix}{n:05d}", state, self.key, self.rng)


class NoIterations:
    """The :class:`Iterations` of a solve without a checkpoint: nothing kept."""

    def resume(self, limit):
        return 0, None

    def save(self, n, state):
        pass


def _rng_json(rng):
    kind, keys, pos, has_gauss, cached = rng.get_state()
    return [kind, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)]


def _rng_state(saved):
    kind, keys, pos, has_gauss, cached = saved
    return kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached


def open_checkpoint(url, estimator, X, y=None, params=None):
    """The :class:`Checkpoint` of ``estimator``'s fit on the validated dask array ``X``
    (and targets ``y``) in the folder ``url``. The fingerprint hashes X's (and y's) chunks on
    the workers; ``params`` (default: the estimator's parameters) are the values the
    reduction depends on."""
    if estimator.get_params(deep=False).get("random_state", 0) is None:
        raise ValueError(
            "checkpoint needs a reproducible fit: set random_state to an int (with "
            "random_state=None every fit draws another hidden layer, and a resumed fit "
            "would mix two of them)"
        )
    base = {"estimator": f"{type(estimator).__module__}.{type(estimator).__qualname__}"}
    base.update(data_fingerprint(X))
    if y is not None:
        base.update(data_fingerprint(y if hasattr(y, "chunks") else np.asarray(y), "y"))
    base.update(param_fingerprint(estimator.get_params(deep=False) if params is None else params))
    return Checkpoint(url, base, X)


__all__ = ["Checkpoint", "Iterations", "NoIterations", "open_checkpoint"]
