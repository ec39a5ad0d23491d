"""The documentation site: its worked examples run and print what the pages say, and it
builds with warnings as errors.

Convention: every fenced ``pycon`` block of a page under ``docs/`` is a doctest session.
A page's blocks run in order in one namespace (a later block may use an earlier one's
names), and each ``>>>`` line's printed result must equal the text below it. So a
definition on the semantics page that drifts from the code, or an example whose
expected value is wrong, fails here.
"""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
PYCON = re.compile(r"^```pycon[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def _sessions(page: Path) -> list[tuple[int, str]]:
    """The page's ``pycon`` blocks, each with the line number it starts at."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in PYCON.finditer(text)]


def test_the_semantics_page_has_examples() -> None:
    assert len(_sessions(DOCS / "semantics.md")) >= 10


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_examples_print_what_the_page_says(page: Path) -> None:
    """Each ``pycon`` block of ``page`` runs as a doctest; a mismatch names the page and
    line of the example and shows the expected and the printed text."""
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    namespace: dict[str, object] = {"__name__": f"docs.{page.stem}"}
    name = str(page.relative_to(ROOT))
    report: list[str] = []
    for line, source in _sessions(page):
        test = parser.get_doctest(source, namespace, name, name, line - 1)
        runner.run(test, out=report.append, clear_globs=False)
        namespace = test.globs
    failed, attempted = runner.summarize(verbose=False)
    assert not failed, "".join(report)
    if page.name == "semantics.md":
        assert attempted > 0


def test_no_page_points_outside_the_project() -> None:
    """The definitions live in the docs: neither they, the README nor the code send
    readers to a design note outside the repository."""
    code = [
        p
        for d in ("theory", "beam_pipelines", "spark_backend", "tests", "bench")
        for p in sorted((ROOT / d).rglob("*.py"))
        if p != Path(__file__).resolve()
    ]
    for path in [*PAGES, ROOT / "README.md", *code]:
        assert "DESIGN" not in path.read_text(encoding="utf-8"), path


def test_the_site_builds_without_warnings(tmp_path: Path) -> None:
    """``make docs``'s build (warnings are errors) into a temporary directory."""
    out = tmp_path / "html"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for page in (
        "index",
        "getting-started",
        "researcher",
        "beam",
        "semantics",
        "architecture",
        "reference/index",
        "notebooks/researcher",
    ):
        assert (out / f"{page}.html").is_file(), page
