"""The package's shape, read from its source with ast: data flows one way (the graph, the
hidden layer and the utilities import nothing above them but the registry, at the bottom of
the house), functions stay short, and the Gram pass asks the graph for what it needs through
public names."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "elmscale"
LOWER = ("graph", "hidden", "utils")
ABOVE = ("elmscale.base", "elmscale.algorithms", "elmscale._builtins")
#: The bottom of the house, which any module may import: the plugin registry (the one table
#: of names per kind: the graph looks a backend up in it, the hidden layer an activation),
#: its hook specifications and the exceptions. The registry loads the built-in plugins, and
#: through them the code above, on its first lookup only.
BOTTOM = ("elmscale.registry", "elmscale.hookspecs", "elmscale.exceptions")
MAX_FUNCTION_LINES = 80


def _module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source, module, is_package=False):
    """Every module (and ``module.name``) an import in ``source`` names, made absolute."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            found.add(prefix)
            found |= {f"{prefix}.{alias.name}" for alias in node.names}
    return found


def _within(names, packages):
    return sorted(n for n in names if any(n == a or n.startswith(a + ".") for a in packages))


def _reaches_above(names):
    return _within(names, ABOVE)


@pytest.mark.parametrize("folder", LOWER)
def test_lower_packages_import_nothing_above_them(folder):
    files = sorted((PACKAGE / folder).glob("*.py"))
    assert files
    for path in files:
        names = imported_modules(
            path.read_text(), _module_name(path), is_package=path.name == "__init__.py"
        )
        assert _reaches_above(names) == [], path


def top_level_imports(source, module):
    """The modules the imports of ``source`` name that run when it is imported: those
    outside any function body, made absolute."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.body = [ast.Pass()]
    return imported_modules(ast.unparse(tree), module)


def test_the_bottom_imports_only_the_bottom_when_imported():
    for name in BOTTOM:
        path = PACKAGE / f"{name.rpartition('.')[2]}.py"
        names = top_level_imports(path.read_text(), name)
        own = [n for n in _within(names, ("elmscale",)) if n != "elmscale"]  # the package
        assert own == _within(own, BOTTOM), path


def test_the_top_level_reader_skips_function_bodies():
    src = "from . import hookspecs\ndef f():\n    from . import _builtins\nimport numpy\n"
    assert top_level_imports(src, "elmscale.registry") == {
        "elmscale",
        "elmscale.hookspecs",
        "numpy",
    }


def test_the_import_reader_sees_relative_and_lazy_imports():
    src = (
        "from .. import registry\nfrom ..base import BaseELM\nimport numpy\n"
        "def f():\n    from ..algorithms._uselm import USELM\n"
        "from ._layer import RandomHiddenLayer\n"
    )
    names = imported_modules(src, "elmscale.hidden._x")
    assert _reaches_above(names) == [
        "elmscale.algorithms._uselm",
        "elmscale.algorithms._uselm.USELM",
        "elmscale.base",
        "elmscale.base.BaseELM",
    ]
    assert "elmscale.registry" in names  # the bottom: any module may import it
    assert "elmscale.hidden._layer.RandomHiddenLayer" in names


def long_functions(source, limit=MAX_FUNCTION_LINES):
    """(name, first line, lines) of every function longer than ``limit`` lines."""
    return [
        (node.name, node.lineno, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_is_longer_than_80_lines():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    too_long = {str(p.relative_to(PACKAGE)): long_functions(p.read_text()) for p in files}
    assert {k: v for k, v in too_long.items() if v} == {}


def test_the_length_reader_counts_nested_and_decorated_functions():
    lines = ["class A:", "    @staticmethod", "    def f():"]
    src = "\n".join(lines + [f"        x{i} = {i}" for i in range(80)]) + "\n"
    assert long_functions(src) == [("f", 3, 81)]
    assert long_functions(src, limit=81) == []


def private_graph_names(source):
    """Private names of elmscale.graph that ``source`` (a module of elmscale) imports or reads
    from an object as an attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and "graph" in node.module:
            parts = node.module.split(".") + [alias.name for alias in node.names]
            found += [p for p in parts if p.startswith("_")]
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(node.attr)
    return found


def test_gram_uses_only_public_names_of_the_graph():
    assert private_graph_names((PACKAGE / "gram.py").read_text()) == []


def test_the_private_name_reader_finds_them():
    src = (
        "from .graph._patterns import group_pattern\nfrom .graph import _take_rows\n"
        "graph._split\ngraph.blocks\n"
    )
    assert private_graph_names(src) == ["_patterns", "_take_rows", "_split"]


def _is_private(dotted):
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def private_imports(source, module, under, is_package=False):
    """The imports in ``source`` (module ``module``) that reach a private name of the package
    ``under``: a private module of it, or a private name imported from it."""
    found = []
    for name in sorted(imported_modules(source, module, is_package)):
        if name == under or name.startswith(under + "."):
            if _is_private(name[len(under) :]):
                found.append(name)
    return found


def _modules(skip=()):
    for path in sorted(PACKAGE.rglob("*.py")):
        if not any(path.is_relative_to(PACKAGE / s) for s in skip):
            yield path, _module_name(path), path.name == "__init__.py"


def test_no_module_outside_graph_imports_a_private_name_of_graph():
    found = {
        str(path.relative_to(PACKAGE)): private_imports(
            path.read_text(), module, "elmscale.graph", is_package
        )
        for path, module, is_package in _modules(skip=("graph",))
    }
    assert {k: v for k, v in found.items() if v} == {}


#: the one module that imports scikit-learn's private names (and says why), for the rest
SKLEARN_WRAPPER = "utils/_sklearn.py"


def test_only_one_module_imports_a_private_name_of_scikit_learn():
    found = {
        str(path.relative_to(PACKAGE)): private_imports(path.read_text(), module, "sklearn")
        for path, module, is_package in _modules()
    }
    assert {k: v for k, v in found.items() if v} == {
        SKLEARN_WRAPPER: sorted(found[SKLEARN_WRAPPER])
    }
    assert found[SKLEARN_WRAPPER]  # the wrapper still holds them


def test_the_private_import_reader_finds_them():
    src = (
        "from .graph._ordering import RowOrder\nfrom .graph import KNNGraph, _take_rows\n"
        "import elmscale.graph._tasks\nfrom . import graph\n"
        "def f():\n    from sklearn.base import _fit_context, clone\n"
        "from sklearn.utils._param_validation import Interval\n"
        "from sklearn.__check_build import x\n"
    )
    assert private_imports(src, "elmscale.x", "elmscale.graph") == [
        "elmscale.graph._ordering",
        "elmscale.graph._ordering.RowOrder",
        "elmscale.graph._take_rows",
        "elmscale.graph._tasks",
    ]
    assert private_imports(src, "elmscale.x", "sklearn") == [
        "sklearn.base._fit_context",
        "sklearn.utils._param_validation",
        "sklearn.utils._param_validation.Interval",
    ]
