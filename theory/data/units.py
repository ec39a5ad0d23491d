"""Time units of integer time columns: conversion to µs and the magnitude check.

The core reads every time as int64 µs since the epoch (docs/semantics.md). Traces
exported by other systems often hold epoch seconds, milliseconds or nanoseconds, which
read as µs land in January 1970 or tens of thousands of years ahead. This module is the
one home of the rule, used by both engines of the ``watermarks`` command line:

- :func:`check_time_unit` parses a unit name (``us``, ``ms``, ``s``, ``ns``);
- :func:`scale_to_us` converts an integer column in that unit to µs (ns are floored to
  the µs below; a value out of the int64 µs range is a ValueError naming the column);
  :func:`unit_factor` gives the same rule as ``(multiply, divide)`` for engines that
  apply it themselves (Spark);
- :func:`in_unit` applies the rule to a read trace (the check, then the conversion);
- :func:`check_magnitude` stops a column given without a unit whose range looks like
  epoch s/ms/ns read as µs, naming the likely unit and the ``--time-unit`` flag. Times
  near 0 (relative traces) and real epoch-µs dates pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.typing import ArrayLike

from theory.columns import int_column
from theory.data.location import TraceFile
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, format_timestamp

if TYPE_CHECKING:
    from theory.data.trace import Trace

__all__ = [
    "TIME_COLUMNS",
    "TIME_UNITS",
    "check_magnitude",
    "check_ranges",
    "check_time_unit",
    "check_unit_range",
    "in_unit",
    "likely_unit",
    "numeric_time_columns",
    "scale_to_us",
    "time_ranges",
    "unit_factor",
]

#: The time columns of a trace a unit applies to (when they hold numbers).
TIME_COLUMNS: tuple[str, ...] = ("event_time", "arrival_time", "publish_time")

#: Unit name -> (multiply, divide) that takes a value in that unit to µs.
TIME_UNITS: dict[str, tuple[int, int]] = {
    "us": (1, 1),
    "ms": (1_000, 1),
    "s": (1_000_000, 1),
    "ns": (1, 1_000),
}

_NAMES = {"s": "epoch seconds", "ms": "epoch milliseconds", "ns": "epoch nanoseconds"}

#: Epoch-µs range of plausible real dates: 1990-01-01 to 2100-01-01 (UTC).
_PLAUSIBLE = (631_152_000_000_000, 4_102_444_800_000_000)


def check_time_unit(unit: object, where: str = "--time-unit") -> str:
    """The unit name (``us``, ``ms``, ``s`` or ``ns``); TypeError for a non-string,
    ValueError naming ``where`` for another string."""
    if not isinstance(unit, str):
        raise TypeError(f"{where} must be a string, got {unit!r}")
    if unit not in TIME_UNITS:
        raise ValueError(f"{where} must be one of {', '.join(TIME_UNITS)}, got {unit!r}")
    return unit


def unit_factor(unit: str) -> tuple[int, int]:
    """``(multiply, divide)``: µs = ``floor(value * multiply / divide)``."""
    return TIME_UNITS[check_time_unit(unit)]


def check_unit_range(lo: int, hi: int, unit: str, column: str) -> None:
    """ValueError naming ``column`` when a value of ``[lo, hi]`` in ``unit`` leaves the
    µs timestamp range once converted."""
    mul, div = unit_factor(unit)
    top = MAX_TIMESTAMP // mul
    if int(lo) * mul // div < MIN_TIMESTAMP or int(hi) > top:
        bad = int(hi) if int(hi) > top else int(lo)
        raise ValueError(
            f"{column}: {bad} {unit} is outside the µs timestamp range once converted "
            f"(|value| must be at most {top} {unit})"
        )


def time_ranges(trace: Trace) -> dict[str, tuple[int, int]]:
    """Each time column's (least, greatest) value, for those present with rows."""
    ranges = {}
    for name in TIME_COLUMNS:
        v = getattr(trace, name)
        if v is not None and v.size:
            ranges[name] = (int(v.min()), int(v.max()))
    return ranges


def check_ranges(
    ranges: Mapping[str, tuple[int, int]],
    unit: str | None,
    scaled: Collection[str],
    where: str = "--time-unit",
) -> None:
    """The unit rule on a trace's time columns, each given as its (least, greatest)
    value (absent: no values), in :data:`TIME_COLUMNS` order: with a ``unit``, a column
    in ``scaled`` must stay in the µs range once converted (:func:`check_unit_range`);
    without one, a column must not look like epoch s/ms/ns (:func:`check_magnitude`,
    whose message names ``where``)."""
    for name in TIME_COLUMNS:
        if name not in ranges:
            continue
        lo, hi = ranges[name]
        if unit is not None and name in scaled:
            check_unit_range(lo, hi, unit, name)
        elif unit is None:
            check_magnitude(lo, hi, name, where)


def in_unit(
    trace: Trace, unit: str | None, scaled: Collection[str], where: str = "--time-unit"
) -> Trace:
    """``trace`` with the unit rule applied (:func:`check_ranges`): the columns in
    ``scaled`` converted from ``unit`` to µs (:func:`scale_to_us`); without a unit,
    ``trace`` itself once no column looks like epoch s/ms/ns."""
    ranges = time_ranges(trace)
    check_ranges(ranges, unit, scaled, where)
    if unit is None or not set(scaled) & ranges.keys():
        return trace
    changes = {n: scale_to_us(getattr(trace, n), unit, n) for n in ranges if n in scaled}
    return dataclasses.replace(trace, **changes)


def scale_to_us(values: ArrayLike, unit: str, column: str) -> np.ndarray:
    """An integer time column in ``unit`` as int64 µs (ns floored). ValueError naming
    ``column`` when a value leaves the µs range (:func:`check_unit_range`)."""
    mul, div = unit_factor(unit)
    v = int_column(values, column)
    if v.size:
        check_unit_range(int(v.min()), int(v.max()), unit, column)
    if div > 1:
        return np.floor_divide(v, div)
    return v if mul == 1 else v * np.int64(mul)


def numeric_time_columns(paths: Sequence[Path | TraceFile]) -> set[str]:
    """The time columns (:data:`TIME_COLUMNS`) that hold numbers (integers or floats) in
    any of the trace files ``paths``, from their schemas: Parquet's, or the types pyarrow
    infers from a CSV file's first block. Timestamps, dates and ISO-8601 strings are
    absolute already, so a unit never applies to them."""
    found: set[str] = set()
    for path in paths:
        if isinstance(path, TraceFile):
            with path.open() as stream:
                schema = _schema(stream, path.suffix)
        else:
            schema = _schema(path, path.suffix)
        for name in TIME_COLUMNS:
            i = schema.get_field_index(name)
            if i >= 0 and (
                pa.types.is_integer(schema.field(i).type)
                or pa.types.is_floating(schema.field(i).type)
            ):
                found.add(name)
    return found


def _schema(source: Any, suffix: str) -> pa.Schema:
    """A trace file's schema: Parquet's, or what pyarrow infers from a CSV's first block."""
    if suffix.lower() == ".csv":
        with pacsv.open_csv(source) as reader:
            return reader.schema
    return pq.read_schema(source)


def likely_unit(lo: int, hi: int) -> str | None:
    """The unit (``s``, ``ms`` or ``ns``) in which every value of ``[lo, hi]`` is a real
    date (1990-2100) while as µs it is not; None when µs is plausible or none fits."""
    if _PLAUSIBLE[0] <= lo and hi < _PLAUSIBLE[1]:
        return None
    for unit in ("ms", "s", "ns"):
        mul, div = TIME_UNITS[unit]
        if _PLAUSIBLE[0] <= lo * mul // div and hi * mul // div < _PLAUSIBLE[1]:
            return unit
    return None


def check_magnitude(lo: int, hi: int, column: str, where: str = "--time-unit") -> None:
    """Raise ValueError when a column given without a unit, ranging ``[lo, hi]`` as µs,
    looks like epoch s/ms/ns (:func:`likely_unit`), naming the unit and how to pass it:
    ``where`` is the flag (``--time-unit``) or the parameter (``time_unit``)."""
    unit = likely_unit(int(lo), int(hi))
    if unit is None:
        return
    mul, div = TIME_UNITS[unit]
    as_us = format_timestamp(int(lo))
    meant = format_timestamp(int(lo) * mul // div)
    raise ValueError(
        f"{column} looks like {_NAMES[unit]}, not µs: its values {int(lo)}..{int(hi)} read "
        f"as µs start at {as_us}, as {unit} at {meant}. Pass {_given(where, unit)} (or "
        f"{_given(where, 'us')} if they really are µs)"
    )


def _given(where: str, unit: str) -> str:
    """How a unit is passed: ``--time-unit ms`` on the command line, ``time_unit='ms'``
    in Python."""
    return f"{where} {unit}" if where.startswith("-") else f"{where}={unit!r}"
