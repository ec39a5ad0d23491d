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
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from theory.data.errors import TraceError
from theory.data.io import CSV_NULLS, trace_format
from theory.data.schema import COLUMNS

__all__ = ["FileGroup", "file_groups", "is_remote", "read_group", "read_remote"]


@dataclass
class FileGroup:
    """Files read by one Spark reader: same format and the same columns and types."""

    fmt: str
    files: list[tuple[int, Path]]  # (file index, path)
    header: tuple[str, ...]  # CSV header or Parquet column names


def is_remote(path: str) -> bool:
    """True for a URI Spark reads itself (hdfs://, s3a://, ...), not a local path."""
    return "://" in path and not path.startswith("file://")


def file_groups(files: list[Path]) -> list[FileGroup]:
    """``files`` (in reading order) grouped by format and header; TraceError for an empty
    or unreadable file."""
    groups: dict[tuple[str, tuple[str, ...]], FileGroup] = {}
    for i, f in enumerate(files):
        fmt = trace_format(f)
        header = _csv_header(f) if fmt == "csv" else _parquet_header(f)
        groups.setdefault((fmt, header), FileGroup(fmt, [], header)).files.append((i, f))
    return list(groups.values())


def _csv_header(path: Path) -> tuple[str, ...]:
    if path.stat().st_size == 0:
        raise TraceError("empty file: no header and no rows", path=str(path))
    with path.open(newline="", encoding="utf-8-sig") as fh:
        row = next(csv.reader(fh), [])
    if not row:
        raise TraceError("empty file: no header and no rows", path=str(path))
    return tuple(row)


def _parquet_header(path: Path) -> tuple[str, ...]:
    if path.stat().st_size == 0:
        raise TraceError("empty file: not a Parquet file (0 bytes)", path=str(path))
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise TraceError(f"not a readable Parquet file: {err}", path=str(path)) from None
    return tuple(f"{f.name}:{f.type}" for f in schema if f.name in COLUMNS)


def _csv_schema(header: tuple[str, ...]) -> T.StructType:
    return T.StructType([T.StructField(c, T.StringType(), True) for c in header])


def read_group(spark: SparkSession, g: FileGroup) -> DataFrame:
    """The trace columns of a group's files, with ``_file`` (index), ``_blk`` (block
    start) and ``_mid`` (monotonically increasing id)."""
    paths = [str(p) for _, p in g.files]
    if g.fmt == "csv":
        reader = (
            spark.read.schema(_csv_schema(g.header))
            .option("header", True)
            .option("enforceSchema", True)
            .option("escape", '"')
            .option("mode", "PERMISSIVE")
        )
        df = reader.csv(paths)
    else:
        df = spark.read.parquet(*paths)
    names = F.create_map(*[x for i, p in g.files for x in (F.lit(p.name), F.lit(i))])
    return df.select(
        *[_raw(c, g.fmt) for c in df.columns if c in COLUMNS],
        F.element_at(names, F.col("_metadata.file_name")).cast("int").alias("_file"),
        F.col("_metadata.file_block_start").alias("_blk"),
        F.monotonically_increasing_id().alias("_mid"),
    )


def _raw(c: str, fmt: str) -> Column:
    raw = F.col(f"`{c}`")
    if fmt != "csv":
        return raw
    # the strings pyarrow's CSV reader takes as null (theory reads CSV with pyarrow)
    return F.when(raw.isin(*CSV_NULLS), F.lit(None).cast("string")).otherwise(raw).alias(c)


def read_remote(spark: SparkSession, path: str) -> tuple[FileGroup, DataFrame]:
    """A non-local dataset (one format, one schema) as one group, read by Spark; rows
    also carry ``_path``, the file Spark read them from."""
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
        F.lit(0).alias("_file"),
        F.col("_metadata.file_path").alias("_path"),
        F.col("_metadata.file_block_start").alias("_blk"),
        F.monotonically_increasing_id().alias("_mid"),
    )
    return FileGroup(fmt, [(0, Path(path))], header), df
