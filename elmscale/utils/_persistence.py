"""Saving fitted estimators: what pickle, joblib and skops store of a fit on a cluster."""

import pickle

import dask
import dask.array as da
import numpy as np

#: Key of the saved state that lists the attributes restored as dask arrays, with chunks.
DASK_ATTRIBUTES = "_elmscale_dask_attributes"


def saved_state(estimator, state):
    """``state`` (an estimator's ``__getstate__``) with its dask-valued attributes computed
    to NumPy and their chunks recorded under :data:`DASK_ATTRIBUTES`.

    A fit on dask input leaves ``labels_``, ``embedding_`` (and the like) as lazy dask
    arrays, usually persisted: their blocks live in the memory of the cluster's workers and
    the array only holds references (futures) to them, which mean nothing to another process.
    Pickling such an estimator (``pickle``, ``joblib``, ``copy.deepcopy``, skops) therefore
    computes every dask-valued attribute to NumPy, in one ``dask.compute`` on the active
    scheduler, and stores it with its chunks; loading (:func:`restored_state`) wraps the
    values back into dask arrays with the same chunks (``da.from_array``), so that code
    written for the fitted estimator (``model.labels_.compute()``) runs unchanged on the
    loaded one, with no cluster needed.

    The cost is that saving brings these N-row arrays to the client once (N x n_components
    floats for ``embedding_``). For data too large for that, store them where they are
    (``model.embedding_.to_zarr(...)``) and delete the attributes before saving: the model
    itself (hidden layer, output weights, cluster centres) is small. Saving after the cluster
    that fitted the model has closed raises ``pickle.PicklingError`` naming the attributes.
    """
    names = [name for name, value in state.items() if isinstance(value, da.Array)]
    if not names:
        return state
    try:
        values = dask.compute(*(state[name] for name in names))
    except Exception as exc:
        raise pickle.PicklingError(
            f"{type(estimator).__name__}: computing the dask attributes {', '.join(names)} "
            f"to save them failed ({type(exc).__name__}: {exc}). Save the model while "
            "the cluster that fitted it is running, or delete these attributes first"
        ) from exc
    state = dict(state)
    chunks = {}
    for name, value in zip(names, values, strict=True):
        chunks[name] = state[name].chunks
        state[name] = np.asarray(value)
    state[DASK_ATTRIBUTES] = chunks
    return state


def restored_state(state):
    """A state saved by :func:`saved_state` with its dask attributes wrapped back into dask
    arrays of their chunks."""
    state = dict(state)
    chunks = state.pop(DASK_ATTRIBUTES, {})
    for name, value_chunks in chunks.items():
        state[name] = da.from_array(state[name], chunks=value_chunks)
    return state


__all__ = ["restored_state", "saved_state"]
