"""Where a bad row is: a CSV row by its line in the file (the header is line 1; a quoted
field spanning lines and blank lines counted), a Parquet row by its index from 0."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from theory.data.errors import TraceError
from theory.data.io import read_trace


def test_a_csv_row_is_named_by_its_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('event_time,arrival_time,key\n1,2,"two\nlines"\n\n3,soon,k\n')
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert e.value.row == 1 and e.value.file_row == 1
    where = f"[file {str(path)!r}, line 5 of that file, the header being line 1]"
    assert str(e.value).endswith(where)


def test_a_parquet_row_is_named_by_its_index(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"event_time": [1, 2, 3], "arrival_time": [2.0, 2.5, 4.0]}), path)
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert str(e.value).endswith(f"[file {str(path)!r}, row index 1 of that file, from 0]")


def test_a_missing_column_lists_every_column_present(tmp_path):
    """Issue 13 finding 8: a CSV with ``ts,arrival,key,value`` was told "columns present:
    ['key', 'value']" (the time-like columns left out)."""
    path = tmp_path / "t.csv"
    path.write_text("ts,arrival,key,value\n1,2,a,1\n")
    with pytest.raises(TraceError, match=r"column 'event_time': required column missing") as e:
        read_trace(path)
    assert "columns present: ['arrival', 'key', 'ts', 'value']" in str(e.value)
