"""`watermarks analyze TRACE`: a user's trace compared on Spark, numbers equal to theory's,
bad rows skipped only when asked and then reported, and bad input failing with a one-line
cause, exit code 2 and no output."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from spark_backend.cli import commands as cli
from spark_backend.traces.collect import to_trace
from spark_backend.traces.generate import generate_trace_df
from tests.helpers.units import us_cell
from theory.data.io import read_trace, write_trace
from theory.experiments.tradeoff import Strategy, tradeoff
from theory.time import SECOND

pytestmark = pytest.mark.slow

SPECS = "perfect,bounded:1s,bounded:5s"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def trace_dir(spark, tmp_path_factory) -> Path:
    """A directory holding a seeded trace as a CSV with two bad rows appended."""
    d = tmp_path_factory.mktemp("trace")
    t = to_trace(generate_trace_df(spark, 8_000, seed=5))
    write_trace(t, d / "good.csv")
    lines = (d / "good.csv").read_text().splitlines()
    header = [c.strip('"') for c in lines[0].split(",")]
    bad_time = ["x" if c == "event_time" else "1" for c in header]
    bad_order = ["1.5" if c == "arrival_time" else "1" for c in header]
    (d / "good.csv").unlink()
    (d / "trace.csv").write_text("\n".join([*lines, ",".join(bad_time), ",".join(bad_order)]))
    return d


def test_skip_and_report_equals_theory(trace_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "report"
    argv = ["analyze", str(trace_dir / "trace.csv"), "--out", str(out), "--strategies", SPECS,
            "--window", "2s", "--on-bad-rows", "skip-and-report"]
    assert cli.main(argv) == 0
    assert str(out / "index.html") in capsys.readouterr().out
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")}  # not the marker
    assert names == {"index.html", "strategies.csv", "watermarks.png", "frontier.png",
                     "holdback.csv", "bad_rows.csv",
                     "windows.parquet"}  # each strategy's per-window results
    bad = _rows(out / "bad_rows.csv")
    assert sum(int(r["rows"]) for r in bad) == 2
    assert any("event_time" in r["examples"] for r in bad)
    trace, report = read_trace(trace_dir / "trace.csv", on_bad_rows="skip-and-report")
    assert report.total == 2
    specs = SPECS.split(",")
    # 2 s windows, not 10 s: the trace spans 8 s of event time, so every 10 s window is
    # fired by the end of input and left out of the latency percentiles (docs/semantics.md,
    # "End of input": its worked example's window); at 2 s the watermark fires most of them
    want = tradeoff(trace, [Strategy(s, s) for s in specs], window_size=2 * SECOND)
    got = _rows(out / "strategies.csv")
    assert [r["strategy"] for r in got] == specs
    for row, w in zip(got, want.rows, strict=True):
        assert int(row["late_count"]) == w.late_count
        assert int(row["dropped"]) == w.dropped
        assert int(row["windows"]) == w.windows
        # integer µs, rounded to the nearest (docs/researcher.md)
        assert row["window_latency_p50_us"] == us_cell(w.window_latency_p50)
        assert row["window_latency_p99_us"] == us_cell(w.window_latency_p99)
        assert int(row["end_of_input_windows"]) == w.end_of_input_windows < w.windows
        assert float(row["completeness_mean"]) == pytest.approx(w.completeness_mean, rel=1e-12)
    assert int(got[1]["late_count"]) > int(got[2]["late_count"]) > 0  # tighter bound, more late
    assert [r["on_frontier"] for r in got] == [str(x) for x in want.on_frontier]
    held = _rows(out / "holdback.csv")
    assert held and sum(float(r["held_fraction"]) for r in held) == pytest.approx(1.0)


def _fails(argv: list[str], out: Path, capsys, *needles: str) -> str:
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no error printed"
    line = err[-1]
    assert line.startswith("watermarks: error:"), line
    for n in needles:
        assert n in line, line
    assert not out.exists()
    return line


def test_bad_rows_fail_by_default_naming_row_and_column(trace_dir, tmp_path, capsys):
    line = _fails(["analyze", str(trace_dir / "trace.csv"), "--strategies", "perfect"],
                  tmp_path / "r", capsys, "event_time", "row 8000")
    assert "trace.csv" in line


def test_missing_column(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("time,arrival_time\n1,2\n")
    _fails(["analyze", str(tmp_path / "t.csv")], tmp_path / "r", capsys,
           "column 'event_time'", "missing")


def test_non_numeric_timestamp(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("event_time,arrival_time\n1,2\n3,soon\n")
    _fails(["analyze", str(tmp_path / "t.csv")], tmp_path / "r", capsys,
           "row 1", "column 'arrival_time'")


def test_empty_file(tmp_path, capsys):
    (tmp_path / "t.parquet").write_bytes(b"")
    _fails(["analyze", str(tmp_path / "t.parquet")], tmp_path / "r", capsys, "empty file")


def test_directory_with_no_data(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "README.txt").write_text("nothing here")
    _fails(["analyze", str(d)], tmp_path / "r", capsys, "holds no trace files")


def test_missing_path(tmp_path, capsys):
    _fails(["analyze", str(tmp_path / "nope.csv")], tmp_path / "r", capsys, "nope.csv")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--strategies", "perfect,sometimes"], "sometimes"),
        (["--strategies", "percentile:1.5"], "percentile:1.5"),
        (["--strategies", "perfect,perfect"], "unique"),
        (["--strategies", ","], "--strategies"),
        (["--window", "0s"], "window"),
    ],
)
def test_bad_parameters(trace_dir, tmp_path, capsys, extra, needle):
    _fails(["analyze", str(trace_dir / "trace.csv"), "--on-bad-rows", "skip-and-report",
            *extra], tmp_path / "r", capsys, needle)


def test_a_failed_run_keeps_the_previous_report(trace_dir, tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    (out / "index.html").write_text("previous")
    assert cli.main(["analyze", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert (out / "index.html").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    assert "missing" in capsys.readouterr().err
