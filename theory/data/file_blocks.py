"""A trace file read block by block: a :class:`~theory.data.blocks.BlockedTrace` whose
block ``i`` is read from the file where it is needed (a cluster's task), so that no one
process holds the whole trace. Times are int64 µs.

A block is a run of consecutive rows in reading order (files in name order, rows in
file order): a Parquet file's row groups, joined up to about ``rows`` rows; a CSV file
whole. A CSV file is not cut by bytes: its quoted fields may hold newlines, so a row's
start is known only by parsing from the top (write a large CSV trace as a directory of
files, as Spark does, or as Parquet). Each block sorted by arrival (stable: ties by event
time, then row) and the blocks in order give rows ordered by (arrival, event time, row
of the trace): the order the local simulator gives the trace read whole
(:func:`~theory.data.io.read_trace`, then
:meth:`~theory.data.trace.Trace.sorted_by_arrival`), ties included.

Two passes:

1. :func:`check_block` on every block (in any process): its rows validated and numbered
   from 0; it gives the rows read and kept, whether its keys are strings, each time
   column's range, its bad-row report, or the :class:`~theory.data.errors.TraceError` it
   raised. No rows leave it.
2. :func:`file_trace`, from the checks alone: what reading the trace whole raises, in the
   same words and order (the first failing block's error renumbered to the trace's row
   and the file's row, after a bad byte in any CSV file; no rows at all; then the
   ``--time-unit`` rule on the whole ranges: :func:`~theory.data.units.check_ranges`),
   the report, and the BlockedTrace. Its block reads the rows again, keys as strings
   when some files have string keys and others not, times scaled to µs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import pyarrow.parquet as pq

from theory.columns import check_count
from theory.data.blocks import BlockedTrace
from theory.data.errors import TraceError, no_rows_error
from theory.data.io import (
    CSV_NULLS,
    check_null_values,
    checked_files,
    read_part,
    refuse_non_utf8,
    string_keyed,
    trace_format,
)
from theory.data.location import TraceFile
from theory.data.report import BadRowReport
from theory.data.schema import OnBadRows, check_on_bad_rows
from theory.data.trace import Trace
from theory.data.units import TIME_COLUMNS, check_ranges, scale_to_us, time_ranges

__all__ = [
    "ROWS",
    "BlockCheck",
    "FileBlock",
    "Reading",
    "check_block",
    "file_trace",
    "plan_blocks",
    "read_blocked",
]

#: Rows a Parquet block holds at most, unless one row group is larger.
ROWS = 1 << 20


@dataclass(frozen=True)
class Reading:
    """How rows are read: the bad-row policy, the causality rule, the CSV null fields
    (:func:`~theory.data.io.check_null_values`'s)."""

    on_bad_rows: OnBadRows = "fail"
    require_causal: bool = False
    nulls: tuple[str, ...] = CSV_NULLS


@dataclass(frozen=True)
class FileBlock:
    """Consecutive rows of one file: Parquet row ``groups`` (None: the whole file);
    ``file_row``: the file's rows before them; ``names``: the file's columns."""

    file: TraceFile
    names: tuple[str, ...]
    groups: tuple[int, ...] | None = None
    file_row: int = 0

    def read(self, reading: Reading) -> tuple[Trace, BadRowReport]:
        """The block's rows validated, numbered from 0 (TraceError as read_trace's for
        these rows alone)."""
        return read_part(self.file, list(self.names), reading.on_bad_rows,
                         reading.require_causal, reading.nulls, 0, self.groups)  # fmt: skip


class BlockCheck(NamedTuple):
    """One block's first pass: rows read and kept, whether its keys are strings, each
    time column's (least, greatest) value over the kept rows (µs, or the file's unit),
    its report (rows from 0), or the error it raised (then the rest is empty)."""

    rows_read: int
    kept: int
    string_keys: bool
    ranges: dict[str, tuple[int, int]]
    report: BadRowReport
    error: TraceError | None = None


def plan_blocks(path: str | os.PathLike[str], rows: int = ROWS) -> list[FileBlock]:
    """The blocks of a trace path (a file or a directory), after the checks made before
    any row is read (:func:`~theory.data.io.checked_files`); reads only Parquet footers."""
    check_count(rows, "rows", minimum=1)
    blocks: list[FileBlock] = []
    for f, names in checked_files(path):
        if trace_format(f) == "csv":
            blocks.append(FileBlock(f, tuple(names)))
            continue
        with f.open() as raw:
            meta = pq.ParquetFile(raw).metadata
        sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        blocks.extend(FileBlock(f, tuple(names), tuple(gs), at) for gs, at in _runs(sizes, rows))
        if not sizes:
            blocks.append(FileBlock(f, tuple(names)))
    return blocks


def _runs(sizes: Sequence[int], rows: int) -> list[tuple[list[int], int]]:
    """Row groups joined in order into runs of at most ``rows`` rows (a larger group
    alone), each with the rows before it."""
    runs: list[tuple[list[int], int]] = []
    at = size = 0
    for g, n in enumerate(sizes):
        if not runs or size + n > rows:
            runs.append(([], at))
            size = 0
        runs[-1][0].append(g)
        size += n
        at += n
    return runs


def check_block(block: FileBlock, reading: Reading) -> BlockCheck:
    """The first pass over one block (see the module docstring)."""
    try:
        trace, report = block.read(reading)
    except TraceError as err:
        return BlockCheck(0, 0, False, {}, BadRowReport(), err)
    return BlockCheck(report.rows_read, len(trace), trace.has_string_keys, time_ranges(trace),
                      report)  # fmt: skip


def file_trace(
    path: str | os.PathLike[str],
    blocks: Sequence[FileBlock],
    checks: Iterable[BlockCheck],
    reading: Reading,
    unit: str | None = None,
    scaled: Collection[str] = (),
) -> tuple[BlockedTrace, BadRowReport]:
    """The trace of ``blocks`` from their checks (in block order): the errors reading it
    whole raises (module docstring), else the BlockedTrace and the bad-row report.
    ``unit``: the integer time columns' unit (None: µs, the magnitude checked); ``scaled``:
    the columns it applies to."""
    report = BadRowReport()
    ranges: dict[str, tuple[int, int]] = {}
    kinds: set[bool] = set()
    kept = 0
    for block, check in zip(blocks, checks, strict=True):
        if check.error is not None:
            refuse_non_utf8([b.file for b in blocks])  # a bad byte is named first
            raise _renumbered(check.error, report.rows_read, block.file_row)
        report = report.merge(_shifted(check.report, report.rows_read))
        for name, (lo, hi) in check.ranges.items():
            was = ranges.get(name, (lo, hi))
            ranges[name] = (min(was[0], lo), max(was[1], hi))
        if check.kept:
            kinds.add(check.string_keys)
        kept += check.kept
    if report.rows_read == 0:
        raise no_rows_error(str(path))
    check_ranges(ranges, unit, scaled)
    make = partial(_read_block, tuple(blocks), reading, unit, frozenset(scaled), len(kinds) > 1)
    return BlockedTrace(len(blocks), make, kept), report


def read_blocked(
    path: str | os.PathLike[str],
    *,
    on_bad_rows: OnBadRows = "fail",
    require_causal: bool = False,
    null_values: Sequence[str] = CSV_NULLS,
    unit: str | None = None,
    scaled: Collection[str] = (),
    rows: int = ROWS,
    run: Callable[[Callable[[FileBlock], BlockCheck], list[FileBlock]], Iterable[BlockCheck]]
    | None = None,
) -> tuple[BlockedTrace, BadRowReport]:
    """Both passes: :func:`plan_blocks`, :func:`check_block` on every block through
    ``run(check, blocks)`` (a cluster's map; None: here, one at a time), :func:`file_trace`."""
    reading = Reading(check_on_bad_rows(on_bad_rows), require_causal,
                      check_null_values(null_values))  # fmt: skip
    blocks = plan_blocks(path, rows)
    check = partial(check_block, reading=reading)
    checks = map(check, blocks) if run is None else run(check, blocks)
    return file_trace(path, blocks, checks, reading, unit, scaled)


def _renumbered(err: TraceError, rows_before: int, file_rows_before: int) -> TraceError:
    """A block's error (rows from 0) as the whole trace's: its row and the file's."""
    if err.row is None:
        return err
    file_row = None if err.file_row is None else err.file_row + file_rows_before
    return TraceError(err.detail, row=err.row + rows_before, column=err.column, path=err.path,
                      file_row=file_row)  # fmt: skip


def _shifted(report: BadRowReport, rows_before: int) -> BadRowReport:
    """A block's report (rows from 0) with its example rows after ``rows_before``."""
    if not rows_before or not report.examples:
        return report
    examples = {k: [(r + rows_before, c, v) for r, c, v in ex] for k, ex in report.examples.items()}
    return BadRowReport(report.rows_read, dict(report.counts), examples, report.total)


def _read_block(
    blocks: tuple[FileBlock, ...],
    reading: Reading,
    unit: str | None,
    scaled: frozenset[str],
    string_keys: bool,
    i: int,
) -> Trace:
    """Block ``i`` read again, as the whole trace has its rows (checked already)."""
    trace, _ = blocks[i].read(reading)
    if string_keys:
        trace = string_keyed(trace)
    if unit is None:
        return trace
    changes: Mapping[str, object] = {
        name: scale_to_us(getattr(trace, name), unit, name)
        for name in TIME_COLUMNS
        if name in scaled and getattr(trace, name) is not None
    }
    return trace.with_columns(**changes) if changes else trace
