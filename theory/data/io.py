"""Trace files: Parquet and CSV reading (validated) and atomic writing.

A trace path is a Parquet (``.parquet``/``.pq``) or CSV (``.csv``) file, or a directory of
them: its files are read in sorted name order (hidden ``.``/``_`` names, such as Spark's
``_SUCCESS``, skipped), rows are numbered across files, and errors name the file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Final, Literal

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from theory.data.report import BadRowReport
from theory.data.schema import COLUMNS, TRACE_SUFFIXES, OnBadRows, check_on_bad_rows
from theory.data.trace import Trace
from theory.data.validate import check_file_columns, validate_columns

__all__ = ["CSV_NULLS", "read_trace", "trace_files", "trace_format", "write_trace"]

#: The CSV fields read as null (pyarrow's defaults: "", "NA", "nan", "null", ...).
CSV_NULLS: Final[tuple[str, ...]] = tuple(pacsv.ConvertOptions().null_values)


def trace_format(path: Path) -> Literal["csv", "parquet"]:
    """The format of a trace file by its suffix; ValueError for another suffix."""
    suffix = path.suffix.lower()
    if suffix not in TRACE_SUFFIXES:
        raise ValueError(
            f"path {str(path)!r}: unknown trace format {suffix!r} (use .parquet, .pq or .csv)"
        )
    return "csv" if suffix == ".csv" else "parquet"


def trace_files(directory: Path) -> list[Path]:
    """The trace files of ``directory`` in reading (name) order; FileNotFoundError if none."""
    files = sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and p.suffix.lower() in TRACE_SUFFIXES and not p.name.startswith((".", "_"))
    )
    if not files:
        raise FileNotFoundError(
            f"directory {str(directory)!r} holds no trace files (.parquet, .pq, .csv)"
        )
    return files


def read_trace(
    path: str | os.PathLike[str],
    *,
    on_bad_rows: OnBadRows = "fail",
    require_causal: bool = False,
) -> tuple[Trace, BadRowReport]:
    """Read a trace from Parquet (.parquet/.pq), CSV (.csv), or a directory of them.

    Missing ``key`` defaults to 0 and missing ``value`` to 1.0; ``event_time`` and
    ``arrival_time`` (µs) are required. If some files have int keys and others string
    keys, int keys are converted to strings. CSV keys that all look like integers are read
    as int64. See :func:`~theory.data.validate.validate_columns` for the rules and
    ``on_bad_rows``.
    """
    policy = check_on_bad_rows(on_bad_rows)
    p = Path(path)
    if not p.is_dir():
        cols = _trace_columns(_read_table(p))
        return validate_columns(
            cols, on_bad_rows=policy, require_causal=require_causal, path=str(p)
        )
    files = trace_files(p)
    check_file_columns([(str(f), _header(f)) for f in files])
    traces: list[Trace] = []
    report = BadRowReport()
    for f in files:
        cols = _trace_columns(_read_table(f))
        t, r = validate_columns(
            cols,
            on_bad_rows=policy,
            require_causal=require_causal,
            row_offset=report.rows_read,
            path=str(f),
        )
        traces.append(t)
        report = report.merge(r)
    return Trace.concat(_same_key_type(traces)), report


def _read_table(path: Path) -> pa.Table:
    if trace_format(path) == "csv":
        opts = pacsv.ConvertOptions(strings_can_be_null=True)
        return pacsv.read_csv(path, convert_options=opts)
    schema = pq.read_schema(path)
    wanted = [c for c in schema.names if c in COLUMNS]
    return pq.read_table(path, columns=wanted)


def _trace_columns(table: pa.Table) -> dict[str, pa.ChunkedArray]:
    return {c: table.column(c) for c in table.column_names if c in COLUMNS}


def _header(path: Path) -> list[str]:
    """The trace columns of a file, from its header or schema alone."""
    if trace_format(path) == "csv":
        with pacsv.open_csv(path) as reader:
            names = reader.schema.names
    else:
        names = pq.read_schema(path).names
    return [c for c in names if c in COLUMNS]


def _same_key_type(traces: list[Trace]) -> list[Trace]:
    """Int keys as strings when some files have string keys (a key column has one type)."""
    if len({t.has_string_keys for t in traces if len(t)}) <= 1:
        return traces
    return [
        t if t.has_string_keys else t.with_columns(key=t.key.astype(str).astype(object))
        for t in traces
    ]


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` to Parquet or CSV (by suffix), atomically.

    The data goes to a temporary file in the same directory, then ``os.replace`` moves it
    into place, so readers see the old file or the new one, never a partial one; on
    failure the temporary file is removed and an existing file is left untouched.
    """
    p = Path(path)
    fmt = trace_format(p)
    table = trace.to_arrow()
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        if fmt == "csv":
            pacsv.write_csv(table, tmp)
        else:
            pq.write_table(table, tmp)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
