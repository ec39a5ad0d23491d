"""The real-Flink oracle's environment, as ``make flink`` leaves it: ``.venv-flink`` with
PyFlink, the oracle's jar, and ``.venv-flink/oracle.env`` naming them. The tests read it
and never build it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Written by ``make flink``: the venv's python, the oracle's jar, PyFlink's jar directory.
FLINK_ENV = ROOT / ".venv-flink" / "oracle.env"

_FIX = "run `make flink` (`make test` runs it)"


def oracle_sources() -> list[Path]:
    """What the environment is built from: the set-up script and the oracle's Java."""
    java = sorted((ROOT / "tests" / "flink_oracle").glob("*.java"))
    return [ROOT / "scripts" / "flink_venv.sh", *java]


def flink_environment(env: Path, sources: list[Path]) -> tuple[str, str, str]:
    """The venv's python, the jar and PyFlink's jar directory named in ``env``;
    :class:`RuntimeError` (one line naming ``make flink``) when ``env`` is missing, older
    than one of ``sources``, or does not name three paths that exist."""
    if not env.is_file():
        raise RuntimeError(f"the Flink oracle's environment {env} is missing: {_FIX}")
    built = env.stat().st_mtime
    stale = [s.name for s in sources if s.stat().st_mtime > built]
    if stale:
        raise RuntimeError(
            f"the Flink oracle's environment {env} is older than {', '.join(stale)}: {_FIX}"
        )
    lines = env.read_text().splitlines()
    if len(lines) != 3 or not all(Path(x).exists() for x in lines):
        raise RuntimeError(
            f"{env} should name the venv's python, the jar and PyFlink's jar directory, one "
            f"a line, all present; it has {lines}: {_FIX}"
        )
    python, jar, lib = lines
    return python, jar, lib
