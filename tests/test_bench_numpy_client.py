"""benchmarks/scale/bench_numpy_client.py: the bytes workers send each other, per stage."""

import numpy as np
import pytest

from benchmarks.scale.bench_numpy_client import StageBytes


@pytest.mark.distributed
def test_stage_bytes_add_up_to_what_the_workers_sent(dask_client):
    """Every stage of the fit gets its bytes, they add up to the workers' own counters, and
    the estimator's ``lap`` is restored afterwards."""
    import elmscale
    from elmscale.base import BaseELM

    lap = BaseELM.lap
    X = np.random.RandomState(0).rand(3_000, 20)
    with StageBytes(dask_client) as sent:
        before = sent._last
        model = elmscale.USELM(n_clusters=3, n_hidden=30, random_state=0).fit(X)
    assert BaseELM.lap is lap
    assert set(model.timings_) - {"hidden"} <= set(sent.stages)
    assert all(v >= 0 for v in sent.stages.values())
    assert sum(sent.stages.values()) == sent.total() - before
