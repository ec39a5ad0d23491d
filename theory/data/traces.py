"""Traces: the columnar input of the model, its validation rules, and Parquet/CSV I/O.

A :class:`Trace` holds one row per element: ``event_time`` and ``arrival_time`` (the
processing time of ingestion) as int64 **microseconds** since the epoch, a ``key`` (int64
or str), a float64 ``value``, and optionally an int64 ``partition`` and an int64
``publish_time`` (µs).

Validation is driven by :data:`RULES`, plain data that another engine (Spark) can apply
too. Bad rows either raise a :class:`TraceError` naming the row and the column
(``on_bad_rows="fail"``), or are removed *and counted* in a :class:`BadRowReport`
(``on_bad_rows="skip-and-report"``). Rows are never dropped silently. Rows are numbered
from 0 in input order (a CSV header is not a row; across the files of a directory the
numbering continues from file to file).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from theory.columns import INT64_MAX, INT64_MIN
from theory.time import DAY, MAX_TIMESTAMP, MIN_TIMESTAMP, from_datetime

__all__ = [
    "COLUMNS",
    "OPTIONAL_COLUMNS",
    "REQUIRED_COLUMNS",
    "RULES",
    "BadRowReport",
    "OnBadRows",
    "Rule",
    "Trace",
    "TraceError",
    "read_trace",
    "validate_columns",
    "write_trace",
]

OnBadRows = Literal["fail", "skip-and-report"]

#: Columns that must be present in every input.
REQUIRED_COLUMNS: Final[tuple[str, ...]] = ("event_time", "arrival_time")
#: Columns that may be absent: ``key`` defaults to 0, ``value`` to 1.0, the others to None.
OPTIONAL_COLUMNS: Final[tuple[str, ...]] = ("key", "value", "partition", "publish_time")
#: All trace columns, in schema order.
COLUMNS: Final[tuple[str, ...]] = REQUIRED_COLUMNS + OPTIONAL_COLUMNS

TRACE_SUFFIXES: Final[frozenset[str]] = frozenset({".parquet", ".pq", ".csv"})

_MAX_EXAMPLES: Final[int] = 5


# --------------------------------------------------------------------------- errors


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
        where = []
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        msg = (", ".join(where) + ": " if where else "") + detail
        if path is not None:
            msg += f" [file {path!r}" + (
                f", row {file_row} of that file]" if file_row is not None else "]"
            )
        super().__init__(msg)

    def __reduce__(self) -> tuple[Any, ...]:
        ctor = functools.partial(
            TraceError, row=self.row, column=self.column, path=self.path, file_row=self.file_row
        )
        return (ctor, (self.detail,))


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    """One validation rule, as data: ``kind`` of check applied to ``column``.

    ``name`` is unique (``"<column>.<kind>"``). ``only_if`` names the flag that enables the
    rule (``"require_causal"``), or is None for rules that always apply. ``column`` is
    ``"*"`` for a rule about any column.
    """

    name: str
    column: str
    description: str
    kind: str
    only_if: str | None = None


def _rule(column: str, kind: str, description: str, only_if: str | None = None) -> Rule:
    return Rule(f"{column}.{kind}", column, description, kind, only_if)


_TS_RANGE = "outside [MIN_TIMESTAMP, MAX_TIMESTAMP] µs"
_TS_PARSE = "not parseable as an integer (µs) or an ISO-8601 timestamp"

#: Every validation rule, in priority order: under ``"fail"`` the lowest bad row raises,
#: and among several rules broken by that row the first one here is reported.
RULES: Final[tuple[Rule, ...]] = (
    _rule("event_time", "missing_column", "required column missing"),
    _rule("arrival_time", "missing_column", "required column missing"),
    _rule("*", "unsupported_type", "column type not supported"),
    _rule("event_time", "null", "null or NaN"),
    _rule("event_time", "unparseable", _TS_PARSE),
    _rule("event_time", "not_integer", "not an integer"),
    _rule("event_time", "out_of_range", _TS_RANGE),
    _rule("arrival_time", "null", "null or NaN"),
    _rule("arrival_time", "unparseable", _TS_PARSE),
    _rule("arrival_time", "not_integer", "not an integer"),
    _rule("arrival_time", "out_of_range", _TS_RANGE),
    _rule("key", "null", "null or NaN"),
    _rule("key", "unparseable", "not an integer or a string"),
    _rule("key", "not_integer", "not an integer"),
    _rule("key", "out_of_range", "outside the int64 range"),
    _rule("value", "null", "null"),
    _rule("value", "unparseable", "not parseable as a number"),
    _rule("value", "not_finite", "not finite (NaN or ±inf)"),
    _rule("partition", "null", "null or NaN"),
    _rule("partition", "unparseable", "not parseable as an integer"),
    _rule("partition", "not_integer", "not an integer"),
    _rule("partition", "out_of_range", "outside [0, 2**63 - 1]"),
    _rule("publish_time", "null", "null or NaN"),
    _rule("publish_time", "unparseable", _TS_PARSE),
    _rule("publish_time", "not_integer", "not an integer"),
    _rule("publish_time", "out_of_range", _TS_RANGE),
    _rule(
        "arrival_time",
        "not_causal",
        "arrival_time before event_time",
        only_if="require_causal",
    ),
)

_RULES_BY_NAME: Final[dict[str, Rule]] = {r.name: r for r in RULES}


def _column_error(kind: str, column: str, extra: str = "", path: str | None = None) -> TraceError:
    rule = _RULES_BY_NAME[f"{column}.{kind}" if kind == "missing_column" else "*.unsupported_type"]
    return TraceError(rule.description + extra, row=None, column=column, path=path)


# --------------------------------------------------------------------------- report


@dataclass
class BadRowReport:
    """What validation removed: per-rule counts and up to 5 examples per rule.

    ``counts[rule_name]`` counts violations (a row may break rules on several columns);
    ``total`` counts distinct rows removed, so ``rows_read == rows_kept + total``.
    ``examples[rule_name]`` holds ``(row, column, raw value)`` tuples.
    """

    rows_read: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[tuple[int, str, object]]] = field(default_factory=dict)
    total: int = 0

    @property
    def rows_kept(self) -> int:
        """Rows that passed validation."""
        return self.rows_read - self.total

    @property
    def ok(self) -> bool:
        """True when no row was removed."""
        return self.total == 0

    def merge(self, other: BadRowReport) -> BadRowReport:
        """The report of two inputs read one after the other (rows already numbered)."""
        counts = dict(self.counts)
        examples = {k: list(v) for k, v in self.examples.items()}
        for name, c in other.counts.items():
            counts[name] = counts.get(name, 0) + c
        for name, ex in other.examples.items():
            have = examples.setdefault(name, [])
            have.extend(ex[: max(0, _MAX_EXAMPLES - len(have))])
        return BadRowReport(
            self.rows_read + other.rows_read, counts, examples, self.total + other.total
        )

    def summary(self) -> str:
        """A human-readable multi-line summary."""
        if self.total == 0:
            return f"{self.rows_read} rows read, no bad rows"
        lines = [
            f"{self.rows_read} rows read, {self.total} bad rows removed, {self.rows_kept} kept"
        ]
        for rule in RULES:
            c = self.counts.get(rule.name, 0)
            if not c:
                continue
            ex = ", ".join(f"row {r}: {v!r}" for r, _, v in self.examples.get(rule.name, []))
            eg = f"; e.g. {ex}" if ex else ""
            lines.append(f"  {rule.name} ({rule.description}): {c}{eg}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- trace


def _as_int64(name: str, a: Any) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind in "fO"):
        raise TypeError(
            f"Trace.{name} must be an integer array (µs); got dtype {arr.dtype}. "
            "Use validate_columns() to convert and check raw input."
        )
    return arr.astype(np.int64, copy=False)


def _as_keys(a: Any) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind in "USO":
        return arr.astype(object, copy=False)
    if arr.size == 0:
        return arr.astype(np.int64)
    raise TypeError(f"Trace.key must be int64 or str, got dtype {arr.dtype}")


@dataclass(frozen=True, eq=False)
class Trace:
    """A columnar trace; every timestamp is int64 µs since the epoch.

    ``key`` is an int64 array or an object array of ``str``; ``value`` is float64;
    ``partition`` and ``publish_time`` are int64 arrays or None. All columns have one
    length. Construction coerces dtypes but does not validate values: use
    :func:`validate_columns` (or :func:`read_trace`) for untrusted input.
    """

    event_time: np.ndarray
    arrival_time: np.ndarray
    key: np.ndarray
    value: np.ndarray
    partition: np.ndarray | None = None
    publish_time: np.ndarray | None = None

    def __post_init__(self) -> None:
        cols: dict[str, np.ndarray | None] = {
            "event_time": _as_int64("event_time", self.event_time),
            "arrival_time": _as_int64("arrival_time", self.arrival_time),
            "key": _as_keys(self.key),
            "value": np.asarray(self.value, dtype=np.float64),
            "partition": None if self.partition is None else _as_int64("partition", self.partition),
            "publish_time": None
            if self.publish_time is None
            else _as_int64("publish_time", self.publish_time),
        }
        et = cols["event_time"]
        n = int(et.shape[0]) if et is not None and et.ndim else 0
        for name, arr in cols.items():
            if arr is None:
                continue
            if arr.ndim != 1 or arr.shape[0] != n:
                raise ValueError(
                    f"Trace.{name} must be 1-d with {n} rows (as event_time), got shape {arr.shape}"
                )
            object.__setattr__(self, name, arr)

    # construction ------------------------------------------------------------------

    @classmethod
    def empty(cls, *, string_keys: bool = False) -> Trace:
        """A trace with no rows."""
        e = np.zeros(0, dtype=np.int64)
        key = np.zeros(0, dtype=object) if string_keys else e
        return cls(e, e, key, np.zeros(0, dtype=np.float64))

    @staticmethod
    def concat(traces: Iterable[Trace]) -> Trace:
        """Rows of ``traces`` one after the other.

        Keys must all be int64 or all str, and ``partition``/``publish_time`` present in
        all or none; otherwise ValueError names the column.
        """
        ts = list(traces)
        if not ts:
            return Trace.empty()
        if len(ts) == 1:
            return ts[0]
        kinds = {t.key.dtype.kind for t in ts if len(t)} or {ts[0].key.dtype.kind}
        if len(kinds) > 1:
            raise ValueError("Trace.concat: column 'key' mixes int64 and str keys")
        out: dict[str, np.ndarray | None] = {}
        for f in fields(Trace):
            parts = [getattr(t, f.name) for t in ts]
            present = [p is not None for p in parts]
            if any(present) and not all(present):
                raise ValueError(f"Trace.concat: column {f.name!r} is present in some traces only")
            if not all(present):
                out[f.name] = None
                continue
            if f.name == "key":
                nonempty = [p for p in parts if p.size] or parts[:1]
                out[f.name] = np.concatenate(nonempty)
            else:
                out[f.name] = np.concatenate(parts)
        return Trace(**out)  # type: ignore[arg-type]

    @staticmethod
    def from_arrow(
        table: pa.Table,
        *,
        on_bad_rows: OnBadRows = "fail",
        require_causal: bool = False,
    ) -> tuple[Trace, BadRowReport]:
        """Validate an Arrow table into a trace (see :func:`validate_columns`)."""
        cols = {name: table.column(name) for name in table.column_names if name in COLUMNS}
        return validate_columns(cols, on_bad_rows=on_bad_rows, require_causal=require_causal)

    # access ------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.event_time.shape[0])

    @property
    def has_string_keys(self) -> bool:
        """True when keys are str (object array), False for int64 keys."""
        return bool(self.key.dtype.kind == "O")

    def take(self, indices: np.ndarray | Sequence[int]) -> Trace:
        """The rows at integer ``indices``, in that order."""
        idx = np.asarray(indices)
        if idx.dtype.kind == "b":
            raise TypeError("Trace.take needs integer indices; use select() for a boolean mask")
        idx = idx.astype(np.intp, copy=False)
        return Trace(
            self.event_time[idx],
            self.arrival_time[idx],
            self.key[idx],
            self.value[idx],
            None if self.partition is None else self.partition[idx],
            None if self.publish_time is None else self.publish_time[idx],
        )

    def select(self, mask: np.ndarray | Sequence[bool]) -> Trace:
        """The rows where the boolean ``mask`` is True, in order."""
        m = np.asarray(mask)
        if m.dtype != np.bool_ or m.shape != (len(self),):
            raise ValueError(f"Trace.select needs a boolean mask of length {len(self)}")
        return self.take(np.flatnonzero(m))

    def sorted_by_arrival(self) -> Trace:
        """Rows in arrival order; ties by event time, then by original position (stable)."""
        et, at = self.event_time, self.arrival_time
        if et.size > 1 and bool(np.all(et[1:] >= et[:-1])):
            order = np.argsort(at, kind="stable")
        else:
            order = np.lexsort((et, at))
        return self.take(order)

    def with_columns(self, **columns: Any) -> Trace:
        """A copy with some columns replaced (``partition=None`` drops that column)."""
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise TypeError(f"Trace.with_columns: unknown column(s) {sorted(unknown)}")
        return replace(self, **columns)

    def to_arrow(self) -> pa.Table:
        """An Arrow table: int64 µs timestamps, int64 or string keys, float64 values."""
        arrays: dict[str, pa.Array] = {
            "event_time": pa.array(self.event_time, type=pa.int64()),
            "arrival_time": pa.array(self.arrival_time, type=pa.int64()),
            "key": pa.array(self.key, type=pa.string() if self.has_string_keys else pa.int64()),
            "value": pa.array(self.value, type=pa.float64()),
        }
        if self.partition is not None:
            arrays["partition"] = pa.array(self.partition, type=pa.int64())
        if self.publish_time is not None:
            arrays["publish_time"] = pa.array(self.publish_time, type=pa.int64())
        return pa.table(arrays)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        for f in fields(Trace):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if (a is None) != (b is None):
                return False
            if a is not None and (a.dtype.kind != b.dtype.kind or not np.array_equal(a, b)):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]


# --------------------------------------------------------------------------- parsing


@dataclass
class _Parsed:
    values: np.ndarray
    bad: dict[str, np.ndarray]  # kind -> mask; masks of one column are disjoint
    raw: Callable[[int], object]


_INT_RE = re.compile(r"[+-]?\d+")
_INT_RE_ARROW = r"^[+-]?\d{1,18}$"
_FLOAT_RE = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE)
_UNIT_FACTOR: Final[dict[str, int]] = {
    "W": 7 * DAY, "D": DAY, "h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000,
    "ms": 1_000, "us": 1,
}  # fmt: skip
_UNIT_DIVISOR: Final[dict[str, int]] = {"ns": 1_000, "ps": 1_000_000, "fs": 10**9, "as": 10**12}


def _raw_getter(col: pa.Array | np.ndarray) -> Callable[[int], object]:
    if isinstance(col, pa.Array):
        return lambda i: col[i].as_py()

    def get(i: int) -> object:
        x = col[i]
        return x.item() if isinstance(x, np.generic) else x

    return get


def _arrow_nulls(col: pa.Array) -> np.ndarray:
    return np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool)


class _IntTarget:
    """How to turn a column into int64 within [lo, hi]; ``temporal`` accepts dates/times."""

    def __init__(self, lo: int, hi: int, temporal: bool) -> None:
        self.lo, self.hi, self.temporal = lo, hi, temporal


_TIMESTAMP = _IntTarget(MIN_TIMESTAMP, MAX_TIMESTAMP, True)
_PARTITION = _IntTarget(0, INT64_MAX, False)
_KEY = _IntTarget(INT64_MIN, INT64_MAX, False)


def _ints_in_range(v: np.ndarray, ok: np.ndarray, t: _IntTarget) -> tuple[np.ndarray, np.ndarray]:
    """From integer-typed ``v``: int64 values and an out-of-range mask (among ``ok``)."""
    if v.dtype == np.uint64:
        over = v > np.uint64(INT64_MAX)
        v = np.where(over, np.uint64(0), v).astype(np.int64)
    else:
        over = _zeros(v.shape[0])
        v = v.astype(np.int64, copy=False)
    out = ok & (over | (v < t.lo) | (v > t.hi))
    return np.where(out | ~ok, 0, v).astype(np.int64, copy=False), out


def _ints_from_floats(
    v: np.ndarray, t: _IntTarget
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From float ``v``: (values, null, not_integer, out_of_range)."""
    v = v.astype(np.float64, copy=False)
    null = np.isnan(v)
    with np.errstate(invalid="ignore"):
        out = ~null & (
            ~np.isfinite(v)
            | (v < float(t.lo))
            | (v > float(t.hi))
            | (v >= 2.0**63)
            | (v < -(2.0**63))
        )
        nonint = ~null & ~out & (v != np.floor(v))
    ok = ~(null | out | nonint)
    ints = np.where(ok, v, 0.0).astype(np.int64)
    out2 = ok & ((ints < t.lo) | (ints > t.hi))
    ints[out2] = 0
    return ints, null, nonint, out | out2


def _scaled(v: np.ndarray, factor: int, divisor: int) -> tuple[np.ndarray, np.ndarray]:
    """``v * factor // divisor`` with an overflow mask."""
    v = v.astype(np.int64, copy=False)
    if divisor > 1:
        return np.floor_divide(v, divisor), _zeros(v.shape[0])
    if factor == 1:
        return v, _zeros(v.shape[0])
    lim = INT64_MAX // factor
    over = (v > lim) | (v < -lim)
    return np.where(over, 0, v) * factor, over


def _scalar_to_int(x: object, t: _IntTarget) -> tuple[str | None, int]:
    """Parse one value: (bad kind or None, int value)."""
    if x is None:
        return "null", 0
    if isinstance(x, (bool, np.bool_)):
        return "unparseable", 0
    if isinstance(x, (int, np.integer)):
        v = int(x)
        return (None, v) if t.lo <= v <= t.hi else ("out_of_range", 0)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        if f != f:
            return "null", 0
        if f in (float("inf"), float("-inf")):
            return "out_of_range", 0
        if f != int(f):
            return "not_integer", 0
        return _scalar_to_int(int(f), t)
    if isinstance(x, bytes):
        try:
            x = x.decode("utf-8")
        except UnicodeDecodeError:
            return "unparseable", 0
    if isinstance(x, str):
        s = x.strip()
        if not s:
            return "null", 0
        if _INT_RE.fullmatch(s):
            return _scalar_to_int(int(s), t)
        if _FLOAT_RE.fullmatch(s):
            return _scalar_to_int(float(s), t)
        if t.temporal:
            try:
                d = _dt.datetime.fromisoformat(s)
            except ValueError:
                return "unparseable", 0
            return _scalar_to_int(from_datetime(d), t)
        return "unparseable", 0
    if t.temporal and isinstance(x, _dt.datetime):
        return _scalar_to_int(from_datetime(x), t)
    if t.temporal and isinstance(x, _dt.date):
        return _scalar_to_int(from_datetime(_dt.datetime(x.year, x.month, x.day)), t)
    if t.temporal and isinstance(x, np.datetime64):
        if np.isnat(x):
            return "null", 0
        return _scalar_to_int(int(x.astype("datetime64[us]").astype(np.int64)), t)
    return "unparseable", 0


def _loop_ints(items: Sequence[object], t: _IntTarget) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    n = len(items)
    vals = np.zeros(n, dtype=np.int64)
    bad = {k: _zeros(n) for k in ("null", "unparseable", "not_integer", "out_of_range")}
    for i, x in enumerate(items):
        kind, v = _scalar_to_int(x, t)
        if kind is None:
            vals[i] = v
        else:
            bad[kind][i] = True
    return vals, bad


def _parse_ints(name: str, col: pa.Array | np.ndarray, t: _IntTarget) -> _Parsed:
    """Integer columns (timestamps, partition): int64 with null/parse/integer/range masks."""
    n = len(col)
    bad = {k: _zeros(n) for k in ("null", "unparseable", "not_integer", "out_of_range")}
    vals = np.zeros(n, dtype=np.int64)
    if isinstance(col, pa.Array):
        ty = col.type
        if pa.types.is_null(ty):
            bad["null"][:] = True
        elif pa.types.is_integer(ty):
            null = _arrow_nulls(col)
            raw = col.fill_null(0).to_numpy(zero_copy_only=False)
            vals, out = _ints_in_range(raw, ~null, t)
            bad["null"], bad["out_of_range"] = null, out
        elif pa.types.is_floating(ty):
            raw = col.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
            vals, bad["null"], bad["not_integer"], bad["out_of_range"] = _ints_from_floats(raw, t)
        elif t.temporal and (
            pa.types.is_timestamp(ty) or pa.types.is_date32(ty) or pa.types.is_date64(ty)
        ):
            null = _arrow_nulls(col)
            if pa.types.is_timestamp(ty):
                unit = ty.unit
                factor, div = _UNIT_FACTOR.get(unit, 1), _UNIT_DIVISOR.get(unit, 1)
                ints = col.cast(pa.int64())
            elif pa.types.is_date32(ty):
                factor, div, ints = DAY, 1, col.cast(pa.int32()).cast(pa.int64())
            else:
                factor, div, ints = 1_000, 1, col.cast(pa.int64())
            raw = ints.fill_null(0).to_numpy(zero_copy_only=False)
            scaled, over = _scaled(raw, factor, div)
            vals, out = _ints_in_range(scaled, ~null & ~over, t)
            bad["null"], bad["out_of_range"] = null, (over & ~null) | out
        elif pa.types.is_string(ty) or pa.types.is_large_string(ty):
            null = _arrow_nulls(col)
            trimmed = pc.utf8_trim_whitespace(col)
            simple = np.asarray(
                pc.match_substring_regex(trimmed, _INT_RE_ARROW)
                .fill_null(False)
                .to_numpy(zero_copy_only=False),
                dtype=bool,
            )
            idx = np.flatnonzero(simple)
            raw = np.zeros(n, dtype=np.int64)
            raw[idx] = (
                trimmed.filter(pa.array(simple)).cast(pa.int64()).to_numpy(zero_copy_only=False)
            )
            vals, out = _ints_in_range(raw, simple, t)
            bad["out_of_range"] = out
            rest = np.flatnonzero(~simple & ~null)
            bad["null"] = null
            if rest.size:
                rv, rb = _loop_ints(col.take(pa.array(rest)).to_pylist(), t)
                vals[rest] = rv
                for k, m in rb.items():
                    bad[k][rest] |= m
        else:
            raise _column_error("unsupported_type", name, f" ({ty})")
    else:
        kind = col.dtype.kind
        if kind in "iu":
            vals, bad["out_of_range"] = _ints_in_range(col, np.ones(n, dtype=bool), t)
        elif kind == "f":
            vals, bad["null"], bad["not_integer"], bad["out_of_range"] = _ints_from_floats(col, t)
        elif kind == "M" and t.temporal:
            unit, count = np.datetime_data(col.dtype)
            arr = col
            if unit in ("Y", "M"):
                arr, unit, count = col.astype("datetime64[D]"), "D", 1
            ints = arr.view(np.int64)
            null = np.isnat(arr)
            factor = _UNIT_FACTOR.get(unit, 1) * int(count)
            div = _UNIT_DIVISOR.get(unit, 1)
            if div > 1 and count != 1:
                ints = ints * int(count)  # sub-µs units with a count: rare; may overflow
            scaled, over = _scaled(np.where(null, 0, ints), factor, div)
            vals, out = _ints_in_range(scaled, ~null & ~over, t)
            bad["null"], bad["out_of_range"] = null, (over & ~null) | out
        elif kind in "USO":
            vals, bad = _loop_ints(list(col), t)
        else:
            raise _column_error("unsupported_type", name, f" ({col.dtype})")
    return _Parsed(vals, bad, _raw_getter(col))


def _parse_keys(name: str, col: pa.Array | np.ndarray) -> _Parsed:
    """Keys: int64 (from ints or integral floats) or str; mixed int/str become str."""
    n = len(col)
    bad = {k: _zeros(n) for k in ("null", "unparseable", "not_integer", "out_of_range")}
    if isinstance(col, pa.Array) and (
        pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
    ):
        bad["null"] = _arrow_nulls(col)
        return _Parsed(col.to_numpy(zero_copy_only=False).astype(object), bad, _raw_getter(col))
    if isinstance(col, pa.Array) and (
        pa.types.is_integer(col.type)
        or pa.types.is_floating(col.type)
        or pa.types.is_null(col.type)
    ):
        return _parse_ints(name, col, _KEY)
    if isinstance(col, pa.Array):
        raise _column_error("unsupported_type", name, f" ({col.type})")
    kind = col.dtype.kind
    if kind in "iuf":
        return _parse_ints(name, col, _KEY)
    if kind == "U":
        return _Parsed(col.astype(object), bad, _raw_getter(col))
    if kind not in "SO":
        raise _column_error("unsupported_type", name, f" ({col.dtype})")
    out = np.empty(n, dtype=object)
    any_str = False
    for i, x in enumerate(col):
        if isinstance(x, bytes):
            try:
                x = x.decode("utf-8")
            except UnicodeDecodeError:
                bad["unparseable"][i] = True
                continue
        if isinstance(x, str):
            out[i] = x
            any_str = True
            continue
        k, v = _scalar_to_int(x, _KEY)
        if k is None:
            out[i] = v
        else:
            bad[k][i] = True
    good = ~np.logical_or.reduce(list(bad.values()))
    if any_str:
        out[good] = [x if isinstance(x, str) else str(x) for x in out[good]]
        out[~good] = ""
        return _Parsed(out, bad, _raw_getter(col))
    ints = np.zeros(n, dtype=np.int64)
    ints[good] = out[good].astype(np.int64) if good.any() else 0
    return _Parsed(ints, bad, _raw_getter(col))


def _scalar_to_float(x: object) -> tuple[str | None, float]:
    if x is None:
        return "null", 0.0
    if isinstance(x, (bool, np.bool_)):
        return "unparseable", 0.0
    if isinstance(x, (int, float, np.integer, np.floating)):
        return None, float(x)
    if isinstance(x, bytes):
        try:
            x = x.decode("utf-8")
        except UnicodeDecodeError:
            return "unparseable", 0.0
    if isinstance(x, str):
        s = x.strip()
        if not s:
            return "null", 0.0
        if _FLOAT_RE.fullmatch(s):
            return None, float(s)
    return "unparseable", 0.0


def _parse_values(name: str, col: pa.Array | np.ndarray) -> _Parsed:
    """Values: float64; null, unparseable and non-finite rows are bad."""
    n = len(col)
    bad = {k: _zeros(n) for k in ("null", "unparseable", "not_finite")}
    vals = np.zeros(n, dtype=np.float64)
    items: Sequence[object] | None = None
    if isinstance(col, pa.Array):
        ty = col.type
        if pa.types.is_null(ty):
            bad["null"][:] = True
        elif pa.types.is_integer(ty) or pa.types.is_floating(ty):
            bad["null"] = _arrow_nulls(col)
            vals = col.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False).copy()
        elif pa.types.is_string(ty) or pa.types.is_large_string(ty):
            bad["null"] = _arrow_nulls(col)
            try:
                trimmed = pc.utf8_trim_whitespace(col)
                as_float = trimmed.cast(pa.float64()).fill_null(0.0)
                vals = as_float.to_numpy(zero_copy_only=False).copy()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                items = col.to_pylist()
        else:
            raise _column_error("unsupported_type", name, f" ({ty})")
    elif col.dtype.kind in "iuf":
        vals = col.astype(np.float64)
    elif col.dtype.kind in "USO":
        items = list(col)
    else:
        raise _column_error("unsupported_type", name, f" ({col.dtype})")
    if items is not None:
        bad["null"] = _zeros(n)
        for i, x in enumerate(items):
            k, v = _scalar_to_float(x)
            if k is None:
                vals[i] = v
            else:
                bad[k][i] = True
    vals[bad["null"] | bad["unparseable"]] = 0.0
    bad["not_finite"] = ~np.isfinite(vals)
    vals[bad["not_finite"]] = 0.0
    return _Parsed(vals, bad, _raw_getter(col))


def _normalise(col: Any) -> pa.Array | np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if isinstance(col, pa.Array):
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        return col
    arr = np.asarray(col)
    if arr.ndim != 1:
        raise ValueError(f"columns must be 1-d, got shape {arr.shape}")
    return arr


# --------------------------------------------------------------------------- validation


def validate_columns(
    columns: Mapping[str, np.ndarray | pa.Array | pa.ChunkedArray | Sequence[Any]],
    *,
    on_bad_rows: OnBadRows = "fail",
    require_causal: bool = False,
    row_offset: int = 0,
    path: str | None = None,
) -> tuple[Trace, BadRowReport]:
    """Check raw columns against :data:`RULES` and build a :class:`Trace`.

    ``event_time`` and ``arrival_time`` are required (else TraceError with ``row=None``);
    ``key`` defaults to 0 and ``value`` to 1.0 when absent; ``partition`` and
    ``publish_time`` are optional. Other columns are ignored. Timestamps (µs) may be
    integers, integral floats, Arrow/numpy timestamps or dates of any unit (converted to
    µs, sub-µs units floored), or strings holding integers or ISO-8601 times (naive = UTC).

    ``on_bad_rows="fail"`` raises TraceError for the lowest bad row; ``"skip-and-report"``
    removes bad rows, keeping the others in order, and counts them in the report.
    ``row_offset`` and ``path`` number rows and name the file in errors (for directories).
    """
    if on_bad_rows not in ("fail", "skip-and-report"):
        raise ValueError(f"on_bad_rows must be 'fail' or 'skip-and-report', got {on_bad_rows!r}")
    for req in REQUIRED_COLUMNS:
        if req not in columns:
            present = sorted(columns)
            rule = _RULES_BY_NAME[f"{req}.missing_column"]
            raise TraceError(
                f"{rule.description} (columns present: {present})", column=req, path=path
            )
    cols = {name: _normalise(c) for name, c in columns.items() if name in COLUMNS}
    n = len(cols["event_time"])
    for name, c in cols.items():
        if len(c) != n:
            raise TraceError(f"has {len(c)} rows but event_time has {n}", column=name, path=path)

    parsed: dict[str, _Parsed] = {}
    try:
        parsed["event_time"] = _parse_ints("event_time", cols["event_time"], _TIMESTAMP)
        parsed["arrival_time"] = _parse_ints("arrival_time", cols["arrival_time"], _TIMESTAMP)
        if "key" in cols:
            parsed["key"] = _parse_keys("key", cols["key"])
        if "value" in cols:
            parsed["value"] = _parse_values("value", cols["value"])
        if "partition" in cols:
            parsed["partition"] = _parse_ints("partition", cols["partition"], _PARTITION)
        if "publish_time" in cols:
            parsed["publish_time"] = _parse_ints("publish_time", cols["publish_time"], _TIMESTAMP)
    except TraceError as e:
        if path is None:
            raise
        raise TraceError(e.detail, row=e.row, column=e.column, path=path) from None

    # Per-rule masks, in RULES order.
    masks: list[tuple[Rule, np.ndarray]] = []
    for rule in RULES:
        if rule.kind in ("missing_column", "unsupported_type"):
            continue
        if rule.kind == "not_causal":
            if not require_causal:
                continue
            ev, av = parsed["event_time"], parsed["arrival_time"]
            ok = ~np.logical_or.reduce([*ev.bad.values(), *av.bad.values()])
            masks.append((rule, ok & (av.values < ev.values)))
            continue
        p = parsed.get(rule.column)
        if p is None or rule.kind not in p.bad:
            continue
        masks.append((rule, p.bad[rule.kind]))

    report = BadRowReport(rows_read=n)
    any_bad = np.logical_or.reduce([m for _, m in masks]) if masks and n else _zeros(n)
    if any_bad.any():
        if on_bad_rows == "fail":
            best_row, best_rule = n, masks[0][0]
            for rule, m in masks:
                if m.any():
                    r = int(np.argmax(m))
                    if r < best_row:
                        best_row, best_rule = r, rule
            raise _row_error(best_rule, best_row, parsed, row_offset, path)
        for rule, m in masks:
            c = int(np.count_nonzero(m))
            if not c:
                continue
            report.counts[rule.name] = c
            report.examples[rule.name] = [
                (row_offset + int(i), rule.column, parsed[rule.column].raw(int(i)))
                for i in np.flatnonzero(m)[:_MAX_EXAMPLES]
            ]
        report.total = int(np.count_nonzero(any_bad))

    keep = None if not any_bad.any() else ~any_bad

    def kept(a: np.ndarray) -> np.ndarray:
        return a if keep is None else a[keep]

    n_kept = n - report.total
    key = kept(parsed["key"].values) if "key" in parsed else np.zeros(n_kept, dtype=np.int64)
    value = kept(parsed["value"].values) if "value" in parsed else np.ones(n_kept, dtype=np.float64)
    trace = Trace(
        kept(parsed["event_time"].values),
        kept(parsed["arrival_time"].values),
        key,
        value,
        kept(parsed["partition"].values) if "partition" in parsed else None,
        kept(parsed["publish_time"].values) if "publish_time" in parsed else None,
    )
    return trace, report


def _row_error(
    rule: Rule, row: int, parsed: Mapping[str, _Parsed], row_offset: int, path: str | None
) -> TraceError:
    if rule.kind == "not_causal":
        a = parsed["arrival_time"].values[row]
        e = parsed["event_time"].values[row]
        detail = f"{rule.description} (got arrival_time={a} < event_time={e})"
    else:
        detail = f"{rule.description} (got {parsed[rule.column].raw(row)!r})"
    return TraceError(
        detail,
        row=row_offset + row,
        column=rule.column,
        path=path,
        file_row=row if path is not None else None,
    )


# --------------------------------------------------------------------------- I/O


def _suffix(path: Path) -> str:
    s = path.suffix.lower()
    if s not in TRACE_SUFFIXES:
        raise ValueError(
            f"path {str(path)!r}: unknown trace format {s!r} (use .parquet, .pq or .csv)"
        )
    return s


def _read_table(path: Path) -> pa.Table:
    if _suffix(path) == ".csv":
        opts = pacsv.ConvertOptions(strings_can_be_null=True)
        return pacsv.read_csv(path, convert_options=opts)
    schema = pq.read_schema(path)
    wanted = [c for c in schema.names if c in COLUMNS]
    return pq.read_table(path, columns=wanted)


def _trace_files(directory: Path) -> list[Path]:
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

    A directory's files (hidden ``.``/``_`` names skipped) are read in sorted name order
    and concatenated; rows are numbered across files and errors name the file. Missing
    ``key`` defaults to 0 and missing ``value`` to 1.0; ``event_time`` and
    ``arrival_time`` (µs) are required. If some files have int keys and others string
    keys, int keys are converted to strings. CSV keys that all look like integers are read
    as int64. See :func:`validate_columns` for the rules and ``on_bad_rows``.
    """
    if on_bad_rows not in ("fail", "skip-and-report"):
        raise ValueError(f"on_bad_rows must be 'fail' or 'skip-and-report', got {on_bad_rows!r}")
    p = Path(path)
    if not p.is_dir():
        _suffix(p)
        table = _read_table(p)
        cols = {c: table.column(c) for c in table.column_names if c in COLUMNS}
        return validate_columns(
            cols, on_bad_rows=on_bad_rows, require_causal=require_causal, path=str(p)
        )
    traces: list[Trace] = []
    report = BadRowReport()
    offset = 0
    first_optional: dict[str, str] = {}
    files = _trace_files(p)
    for f in files:
        table = _read_table(f)
        cols = {c: table.column(c) for c in table.column_names if c in COLUMNS}
        t, r = validate_columns(
            cols,
            on_bad_rows=on_bad_rows,
            require_causal=require_causal,
            row_offset=offset,
            path=str(f),
        )
        for opt in ("partition", "publish_time"):
            if opt in cols:
                first_optional.setdefault(opt, str(f))
        traces.append(t)
        report = report.merge(r)
        offset += table.num_rows
    for opt, where in first_optional.items():
        for f, t in zip(files, traces, strict=True):
            if getattr(t, opt) is None:
                raise TraceError(
                    f"optional column present in {where!r} but missing here",
                    column=opt,
                    path=str(f),
                )
    if len({t.has_string_keys for t in traces if len(t)}) > 1:
        traces = [
            t if t.has_string_keys else t.with_columns(key=t.key.astype(str).astype(object))
            for t in traces
        ]
    return Trace.concat(traces), report


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` to Parquet or CSV (by suffix), atomically.

    The data goes to a temporary file in the same directory, then ``os.replace`` moves it
    into place, so readers see the old file or the new one, never a partial one; on
    failure the temporary file is removed and an existing file is left untouched.
    """
    p = Path(path)
    suffix = _suffix(p)
    table = trace.to_arrow()
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        if suffix == ".csv":
            pacsv.write_csv(table, tmp)
        else:
            pq.write_table(table, tmp)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
