"""Imports flow spark_backend -> beam_pipelines -> theory, never upwards.

``theory`` is checked against an allow-list: the standard library, numpy, scipy, pyarrow,
datasketches and theory itself, so a new dependency (matplotlib, pandas, Beam) fails here
rather than in a user's environment. ``beam_pipelines`` may import anything but Spark and
``spark_backend``."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THEORY_ALLOWED = set(sys.stdlib_module_names) | {
    "numpy",
    "scipy",
    "pyarrow",
    "datasketches",
    "theory",
    "__future__",
}
BEAM_FORBIDDEN = {"pyspark", "spark_backend"}


def imported_modules(path: Path) -> set[str]:
    """Top-level names of every absolute import in ``path`` (relative imports are local)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def modules_of(package: str) -> list[Path]:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package} has no modules"
    return files


def test_theory_imports_only_allowed_packages() -> None:
    for path in modules_of("theory"):
        bad = imported_modules(path) - THEORY_ALLOWED
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)} (not on the allow-list)"


def test_beam_pipelines_never_imports_spark() -> None:
    for path in modules_of("beam_pipelines"):
        bad = imported_modules(path) & BEAM_FORBIDDEN
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("module", ["matplotlib", "pandas", "apache_beam", "pyspark"])
def test_the_allow_list_refuses_other_packages(module: str, tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(f"import {module}.sub\nfrom {module} import x\n")
    assert imported_modules(probe) - THEORY_ALLOWED == {module}


def test_import_theory_is_lazy() -> None:
    """``import theory`` loads none of its subpackages; names resolve on first use."""
    import subprocess

    code = (
        "import sys, theory; "
        "loaded = sorted(m for m in sys.modules if m.startswith('theory.')); "
        "assert loaded == [], loaded; "
        "assert theory.simulate.__module__ == 'theory.pipeline.simulator'; "
        "assert theory.chapter3.__name__ == 'theory.pipeline.chapter3'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_public_api_resolves_every_name_and_shadows_no_subpackage() -> None:
    import pkgutil

    import theory

    assert sorted(theory.__all__) == sorted(theory._EXPORTS)
    subpackages = {m.name for m in pkgutil.iter_modules(theory.__path__)}
    assert not subpackages & set(theory.__all__), "an export shadows a module of theory"
    for name in theory.__all__:
        assert getattr(theory, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = theory.nope  # type: ignore[attr-defined]


def test_the_package_maps_name_every_module() -> None:
    """A newcomer finds every concept from ``theory``'s docstring: it names each module
    and subpackage of theory, and each subpackage's docstring names its modules."""
    import importlib
    import pkgutil

    import theory

    unmapped = [
        m.name for m in pkgutil.iter_modules(theory.__path__)
        if f"``theory.{m.name}``" not in (theory.__doc__ or "")
    ]
    for m in pkgutil.iter_modules(theory.__path__):
        if m.ispkg:
            package = importlib.import_module(f"theory.{m.name}")
            unmapped += [
                f"{m.name}.{sub.name}" for sub in pkgutil.iter_modules(package.__path__)
                if f"``{sub.name}``" not in (package.__doc__ or "")
                and f"``theory.{m.name}.{sub.name}``" not in (package.__doc__ or "")
            ]
    assert unmapped == []


def test_the_spark_backend_maps_name_every_module() -> None:
    """``spark_backend``'s docstring names each of its sub-packages and modules, and each
    sub-package's docstring names its own (as ``name``, ``package.name`` or
    :mod:`.name`); read with ``ast``, so no sub-package is imported."""
    unmapped = []
    for init in sorted((ROOT / "spark_backend").rglob("__init__.py")):
        package = init.parent
        dotted = ".".join(package.relative_to(ROOT).parts)
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for child in sorted(package.iterdir()):
            if child.suffix == ".py" and (child.name == "__main__.py" or child.stem[0] != "_"):
                name = child.stem
            elif (child / "__init__.py").is_file():
                name = child.name
            else:
                continue
            forms = (f"``{name}``", f"``{dotted}.{name}``", f":mod:`.{name}`")
            if not any(form in doc for form in forms):
                unmapped.append(f"{dotted}.{name}")
    assert unmapped == []
