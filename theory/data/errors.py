""":class:`TraceError` and the one wording of every trace validation error.

Both readers (numpy's :func:`theory.data.io.read_trace` and Spark's
:func:`spark_backend.traces.read.read_trace_df`) build their errors with these functions,
so the same bad input gets the same message from either.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Iterable
from typing import Any

from theory.data.schema import Rule, rule_named

__all__ = [
    "TraceError",
    "bad_row_error",
    "duplicate_columns_error",
    "empty_file_error",
    "length_error",
    "missing_column_error",
    "no_rows_error",
    "not_utf8_error",
    "optional_column_error",
    "ragged_row_error",
    "unsupported_type_error",
]


class TraceError(ValueError):
    """A bad trace input. ``row`` (0-based, or None) and ``column`` (or None) locate it.

    The message names both, e.g. ``row 17, column 'event_time': not an integer (got 1.5)``;
    for a directory it also names the file (``path``) and the row within that file.
    """

    def __init__(
        self,
        detail: str,
        *,
        row: int | None = None,
        column: str | None = None,
        path: str | None = None,
        file_row: int | None = None,
    ) -> None:
        self.detail = detail
        self.row = row
        self.column = column
        self.path = path
        self.file_row = file_row
        super().__init__(_where(row, column) + detail + _in_file(path, file_row))

    def __reduce__(self) -> tuple[Any, ...]:
        ctor = functools.partial(
            TraceError, row=self.row, column=self.column, path=self.path, file_row=self.file_row
        )
        return (ctor, (self.detail,))


def _where(row: int | None, column: str | None) -> str:
    parts = [] if row is None else [f"row {row}"]
    if column is not None:
        parts.append(f"column {column!r}")
    return ", ".join(parts) + ": " if parts else ""


def _in_file(path: str | None, file_row: int | None) -> str:
    if path is None:
        return ""
    if file_row is None:
        return f" [file {path!r}]"
    if path.lower().endswith(".csv"):
        line = csv_line(path, file_row)
        if line is not None:
            return f" [file {path!r}, line {line} of that file, the header being line 1]"
    return f" [file {path!r}, row index {file_row} of that file, from 0]"


def csv_line(path: str, row: int) -> int | None:
    """The line (1-based, the header is line 1) on which data row ``row`` (0-based) of
    the CSV file ``path`` starts, counting fields that span lines; None if unreadable."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            line, i = 1, 0
            for record in reader:
                if record:  # pyarrow skips blank lines
                    if i == row + 1:
                        return line
                    i += 1
                line = reader.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def missing_column_error(column: str, present: Iterable[str], path: str | None) -> TraceError:
    """Required ``column`` is absent; ``present`` lists the columns that are there."""
    rule = rule_named(f"{column}.missing_column")
    return TraceError(
        f"{rule.description} (columns present: {sorted(present)})", column=column, path=path
    )


def unsupported_type_error(column: str, type_name: str, path: str | None) -> TraceError:
    """``column`` has a type no rule can parse (``type_name`` as the engine spells it)."""
    rule = rule_named("*.unsupported_type")
    return TraceError(f"{rule.description} ({type_name})", column=column, path=path)


def length_error(column: str, rows: int, expected: int, path: str | None) -> TraceError:
    """``column`` has ``rows`` rows where ``event_time`` has ``expected``."""
    return TraceError(f"has {rows} rows but event_time has {expected}", column=column, path=path)


def optional_column_error(column: str, present_in: str, path: str) -> TraceError:
    """``column`` is in the file ``present_in`` but not in the file ``path`` of one trace."""
    return TraceError(
        f"optional column present in {present_in!r} but missing here", column=column, path=path
    )


def no_rows_error(path: str) -> TraceError:
    """The input holds no row at all."""
    return TraceError("the trace has no rows (only a header, or empty files)", path=path)


def bad_row_error(
    rule: Rule,
    row: int,
    got: object,
    *,
    path: str | None = None,
    file_row: int | None = None,
) -> TraceError:
    """Row ``row`` breaks ``rule``; ``got`` is the raw value as read, or for ``not_causal``
    the pair ``(arrival_time, event_time)`` in µs."""
    return TraceError(_detail(rule, got), row=row, column=rule.column, path=path, file_row=file_row)


def _detail(rule: Rule, got: object) -> str:
    if rule.kind == "not_causal" and isinstance(got, tuple):
        arrival, event = got
        return f"{rule.description} (got arrival_time={arrival} < event_time={event})"
    return f"{rule.description} (got {got!r})"


def duplicate_columns_error(names: Iterable[str], path: str | None) -> TraceError:
    """A header or schema names a column more than once (``names``: the repeated ones)."""
    return TraceError(f"duplicate column names: {sorted(set(names))}", path=path)


def empty_file_error(fmt: str, path: str) -> TraceError:
    """A 0-byte file (``fmt``: ``"csv"`` or ``"parquet"``)."""
    what = "no header and no rows" if fmt == "csv" else "not a Parquet file (0 bytes)"
    return TraceError(f"empty file: {what}", path=path)


def not_utf8_error(line: int, byte: int, path: str) -> TraceError:
    """A CSV file that is not UTF-8 text: the first bad ``byte`` is on ``line`` (1-based,
    the header is line 1)."""
    return TraceError(f"not UTF-8 text: byte 0x{byte:02x} on line {line} of the file", path=path)


def ragged_row_error(expected: int, got: int, text: str, path: str) -> TraceError:
    """A CSV row with ``got`` fields under a header of ``expected``; ``text`` is the row
    as written (both readers find it by its text: neither knows its line reliably)."""
    return TraceError(
        f"a row has {got} fields where the header has {expected}: {text!r}", path=path
    )
