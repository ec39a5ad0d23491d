"""The documentation's notebooks run: each is executed once, cell by cell, in an
ipykernel kernel of this interpreter (the project's venv), and gives the kinds of
output stored with it, which the docs build shows without running it again."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "docs").rglob("*.ipynb"))


def _kinds(cell: nbformat.NotebookNode) -> list[tuple[str, ...]]:
    """Each output of a code cell as (output type, stream name or its mime types)."""
    return [
        (o.output_type, o.get("name", ""), *sorted(o.get("data", {})))
        for o in cell.get("outputs", [])
    ]


def test_the_docs_have_the_researcher_notebook() -> None:
    assert ROOT / "docs" / "notebooks" / "researcher.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_the_notebook_runs_and_gives_its_stored_outputs(path: Path, tmp_path: Path) -> None:
    """A failing cell is named (its index and first line) with its error; the outputs
    are those stored (the docs show them): the results as HTML tables, the figure as a
    PNG, no error."""
    stored = nbformat.read(path, as_version=4)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    name = path.relative_to(ROOT)
    with client.setup_kernel():
        nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.prefix)"))
        client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
        probe = nb.cells.pop()
        assert probe.outputs[0]["text"].strip() == sys.prefix, "the kernel is not this venv's"
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            try:
                client.execute_cell(cell, i)
            except CellExecutionError as e:
                first = cell.source.splitlines()[0] if cell.source else ""
                pytest.fail(f"{name} cell {i} ({first!r}) failed: {e.ename}: {e.evalue}",
                            pytrace=False)
    for i, (ran, kept) in enumerate(zip(nb.cells, stored.cells, strict=True)):
        if ran.cell_type == "code":
            assert _kinds(ran) == _kinds(kept), f"{name} cell {i}: outputs differ from stored"
            assert all(o.output_type != "error" for o in kept.outputs), f"{name} cell {i}"
    kinds = [k for c in stored.cells if c.cell_type == "code" for k in _kinds(c)]
    assert sum("text/html" in k for k in kinds) >= 4 and any("image/png" in k for k in kinds)
