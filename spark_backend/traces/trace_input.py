"""A user's trace read by either engine, its times in µs: the ``--time-unit`` rule.

Numeric time columns are in ``unit`` when one is given (any value whose µs lie in Beam's
timestamp range accepted); without it they are µs, and a column whose range looks like
epoch seconds, milliseconds or nanoseconds read as µs stops the run
(:func:`theory.data.units.check_magnitude`, which names the likely unit and the flag).
Both engines apply theory's rule: the local one on numpy columns, Spark as an exact
bigint expression. Timestamp, date and ISO-8601
columns are absolute and never scaled.

:func:`read_blocks` gives :func:`read_local`'s trace as a
:class:`~theory.data.blocks.BlockedTrace` read by Spark's tasks (``simulate --engine
spark --trace``): the driver reads headers, Parquet footers and each block's check only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_backend.traces.files import file_groups
from spark_backend.traces.read import read_trace_df
from theory.data.blocks import BlockedTrace
from theory.data.file_blocks import ROWS, BlockCheck, FileBlock, read_blocked
from theory.data.io import check_file, read_in_unit, trace_files
from theory.data.location import is_uri
from theory.data.report import BadRowReport
from theory.data.schema import OnBadRows
from theory.data.trace import Trace
from theory.data.units import (
    TIME_COLUMNS,
    check_ranges,
    numeric_time_columns,
    unit_factor,
)

__all__ = ["local_files", "read_blocks", "read_local", "read_spark", "scaled_columns"]


def local_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files behind ``path`` (a file or a directory), checked to exist;
    FileNotFoundError naming the path otherwise. Remote URIs give no files."""
    text = os.fspath(path)
    if is_uri(text) and not text.startswith("file://"):
        return []
    p = Path(text.removeprefix("file://"))
    if p.is_dir():
        return trace_files(p)
    if not p.is_file():
        raise FileNotFoundError(f"trace {text!r} does not exist")
    return [p]


def scaled_columns(path: str | os.PathLike[str], unit: str | None) -> set[str]:
    """The time columns ``unit`` applies to (none without a unit; every time column of
    a remote trace, whose schema is not read here)."""
    if unit is None:
        return set()
    files = local_files(path)
    return numeric_time_columns(files) if files else set(TIME_COLUMNS)


def read_local(
    path: str | os.PathLike[str],
    on_bad_rows: OnBadRows,
    unit: str | None,
    strict: bool = False,
    null_values: Sequence[str] = (),
) -> tuple[Trace, BadRowReport]:
    """Read and validate with theory (no Spark), and apply the unit rule. Empty or
    unreadable files get the Spark reader's errors (its file checks run first, in its
    order: theory's :func:`~theory.data.io.check_file`, then the grouping)."""
    _checked_headers(path, unit)
    return read_in_unit(path, on_bad_rows, strict, False, null_values, unit, "--time-unit")


def read_blocks(
    sc: Any,
    path: str | os.PathLike[str],
    on_bad_rows: OnBadRows,
    unit: str | None,
    strict: bool = False,
    null_values: Sequence[str] = (),
    rows: int = ROWS,
) -> tuple[BlockedTrace, BadRowReport]:
    """:func:`read_local`'s trace as blocks (:mod:`theory.data.file_blocks`: Parquet row
    groups, CSV files), each checked by a task of SparkContext ``sc``; the same errors,
    raised before the trace is simulated. Here only headers, Parquet footers and each
    block's check (counts and ranges) are read; a task of the simulation reads a block."""
    cols = _checked_headers(path, unit)

    def run(check: Callable[[FileBlock], BlockCheck], blocks: list[FileBlock]) -> list[BlockCheck]:
        return sc.parallelize(blocks, max(1, len(blocks))).map(check).collect()

    return read_blocked(
        path, on_bad_rows=on_bad_rows, require_causal=strict, null_values=null_values,
        unit=unit, scaled=cols, rows=rows, run=run,
    )  # fmt: skip


def _checked_headers(path: str | os.PathLike[str], unit: str | None) -> set[str]:
    """Both readers' file checks before any row, in the Spark reader's order (theory's
    :func:`~theory.data.io.check_file`, then the grouping); the columns ``unit`` applies to."""
    files = local_files(path)
    for f in files:
        check_file(f)
    file_groups(files)
    return scaled_columns(path, unit)


def read_spark(
    session: SparkSession,
    path: str | os.PathLike[str],
    on_bad_rows: OnBadRows,
    unit: str | None,
    strict: bool = False,
    null_values: Sequence[str] = (),
) -> tuple[DataFrame, BadRowReport]:
    """Read and validate on Spark, then apply the unit rule (one small aggregation for
    the ranges; the scaling is a lazy exact bigint expression)."""
    cols = scaled_columns(path, unit)
    df, bad = read_trace_df(
        session, path, on_bad_rows=on_bad_rows, require_causal=strict, null_values=null_values
    )
    present = [c for c in TIME_COLUMNS if c in df.columns]
    aggs = [F.min(c).alias(f"lo_{c}") for c in present]
    aggs += [F.max(c).alias(f"hi_{c}") for c in present]
    got = df.agg(*aggs).first() if aggs else None
    ranges = {
        c: (int(got[f"lo_{c}"]), int(got[f"hi_{c}"]))
        for c in present
        if got is not None and got[f"lo_{c}"] is not None
    }
    check_ranges(ranges, unit, cols)
    for c in ranges:
        if unit is not None and c in cols:
            df = df.withColumn(c, _scaled(c, unit))
    return df, bad


def _scaled(column: str, unit: str) -> Column:
    """``column`` (bigint, in ``unit``) as µs, exactly: theory's (multiply, divide)."""
    mul, div = unit_factor(unit)
    c = f"CAST(`{column}` AS BIGINT)"
    if div > 1:  # floor, as numpy's floor_divide; integer `div` (no double rounding)
        return F.expr(f"({c} - pmod({c}, {div})) div {div}")
    return F.expr(f"{c} * {mul}")
