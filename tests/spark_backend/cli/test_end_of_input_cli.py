"""`analyze` on the semantics page's end-of-input example (docs/semantics.md, "End of
input"): the window fired by the end of input has no latency in the table unless
--include-end-of-input, and the table counts it."""

from __future__ import annotations

import csv
from pathlib import Path

from spark_backend.cli import commands as cli


def _us(cell: str) -> float | None:
    """A µs cell, None for none."""
    return None if cell in ("", "nan") else float(cell)


def _strategies(out: Path) -> list[dict[str, str]]:
    with (out / "strategies.csv").open() as f:
        return list(csv.DictReader(f))


def test_a_window_fired_by_the_end_of_input_has_no_latency_unless_asked(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("event_time,arrival_time\n0,1000000\n2000000,3000000\n")
    base = ["analyze", str(trace), "--engine", "local", "--strategies", "perfect",
            "--window", "10s"]
    assert cli.main([*base, "--out", str(tmp_path / "o")]) == 0, capsys.readouterr().err
    (row,) = _strategies(tmp_path / "o")
    assert row["end_of_input_windows"] == "1"
    assert _us(row["window_latency_p50_us"]) is None  # the only window is left out
    assert cli.main([*base, "--include-end-of-input", "--out", str(tmp_path / "i")]) == 0
    (row,) = _strategies(tmp_path / "i")
    assert row["end_of_input_windows"] == "1"
    assert _us(row["window_latency_p50_us"]) == -7_000_000
