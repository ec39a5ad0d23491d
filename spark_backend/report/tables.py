"""Output tables with their units: what the report and ``metrics.csv`` write.

Internally every time and duration is a µs number (docs/semantics.md). A table written
for a reader says so in its column names: :func:`with_units` renames a duration column
``x`` to ``x_us``, and a time column ``x`` to ``x_us`` with ``x_utc`` (ISO-8601 UTC)
beside it. An ``_us`` cell is an integer: a fractional value (an interpolated percentile,
a time-weighted lag) is rounded to the nearest µs, halves to even; none (NaN) is blank.
:func:`csv_value` writes infinities as ``inf``/``-inf``: a float infinity, or a time at or
beyond MAX/MIN_TIMESTAMP (a watermark at the end of time). A column in seconds is named
``_s``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence

from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, format_timestamp

__all__ = ["csv_value", "micros", "time_cell", "with_units"]

Table = Mapping[str, Sequence[object]]


def time_cell(us: object) -> str:
    """A time (µs) as ISO-8601 UTC, ``inf``/``-inf`` at the bounds, blank for none."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return ""
    v = int(us)  # type: ignore[call-overload]
    if v >= MAX_TIMESTAMP:
        return "inf"
    if v <= MIN_TIMESTAMP:
        return "-inf"
    return format_timestamp(v)


def micros(value: object) -> object:
    """A µs value as an ``_us`` cell: an int (rounded to the nearest µs, halves to even),
    None for none (NaN), a float infinity kept."""
    if value is None:
        return None
    v = float(value)  # type: ignore[arg-type]
    if math.isnan(v):
        return None
    if math.isinf(v):
        return v
    if isinstance(value, numbers.Integral):
        return int(value)
    return round(v)


def with_units(
    table: Table, durations: Iterable[str] = (), times: Iterable[str] = ()
) -> dict[str, list[object]]:
    """``table`` with its µs columns named by unit: each of ``durations`` gets ``_us``,
    each of ``times`` gets ``_us`` and an ``_utc`` column after it. Other columns are
    kept; the order is kept. KeyError names a column that is not there."""
    durations, times = set(durations), set(times)
    for name in durations | times:
        if name not in table:
            raise KeyError(f"no column {name!r}; have {list(table)}")
    out: dict[str, list[object]] = {}
    for name, values in table.items():
        base = name.replace(" ", "_")
        if name in durations:
            out[f"{base}_us"] = [micros(v) for v in values]
        elif name in times:
            out[f"{base}_us"] = [micros(v) for v in values]
            out[f"{base}_utc"] = [time_cell(v) for v in values]
        else:
            out[name] = list(values)
    return out


def csv_value(value: object, column: str = "") -> object:
    """A cell as the CSV writes it: ``inf``/``-inf`` for float infinities and, in a
    ``_us`` column, for times at the bounds; everything else unchanged."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if (
        column.endswith("_us")
        and isinstance(value, numbers.Integral)
        and not isinstance(value, bool)
    ):
        if int(value) >= MAX_TIMESTAMP:
            return "inf"
        if int(value) <= MIN_TIMESTAMP:
            return "-inf"
    return value
