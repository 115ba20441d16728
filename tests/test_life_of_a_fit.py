"""The life of a fit, as the architecture page lists it (docs/developer.rst, "The life of a
fit"), is what a real fit does: every step listed for US-ELM and EMMC runs, and their first
calls come in the page's order.

The page names each step by the function that runs it, qualified by the module that defines
it; a profiler hook records the first call of every elmscale function during a small fit. A
step renamed, moved to another module or run in another order fails here, so the page cannot
drift from the code unnoticed."""

import importlib
import re
import sys
from pathlib import Path

import dask
import pytest

import elmscale

DEVELOPER = Path(__file__).resolve().parents[1] / "docs" / "developer.rst"
SECTION = "The life of a fit"
#: the fits the page describes, small: US-ELM with the graph filter on (``smoothing="auto"``
#: turns it on from 1,000 rows only), the primal problem (n_hidden below the rows); EMMC with
#: its defaults
ESTIMATORS = {
    "USELM": lambda: elmscale.USELM(n_clusters=3, n_hidden=100, smoothing=2, random_state=0),
    "EMMC": lambda: elmscale.EMMC(n_clusters=3, n_hidden=100, random_state=0),
}


def page_steps():
    """``{class name: [qualified function names]}``: the lists of the page's section, each
    after the paragraph that opens with "One :class:`elmscale.NAME` fit", an item per step
    (``#. ``name``: what it does``)."""
    lines = DEVELOPER.read_text().splitlines()
    start = lines.index(SECTION) + 2
    end = next(
        (
            i
            for i in range(start, len(lines) - 1)
            if lines[i].strip() and re.fullmatch(r"([=~-])\1+", lines[i + 1])
        ),
        len(lines),
    )
    steps, current = {}, None
    for line in lines[start:end]:
        opening = re.match(r"One :class:`elmscale\.(\w+)` fit", line)
        if opening:
            current = steps.setdefault(opening.group(1), [])
        item = re.match(r"#\.\s+``([\w.]+)``", line)
        if item:
            assert current is not None, f"a step before the first list: {line!r}"
            current.append(item.group(1))
    return steps


def first_calls(fit):
    """The qualified names (module and ``co_qualname``) of the elmscale functions ``fit()``
    calls, in the order of their first calls. The sync scheduler runs the tasks on this
    thread too, where ``sys.setprofile`` sees them (the threaded one would run them on its
    pool's threads)."""
    order = {}

    def hook(frame, event, arg):
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("elmscale"):
                order.setdefault(f"{module}.{frame.f_code.co_qualname}", len(order))

    previous = sys.getprofile()
    with dask.config.set(scheduler="sync"):
        sys.setprofile(hook)
        try:
            fit()
        finally:
            sys.setprofile(previous)
    return list(order)


def _defined_at(name):
    """The object the qualified ``name`` points at: the longest importable module prefix,
    then attributes."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def test_the_page_lists_the_steps_of_both_fits():
    """Both lists are there, at the grain a newcomer reads (the steps, not every helper),
    and each step names a function where it is defined, not where it is re-exported."""
    steps = page_steps()
    assert set(steps) == set(ESTIMATORS)
    for estimator, names in steps.items():
        assert 8 <= len(names) <= 15, f"{estimator}: {len(names)} steps"
        assert len(set(names)) == len(names), f"{estimator}: a step listed twice"
        for name in names:
            fn = _defined_at(name)
            assert f"{fn.__module__}.{fn.__qualname__}" == name, f"{name} is defined elsewhere"


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_a_fit_runs_the_page_steps_in_the_page_order(estimator, blobs):
    """A real fit of a few hundred NumPy rows calls every step the page lists, and calls
    each for the first time after the steps listed before it."""
    X, _ = blobs
    steps = page_steps()[estimator]
    calls = first_calls(lambda: ESTIMATORS[estimator]().fit(X))
    missing = [name for name in steps if name not in calls]
    assert not missing, f"{estimator}: the page lists steps the fit never called: {missing}"
    ran = sorted(steps, key=calls.index)
    assert ran == steps, (
        f"{estimator}: the fit first calls the page's steps in another order:\n  "
        + "\n  ".join(ran)
    )
