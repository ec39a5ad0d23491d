"""One convention of units in every table `analyze` and `simulate` write (the demo's:
tests/spark_backend/report/test_report.py): integer `_us`, ISO `_utc` beside times, `_s`
only where named so (tests/helpers/units.py)."""

from __future__ import annotations

from pathlib import Path

from spark_backend.cli import commands as cli
from tests.helpers.units import output_unit_errors, unit_errors_of_name
from theory.data.generators import generate_trace
from theory.data.io import write_trace


def test_the_checker_can_fail() -> None:
    assert unit_errors_of_name("latency p50") and unit_errors_of_name("window start")
    assert not unit_errors_of_name("end_of_input_windows")
    assert not unit_errors_of_name("window_start_us")


def test_analyze_and_simulate_name_every_unit(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.csv"
    write_trace(generate_trace(300, seed=3), trace)
    runs = {
        "analyze": ["analyze", str(trace), "--engine", "local", "--window", "20ms",
                    "--strategies", "perfect,bounded:20ms,percentile:0.9", "--late-firings",
                    "--allowed-lateness", "10ms", "--timestamp-combiner", "earliest",
                    "--systems", "beam,flink,spark"],
        "simulate": ["simulate", "--events", "300", "--engine", "local"],
        "simulate_trace": ["simulate", "--trace", str(trace), "--engine", "local",
                           "--windowing", "fixed:20ms"],
    }
    for name, argv in runs.items():
        out = tmp_path / name
        assert cli.main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
        assert output_unit_errors(out) == [], name
