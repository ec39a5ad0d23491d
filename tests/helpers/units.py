"""The command line's unit convention, checked on its output files: a column named
``_us`` holds integers (µs; in a CSV also blank for none and ``inf``/``-inf`` at the
bounds), ``_utc`` ISO-8601 UTC strings, ``_s`` numbers (seconds), and no other column
of numbers names a time or a duration."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

_INT = re.compile(r"^-?\d+$")
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
_BOUNDS = {"", "inf", "-inf", "+inf", "end-of-global-window"}
#: Words that make a column a time or a duration, unless it counts something.
_TIME_WORDS = {"time", "latency", "lag", "watermark", "delay", "hold", "duration", "start",
               "end", "longest", "total", "timestamp"}
_COUNTS = {"windows", "count", "rows", "panes", "stalls", "elements", "fraction", "mean",
           "explains", "left", "stage", "switched", "value"}


#: First words of a flag (a bool column).
_FLAGS = {"fired", "on", "is", "has", "same"}


def _tokens(name: str) -> list[str]:
    return re.split(r"[_ :]+", name.lower())


#: Statistics of a metric (its mean and interval bounds over seeds or resamples): the
#: column has the metric's unit.
_STATISTIC = re.compile(r"_(mean|ci_low|ci_high)$")


def unit_errors_of_name(name: str) -> list[str]:
    """A column without a unit suffix that names a time or a duration (a statistic of
    a metric, ``x_mean`` or ``x_ci_low``, judged by its metric ``x``)."""
    if name.endswith(("_us", "_utc", "_s")):
        return []
    tokens = _tokens(_STATISTIC.sub("", name) or name)
    if tokens[-1] in _COUNTS or tokens[0] in _FLAGS or not _TIME_WORDS & set(tokens):
        return []
    return [f"{name}: a time or duration without _us, _utc or _s"]


def csv_unit_errors(path: Path) -> list[str]:
    """Each column of the CSV ``path`` against its name's unit."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
        names = list(rows[0]) if rows else []
    errors = []
    for name in names:
        cells = [r[name] for r in rows]
        if any(_is_number(c) for c in cells):  # a column of names names no unit
            errors += [f"{path.name}: {e}" for e in unit_errors_of_name(name)]
        if name.endswith("_us"):
            bad = [c for c in cells if not _INT.match(c) and c not in _BOUNDS]
        elif name.endswith("_utc"):
            bad = [c for c in cells if not _ISO.match(c) and c not in _BOUNDS]
        elif name.endswith("_s"):
            bad = [c for c in cells if c not in _BOUNDS and not _is_number(c)]
        else:
            bad = []
        if bad:
            errors.append(f"{path.name}: {name} holds {bad[:3]}")
    return errors


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def parquet_unit_errors(path: Path) -> list[str]:
    """Each column of the Parquet file ``path`` against its name's unit (its type)."""
    schema = pq.read_schema(path)
    errors = []
    for field in schema:
        if pa.types.is_integer(field.type) or pa.types.is_floating(field.type):
            errors += [f"{path.name}: {e}" for e in unit_errors_of_name(field.name)]
        if field.name.endswith("_us") and not pa.types.is_integer(field.type):
            errors.append(f"{path.name}: {field.name} is {field.type}, not an integer")
        if field.name.endswith("_utc"):
            if not pa.types.is_string(field.type):
                errors.append(f"{path.name}: {field.name} is {field.type}, not a string")
            else:
                cells = pq.read_table(path, columns=[field.name]).column(0).to_pylist()
                bad = [c for c in cells if c is not None and not _ISO.match(c)
                       and c not in _BOUNDS]
                if bad:
                    errors.append(f"{path.name}: {field.name} holds {bad[:3]}")
    return errors


def output_unit_errors(out: Path) -> list[str]:
    """Every CSV and Parquet file under ``out`` checked; at least one must be there."""
    files = sorted(out.rglob("*.csv")) + sorted(out.rglob("*.parquet"))
    assert files, f"no CSV or Parquet file under {out}"
    errors = []
    for f in files:
        errors += csv_unit_errors(f) if f.suffix == ".csv" else parquet_unit_errors(f)
    return errors


def us_cell(value: float) -> str:
    """The text of a µs value in an ``_us`` CSV column: the nearest integer (halves to
    even), blank for none (NaN)."""
    return "" if value != value else str(round(value))
