"""Trace files: Parquet and CSV reading (validated) and atomic writing.

A trace path is a Parquet (``.parquet``/``.pq``) or CSV (``.csv``) file, or a directory of
them: its files are read in sorted name order (hidden ``.``/``_`` names, such as Spark's
``_SUCCESS``, skipped), rows are numbered across files, and errors name the file.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from theory.data.errors import (
    TraceError,
    duplicate_columns_error,
    empty_file_error,
    no_rows_error,
    not_utf8_error,
    ragged_row_error,
)
from theory.data.location import (
    TraceFile,
    as_trace_file,
    list_trace_files,
    trace_files,
    trace_format,
)
from theory.data.report import BadRowReport
from theory.data.schema import COLUMNS, OnBadRows, check_on_bad_rows
from theory.data.trace import Trace
from theory.data.units import check_time_unit, in_unit, numeric_time_columns
from theory.data.validate import check_file_columns, validate_columns

__all__ = [
    "CSV_NULLS",
    "check_file",
    "check_null_values",
    "check_utf8",
    "checked_files",
    "read_in_unit",
    "read_part",
    "read_trace",
    "refuse_non_utf8",
    "string_keyed",
    "trace_files",
    "trace_format",
    "write_file_atomically",
    "write_trace",
]

#: The CSV fields read as null: only the empty field. A key ``NA`` or ``null`` is a
#: string, as the user wrote it (pyarrow's defaults would read ``NA``, ``null``, ``nan``,
#: ``N/A``, ... as null and drop those rows as bad).
CSV_NULLS: Final[tuple[str, ...]] = ("",)

_RAGGED = re.compile(r"Expected (\d+) columns, got (\d+): (.*)", re.DOTALL)


def read_trace(
    path: str | os.PathLike[str],
    *,
    on_bad_rows: OnBadRows = "fail",
    require_causal: bool = False,
    allow_empty: bool = False,
    null_values: Sequence[str] = CSV_NULLS,
    time_unit: str | None = None,
) -> tuple[Trace, BadRowReport]:
    """Read a trace from Parquet (.parquet/.pq), CSV (.csv), or a directory of them.

    Missing ``key`` defaults to 0 and missing ``value`` to 1.0; ``event_time`` and
    ``arrival_time`` are required. Numeric time columns are in ``time_unit`` (``us``,
    ``ms``, ``s`` or ``ns``) and converted to µs (ns floored); without a unit they are
    µs, and a column whose range looks like epoch seconds, milliseconds or nanoseconds
    is a ValueError naming the likely unit (:func:`~theory.data.units.in_unit`, the
    command line's ``--time-unit`` rule). Timestamp, date and ISO-8601 columns are
    absolute and never scaled. If some files have int keys and others string
    keys, int keys are converted to strings. CSV keys that all look like integers are read
    as int64. See :func:`~theory.data.validate.validate_columns` for the rules and
    ``on_bad_rows``. An input with no rows at all (a header only, or empty files) is a
    TraceError unless ``allow_empty``, as in Spark's reader. ``null_values``: the CSV
    fields read as null (:func:`check_null_values`; the empty field always is).
    """
    return read_in_unit(
        path, on_bad_rows, require_causal, allow_empty, null_values, time_unit, "time_unit"
    )


def read_in_unit(
    path: str | os.PathLike[str],
    on_bad_rows: OnBadRows,
    require_causal: bool,
    allow_empty: bool,
    null_values: Sequence[str],
    time_unit: str | None,
    where: str,
) -> tuple[Trace, BadRowReport]:
    """:func:`read_trace`, its unit errors naming ``where``: the parameter
    (``time_unit``) or the command line's flag (``--time-unit``)."""
    nulls = check_null_values(null_values)
    unit = None if time_unit is None else check_time_unit(time_unit, where)
    trace, report = _read(path, check_on_bad_rows(on_bad_rows), require_causal, nulls)
    if report.rows_read == 0 and not allow_empty:
        raise no_rows_error(str(path))
    scaled = numeric_time_columns(list_trace_files(path)) if unit is not None else ()
    return in_unit(trace, unit, scaled, where), report


def check_null_values(values: Sequence[str]) -> tuple[str, ...]:
    """The CSV fields read as null: ``values`` (strings, as written, case-sensitive) and
    the empty field. TypeError for a bare string or a non-string."""
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"null_values must be a sequence of strings, got {values!r}")
    return tuple(dict.fromkeys(("", *values)))


def _read(
    path: str | os.PathLike[str], policy: OnBadRows, require_causal: bool, nulls: tuple[str, ...]
) -> tuple[Trace, BadRowReport]:
    headed = checked_files(path)
    traces: list[Trace] = []
    report = BadRowReport()
    try:
        for f, names in headed:
            t, r = read_part(f, names, policy, require_causal, nulls, report.rows_read)
            traces.append(t)
            report = report.merge(r)
    except TraceError:
        refuse_non_utf8([f for f, _ in headed])  # a bad byte is the cause to name first
        raise
    return Trace.concat(_same_key_type(traces)), report


def checked_files(path: str | os.PathLike[str]) -> list[tuple[TraceFile, list[str]]]:
    """The files of a trace path in reading order, each with its column names, after
    the checks made before any row is read (:func:`check_file` on each, then the
    columns across files); errors name the file."""
    files = list_trace_files(path)
    headers = [check_file(f) for f in files]
    check_file_columns([(f.shown, h) for f, h in zip(files, headers, strict=True)])
    return list(zip(files, headers, strict=True))


def read_part(
    f: TraceFile,
    names: list[str],
    policy: OnBadRows,
    require_causal: bool,
    nulls: tuple[str, ...],
    row_offset: int = 0,
    groups: Sequence[int] | None = None,
) -> tuple[Trace, BadRowReport]:
    """A file's rows validated (numbered from ``row_offset``; errors name the file and
    the row in it), or only its Parquet row groups ``groups`` (a row's index in the file
    then counts from the first group's). ``names``: :func:`check_file`'s."""
    return validate_columns(
        _trace_columns(_read_table(f, names, nulls, groups)),
        on_bad_rows=policy,
        require_causal=require_causal,
        row_offset=row_offset,
        path=f.shown,
        shown=_csv_text(f, nulls) if trace_format(f) == "csv" else None,
    )


def check_file(path: Path | TraceFile) -> list[str]:
    """Every column name of a trace file (local, or a :class:`TraceFile` on any pyarrow
    file system), after the checks both readers make before reading rows: not empty, a
    CSV's first block (header included) is UTF-8, no column named twice. TraceError
    naming the file (and for bad UTF-8 the line). Reads at most the first block; a bad
    byte further on is found by the row readers (:func:`refuse_non_utf8`)."""
    f = as_trace_file(path)
    fmt = trace_format(f)
    if f.size() == 0:
        raise empty_file_error(fmt, f.shown)
    if fmt == "csv":
        check_utf8(f, limit=HEAD_BYTES)
        try:
            with f.open() as raw, pacsv.open_csv(
                raw, parse_options=pacsv.ParseOptions(newlines_in_values=True)
            ) as reader:
                names = list(reader.schema.names)
        except pa.ArrowInvalid as err:
            raise _csv_error(err, f) from None
    else:
        try:
            with f.open() as raw:
                names = list(pq.read_schema(raw).names)
        except (pa.ArrowInvalid, OSError) as err:
            raise TraceError(f"not a readable Parquet file: {err}", path=f.shown) from None
    repeated = [n for n in names if names.count(n) > 1]
    if repeated:
        raise duplicate_columns_error(repeated, f.shown)
    return names


#: The bytes of a CSV file :func:`check_file` checks for UTF-8: pyarrow's first block,
#: from which it takes the header.
HEAD_BYTES: Final[int] = 1 << 20


def _csv_error(err: pa.ArrowInvalid, f: TraceFile) -> TraceError:
    """pyarrow's CSV parse error in theory's words (a ragged row by its text)."""
    m = _RAGGED.search(str(err))
    if m is None:
        return TraceError(f"not a readable CSV file: {err}", path=f.shown)
    return ragged_row_error(int(m[1]), int(m[2]), m[3], f.shown)


def check_utf8(
    path: Path | TraceFile, chunk: int = 1 << 22, limit: int | None = None
) -> None:
    """TraceError naming the line of the first byte that is not UTF-8 (a BOM is fine),
    among the first ``limit`` bytes (all without a limit)."""
    f = as_trace_file(path)
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, left = 1, limit
    with f.open() as stream:
        while True:
            block = stream.read(chunk if left is None else min(chunk, left))
            end = not block or (left is not None and left <= len(block))
            try:
                decoder.decode(block, final=not block)  # a cut character at `limit` is fine
            except UnicodeDecodeError as err:
                at = max(err.start, 0)
                byte = block[at] if at < len(block) else 0
                raise not_utf8_error(line + block[:at].count(b"\n"), byte, f.shown) from None
            if end:
                return
            line += block.count(b"\n")
            if left is not None:
                left -= len(block)


def refuse_non_utf8(files: Sequence[Path | TraceFile]) -> None:
    """:func:`check_utf8` on each CSV file in order: the readers call it only when
    something is wrong (a bad row, a ragged row, a column that is not text), so that a
    bad byte is named before what it caused, at no cost to a good input."""
    for f in files:
        if trace_format(f) == "csv":
            check_utf8(f)


def _read_table(
    f: TraceFile, names: list[str], nulls: tuple[str, ...], groups: Sequence[int] | None = None
) -> pa.Table:
    if trace_format(f) == "csv":
        opts = pacsv.ConvertOptions(null_values=list(nulls), strings_can_be_null=True)
        parse = pacsv.ParseOptions(newlines_in_values=True)
        try:
            with f.open() as raw:
                table = pacsv.read_csv(raw, parse_options=parse, convert_options=opts)
        except pa.ArrowInvalid as err:
            raise _csv_error(err, f) from None
        if any(pa.types.is_binary(t) for t in table.schema.types):  # text not UTF-8
            check_utf8(f)
        return table
    wanted = [c for c in names if c in COLUMNS]
    with f.open() as raw:
        if groups is None:
            return pq.read_table(raw, columns=wanted)
        return pq.ParquetFile(raw).read_row_groups(list(groups), columns=wanted)


def _csv_text(f: TraceFile, nulls: tuple[str, ...]) -> Callable[[str, int], object]:
    """A CSV field's text (None for a null field), as Spark's reader shows a bad value:
    ``1.5``, not the float pyarrow inferred. The file is read again, as text, only when a
    bad value is shown."""

    @functools.cache
    def column(name: str) -> pa.ChunkedArray:
        opts = pacsv.ConvertOptions(
            null_values=list(nulls),
            strings_can_be_null=True,
            include_columns=[name],
            column_types={name: pa.string()},
        )
        with f.open() as raw:
            parse = pacsv.ParseOptions(newlines_in_values=True)
            return pacsv.read_csv(raw, parse_options=parse, convert_options=opts).column(name)

    return lambda name, row: column(name)[row].as_py()


def _trace_columns(table: pa.Table) -> dict[str, pa.ChunkedArray]:
    return {c: table.column(c) for c in table.column_names if c in COLUMNS}


def _same_key_type(traces: list[Trace]) -> list[Trace]:
    """Int keys as strings when some files have string keys (a key column has one type)."""
    if len({t.has_string_keys for t in traces if len(t)}) <= 1:
        return traces
    return [string_keyed(t) for t in traces]


def string_keyed(trace: Trace) -> Trace:
    """``trace`` with its int keys as strings (as is, if they are strings already)."""
    if trace.has_string_keys:
        return trace
    return trace.with_columns(key=trace.key.astype(str).astype(object))


def write_file_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to the file ``path`` atomically: to a temporary file beside it
    (synced, mode ``0666 & ~umask``), then ``os.replace``, so a reader sees the old file
    or the new one, never a part. Concurrent writers of one path (a retried task) each
    write their own temporary file; the last rename wins."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_trace(
    trace: Trace, path: str | os.PathLike[str], extra: Mapping[str, pa.Array] | None = None
) -> None:
    """Write ``trace`` to Parquet or CSV (by suffix), atomically; ``extra`` columns (one
    value per row, e.g. a chapter-3 trace's ``platform``) are written after the trace's.

    The data goes to a temporary file in the same directory, then ``os.replace`` moves it
    into place, so readers see the old file or the new one, never a partial one; on
    failure the temporary file is removed and an existing file is left untouched.
    """
    p = Path(path)
    fmt = trace_format(p)
    table = trace.to_arrow()
    for name, column in (extra or {}).items():
        table = table.append_column(name, column)
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
