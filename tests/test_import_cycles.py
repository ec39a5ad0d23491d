"""No import cycle among the modules of ``theory``, ``beam_pipelines`` and ``spark_backend``.

The graph is built from ``ast``, as ``test_layering`` finds upward imports: a node per
module (a package is its ``__init__``), an edge per import of another module of the
three packages, wherever it is written: at the top, inside a function (a lazy import is
still a dependency, and one that hides a cycle from the interpreter until it runs), or
under ``try``. Imports under ``if TYPE_CHECKING:`` are left out: they never run, and
annotations may name a module that imports this one. ``from a.b import c`` is an edge to
the module ``a.b.c`` when there is one, else to ``a.b``; the packages an import passes
through (``a``, ``a.b``) are not edges, so a package's ``__init__`` re-exporting its
modules does not make every module of the package a cycle.

One cycle is allowed, named in :data:`ALLOWED` with its reason; an allowed cycle that is
no longer there fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("theory", "beam_pipelines", "spark_backend")

#: Cycles kept on purpose: the modules of each, and why it stays.
ALLOWED: dict[frozenset[str], str] = {
    frozenset({"theory.data.trace", "theory.data.validate"}): (
        "Trace.from_arrow (public) validates through validate_columns, and validate_columns "
        "(public) returns a Trace; the method imports validate lazily"
    ),
}


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``root/<package>``."""
    out: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """Ids of the nodes inside ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for body in node.body:
                skipped.update(id(n) for n in ast.walk(body))
    return skipped


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``module`` (its file ``path``) imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(m for a in node.names if (m := known(a.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.update(m for m in (target if target in modules else known(base),) if m)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    modules = module_files(root, packages)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's
    algorithm, iterative), each as ``[a, b, ..., a]`` starting at its smallest name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return [_a_cycle(graph, c) for c in components]


def _a_cycle(graph: Mapping[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the smallest module of ``component`` (breadth first)."""
    first = min(component)
    previous: dict[str, str] = {}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(previous[path[-1]])
                    return [first, *reversed(path[:-1]), first]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in {sorted(component)}")


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    named = {frozenset(c): " -> ".join(c) for c in found}
    unexpected = sorted(v for k, v in named.items() if k not in ALLOWED)
    assert not unexpected, "import cycles:\n" + "\n".join(unexpected)
    gone = sorted(" <-> ".join(sorted(k)) for k in ALLOWED if k not in named)
    assert not gone, f"allowed cycles that are gone (remove them from ALLOWED): {gone}"


def _package(tmp_path: Path, files: Mapping[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(tmp_path, ["pkg"])


def test_a_lazy_import_closing_a_loop_is_a_cycle(tmp_path: Path) -> None:
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import f\n",
            "pkg/a.py": "from pkg import b\n\ndef f():\n    return b\n",
            "pkg/b.py": "def g():\n    from pkg.sub.c import h\n    return h\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "from ..a import f\n\ndef h():\n    return f\n",
        },
    )
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]


def test_type_checking_imports_and_package_inits_make_no_cycle(tmp_path: Path) -> None:
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import f\nfrom pkg.b import g\n",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from pkg.b import g\n\ndef f(): ...\n",
            "pkg/b.py": "from pkg.a import f\n\ndef g():\n    return f\n",
        },
    )
    assert graph["pkg.a"] == set() and graph["pkg.b"] == {"pkg.a"}
    assert cycles(graph) == []
