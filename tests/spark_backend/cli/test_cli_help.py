"""The command line's help (issue 13 finding 8): a real description, defaults shown, the
required columns, and every strategy spec with its meaning."""

from __future__ import annotations

import pytest

from spark_backend.cli import commands as cli
from theory.watermarks.spec import SPEC_MEANINGS


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_top_level_help_describes_the_tool(capsys) -> None:
    text = _help(capsys)
    assert "The ``watermarks`` command line." not in text
    assert "compare watermark strategies" in text
    assert all(name in text for name in ("analyze", "demo", "simulate"))


def test_analyze_help_lists_columns_defaults_and_specs(capsys) -> None:
    text = _help(capsys, "analyze")
    assert "Required columns: event_time and arrival_time" in text
    assert "(default: 2m)" in text and "(default: fail)" in text and "(default: auto)" in text
    for form in ("perfect", "perfect:oracle", "bounded:<duration>", "percentile:<p>:hold"):
        meaning = dict(SPEC_MEANINGS)[form]
        assert f"{form} = {' '.join(meaning.split())}" in text


def test_simulate_help_lists_every_spec(capsys) -> None:
    text = _help(capsys, "simulate")
    for form, meaning in SPEC_MEANINGS:
        assert f"{form} = {' '.join(meaning.split())}" in text
    assert "(default: perfect)" in text


def test_demo_defaults_to_spark(capsys) -> None:
    assert "(default: spark)" in _help(capsys, "demo")


def test_analyze_and_demo_take_the_firing_options(capsys) -> None:
    for command in ("analyze", "demo"):
        text = " ".join(_help(capsys, command).split())
        assert "--allowed-lateness" in text and "--late-firings" in text
        assert "{eow,earliest,latest}" in text and "(default: eow)" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--allowed-lateness", "1m"], "--allowed-lateness needs --late-firings"),
        (["--late-firings"], "--late-firings needs --allowed-lateness > 0"),
        (["--allowed-lateness=-1s", "--late-firings"], "-1s"),
    ],
)
@pytest.mark.parametrize("command", ["analyze", "demo"])
def test_bad_firing_options_exit_2_before_any_engine(tmp_path, capsys, monkeypatch, command,
                                                     args, message) -> None:
    """Checked before any engine starts (a Spark start would fail this test)."""
    from spark_backend.cli import jobs

    def no_spark(*a: object, **k: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(jobs, "get_session", no_spark)
    trace = tmp_path / "t.csv"
    trace.write_text("event_time,arrival_time\n1,2\n")
    out = tmp_path / "o"
    argv = [command, *([str(trace)] if command == "analyze" else []), "--out", str(out), *args]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("watermarks: error:") and message in err[-1], err
    assert not out.exists()
