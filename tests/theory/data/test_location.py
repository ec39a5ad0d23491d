"""Trace files on any pyarrow file system (:mod:`theory.data.location`), and the UTF-8
check that costs nothing on a good file: theory's side, no Spark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from theory.data.errors import TraceError
from theory.data.io import HEAD_BYTES, check_file, read_trace
from theory.data.location import TraceFile, list_trace_files, uri_file_system

BAD = Path(__file__).parents[2] / "data" / "bad"
H = "event_time,arrival_time,key,value\n"


def test_check_file_works_on_another_file_system_and_names_the_file_as_shown():
    sub = pafs.SubTreeFileSystem(str(BAD), pafs.LocalFileSystem())
    assert check_file(TraceFile(sub, "bom.csv", "sub://bom.csv")) == [
        "event_time", "arrival_time", "key", "value"]
    for name, needle in [
        ("empty.csv", "empty file"),
        ("non_utf8.csv", "byte 0xff on line 2"),
        ("dup_columns.csv", "duplicate column names"),
        ("dup_columns.parquet", "duplicate column names"),
    ]:
        with pytest.raises(TraceError, match=needle) as err:
            check_file(TraceFile(sub, name, f"sub://{name}"))
        assert f"sub://{name}" in str(err.value)
        with pytest.raises(TraceError) as same:
            check_file(BAD / name)
        assert str(same.value) == str(err.value).replace(f"sub://{name}", str(BAD / name))


def test_a_file_uri_lists_and_reads_as_the_path_does(tmp_path):
    d = tmp_path / "a dir"
    d.mkdir()
    (d / "b.csv").write_text(H + "3,4,k,1\n")
    (d / "a.csv").write_text(H + "1,2,k,1\n")
    (d / ".hidden.csv").write_text("junk")
    (d / "_SUCCESS").write_text("")
    files = list_trace_files(d.as_uri())
    assert [f.shown for f in files] == [f"file://{d}/a.csv", f"file://{d}/b.csv"]
    by_uri, _ = read_trace(d.as_uri())
    by_path, _ = read_trace(d)
    np.testing.assert_array_equal(by_uri.event_time, by_path.event_time)
    assert list(by_uri.event_time) == [1, 3]
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        list_trace_files((tmp_path / "none.csv").as_uri())
    with pytest.raises(FileNotFoundError, match="holds no trace files"):
        list_trace_files(tmp_path.as_uri())  # holds a directory, no trace file
    with pytest.raises(ValueError, match=r"unknown trace format '\.txt'"):
        list_trace_files((tmp_path / "x.txt").as_uri())
    assert uri_file_system("foo://bar/x.csv") is None  # Spark's, if anyone's


def test_a_bad_byte_past_the_first_block_is_found_by_the_reader(tmp_path):
    rows = "".join(f"{i},{i + 1},k,1\n" for i in range(HEAD_BYTES // 8))
    assert len(rows) > HEAD_BYTES
    bad = tmp_path / "bad.csv"
    bad.write_bytes((H + rows).encode() + b"7,8,\xc3(,1\n")
    line = rows.count("\n") + 2
    assert check_file(bad)  # the header block is fine: no scan of the whole file
    with pytest.raises(TraceError, match=f"byte 0xc3 on line {line} "):
        read_trace(bad)
    bad.write_bytes((H + rows).encode() + "7,8,\ufffd,1\n".encode())  # a real U+FFFD
    trace, _ = read_trace(bad)
    assert trace.key[-1] == "\ufffd"
