"""Trace files for Spark: which files, in which groups, read raw with row positions.

Files are found and named as :mod:`theory.data.io` finds them (one listing, one suffix
rule). Files of one format and one header (CSV) or schema (Parquet) form a
:class:`FileGroup` read by one Spark reader; each row keeps its file index, the start of
its block and a monotonically increasing id, from which rows are numbered as theory
numbers them. CSV columns are read as strings, with pyarrow's null values as null, so
that parsing follows theory's rules rather than Spark's CSV inference.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_backend.traces.split import max_partition_bytes, not_plain_files
from theory.data.errors import TraceError
from theory.data.io import CSV_NULLS
from theory.data.location import TraceFile, as_trace_file, trace_format
from theory.data.schema import COLUMNS

__all__ = [
    "NOT_UTF8",
    "RAGGED",
    "FileGroup",
    "file_groups",
    "read_group",
    "read_remote",
    "uri_name",
]


@dataclass
class FileGroup:
    """Files read by one Spark reader: same format and the same columns and types."""

    fmt: str
    files: list[tuple[int, TraceFile]]  # (file index, file)
    header: tuple[str, ...]  # CSV header or Parquet column names


def file_groups(files: Sequence[Path | TraceFile]) -> list[FileGroup]:
    """``files`` (in reading order, local or on any pyarrow file system) grouped by
    format and header; TraceError for an empty or unreadable file. Run
    :func:`theory.data.io.check_file` on each file first."""
    groups: dict[tuple[str, tuple[str, ...]], FileGroup] = {}
    for i, path in enumerate(files):
        f = as_trace_file(path)
        fmt = trace_format(f)
        header = _csv_header(f) if fmt == "csv" else _parquet_header(f)
        groups.setdefault((fmt, header), FileGroup(fmt, [], header)).files.append((i, f))
    return list(groups.values())


def _csv_header(f: TraceFile) -> tuple[str, ...]:
    with f.open() as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as fh:
        row = next(csv.reader(fh), [])
    if not row:
        raise TraceError("empty file: no header and no rows", path=f.shown)
    return tuple(row)


def _parquet_header(f: TraceFile) -> tuple[str, ...]:
    try:
        with f.open() as raw:
            schema = pq.read_schema(raw)
    except (pa.ArrowInvalid, OSError) as err:
        raise TraceError(f"not a readable Parquet file: {err}", path=f.shown) from None
    return tuple(f"{f.name}:{f.type}" for f in schema if f.name in COLUMNS)


#: The column of a CSV group holding a ragged row's text (null for a well-formed row).
RAGGED = "_ragged"

#: The column flagging a row that holds U+FFFD, which Spark's CSV reader puts in place
#: of bytes that are not UTF-8: such a file is checked on the driver
#: (:func:`theory.data.io.refuse_non_utf8`), which names the line or clears it.
NOT_UTF8 = "_not_utf8"


def _not_utf8(columns: Sequence[str]) -> Column:
    """True where any of the string ``columns`` holds U+FFFD."""
    out: Column = F.lit(False)
    for c in columns:
        out = out | F.coalesce(F.col(f"`{c}`").contains("\ufffd"), F.lit(False))
    return out


def _csv_schema(header: tuple[str, ...], ragged: bool = False) -> T.StructType:
    fields = [T.StructField(c, T.StringType(), True) for c in header]
    if ragged:
        fields.append(T.StructField(RAGGED, T.StringType(), True))
    return T.StructType(fields)


def read_group(
    spark: SparkSession, g: FileGroup, nulls: tuple[str, ...] = CSV_NULLS
) -> DataFrame:
    """The trace columns of a group's files, with ``_file`` (index), ``_blk`` (block
    start), ``_mid`` (monotonically increasing id) and :data:`NOT_UTF8`. A CSV file is
    read whole (``multiLine``, quoted newlines as pyarrow reads them) unless it is
    larger than Spark's largest split and holds no quoted newline
    (:mod:`spark_backend.traces.split`): then it is read line by line, one task per
    split."""
    if g.fmt != "csv":
        return _columns(spark.read.parquet(*[f.shown for _, f in g.files]), g, nulls)
    by_line = _line_by_line(spark, g)
    parts = []  # at most two readers: whole files, then files read line by line
    for line in (False, True):
        paths = [f.shown for i, f in g.files if (i in by_line) == line]
        if paths:
            reader = _csv_reader(spark, g.header, multi_line=not line)
            parts.append(_columns(reader.csv(paths), g, nulls))
    return functools.reduce(DataFrame.unionByName, parts)


def _line_by_line(spark: SparkSession, g: FileGroup) -> set[int]:
    """The files of CSV group ``g`` worth reading line by line: larger than Spark's
    largest split and every line plain."""
    split = max_partition_bytes(spark)
    large = [(i, f) for i, f in g.files if f.size() > split]
    whole = not_plain_files(spark, [f.shown for _, f in large])
    return {i for i, f in large if uri_name(f.name) not in whole}


def _csv_reader(spark: SparkSession, header: tuple[str, ...], multi_line: bool) -> DataFrameReader:
    return (
        spark.read.schema(_csv_schema(header, ragged=True))
        .option("header", True)
        .option("columnNameOfCorruptRecord", RAGGED)  # more or fewer fields
        .option("enforceSchema", True)
        .option("escape", '"')
        .option("mode", "PERMISSIVE")
        .option("multiLine", multi_line)
    )


def _columns(df: DataFrame, g: FileGroup, nulls: tuple[str, ...]) -> DataFrame:
    names = F.create_map(*[x for i, p in g.files for x in (F.lit(uri_name(p.name)), F.lit(i))])
    typed = [h.partition(":") for h in g.header] if g.fmt == "parquet" else []
    nanos = {name for name, _, ty in typed if ty.startswith("timestamp[ns")}
    return df.select(
        *[_micros(c) if c in nanos else _raw(c, g.fmt, nulls) for c in df.columns if c in COLUMNS],
        *([F.col(RAGGED)] if g.fmt == "csv" else []),
        (_not_utf8(df.columns) if g.fmt == "csv" else F.lit(False)).alias(NOT_UTF8),
        F.element_at(names, F.col("_metadata.file_name")).cast("int").alias("_file"),
        F.col("_metadata.file_block_start").alias("_blk"),
        F.monotonically_increasing_id().alias("_mid"),
    )


#: Characters ``java.net.URI`` leaves as they are in a path (besides ASCII letters and
#: digits, and non-ASCII characters that are neither spaces nor controls).
_URI_PATH_SAFE = frozenset("_-!.~'()*,;:$&+=@")


def uri_name(name: str) -> str:
    """A file name as Spark's ``_metadata.file_name`` spells it: quoted as Hadoop's
    ``Path.toUri()`` quotes a path (``a b%.csv`` -> ``a%20b%25.csv``; ``é`` stays)."""
    out = []
    for ch in name:
        plain = (ch.isascii() and ch.isalnum()) or ch in _URI_PATH_SAFE
        other = not ch.isascii() and ch.isprintable() and not ch.isspace()
        if plain or other:
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
    return "".join(out)


def _micros(c: str) -> Column:
    """A Parquet ns timestamp (read as a long: ``spark.sql.legacy.parquet.nanosAsLong``,
    set by :mod:`spark_backend.session.session`) floored to µs, as theory floors it."""
    ns = F.col(f"`{c}`")
    return ((ns - F.pmod(ns, F.lit(1000))) / F.lit(1000)).cast("long").alias(c)


def _raw(c: str, fmt: str, nulls: tuple[str, ...]) -> Column:
    raw = F.col(f"`{c}`")
    if fmt != "csv":
        return raw
    # the strings pyarrow's CSV reader takes as null (theory reads CSV with pyarrow)
    return F.when(raw.isin(*nulls), F.lit(None).cast("string")).otherwise(raw).alias(c)


def read_remote(spark: SparkSession, path: str) -> tuple[FileGroup, DataFrame]:
    """A dataset under a URI scheme pyarrow has no file system for (``s3a://``,
    ``wasbs://``; one format, one schema) as one group, read by Spark alone, so without
    the per-file checks; rows also carry ``_path``, the file Spark read them from."""
    fmt = "csv" if path.lower().rstrip("/").endswith(".csv") else "parquet"
    if fmt == "csv":
        header = tuple(spark.read.option("header", True).csv(path).columns)
    else:
        header = tuple(spark.read.parquet(path).columns)
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.schema(_csv_schema(header)).option("header", True).option("escape", '"')
    raw = reader.load(path)
    df = raw.select(
        *[F.col(f"`{c}`") for c in raw.columns if c in COLUMNS],
        (_not_utf8(raw.columns) if fmt == "csv" else F.lit(False)).alias(NOT_UTF8),
        F.lit(0).alias("_file"),
        F.col("_metadata.file_path").alias("_path"),
        F.col("_metadata.file_block_start").alias("_blk"),
        F.monotonically_increasing_id().alias("_mid"),
    )
    unknown = TraceFile(pafs.LocalFileSystem(), path, path)  # only Spark opens it
    return FileGroup(fmt, [(0, unknown)], header), df
