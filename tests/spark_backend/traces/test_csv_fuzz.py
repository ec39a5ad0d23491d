"""Fuzzing the CSV reader (hypothesis): a random valid CSV (quoted commas, quotes and
newlines, keys such as ``NA`` and ``null``, file names with spaces, ``%``, ``#`` and
unicode) is read identically by theory's reader and Spark's; a random corruption of one
time field gives the same error from both, naming the row and the column."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from spark_backend.traces.collect import to_trace
from spark_backend.traces.read import read_trace_df
from theory.data.errors import TraceError
from theory.data.io import read_trace

pytestmark = pytest.mark.slow

_KEYS = st.one_of(
    st.sampled_from(["NA", "null", "nan", "N/A", "a,b", 'say "hi"', "two\nlines", "é", " x "]),
    st.text(alphabet="abcxyz019 ", min_size=1, max_size=4),
)
_TIME = st.integers(0, 2**50)
_ROW = st.tuples(_TIME, st.integers(0, 2**20), _KEYS, st.floats(-1e6, 1e6, allow_nan=False))
_NAMES = st.sampled_from(["t.csv", "a b.csv", "p%41.csv", "h#1.csv", "é ü.csv"])
_SETTINGS = settings(
    max_examples=4,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking on Spark takes minutes
)


def _write(directory: Path, name: str, rows: list[tuple[int, int, str, float]]) -> Path:
    path = directory / name
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["event_time", "arrival_time", "key", "value"])
        for e, delay, k, v in rows:
            w.writerow([e, e + delay, k, repr(v)])
    return path


@given(rows=st.lists(_ROW, min_size=1, max_size=12), name=_NAMES)
@_SETTINGS
def test_valid_csvs_read_identically(spark, rows, name):
    with tempfile.TemporaryDirectory() as d:
        path = _write(Path(d), name, rows)
        theirs, _ = read_trace(path)
        df, _ = read_trace_df(spark, path)
        ours = to_trace(df)
    assert len(theirs) == len(ours) == len(rows)
    np.testing.assert_array_equal(ours.event_time, theirs.event_time)
    np.testing.assert_array_equal(ours.arrival_time, theirs.arrival_time)
    np.testing.assert_array_equal(ours.value, theirs.value)
    assert [str(k) for k in ours.key] == [str(k) for k in theirs.key] == [r[2] for r in rows]


@given(
    rows=st.lists(_ROW, min_size=2, max_size=10),
    data=st.data(),
    junk=st.sampled_from(["x", "", "NA", "--3", "soon", "12:00"]),
)
@_SETTINGS
def test_a_corrupted_time_field_names_the_row_in_both_readers(spark, rows, data, junk):
    bad = data.draw(st.integers(0, len(rows) - 1), label="bad row")
    column = data.draw(st.sampled_from(["event_time", "arrival_time"]), label="column")
    with tempfile.TemporaryDirectory() as d:
        path = _write(Path(d), "t.csv", rows)
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        header = ["event_time", "arrival_time", "key", "value"]
        # rows may span lines (quoted newlines): rebuild them with csv instead
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(header)
            for i, (e, delay, k, v) in enumerate(rows):
                fields: list[object] = [e, e + delay, k, repr(v)]
                if i == bad:
                    fields[header.index(column)] = junk
                w.writerow(fields)
        assert lines  # the file existed before the rewrite
        with pytest.raises(TraceError) as theirs:
            read_trace(path)
        with pytest.raises(TraceError) as ours:
            read_trace_df(spark, path)
    assert str(ours.value) == str(theirs.value)
    assert theirs.value.row == bad and theirs.value.column == column
    assert f"row {bad}" in str(theirs.value) and repr(column) in str(theirs.value)


def test_a_numeric_bad_value_is_shown_alike(spark, tmp_path):
    """Both readers show a bad CSV value as the file's text ('1.5', '1e20'), not as the
    number pyarrow inferred, in the error and in skip-and-report's examples."""
    path = tmp_path / "t.csv"
    path.write_text("event_time,arrival_time,value\n1.5,2,1\n0,3,1\n1e20,4,inf\n")
    with pytest.raises(TraceError) as theirs:
        read_trace(path)
    with pytest.raises(TraceError) as ours:
        read_trace_df(spark, path)
    assert str(ours.value) == str(theirs.value)
    assert "(got '1.5')" in str(theirs.value)
    _, mine = read_trace(path, on_bad_rows="skip-and-report")
    _, spark_report = read_trace_df(spark, path, on_bad_rows="skip-and-report")
    assert mine == spark_report
    assert ("event_time.not_integer", [(0, "event_time", "1.5")]) in mine.examples.items()
    assert mine.examples["value.not_finite"] == [(2, "value", "inf")]
