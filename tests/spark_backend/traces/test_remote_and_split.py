"""Issue 14's reader tail, on real Spark and real files:

- a ``file://`` URI goes through :mod:`pyarrow.fs` (:mod:`theory.data.location`), so it
  gets the per-file checks a local path gets, and both engines read it, or refuse it,
  alike, naming the URI;
- a byte that is not UTF-8 past the first block (which :func:`check_file` checks) is
  found by the readers themselves and named by line, before any error it caused; a
  genuine U+FFFD is read as text;
- a CSV file larger than a split is read line by line in several tasks when it holds no
  quoted newline, and whole when it does; both read as theory reads them, rows
  numbered alike across splits.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from spark_backend.traces.collect import to_trace
from spark_backend.traces.read import read_trace_df
from spark_backend.traces.split import PLAIN_LINE
from theory.data.errors import TraceError
from theory.data.io import HEAD_BYTES, read_trace
from theory.data.trace import Trace

pytestmark = pytest.mark.slow

BAD = Path(__file__).parents[2] / "data" / "bad"
ROWS = 30_000  # ~1.4 MB: past HEAD_BYTES, and several splits at 256 KiB
T0 = 1_700_000_000_000_000  # 2023 in µs


def _rows(n: int, key: str = "k") -> list[str]:
    return [f"{T0 + i},{T0 + 2_000 + i},{key}{i % 7},{i % 5}.5" for i in range(n)]


def _write(path: Path, rows: list[str]) -> Path:
    path.write_bytes(("event_time,arrival_time,key,value\n" + "\n".join(rows) + "\n").encode())
    return path


def _rows_of(trace: Trace) -> list[tuple]:
    assert len(trace) > 0
    cols = (trace.event_time, trace.arrival_time, trace.key, trace.value)
    return list(zip(*(c.tolist() for c in cols), strict=True))


def _same(spark, path: str, **kw) -> None:
    theirs, t_report = read_trace(path, **kw)
    df, s_report = read_trace_df(spark, path, **kw)
    assert sorted(_rows_of(to_trace(df))) == sorted(_rows_of(theirs))  # Spark orders splits
    assert s_report.counts == t_report.counts and s_report.rows_read == t_report.rows_read
    rows = {k: [e[0] for e in v] for k, v in s_report.examples.items()}
    assert rows == {k: [e[0] for e in v] for k, v in t_report.examples.items()}


def _same_error(spark, path: str, needle: str, **kw) -> str:
    with pytest.raises(TraceError) as theirs:
        read_trace(path, **kw)
    with pytest.raises(TraceError) as ours:
        read_trace_df(spark, path, **kw)
    assert str(ours.value) == str(theirs.value)
    assert needle in str(theirs.value), str(theirs.value)
    return str(theirs.value)


def test_a_file_uri_is_read_and_checked_as_a_local_path(spark, tmp_path):
    names = tmp_path / "names dir"
    shutil.copytree(BAD / "names", names)
    _same(spark, names.as_uri())  # spaces, %, #, + and unicode, listed through pyarrow.fs
    for case, needle in [
        ("non_utf8.csv", "not UTF-8 text: byte 0xff on line 2"),
        ("dup_columns.parquet", "duplicate column names: ['event_time']"),
        ("empty.csv", "empty file"),
        ("ragged.csv", "a row has 6 fields where the header has 4"),
    ]:
        uri = (BAD / case).as_uri()
        assert uri in _same_error(spark, uri, needle)
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        read_trace_df(spark, (tmp_path / "missing.csv").as_uri())


def test_a_bad_byte_past_the_first_block_is_named_by_line(spark, tmp_path):
    rows = _rows(ROWS)
    assert len("\n".join(rows)) > HEAD_BYTES  # check_file does not see the bad byte
    deep = ROWS - 10
    bad = _write(tmp_path / "deep.csv", rows)
    bad.write_bytes(bad.read_bytes().replace(b"\n%d," % (T0 + deep), b"\n\xff,", 1))
    line = f"byte 0xff on line {deep + 2}"
    _same_error(spark, str(bad), line)
    _same_error(spark, str(bad), line, on_bad_rows="skip-and-report")
    extra = tmp_path / "extra.csv"  # the byte in a column neither reader keeps
    extra.write_bytes(
        b"event_time,arrival_time,note\n"
        + b"".join(b"%d,%d,note\n" % (T0 + i, T0 + i) for i in range(ROWS))
        + b"7,8,\xfe\n"
    )
    _same_error(spark, str(extra), f"byte 0xfe on line {ROWS + 2}")
    # a bad row before the bad byte: the byte is named, as theory names it
    both = _write(tmp_path / "both.csv", ["1,x,k,1", *rows])
    both.write_bytes(both.read_bytes().replace(b"\n%d," % (T0 + 10), b"\n1\xff,", 1))
    _same_error(spark, str(both), "byte 0xff on line 13")


@pytest.fixture
def small_splits(spark) -> Iterator[None]:
    key = "spark.sql.files.maxPartitionBytes"
    before = spark.conf.get(key)
    spark.conf.set(key, str(256 * 1024))
    try:
        yield
    finally:
        spark.conf.set(key, before)


def test_a_large_csv_is_split_unless_it_holds_a_quoted_newline(spark, tmp_path, small_splits):
    d = tmp_path / "d"
    d.mkdir()
    plain = _rows(ROWS)
    plain[ROWS // 2] = "5,6,k,not a number"  # a bad row deep in a later split
    plain[ROWS - 3] = f"{T0},{T0},\ufffd genuine,1"  # U+FFFD written as UTF-8: text, not an error
    plain[100] = f'{T0},{T0},"a, ""quoted"" key",2'  # quotes closed on their line stay plain
    _write(d / "a_plain.csv", plain)
    quoted = _rows(ROWS, key="q")
    quoted[ROWS - 5] = f'{T0},{T0},"two\nlines",3'
    _write(d / "b_quoted.csv", quoted)
    _write(d / "c_small.csv", [f'{T0},{T0},"x\ny",4'])
    _same(spark, str(d), on_bad_rows="skip-and-report")
    # plain is split; quoted and small are one task each
    from spark_backend.traces.files import file_groups, read_group
    from theory.data.location import list_trace_files

    (group,) = file_groups(list_trace_files(str(d)))
    df = read_group(spark, group)
    tasks = df.groupBy("_file").agg(F.countDistinct("_blk")).collect()
    blocks = {int(r[0]): int(r[1]) for r in tasks}
    assert blocks[0] > 3 and blocks[1] == 1 and blocks[2] == 1, blocks


_FIELDS = st.lists(st.text(alphabet='ab,"é \r\n', max_size=5), min_size=1, max_size=5)


@given(_FIELDS)
@settings(max_examples=200, deadline=None)
def test_a_line_is_plain_exactly_when_no_field_holds_a_line_end(fields):
    """A row written by a CSV writer: every line (split as Hadoop's line reader splits:
    at \\r\\n, \\r or \\n) is plain iff no field holds a line end (then the file reads
    the same line by line as whole)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(fields)
    lines = re.split(r"\r\n|\r|\n", buf.getvalue()[:-2])
    plain = all(re.search(PLAIN_LINE, ln) for ln in lines)
    assert plain == (not any(c in f for f in fields for c in "\r\n")), lines
    assert not re.search(PLAIN_LINE, 'a"b,1') and not re.search(PLAIN_LINE, '"a"b,1')
