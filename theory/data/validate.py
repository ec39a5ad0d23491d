"""Validation: raw columns checked against :data:`~theory.data.schema.RULES` into a Trace.

Bad rows either raise a :class:`~theory.data.errors.TraceError` naming the row and the
column (``on_bad_rows="fail"``), or are removed *and counted* in a
:class:`~theory.data.report.BadRowReport` (``"skip-and-report"``): a row is never dropped
silently, because a quietly shortened trace would make every watermark and lateness
figure computed from it wrong without a sign. Rows are numbered from 0 in input order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from theory.data.errors import (
    TraceError,
    bad_row_error,
    length_error,
    missing_column_error,
    optional_column_error,
)
from theory.data.parse import Column, ParsedColumn, normalise, parse_column
from theory.data.report import BadRowReport
from theory.data.schema import (
    COLUMNS,
    MAX_EXAMPLES,
    NO_DEFAULT_COLUMNS,
    REQUIRED_COLUMNS,
    OnBadRows,
    Rule,
    check_on_bad_rows,
    row_rules,
)
from theory.data.trace import Trace

__all__ = ["check_file_columns", "validate_columns"]

RawColumns = Mapping[str, np.ndarray | pa.Array | pa.ChunkedArray | Sequence[Any]]
Flags = list[tuple[Rule, np.ndarray]]
#: How the input holds a value, given its column and its row within the file.
Shown = Callable[[str, int], object]


def validate_columns(
    columns: RawColumns,
    *,
    on_bad_rows: OnBadRows = "fail",
    require_causal: bool = False,
    row_offset: int = 0,
    path: str | None = None,
    shown: Shown | None = None,
) -> tuple[Trace, BadRowReport]:
    """Check raw columns against :data:`~theory.data.schema.RULES` and build a Trace.

    ``event_time`` and ``arrival_time`` are required (else TraceError with ``row=None``);
    ``key`` defaults to 0 and ``value`` to 1.0 when absent; ``partition`` and
    ``publish_time`` are optional. Other columns are ignored. Timestamps (µs) may be
    integers, integral floats, Arrow/numpy timestamps or dates of any unit (converted to
    µs, sub-µs units floored), or strings holding integers or ISO-8601 times (naive = UTC).

    ``on_bad_rows="fail"`` raises TraceError for the lowest bad row; ``"skip-and-report"``
    removes bad rows, keeping the others in order, and counts them in the report.
    ``row_offset`` and ``path`` number rows and name the file in errors (for directories).
    ``shown(column, row)`` gives a bad value as the input holds it (a CSV field's text, as
    Spark's reader shows it); by default errors and examples show the value as parsed.
    """
    policy = check_on_bad_rows(on_bad_rows)
    for column in REQUIRED_COLUMNS:
        if column not in columns:
            raise missing_column_error(column, columns, path)
    parsed = _parse(_normalised(columns, path), path)
    n = len(parsed["event_time"].values)
    flags = row_rules(
        {c: p.bad for c, p in parsed.items()},
        (lambda: _not_causal(parsed)) if require_causal else None,
    )
    bad = np.logical_or.reduce([m for _, m in flags]) if flags and n else np.zeros(n, bool)
    if not bad.any():
        return _trace(parsed, None, n), BadRowReport(rows_read=n)
    if policy == "fail":
        raise _first_error(flags, bad, parsed, _shown(parsed, shown), row_offset, path)
    return _trace(parsed, ~bad, n), _report(flags, bad, _shown(parsed, shown), row_offset)


def check_file_columns(columns_of_files: Sequence[tuple[str, Collection[str]]]) -> None:
    """Column checks across the files of one trace, before any row is read.

    Each file (``(path, its trace columns)``, in reading order) needs the required
    columns; ``partition`` and ``publish_time`` have no default, so a directory has them
    in every file or in none (a trace with the column in some rows only has no meaning).
    """
    first_with: dict[str, str] = {}
    for path, present in columns_of_files:
        for column in REQUIRED_COLUMNS:
            if column not in present:
                raise missing_column_error(column, present, path)
        for column in NO_DEFAULT_COLUMNS:
            if column in present:
                first_with.setdefault(column, path)
    for column, where in first_with.items():
        for path, present in columns_of_files:
            if column not in present:
                raise optional_column_error(column, where, path)


def _normalised(columns: RawColumns, path: str | None) -> dict[str, Column]:
    cols = {name: normalise(c) for name, c in columns.items() if name in COLUMNS}
    n = len(cols["event_time"])
    for name, c in cols.items():
        if len(c) != n:
            raise length_error(name, len(c), n, path)
    return cols


def _parse(cols: Mapping[str, Column], path: str | None) -> dict[str, ParsedColumn]:
    """Every column parsed; a column error names the file."""
    try:
        return {name: parse_column(name, col) for name, col in cols.items()}
    except TraceError as e:
        if path is None:
            raise
        raise TraceError(e.detail, row=e.row, column=e.column, path=path) from None


def _not_causal(parsed: Mapping[str, ParsedColumn]) -> np.ndarray:
    """Rows whose (valid) arrival time is before their (valid) event time."""
    event, arrival = parsed["event_time"], parsed["arrival_time"]
    valid = ~np.logical_or.reduce([*event.bad.values(), *arrival.bad.values()])
    return valid & (arrival.values < event.values)


def _shown(parsed: Mapping[str, ParsedColumn], shown: Shown | None) -> Shown:
    """``shown``, or the parsed column's raw value."""
    return shown or (lambda column, row: parsed[column].raw(row))


def _first_error(
    flags: Flags,
    bad: np.ndarray,
    parsed: Mapping[str, ParsedColumn],
    shown: Shown,
    row_offset: int,
    path: str | None,
) -> TraceError:
    """The error of the lowest bad row, for the first rule (in RULES order) it breaks.
    For ``not_causal`` the value shown is the pair of parsed times (µs)."""
    row = int(np.argmax(bad))
    rule = next(r for r, m in flags if m[row])
    got = (
        (parsed["arrival_time"].values[row], parsed["event_time"].values[row])
        if rule.kind == "not_causal"
        else shown(rule.column, row)
    )
    file_row = row if path is not None else None
    return bad_row_error(rule, row_offset + row, got, path=path, file_row=file_row)


def _report(
    flags: Flags, bad: np.ndarray, shown: Shown, row_offset: int
) -> BadRowReport:
    counts = {rule.name: int(np.count_nonzero(m)) for rule, m in flags}
    examples = {
        rule.name: [
            (row_offset + int(i), rule.column, shown(rule.column, int(i)))
            for i in np.flatnonzero(m)[:MAX_EXAMPLES]
        ]
        for rule, m in flags
    }
    return BadRowReport.of(len(bad), int(np.count_nonzero(bad)), counts, examples)


def _trace(parsed: Mapping[str, ParsedColumn], keep: np.ndarray | None, n: int) -> Trace:
    """The trace of the kept rows (all when ``keep`` is None), with column defaults."""

    def kept(name: str) -> np.ndarray:
        values = parsed[name].values
        return values if keep is None else values[keep]

    def optional(name: str) -> np.ndarray | None:
        return kept(name) if name in parsed else None

    n_kept = n if keep is None else int(np.count_nonzero(keep))
    key, value = optional("key"), optional("value")
    return Trace(
        kept("event_time"),
        kept("arrival_time"),
        np.zeros(n_kept, dtype=np.int64) if key is None else key,
        np.ones(n_kept, dtype=np.float64) if value is None else value,
        optional("partition"),
        optional("publish_time"),
    )
