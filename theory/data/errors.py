""":class:`TraceError` and the one wording of every trace validation error.

Both readers (numpy's :func:`theory.data.io.read_trace` and Spark's
:func:`spark_backend.traces.read.read_trace_df`) build their errors with these functions,
so the same bad input gets the same message from either.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from theory.data.schema import Rule, rule_named

__all__ = [
    "TraceError",
    "bad_row_error",
    "length_error",
    "missing_column_error",
    "no_rows_error",
    "optional_column_error",
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
    return f" [file {path!r}" + (f", row {file_row} of that file]" if file_row is not None else "]")


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
