"""The trace schema and its validation rules, as plain data both readers apply.

A trace has one row per element: ``event_time`` and ``arrival_time`` (the processing time
of ingestion) as int64 **microseconds** since the epoch, a ``key`` (int64 or str), a
float64 ``value``, and optionally an int64 ``partition`` and an int64 ``publish_time``
(µs). :data:`RULES` lists every check; numpy (:mod:`theory.data.validate`) and Spark
(:mod:`spark_backend.traces.read`) both apply them in this order, so both report the
same rule for the same row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeVar, cast

from theory.columns import INT64_MAX, INT64_MIN
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = [
    "COLUMNS",
    "COLUMN_KINDS",
    "INT_KINDS",
    "INT_TARGETS",
    "KEY",
    "MAX_EXAMPLES",
    "NO_DEFAULT_COLUMNS",
    "OPTIONAL_COLUMNS",
    "REQUIRED_COLUMNS",
    "RULES",
    "TRACE_SUFFIXES",
    "VALUE_KINDS",
    "IntTarget",
    "OnBadRows",
    "Rule",
    "check_on_bad_rows",
    "row_rules",
    "rule_named",
]

OnBadRows = Literal["fail", "skip-and-report"]

#: Columns that must be present in every input.
REQUIRED_COLUMNS: Final[tuple[str, ...]] = ("event_time", "arrival_time")
#: Columns that may be absent: ``key`` defaults to 0, ``value`` to 1.0, the others to None.
OPTIONAL_COLUMNS: Final[tuple[str, ...]] = ("key", "value", "partition", "publish_time")
#: Optional columns without a default: all files of a directory have them, or none does.
NO_DEFAULT_COLUMNS: Final[tuple[str, ...]] = ("partition", "publish_time")
#: All trace columns, in schema order.
COLUMNS: Final[tuple[str, ...]] = REQUIRED_COLUMNS + OPTIONAL_COLUMNS

#: File suffixes of traces: Parquet (.parquet, .pq) and CSV (.csv).
TRACE_SUFFIXES: Final[frozenset[str]] = frozenset({".parquet", ".pq", ".csv"})

#: Examples a report keeps per rule.
MAX_EXAMPLES: Final[int] = 5


def check_on_bad_rows(on_bad_rows: object) -> OnBadRows:
    """``on_bad_rows`` as a policy: TypeError for a non-str, ValueError for another str."""
    if not isinstance(on_bad_rows, str):
        raise TypeError(f"on_bad_rows must be a str, got {on_bad_rows!r}")
    if on_bad_rows not in ("fail", "skip-and-report"):
        raise ValueError(f"on_bad_rows must be 'fail' or 'skip-and-report', got {on_bad_rows!r}")
    return cast(OnBadRows, on_bad_rows)


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


def _int_rules(column: str, unparseable: str, out_of_range: str) -> tuple[Rule, ...]:
    """The rules of an integer column, one per kind of :data:`INT_KINDS`."""
    return (
        _rule(column, "null", "null or NaN"),
        _rule(column, "unparseable", unparseable),
        _rule(column, "not_integer", "not an integer"),
        _rule(column, "out_of_range", out_of_range),
    )


_TS_RANGE = (
    "outside [MIN_TIMESTAMP, MAX_TIMESTAMP] µs (Beam's timestamp range: "
    "±9223372036854775000, just inside int64)"
)
_TS_PARSE = "not parseable as an integer (µs) or an ISO-8601 timestamp"

#: Every validation rule, in priority order: under ``"fail"`` the lowest bad row raises,
#: and among several rules broken by that row the first one here is reported.
RULES: Final[tuple[Rule, ...]] = (
    _rule("event_time", "missing_column", "required column missing"),
    _rule("arrival_time", "missing_column", "required column missing"),
    _rule("*", "unsupported_type", "column type not supported"),
    *_int_rules("event_time", _TS_PARSE, _TS_RANGE),
    *_int_rules("arrival_time", _TS_PARSE, _TS_RANGE),
    *_int_rules("key", "not an integer or a string", "outside the int64 range"),
    _rule("value", "null", "null"),
    _rule("value", "unparseable", "not parseable as a number"),
    _rule("value", "not_finite", "not finite (NaN or ±inf)"),
    *_int_rules("partition", "not parseable as an integer", "outside [0, 2**63 - 1]"),
    *_int_rules("publish_time", _TS_PARSE, _TS_RANGE),
    _rule(
        "arrival_time",
        "not_causal",
        "arrival_time before event_time",
        only_if="require_causal",
    ),
)

#: The row rule kinds of an integer column (timestamps, partition, key) and of ``value``.
INT_KINDS: Final[tuple[str, ...]] = ("null", "unparseable", "not_integer", "out_of_range")
VALUE_KINDS: Final[tuple[str, ...]] = ("null", "unparseable", "not_finite")


@dataclass(frozen=True)
class IntTarget:
    """What an integer column must hold: int64 in ``[lo, hi]``; ``temporal`` columns also
    accept dates, times and ISO-8601 strings (converted to µs)."""

    lo: int
    hi: int
    temporal: bool


#: The target of each integer column (``key`` is int64 when not a string).
INT_TARGETS: Final[Mapping[str, IntTarget]] = {
    "event_time": IntTarget(MIN_TIMESTAMP, MAX_TIMESTAMP, True),
    "arrival_time": IntTarget(MIN_TIMESTAMP, MAX_TIMESTAMP, True),
    "publish_time": IntTarget(MIN_TIMESTAMP, MAX_TIMESTAMP, True),
    "partition": IntTarget(0, INT64_MAX, False),
}
KEY: Final[IntTarget] = IntTarget(INT64_MIN, INT64_MAX, False)

_RULES_BY_NAME: Final[dict[str, Rule]] = {r.name: r for r in RULES}

#: Rule kinds about a whole column, checked before any row.
COLUMN_KINDS: Final[frozenset[str]] = frozenset({"missing_column", "unsupported_type"})


def rule_named(name: str) -> Rule:
    """The rule called ``name`` (``"<column>.<kind>"``); KeyError for an unknown name."""
    return _RULES_BY_NAME[name]


Flag = TypeVar("Flag")


def row_rules(
    flags: Mapping[str, Mapping[str, Flag]],
    causal: Callable[[], Flag] | None,
) -> list[tuple[Rule, Flag]]:
    """The row rules that apply, in :data:`RULES` order, each with its flag.

    ``flags[column][kind]`` flags the rows breaking ``kind`` on ``column`` (a numpy mask,
    or a Spark column: this only orders them); absent columns and kinds are skipped.
    ``causal`` builds the ``not_causal`` flag, or is None when ``require_causal`` is off.
    One function orders the rules for both readers, so both blame the same rule.
    """
    out: list[tuple[Rule, Flag]] = []
    for rule in RULES:
        if rule.kind in COLUMN_KINDS:
            continue
        if rule.kind == "not_causal":
            if causal is not None:
                out.append((rule, causal()))
            continue
        flag = flags.get(rule.column, {}).get(rule.kind)
        if flag is not None:
            out.append((rule, flag))
    return out
