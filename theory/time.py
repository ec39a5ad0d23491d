"""Time in the model: int64 microseconds since the Unix epoch, with Beam's bounds.

Every event time, processing time and watermark in ``theory`` is an ``int`` (or an
``np.int64`` array) of microseconds. Flink's milliseconds and Python ``datetime`` values
are converted at the edge with the functions here.
"""

from __future__ import annotations

import datetime as _dt
import re
from fractions import Fraction
from typing import Final

#: Beam's ``MIN_TIMESTAMP``: ``MIN_TIMESTAMP_MILLIS`` (-9223372036854775 ms) in µs.
MIN_TIMESTAMP: Final[int] = -9_223_372_036_854_775 * 1_000
#: Beam's ``MAX_TIMESTAMP``: ``MAX_TIMESTAMP_MILLIS`` (9223372036854775 ms) in µs.
MAX_TIMESTAMP: Final[int] = 9_223_372_036_854_775 * 1_000
#: One day in microseconds.
DAY: Final[int] = 86_400_000_000
#: Beam's end of the global window: ``MAX_TIMESTAMP`` minus one day.
END_OF_GLOBAL_WINDOW: Final[int] = MAX_TIMESTAMP - DAY

MICROS_PER_MILLI: Final[int] = 1_000
MICROS_PER_SECOND: Final[int] = 1_000_000
MILLISECOND: Final[int] = MICROS_PER_MILLI
SECOND: Final[int] = MICROS_PER_SECOND
MINUTE: Final[int] = 60 * SECOND
HOUR: Final[int] = 60 * MINUTE

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def from_seconds(seconds: float) -> int:
    """Seconds (float) to microseconds, rounded to the nearest microsecond."""
    return round(seconds * MICROS_PER_SECOND)


def to_seconds(micros: int) -> float:
    """Microseconds to float seconds."""
    return micros / MICROS_PER_SECOND


def from_millis(millis: int) -> int:
    """Milliseconds (Flink, Java) to microseconds."""
    return int(millis) * MICROS_PER_MILLI


def to_millis(micros: int) -> int:
    """Microseconds to milliseconds, rounding toward negative infinity (as Beam does)."""
    return int(micros) // MICROS_PER_MILLI


def from_datetime(value: _dt.datetime) -> int:
    """A ``datetime`` to microseconds since the epoch; naive values are taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    delta = value - _EPOCH
    return (delta.days * DAY) + delta.seconds * MICROS_PER_SECOND + delta.microseconds


def to_datetime(micros: int) -> _dt.datetime:
    """Microseconds since the epoch to an aware UTC ``datetime``."""
    return _EPOCH + _dt.timedelta(microseconds=int(micros))


def format_timestamp(micros: int) -> str:
    """Human form: ``-inf``/``+inf`` for the bounds, else ISO-8601 UTC."""
    if micros <= MIN_TIMESTAMP:
        return "-inf"
    if micros >= MAX_TIMESTAMP:
        return "+inf"
    if micros >= END_OF_GLOBAL_WINDOW:
        return "end-of-global-window"
    try:
        return to_datetime(micros).isoformat().replace("+00:00", "Z")
    except OverflowError:
        return f"{micros}µs"


_UNITS: Final[dict[str, int]] = {
    "": 1,
    "us": 1,
    "µs": 1,
    "μs": 1,
    "ms": MICROS_PER_MILLI,
    "s": SECOND,
    "m": MINUTE,
    "min": MINUTE,
    "h": HOUR,
    "d": DAY,
}
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-zµμ]*)")


def parse_duration(text: str) -> int:
    """Parse a non-negative duration to µs: ``"500ms"``, ``"30s"``, ``"2m"``, ``"1h"``,
    ``"1d"``, ``"250us"``, ``"1.5s"``, or a plain integer of µs (``"1500"``).

    Raises ``ValueError`` naming the text if it is malformed or not a whole number of µs.
    """
    m = _DURATION_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None or m.group(2) not in _UNITS:
        raise ValueError(
            f"bad duration {text!r}: expected a number with unit us, ms, s, m, h or d, "
            "or an integer number of microseconds"
        )
    micros = Fraction(m.group(1)) * _UNITS[m.group(2)]
    if micros.denominator != 1:
        raise ValueError(f"bad duration {text!r}: not a whole number of microseconds")
    return int(micros)
