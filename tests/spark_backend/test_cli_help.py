"""The command line's help (issue 13 finding 8): a real description, defaults shown, the
required columns, and every strategy spec with its meaning."""

from __future__ import annotations

import pytest

from spark_backend import cli
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
