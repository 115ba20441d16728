"""The allocator settings change where freed blocks go, never a result: a fit in a process
that applied them gives the labels of a fit in this one."""

import json
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits

from elmscale import USELM
from elmscale.utils import MALLOC_ENV, tune_malloc

FIT = """
import json, sys
from elmscale.utils import tune_malloc
applied = tune_malloc()
from sklearn.datasets import load_digits
from elmscale import USELM
X = load_digits().data
labels = USELM(n_clusters=10, n_hidden=200, random_state=0).fit(X).labels_
print(json.dumps({"applied": applied, "labels": labels.tolist()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_tuned_process_fits_the_same_labels():
    out = subprocess.run([sys.executable, "-c", FIT], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["applied"] is True
    X = load_digits().data
    expected = USELM(n_clusters=10, n_hidden=200, random_state=0).fit(X).labels_
    np.testing.assert_array_equal(np.asarray(got["labels"]), expected)


def test_the_environment_names_the_same_settings():
    assert set(MALLOC_ENV) == {"MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"}
    assert MALLOC_ENV["MALLOC_ARENA_MAX"] == "1" and MALLOC_ENV["MALLOC_MMAP_MAX_"] == "0"


def test_elsewhere_than_linux_nothing_changes(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert tune_malloc() is False
