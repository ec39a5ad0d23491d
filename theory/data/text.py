"""Parsing one raw value: the slow path for values that are not already typed columns.

:func:`int_of` and :func:`float_of` return ``(bad kind or None, value)``; the kinds are
those of :data:`theory.data.schema.RULES`. The regular expressions are given as text
(``*_TEXT``) so that Spark's reader classifies strings with the same patterns.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Final

import numpy as np

from theory.data.schema import IntTarget
from theory.time import from_datetime

__all__ = [
    "DECIMAL_TEXT",
    "INF_TEXT",
    "INT_TEXT",
    "NAN_TEXT",
    "float_of",
    "int_of",
]

#: An integer; a decimal number with an optional exponent; NaN and infinity (any case).
INT_TEXT: Final[str] = r"[+-]?\d+"
DECIMAL_TEXT: Final[str] = r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
NAN_TEXT: Final[str] = r"[+-]?nan"
INF_TEXT: Final[str] = r"[+-]?inf(inity)?"

_INT_RE = re.compile(INT_TEXT)
_NUMBER_RE = re.compile(f"(?:{DECIMAL_TEXT})|(?:{INF_TEXT})|(?:{NAN_TEXT})", re.IGNORECASE)

Parsed = tuple[str | None, int]


def int_of(x: object, t: IntTarget) -> Parsed:
    """One value as an int of target ``t``: ints, integral floats, strings of those, and
    (for temporal targets) datetimes, dates and ISO-8601 strings (naive = UTC) in µs."""
    if x is None:
        return "null", 0
    if isinstance(x, (bool, np.bool_)):
        return "unparseable", 0
    if isinstance(x, (int, np.integer)):
        return _in_range(int(x), t)
    if isinstance(x, (float, np.floating)):
        return _int_of_float(float(x), t)
    if isinstance(x, bytes):
        x = _decoded(x)
    if isinstance(x, str):
        return _int_of_text(x, t)
    if t.temporal:
        return _int_of_time(x, t)
    return "unparseable", 0


def _in_range(v: int, t: IntTarget) -> Parsed:
    return (None, v) if t.lo <= v <= t.hi else ("out_of_range", 0)


def _int_of_float(f: float, t: IntTarget) -> Parsed:
    if f != f:
        return "null", 0
    if f in (float("inf"), float("-inf")):
        return "out_of_range", 0
    if f != int(f):
        return "not_integer", 0
    return _in_range(int(f), t)


def _decoded(b: bytes) -> str | None:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _int_of_text(x: str, t: IntTarget) -> Parsed:
    """Integers first, then numbers, then (temporal targets) ISO-8601 times."""
    s = x.strip()
    if not s:
        return "null", 0
    if _INT_RE.fullmatch(s):
        return _in_range(int(s), t)
    if _NUMBER_RE.fullmatch(s):
        return _int_of_float(float(s), t)
    if not t.temporal:
        return "unparseable", 0
    try:
        d = _dt.datetime.fromisoformat(s)
    except ValueError:
        return "unparseable", 0
    return _in_range(from_datetime(d), t)


def _int_of_time(x: object, t: IntTarget) -> Parsed:
    """A datetime, date or numpy datetime64 in µs."""
    if isinstance(x, _dt.datetime):
        return _in_range(from_datetime(x), t)
    if isinstance(x, _dt.date):
        return _in_range(from_datetime(_dt.datetime(x.year, x.month, x.day)), t)
    if isinstance(x, np.datetime64):
        if np.isnat(x):
            return "null", 0
        return _in_range(int(x.astype("datetime64[us]").astype(np.int64)), t)
    return "unparseable", 0


def float_of(x: object) -> tuple[str | None, float]:
    """One value as a float: numbers, and strings of numbers (NaN and ±inf included)."""
    if x is None:
        return "null", 0.0
    if isinstance(x, (bool, np.bool_)):
        return "unparseable", 0.0
    if isinstance(x, (int, float, np.integer, np.floating)):
        return None, float(x)
    if isinstance(x, bytes):
        x = _decoded(x)
    if not isinstance(x, str):
        return "unparseable", 0.0
    s = x.strip()
    if not s:
        return "null", 0.0
    if _NUMBER_RE.fullmatch(s):
        return None, float(s)
    return "unparseable", 0.0
