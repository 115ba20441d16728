"""The plugin API is documented: every hookspec has a docstring and a README row with its
exact signature."""

import inspect
from pathlib import Path

import pytest

from elmscale import hookspecs

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
HOOKS = [f for name, f in vars(hookspecs).items() if name.startswith("register_") and callable(f)]


def test_there_is_a_hook_per_kind():
    from elmscale.registry import KINDS

    assert sorted(f.__name__ for f in HOOKS) == sorted(KINDS.values())


@pytest.mark.parametrize("hook", HOOKS, ids=lambda f: f.__name__)
def test_hook_is_documented(hook):
    assert inspect.getdoc(hook), f"{hook.__name__} has no docstring"
    signature = f"{hook.__name__}{inspect.signature(hook)}"
    assert f"`{signature}`" in README, f"README does not document {signature}"
