"""The bad-input corpus (``tests/data/bad/``, one file per case, written by its
``make_corpus.py``) through both readers and the command line.

- Both engines read each readable file identically (every column), or refuse it with the
  same message (theory's wording, naming the file).
- The CLI refuses each bad file, and each bad option, with exit code 2 and one line naming
  the cause, no traceback, the previous output intact and no debris.
- A row at -2**62 µs costs what its data costs (no allocation per window of the span).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spark_backend.cli import commands as cli
from spark_backend.cli.atomic import MARKER
from spark_backend.traces.collect import to_trace
from spark_backend.traces.read import read_trace_df
from tests.helpers.units import us_cell
from theory.data.errors import TraceError
from theory.data.io import read_trace
from theory.experiments.tradeoff import Strategy, tradeoff
from theory.time import SECOND

pytestmark = pytest.mark.slow

BAD = Path(__file__).parents[2] / "data" / "bad"

READ_ALIKE = [
    "bom.csv",
    "early_arrival.csv",
    "far_past.csv",
    "na_keys.csv",  # keys NA, null, N/A, nan stay strings
    "quoted_newline.csv",
    "names",  # file names with a space, %, #, + and unicode
    "ns_tz.parquet",  # timestamp[ns, tz]: floored to µs by both
    "ns_timestamps.csv",  # ISO-8601 with 9 fractional digits
    "window_overflow.csv",
]

REFUSED = {
    "dup_columns.csv": "duplicate column names: ['event_time']",
    "dup_columns.parquet": "duplicate column names: ['event_time']",
    "empty.csv": "empty file: no header and no rows",
    "header_only.csv": "the trace has no rows",
    "header_space.csv": "columns present: [' event_time', 'arrival_time']",
    "non_utf8.csv": "not UTF-8 text: byte 0xff on line 2",
    "not_a_number.csv": "row 1, column 'arrival_time'",
    "ragged.csv": "a row has 6 fields where the header has 4: '3,4,b,1,5,6'",
    "short_row.csv": "a row has 3 fields where the header has 4: '3,4,b'",
}


def test_the_corpus_is_what_make_corpus_writes(tmp_path):
    """Every case is a committed file; none is left untested."""
    cases = {p.name for p in BAD.iterdir() if p.name != "make_corpus.py"}
    assert cases == set(READ_ALIKE) | set(REFUSED)


def _rows(trace) -> list[tuple]:
    cols = (trace.event_time, trace.arrival_time, trace.key, trace.value)
    return sorted(zip(*(c.tolist() for c in cols), strict=True), key=repr)


def test_both_engines_read_the_same(spark, tmp_path):
    """Every readable case in one Spark read (a directory of all of them; the test
    budget): the same rows, case by case, from both engines."""
    every = tmp_path / "every"
    every.mkdir()
    for name in READ_ALIKE:
        for f in sorted((BAD / name).iterdir()) if (BAD / name).is_dir() else [BAD / name]:
            shutil.copy(f, every / f.name)
    df, _ = read_trace_df(spark, every)
    ours = _rows(to_trace(df))
    theirs = _rows(read_trace(every)[0])
    assert ours == theirs
    for name in READ_ALIKE:  # each case is there, read by theory alone as by both
        alone = _rows(read_trace(BAD / name)[0])
        assert len(alone) > 0
        assert all(
            (e, a, str(k), v) in {(e2, a2, str(k2), v2) for e2, a2, k2, v2 in ours}
            for e, a, k, v in alone
        ), name


def test_keys_that_look_like_nulls_stay_strings():
    trace, report = read_trace(BAD / "na_keys.csv")
    assert list(trace.key) == ["NA", "null", "N/A", "nan"] and report.total == 0


def test_ns_timestamps_are_floored_to_microseconds():
    trace, _ = read_trace(BAD / "ns_tz.parquet")
    assert list(trace.event_time) == [1, 2_999]  # 1,500 ns and 2,999,999 ns


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_both_engines_refuse_with_the_same_message(spark, name):
    with pytest.raises(TraceError) as theirs:
        read_trace(BAD / name)
    with pytest.raises(TraceError) as ours:
        read_trace_df(spark, BAD / name)
    assert str(ours.value) == str(theirs.value)
    assert REFUSED[name] in str(theirs.value) and name in str(theirs.value)


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _error_lines(err: str) -> list[str]:
    """stderr without the progress bar's lines."""
    return [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[")]


def test_the_cli_refuses_every_bad_input_with_one_line(spark, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / MARKER).write_text("")
    (out / "index.html").write_text("the previous report")
    before = _tree(tmp_path)
    cases = [([str(BAD / n)], [n, needle]) for n, needle in REFUSED.items()]
    cases += [
        (["foo://bar/x.csv"], ["unsupported scheme 'foo'"]),
        ([str(BAD / "bom.csv"), "--master", "bogus://x"], ["not a Spark master URL"]),
        ([str(BAD / "early_arrival.csv"), "--strict"], ["row 8", "arrival_time"]),
        ([str(BAD / "window_overflow.csv"), "--window", "1h"], ["past MAX_TIMESTAMP"]),
        ([str(BAD / "bom.csv"), "--window", str(2**63 - 1)], ["past MAX_TIMESTAMP"]),
        ([str(BAD / "bom.csv"), "--strategies", "bounded:100000000000000000h"],
         ["the bound of 'bounded:100000000000000000h'"]),
    ]
    for argv, needles in cases:
        code = cli.main(["analyze", *argv, "--out", str(out), "--strategies", "perfect"]
                        if "--strategies" not in argv else ["analyze", *argv, "--out", str(out)])
        err = capsys.readouterr().err
        lines = _error_lines(err)
        assert code == 2, (argv, err)
        assert len(lines) == 1 and lines[0].startswith("watermarks: error: "), (argv, lines)
        assert all(n in lines[0] for n in needles), (argv, lines[0])
        assert "Traceback" not in err
        assert _tree(tmp_path) == before, argv  # previous output intact, no debris


def test_a_row_at_minus_2_to_the_62_costs_what_its_data_costs(spark, tmp_path, capsys):
    out = tmp_path / "out"
    specs = "perfect,bounded:1s"
    assert cli.main(["analyze", str(BAD / "far_past.csv"), "--out", str(out),
                     "--strategies", specs, "--window", "1s"]) == 0
    trace, _ = read_trace(BAD / "far_past.csv")
    want = tradeoff(trace, [Strategy(s, s) for s in specs.split(",")], window_size=SECOND)
    with (out / "strategies.csv").open() as f:
        got = list(csv.DictReader(f))
    for row, w in zip(got, want.rows, strict=True):
        assert int(row["windows"]) == w.windows == 9
        # integer µs, rounded to the nearest (docs/researcher.md)
        assert row["window_latency_p99_us"] == us_cell(w.window_latency_p99)


def test_arrival_before_event_time_is_counted_and_warned(spark):
    from spark_backend.cli.jobs import arrival_before_event_warning

    def early(name: str) -> int:
        df, _ = read_trace_df(spark, BAD / name)
        return df.where(df.arrival_time < df.event_time).count()

    assert "1 of 9 rows arrive before their event time" in str(
        arrival_before_event_warning(early("early_arrival.csv"), 9)
    )
    assert arrival_before_event_warning(early("bom.csv"), 8) is None


def test_a_jvm_that_will_not_start_is_one_line(tmp_path):
    """A separate process: a driver memory the JVM cannot take."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-m", "spark_backend.cli", "analyze", str(BAD / "bom.csv"),
         "--engine", "spark", "--conf", "spark.driver.memory=bogus", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )
    lines = _error_lines(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert lines[-1] == "watermarks: error: Spark's JVM would not start (its own error is " \
        "printed above)", proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_null_values_say_which_strings_are_null(spark):
    nulls = ["NA", "null"]
    theirs, t_report = read_trace(
        BAD / "na_keys.csv", null_values=nulls, on_bad_rows="skip-and-report"
    )
    df, s_report = read_trace_df(
        spark, BAD / "na_keys.csv", null_values=nulls, on_bad_rows="skip-and-report"
    )
    assert list(to_trace(df).key) == list(theirs.key) == ["N/A", "nan"]
    assert s_report.counts == t_report.counts == {"key.null": 2}


def test_spark_and_memory_errors_are_one_line_naming_the_cause(spark):
    from spark_backend.cli.errors import one_line

    caught = []
    for action in (
        lambda: spark.sql("SELECT * FROM no_such_table").collect(),
        lambda: spark.read.text("foo://bar/x.csv").collect(),
    ):
        with pytest.raises(Exception) as e:
            action()
        caught.append(one_line(e.value))
    assert caught[0].startswith("Spark refused the input: [TABLE_OR_VIEW_NOT_FOUND]")
    assert "foo" in caught[1] and caught[1].startswith("Spark")
    assert one_line(MemoryError("Unable to allocate 573 GiB")) == (
        "out of memory: Unable to allocate 573 GiB"
    )
    assert all("\n" not in c and len(c) <= 500 for c in caught)
