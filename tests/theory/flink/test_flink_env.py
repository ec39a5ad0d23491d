"""The Flink oracle's environment is read, never built, by the tests: without it, or with
one older than the oracle's sources, they fail with one line naming ``make flink``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.flink_env import flink_environment


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """An environment file naming three files that exist, newer than its one source."""
    source = tmp_path / "Oracle.java"
    source.write_text("class Oracle {}")
    names = [str(tmp_path / n) for n in ("python", "oracle.jar", "lib")]
    for n in names:
        Path(n).touch()
    env = tmp_path / "oracle.env"
    env.write_text("\n".join(names) + "\n")
    os.utime(source, (1_000, 1_000))
    return env, source, names


def test_a_built_environment_is_read(built: tuple[Path, Path, list[str]]) -> None:
    env, source, names = built
    assert flink_environment(env, [source]) == tuple(names)


def _one_line_naming_make(err: pytest.ExceptionInfo[RuntimeError]) -> str:
    message = str(err.value)
    assert "\n" not in message and message.endswith("run `make flink` (`make test` runs it)")
    return message


def test_a_missing_environment_fails_naming_make(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError) as err:
        flink_environment(tmp_path / "oracle.env", [])
    assert "oracle.env is missing" in _one_line_naming_make(err)


def test_an_environment_older_than_its_sources_fails_naming_make(
    built: tuple[Path, Path, list[str]],
) -> None:
    env, source, _ = built
    os.utime(env, (500, 500))
    with pytest.raises(RuntimeError) as err:
        flink_environment(env, [source])
    assert "older than Oracle.java" in _one_line_naming_make(err)


def test_an_environment_naming_an_absent_file_fails_naming_make(
    built: tuple[Path, Path, list[str]],
) -> None:
    env, source, names = built
    Path(names[1]).unlink()
    with pytest.raises(RuntimeError) as err:
        flink_environment(env, [source])
    assert "all present" in _one_line_naming_make(err)


def test_make_test_builds_the_environment_first(tmp_path: Path) -> None:
    """``make test`` (what CI runs on a clean clone) runs the set-up script, when the
    environment is missing, before pytest."""
    root = Path(__file__).resolve().parents[3]
    env = tmp_path / "oracle.env"
    dry = subprocess.run(
        ["make", "-n", "-C", str(root), "test", f"FLINK_ENV={env}"],
        capture_output=True, text=True, check=True,
    ).stdout
    setup = [ln for ln in dry.splitlines() if "scripts/flink_venv.sh" in ln]
    assert setup and dry.index(setup[0]) < dry.index("-m pytest")
