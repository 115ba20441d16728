"""Numbers from one source: the figures the docs and the README quote are benchmarks/RESULTS.md's,
and benchmarks/README.md lists every script under benchmarks/.

A quoted figure is tagged next to the paragraph that quotes it, by a comment the rendered page
does not show::

    .. figures from benchmarks/RESULTS.md: 72.3-72.5 s | 885 s          (reStructuredText)
    <!-- figures from benchmarks/RESULTS.md: 0.805 | 0.766 -->          (Markdown)

Each tagged figure must appear, as written, both in the document's text and in RESULTS.md: a
figure changed in one place and not the other fails here. (Untagged numbers are not checked.)
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
MARKER = re.compile(r"(?:\.\. |<!-- )figures from benchmarks/RESULTS\.md:(.*?)(?:-->)?$", re.M)
QUOTING = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.rst"))]


def quoted_figures(text):
    """The figures tagged in ``text`` and the text without its tag lines."""
    figures = [f.strip() for m in MARKER.finditer(text) for f in m.group(1).split("|")]
    return [f for f in figures if f], MARKER.sub("", text)


def contains_figure(text, figure):
    """Whether ``figure`` occurs in ``text`` as a whole number: "69.8" is not found in
    "169.85", nor "885 s" in "1,885 s"."""
    return re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d])", " ".join(text.split()))


def test_the_figure_reader():
    text = (
        "in 72.3-72.5 s and 885 s.\n\n.. figures from benchmarks/RESULTS.md: 72.3-72.5 s | 885 s\n"
    )
    figures, rest = quoted_figures(text)
    assert figures == ["72.3-72.5 s", "885 s"]
    assert "figures from" not in rest
    assert quoted_figures("<!-- figures from benchmarks/RESULTS.md: 0.805 -->")[0] == ["0.805"]
    assert contains_figure("a mean of 69.8 %", "69.8")
    assert not contains_figure("169.85", "69.8") and not contains_figure("1,885 s", "885 s")
    assert contains_figure("the fit: 72.3-72.5\n s", "72.3-72.5 s")  # across a line break


def _tagged():
    return [(p, f) for p in QUOTING for f in quoted_figures(p.read_text())[0]]


def test_the_docs_tag_the_figures_they_quote():
    files = {p.relative_to(ROOT).as_posix() for p, _ in _tagged()}
    assert {"README.md", "docs/user_guide/estimators.rst", "docs/user_guide/scaling.rst"} <= files


@pytest.mark.parametrize(
    "path, figure", _tagged(), ids=lambda v: v.name if isinstance(v, Path) else v
)
def test_a_quoted_figure_is_in_the_text_and_in_results(path, figure):
    _, text = quoted_figures(path.read_text())
    assert contains_figure(text, figure), f"{figure!r} is tagged but not quoted in {path.name}"
    assert contains_figure(RESULTS.read_text(), figure), (
        f"{path.name} quotes {figure!r}, which benchmarks/RESULTS.md does not hold"
    )


def test_benchmarks_readme_lists_every_script():
    bench = ROOT / "benchmarks"
    on_disk = {p.name for p in bench.rglob("*.py") if p.name != "__init__.py"}
    listed = set(re.findall(r"`([\w./]+\.py)`", (bench / "README.md").read_text()))
    listed = {Path(name).name for name in listed if not name.startswith("tests/")}
    assert sorted(on_disk - listed) == [], "scripts missing from benchmarks/README.md"
    assert sorted(listed - on_disk) == [], "benchmarks/README.md lists scripts that do not exist"
