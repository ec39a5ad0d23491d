"""One ``--out`` guard for every command: each subcommand of the parser (enumerated, so a
new one cannot skip it) declares its input paths, and ``--out`` is refused when it holds
an input or lies inside one, before any work, leaving every file as it was."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import pytest

from spark_backend.cli import commands as cli
from spark_backend.cli.atomic import MARKER

TRACE = "event_time,arrival_time\n1000000,2000000\n3000000,4000000\n"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _argv(command: str, dest: str, value: str, out: str) -> list[str]:
    """``command`` with its input ``dest`` set to ``value`` and ``--out out``."""
    (action,) = [a for a in _subcommands()[command]._actions if a.dest == dest]
    given = [action.option_strings[0], value] if action.option_strings else [value]
    return [command, *given, "--out", out]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


COMMANDS = sorted(_subcommands())
INPUTS = [(c, d) for c in COMMANDS for d in _subcommands()[c].get_default("inputs") or {}]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_declares_its_inputs(command: str) -> None:
    declared = _subcommands()[command].get_default("inputs")
    assert isinstance(declared, dict), f"{command} declares no inputs for the --out guard"
    dests = {a.dest for a in _subcommands()[command]._actions}
    assert set(declared) <= dests
    # a path-like argument not declared would escape the guard
    for action in _subcommands()[command]._actions:
        if action.dest in ("trace", "input", "inputs", "path", "checkpoint"):
            assert action.dest in declared, f"{command}: {action.dest} is not declared"


def test_the_commands_are_the_known_ones() -> None:
    assert ("analyze", "trace") in INPUTS and ("simulate", "trace") in INPUTS


@pytest.mark.parametrize(("command", "dest"), INPUTS)
def test_an_input_inside_a_previous_output_is_not_lost(
    command: str, dest: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / MARKER).write_text("x")
    (out / "t.csv").write_text(TRACE)
    before = _tree(tmp_path)
    assert cli.main(_argv(command, dest, "out/t.csv", "out")) == 2
    assert "--out 'out' holds the input 'out/t.csv'" in capsys.readouterr().err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(("command", "dest"), INPUTS)
@pytest.mark.parametrize("out", ["in/sim", "in", "in/a/b", "./in/../in/sim"])
def test_an_output_inside_the_input_directory_is_refused(
    command: str, dest: str, out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "t.csv").write_text(TRACE)
    before = _tree(tmp_path)
    assert cli.main(_argv(command, dest, "in", out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the input 'in'" in err
    assert _tree(tmp_path) == before and not (tmp_path / "in" / "sim").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_foreign_directory_is_never_replaced(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mine.txt").write_text("keep")
    (tmp_path / "t.csv").write_text(TRACE)
    argv = [command, "--out", "data"]
    for dest in _subcommands()[command].get_default("inputs"):
        argv = _argv(command, dest, "t.csv", "data")
    before = _tree(tmp_path)
    assert cli.main(argv) == 2
    assert "neither empty nor a previous output" in capsys.readouterr().err
    assert _tree(tmp_path) == before


def test_a_command_without_declared_inputs_is_refused(tmp_path: Path) -> None:
    from spark_backend.cli.preflight import check_outputs

    args = argparse.Namespace(command="new", out=str(tmp_path / "o"))
    with pytest.raises(RuntimeError, match="declares no inputs"):
        check_outputs(args)


def test_a_read_only_empty_output_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "ro"
    out.mkdir()
    os.chmod(out, 0o555)
    try:
        assert cli.main(["simulate", "--events", "50", "--out", "ro"]) == 2
        assert "read-only directory (mode 0555)" in capsys.readouterr().err
        assert os.stat(out).st_mode & 0o777 == 0o555 and not any(out.iterdir())
    finally:
        os.chmod(out, 0o755)
        shutil.rmtree(out)
