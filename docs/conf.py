"""Sphinx configuration of elmscale's documentation (build from the repository root):

    pip install -e ".[docs]"
    sphinx-build -W -b html docs docs/_build/html

The API reference is generated from the package itself: every public module (a name without a
leading underscore, except the command line) gets a page listing its public names, ``__all__``
where the module defines it, so the reference follows the code without a hand-kept list.
"""

import importlib
import inspect
import os
import pkgutil
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's elmscale, not another install

import elmscale  # noqa: E402

project = "elmscale"
author = "elmscale developers"
copyright = "elmscale developers"
release = version = elmscale.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "examples/*.py", "examples/README.rst"]
templates_path = ["_templates"]

html_theme = "pydata_sphinx_theme"
html_title = "elmscale"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path = []

autosummary_generate = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"
# the parameter tables come from the numpydoc sections, not from a second listing of members
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True

# the gallery: every example is executed at build time (small sizes, a few seconds each)
sphinx_gallery_conf = {
    "examples_dirs": ["examples"],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/plot_",
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
    "matplotlib_animations": False,
    "reset_modules": ("matplotlib",),
    "plot_gallery": "True",
    "abort_on_example_error": True,
    # "Examples using X" at the end of each API page
    "doc_module": ("elmscale",),
    "backreferences_dir": "api/generated/backreferences",
}

# the documentation describes elmscale's built-ins: third-party plugins installed here (and in
# the examples' worker processes, which inherit the environment) are not loaded
os.environ["ELMSCALE_LOAD_PLUGINS"] = ""
warnings.filterwarnings("ignore", category=UserWarning, message="Port .* is already in use")

# -- the API reference, generated from the package ------------------------------------------
SKIPPED_MODULES = {"elmscale.cli", "elmscale.demo"}


def public_modules():
    """elmscale and its public submodules (no leading underscore in any part)."""
    names = ["elmscale"]
    for info in pkgutil.walk_packages(elmscale.__path__, "elmscale."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or info.name in SKIPPED_MODULES:
            continue
        names.append(info.name)
    return names


def public_names(module):
    """``__all__``, or the public functions and classes defined in the module."""
    if hasattr(module, "__all__"):
        return [n for n in module.__all__ if not n.startswith("__")]
    return sorted(
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and (inspect.isfunction(v) or inspect.isclass(v))
        and v.__module__ == module.__name__
    )


def write_api_pages():
    """One page per public module; a name exported by elmscale itself is documented there
    only, and a module with nothing else gets no page."""
    out = HERE / "api" / "modules"
    out.mkdir(parents=True, exist_ok=True)
    top = {id(getattr(elmscale, n)) for n in public_names(elmscale)}
    for name in public_modules():
        module = importlib.import_module(name)
        names = public_names(module)
        if name != "elmscale":
            names = [n for n in names if id(getattr(module, n)) not in top]
            if not names:  # everything it offers is documented under elmscale itself
                continue
        title = f"``{name}``"
        lines = [title, "=" * len(title), "", f".. automodule:: {name}", "   :no-members:", ""]
        lines += [f".. currentmodule:: {name}", "", ".. autosummary::"]
        lines += ["   :toctree: ../generated", ""] + [f"   {n}" for n in names]
        text = "\n".join(lines) + "\n"
        path = out / f"{name}.rst"
        if not path.exists() or path.read_text() != text:  # unchanged files keep the cache
            path.write_text(text)


def write_estimator_table():
    """``api/estimators.rst``: every estimator the built-in plugins register, with its
    registered name, aliases and description, from the registry (a new built-in is listed
    by registering it)."""
    reg = elmscale.registry.get_registry()
    lines = [
        "Estimators",
        "==========",
        "",
        "Every estimator elmscale registers, by the name ``elmscale.make`` and the command",
        "line take (``elmscale.all_estimators()`` lists them, and an installed plugin's too).",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 25 25 50",
        "",
        "   * - class",
        "     - name (aliases)",
        "     - what it does",
    ]
    for name, cls in elmscale.all_estimators():
        entry = reg.entry("algorithm", name)
        if not entry.plugin.startswith(elmscale.registry.BUILTIN_PACKAGE):
            continue
        aliases = ", ".join(f"``{a}``" for a in entry.aliases)
        lines += [
            f"   * - :class:`~elmscale.{cls.__name__}`",
            f"     - ``{name}``" + (f" ({aliases})" if aliases else ""),
            f"     - {entry.description}",
        ]
    text = "\n".join(lines) + "\n"
    path = HERE / "api" / "estimators.rst"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


# written when this file is read, before Sphinx looks for the source files
write_api_pages()
write_estimator_table()


def skip_scikit_learn_members(app, what, name, obj, skip, options):
    """Methods inherited from scikit-learn (get_params, set_output, score, ...) are documented
    by scikit-learn; their docstrings link to its own pages."""
    module = getattr(obj, "__module__", None) or ""
    return True if module.startswith("sklearn") else None


def setup(app):
    app.connect("autodoc-skip-member", skip_scikit_learn_members)
