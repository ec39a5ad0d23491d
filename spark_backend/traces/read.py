"""Reading and validating a trace on Spark: :func:`read_trace_df`.

The rules, their order, the error messages and the report come from theory
(:mod:`theory.data.schema`, :mod:`theory.data.errors`, :mod:`theory.data.report`); Spark
only computes, with DataFrame operations, which rows break which rule: per-rule counts
per block in one pass, then the lowest bad row (``"fail"``) or the first bad rows of
each rule (``"skip-and-report"``). Theory formats them. The data stays in the JVM: no
row goes through a Python worker, so validation scales with the cluster. (Running
theory's pyarrow parser per file with ``mapInArrow`` would share more code, but it
would read each file in one task, ship every row to Python, and could not see the
types pyarrow infers for a whole CSV file from a slice of it.)

A local path or a URI pyarrow has a file system for is listed and checked on the driver
through :mod:`pyarrow.fs` (:mod:`theory.data.location`), file by file, as theory does;
another URI Spark reads (``s3a://``) goes to Spark alone. A byte that is not UTF-8 shows
in Spark's tasks as U+FFFD; only then (or when a row is bad) does the driver scan the
files for it, so that theory's error, naming file and line, comes first.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from spark_backend.traces.files import (
    NOT_UTF8,
    RAGGED,
    FileGroup,
    file_groups,
    read_group,
    read_remote,
)
from spark_backend.traces.parse import ParsedFrame, any_of, csv_key_kinds, parse_frame
from theory.data.errors import TraceError, bad_row_error, no_rows_error, ragged_row_error
from theory.data.io import CSV_NULLS, check_file, check_null_values, refuse_non_utf8
from theory.data.location import TraceFile, is_uri, list_trace_files, uri_file_system
from theory.data.report import BadRowReport, Example
from theory.data.schema import COLUMNS, MAX_EXAMPLES, OnBadRows, check_on_bad_rows
from theory.data.validate import check_file_columns

__all__ = ["read_trace_df"]


def read_trace_df(
    spark: SparkSession,
    path: str | os.PathLike[str],
    *,
    on_bad_rows: OnBadRows = "fail",
    require_causal: bool = False,
    allow_empty: bool = False,
    null_values: Sequence[str] = CSV_NULLS,
) -> tuple[DataFrame, BadRowReport]:
    """Read and validate a trace: a Parquet (.parquet/.pq) or CSV (.csv) file, or a
    directory of them (read in name order; hidden ``.``/``_`` names skipped), local or
    a URI.

    Validation applies :data:`theory.data.schema.RULES` as Spark expressions, with theory's
    parsing: timestamps (µs) may be integers, integral floats, timestamps or dates, or
    strings holding integers, numbers or ISO-8601 times (naive = UTC); ``key`` defaults to
    0 and ``value`` to 1.0; a CSV file's keys are int64 when they all look like integers.
    ``null_values``: the CSV fields read as null, as theory reads them (the empty
    field always; ``NA`` or ``null`` only if listed). ``on_bad_rows="fail"`` raises
    :class:`~theory.data.errors.TraceError` for the lowest bad row (naming the row, the
    column and the file); ``"skip-and-report"`` drops bad
    rows and counts them, per rule with up to 5 examples, in the report. Rows, errors and
    report are those of :func:`theory.data.io.read_trace` on the same files (a bad CSV
    value shown as the field's text). Errors: TraceError for
    a missing column, an unsupported column type, an empty file, or (unless
    ``allow_empty``) a trace with no rows; FileNotFoundError for a missing path or a
    directory with no trace files.

    Returns the validated DataFrame (lazy; it re-parses on every action, so persist it
    for repeated use) and the report. Runs one or two Spark jobs (more when rows are bad).
    """
    policy = check_on_bad_rows(on_bad_rows)
    nulls = check_null_values(null_values)
    text = os.fspath(path)
    if is_uri(text) and uri_file_system(text) is None:
        group, df = read_remote(spark, text)
        inputs = _Inputs([group], [df], {0: text}, remote=True)
    else:
        inputs = _checked_inputs(spark, text, nulls)
    return _validate(inputs, policy, require_causal, allow_empty)


@dataclass
class _Inputs:
    """The groups of files of one trace, their raw frames, and each file's path."""

    groups: list[FileGroup]
    frames: list[DataFrame]
    path_of: dict[int, str]
    remote: bool = False
    names_of: dict[int, list[str]] = field(default_factory=dict)  # every column, per file
    files: list[TraceFile] = field(default_factory=list)  # checked files, in order

    def refuse_non_utf8(self) -> None:
        """Theory's error for the first bad byte of the checked files, if there is one:
        called before any other error about rows, which a bad byte may have caused."""
        refuse_non_utf8(self.files)

    def columns_of_files(self) -> list[tuple[str, list[str]]]:
        """(path, columns) of every file, in reading order: every column of a local file
        (so that an error lists them all), the trace columns of a remote dataset."""
        present = [[c for c in df.columns if c in COLUMNS] for df in self.frames]
        files = sorted((i, gi) for gi, g in enumerate(self.groups) for i, _ in g.files)
        return [
            (self.path_of[i], self.names_of.get(i, present[gi])) for i, gi in files
        ]


def _checked_inputs(spark: SparkSession, text: str, nulls: tuple[str, ...]) -> _Inputs:
    """A local path or a URI pyarrow knows: its files listed, checked (theory's
    :func:`~theory.data.io.check_file`, through :mod:`pyarrow.fs`) and grouped on the
    driver, then read by Spark."""
    files = list_trace_files(text)
    path_of = {i: f.shown for i, f in enumerate(files)}
    names_of = {i: check_file(f) for i, f in enumerate(files)}  # theory's checks, words
    groups = file_groups(files)
    frames = [read_group(spark, g, nulls) for g in groups]
    return _Inputs(groups, frames, path_of, names_of=names_of, files=files)


def _validate(
    inputs: _Inputs, policy: OnBadRows, require_causal: bool, allow_empty: bool
) -> tuple[DataFrame, BadRowReport]:
    check_file_columns(inputs.columns_of_files())  # before any data is read
    _check_ragged(inputs)
    key_kind = csv_key_kinds(inputs.groups, inputs.frames)
    parsed = [
        parse_frame(df, g, key_kind, require_causal, inputs.path_of[g.files[0][0]])
        for g, df in zip(inputs.groups, inputs.frames, strict=True)
    ]
    stats = sorted(
        (s for pr in parsed for s in _block_stats(pr, inputs.remote)),
        key=lambda s: (s.file, s.path, s.block),
    )
    rows = _RowNumbers(stats, inputs)
    total_bad = sum(s.bad for s in stats)
    if (total_bad and policy == "fail") or any(s.not_utf8 for s in stats):
        inputs.refuse_non_utf8()  # theory reads a file with a bad byte no further
    if rows.rows_read == 0 and not allow_empty:
        paths = inputs.path_of
        raise no_rows_error(paths[0] if len(paths) == 1 else str(Path(paths[0]).parent))
    if total_bad == 0:
        return _final_frame(parsed, drop_bad=False), BadRowReport(rows_read=rows.rows_read)
    if policy == "fail":
        raise _first_error(parsed, rows)
    counts: dict[str, int] = {}
    for s in stats:
        for name, c in s.counts.items():
            counts[name] = counts.get(name, 0) + c
    report = BadRowReport.of(rows.rows_read, total_bad, counts, _examples(parsed, rows))
    return _final_frame(parsed, drop_bad=True), report


def _check_ragged(inputs: _Inputs) -> None:
    """Theory's error for the first CSV row with more or fewer fields than its header
    (Spark would pad or cut it): one Spark job per local CSV group."""
    for g, df in zip(inputs.groups, inputs.frames, strict=True):
        if g.fmt != "csv" or RAGGED not in df.columns:
            continue
        first = (
            df.where(F.col(RAGGED).isNotNull())
            .select(RAGGED, "_file", "_blk", "_mid", F.col(f"`{g.header[0]}`"))
            .orderBy("_file", "_blk", "_mid")
            .limit(1)
            .collect()
        )
        if first:
            inputs.refuse_non_utf8()
            text = str(first[0][RAGGED]).rstrip("\r\n")
            fields = len(next(csv.reader([text]), []))
            path = inputs.path_of[int(first[0]["_file"])]
            raise ragged_row_error(len(g.header), fields, text, path)


# --------------------------------------------------------------------------- row numbers


@dataclass
class _BlockStats:
    """One block of one file: its rows, first row id, per-rule counts and bad rows."""

    file: int
    path: str  # the file Spark read (remote inputs only)
    block: int
    rows: int
    mid0: int
    counts: dict[str, int]
    bad: int
    not_utf8: int  # rows holding U+FFFD


def _block_stats(pr: ParsedFrame, remote: bool) -> list[_BlockStats]:
    """Rows and per-rule counts per (file, block): one Spark job."""
    bad = pr.bad_flags()
    aggs = [F.count(F.lit(1)).alias("rows"), F.min("_mid").alias("mid0")]
    aggs += [F.sum(b.cast("long")).alias(f"c{i}") for i, b in enumerate(bad)]
    aggs.append(F.sum(any_of(bad).cast("long")).alias("bad"))
    aggs.append(F.sum(F.col(NOT_UTF8).cast("long")).alias("not_utf8"))
    keys = ["_file", "_blk"] + (["_path"] if remote else [])
    return [
        _BlockStats(
            int(r["_file"]),
            str(r["_path"]) if remote else "",
            int(r["_blk"]),
            int(r["rows"]),
            int(r["mid0"]),
            {rule.name: int(r[f"c{i}"] or 0) for i, rule in enumerate(pr.rules)},
            int(r["bad"] or 0),
            int(r["not_utf8"] or 0),
        )
        for r in pr.df.groupBy(*keys).agg(*aggs).collect()
    ]


class _RowNumbers:
    """Rows numbered from 0 in input order, across files, as theory numbers them: a row's
    number is its block's offset plus its id's distance from the block's first id."""

    def __init__(self, stats: list[_BlockStats], inputs: _Inputs) -> None:
        self.inputs = inputs
        self.file_start: dict[tuple[int, str], int] = {}
        self.block_start: dict[tuple[int, str, int], tuple[int, int]] = {}
        acc = 0
        for s in stats:
            self.file_start.setdefault((s.file, s.path), acc)
            self.block_start[(s.file, s.path, s.block)] = (acc, s.mid0)
            acc += s.rows
        self.rows_read = acc

    def order(self) -> list[str]:
        """The columns that sort rows in input order."""
        return ["_file"] + (["_path"] if self.inputs.remote else []) + ["_blk", "_mid"]

    def locate(self, r: Any) -> tuple[int, int, str]:
        """(row, row within its file, file path) of the collected row ``r``."""
        f = int(r["_file"])
        fp = str(r["_path"]) if self.inputs.remote else ""
        start, mid0 = self.block_start[(f, fp, int(r["_blk"]))]
        row = start + int(r["_mid"]) - mid0
        path = fp.removeprefix("file:") if self.inputs.remote else self.inputs.path_of[f]
        return row, row - self.file_start[(f, fp)], path


def _first_error(parsed: list[ParsedFrame], rows: _RowNumbers) -> TraceError:
    """Theory's error for the lowest bad row and the first rule (in RULES order) it breaks."""
    candidates = []
    for pr in parsed:
        got = pr.df.where(any_of(pr.bad_flags())).orderBy(*rows.order()).limit(1).collect()
        candidates += [(rows.locate(r), r, pr) for r in got]
    (row, file_row, path), r, pr = min(candidates, key=lambda c: c[0][0])
    rule = next(pr.rules[i] for i in range(len(pr.rules)) if r[f"_bad_{i}"])
    value = (
        (r["arrival_time"], r["event_time"])
        if rule.kind == "not_causal"
        else r[f"_raw_{rule.column}"]
    )
    return bad_row_error(rule, row, value, path=path, file_row=file_row)


def _examples(parsed: list[ParsedFrame], rows: _RowNumbers) -> dict[str, list[Example]]:
    """The first bad rows of each rule (at most 5 per rule and group): one Spark job per
    group."""
    out: dict[str, list[Example]] = {}
    for pr in parsed:
        flags = pr.bad_flags()
        rule_ids = F.array(*[F.when(f, F.lit(i)) for i, f in enumerate(flags)])
        exploded = (
            pr.df.where(any_of(flags))
            .select("*", F.explode(rule_ids).alias("_rule"))
            .where(F.col("_rule").isNotNull())
        )
        w = Window.partitionBy("_rule").orderBy(*rows.order())
        top = exploded.withColumn("_n", F.row_number().over(w)).where(F.col("_n") <= MAX_EXAMPLES)
        for r in top.collect():
            rule = pr.rules[int(r["_rule"])]
            row, _, _ = rows.locate(r)
            out.setdefault(rule.name, []).append((row, rule.column, r[f"_raw_{rule.column}"]))
    return out


# --------------------------------------------------------------------------- the trace


def _final_frame(parsed: list[ParsedFrame], drop_bad: bool) -> DataFrame:
    """The validated trace: every group in the trace schema (bad rows removed when
    ``drop_bad``), keys as strings if any group has string keys, unioned."""
    string_keys = any(
        "key" in pr.columns and isinstance(pr.df.schema["key"].dataType, T.StringType)
        for pr in parsed
    )
    optional = [c for c in ("partition", "publish_time") if all(c in pr.columns for pr in parsed)]
    frames = []
    for pr in parsed:
        df = pr.df.where(~any_of(pr.bad_flags())) if drop_bad and pr.rules else pr.df
        frames.append(df.select(*_trace_columns(pr, string_keys, optional)))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _trace_columns(pr: ParsedFrame, string_keys: bool, optional: list[str]) -> list[Any]:
    key = F.col("key") if "key" in pr.columns else F.lit(0).cast("long")
    if string_keys:
        key = key.cast("string")
    elif "key" in pr.columns:
        key = key.cast("long")
    value = F.col("value") if "value" in pr.columns else F.lit(1.0)
    return [
        F.col("event_time").cast("long").alias("event_time"),
        F.col("arrival_time").cast("long").alias("arrival_time"),
        key.alias("key"),
        value.cast("double").alias("value"),
        *[F.col(c).cast("long").alias(c) for c in optional],
    ]
