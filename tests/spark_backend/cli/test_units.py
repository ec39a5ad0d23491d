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


def test_the_api_table_equals_the_command_lines(tmp_path: Path, capsys) -> None:
    """`tradeoff(...).table()` and `analyze`'s strategies.csv on one trace: the same
    columns in the same units give the same values, the lag included (the source
    watermark's, exact and time-weighted in both)."""
    import csv

    from theory.data.io import read_trace
    from theory.experiments.tradeoff import Strategy, tradeoff
    from theory.time import parse_duration

    path = tmp_path / "t.csv"
    write_trace(generate_trace(400, seed=8), path)
    specs = ["perfect", "bounded:20ms", "percentile:0.9"]
    argv = ["analyze", str(path), "--engine", "local", "--window", "20ms",
            "--strategies", ",".join(specs), "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 0, capsys.readouterr().err
    with (tmp_path / "o" / "strategies.csv").open() as f:
        cli_rows = list(csv.DictReader(f))
    trace, _ = read_trace(path)
    api = tradeoff(trace, [Strategy(s, s) for s in specs],
                   window_size=parse_duration("20ms")).table()
    same = {"strategy": "strategy", "late_count": "late_count", "dropped": "dropped",
            "windows": "windows", "end_of_input_windows": "end_of_input_windows",
            "complete_fraction": "complete_fraction", "on_frontier": "on_frontier",
            "window_latency_p50_us": "window_latency_p50_us",
            "window_latency_p90_us": "window_latency_p90_us",
            "window_latency_p99_us": "window_latency_p99_us",
            "watermark_lag_p50_us": "source_lag_p50_us",
            "watermark_lag_p99_us": "source_lag_p99_us"}
    for i, row in enumerate(cli_rows):
        for ours, theirs in same.items():
            v = api[ours][i]
            assert row[theirs] == ("" if v is None else str(v)), (ours, row["strategy"])
        assert float(row["completeness_mean"]) == float(api["completeness_mean"][i])
    assert any(int(r["late_count"]) > 0 for r in cli_rows)
