"""The `watermarks` command line: it runs, writes complete outputs atomically, and fails
with a one-line cause and a non-zero exit code on bad input."""

import subprocess
import sys
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from spark_backend.cli import commands as cli
from spark_backend.cli.atomic import atomic_directory


def test_simulate_writes_series_and_metrics(tmp_path, capsys):
    out = tmp_path / "sim"
    assert cli.main(["simulate", "--events", "3000", "--seed", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    for stage in ("mobile_sessions", "console_sessions", "flatten", "average_session_length"):
        assert stage in printed.out
    assert "stage mobile_sessions" in printed.err  # progress line per stage
    series = pq.read_table(out / "series.parquet").to_pydict()
    assert set(series["stage"]) == {
        "mobile_in", "console_in", "mobile_sessions", "console_sessions", "flatten",
        "average_session_length",
    }
    # the columns name their unit (integer µs, ISO-8601 UTC beside)
    assert series["processing_time_utc"][0].endswith("Z")
    for iw, ow in zip(series["input_watermark_us"], series["output_watermark_us"], strict=True):
        assert ow <= iw
    metrics = pacsv.read_csv(out / "metrics.csv").to_pydict()
    assert metrics["stage"][0] == "mobile_in"
    assert all(c == 0 for c in metrics["late_count"])  # perfect watermark by default
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim"]  # no temp dirs left


def test_heuristic_watermark_reports_late_data(tmp_path, capsys):
    out = tmp_path / "sim"
    assert cli.main(["simulate", "--events", "3000", "--watermark", "bounded:1s",
                     "--keep-freed-memory", "--out", str(out)]) == 0
    metrics = pacsv.read_csv(out / "metrics.csv").to_pydict()
    assert metrics["late_count"][0] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--events", "0"], "--events must be >= 1"),
        (["--watermark", "bounded:-5s"], "bounded"),
        (["--watermark", "nonsense"], "nonsense"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "sim"
    assert cli.main(["simulate", "--out", str(out), "--events", "100", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("watermarks: error:") and message in err[-1]
    assert not out.exists()


def test_failed_run_keeps_previous_output(tmp_path):
    out = tmp_path / "report"
    with atomic_directory(out) as tmp:
        (tmp / "a.txt").write_text("first")
    with pytest.raises(RuntimeError), atomic_directory(out) as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("boom")
    assert (out / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "watermarks"
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "simulate" in proc.stdout
