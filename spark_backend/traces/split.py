"""Which CSV files Spark may read line by line, split across tasks, and still read as
pyarrow (theory's reader) reads them.

Spark's CSV reader reads a quoted newline only with ``multiLine``, which reads each file
in one task. A file whose every line is *plain* (each field unquoted and free of ``"``,
or quoted and closed on the same line) reads the same either way. So a file small
enough to be one split anyway is read whole, and a larger one is first scanned for a
line that is not plain (one Spark job over the text, no Python worker): a plain file is
read line by line, in as many tasks as it has splits; any other keeps ``multiLine``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

__all__ = ["PLAIN_LINE", "SMALLEST_SPLIT", "max_split_bytes", "not_plain_files"]

LOG = logging.getLogger(__name__)

_FIELD: Final[str] = r'(?:"(?:[^"]++|"")*+"|[^",\r\n]*+)'  # quoted first
#: A line (as Spark's text reader gives it, without its end) that holds no quoted
#: newline and no stray quote, under pyarrow's and Spark's CSV rules.
PLAIN_LINE: Final[str] = rf"^{_FIELD}(?:,{_FIELD})*+\r?$"


def max_split_bytes(spark: SparkSession, sizes: Sequence[int]) -> int:
    """The bytes per split Spark's file sources use for files of ``sizes``
    (``FilePartition.maxSplitBytes``): a file no larger is read in one task. Without
    the JVM's conf (Spark Connect), Spark's smallest split: its default open cost."""
    try:
        conf = spark._jsparkSession.sessionState().conf()  # the SQLConf Spark uses itself
        open_cost = int(conf.filesOpenCostInBytes())
        most = int(conf.filesMaxPartitionBytes())
        given = conf.filesMinPartitionNum()
        parallel = (
            int(given.get()) if given.isDefined() else spark.sparkContext.defaultParallelism
        )
    except AttributeError:  # a Spark Connect session has no JVM here
        return SMALLEST_SPLIT
    per_core = sum(s + open_cost for s in sizes) // max(1, parallel)
    return min(most, max(open_cost, per_core))


#: Spark's default ``spark.sql.files.openCostInBytes``, below which it never splits.
SMALLEST_SPLIT: Final[int] = 4 << 20


def not_plain_files(spark: SparkSession, paths: Sequence[str]) -> set[str]:
    """The ``_metadata.file_name`` of each of ``paths`` (CSV) with a line that is not
    :data:`PLAIN_LINE`: one Spark job over the files' text, split across tasks."""
    if not paths:
        return set()
    text = spark.read.text(list(paths))
    rows = (
        text.where(~F.col("value").rlike(PLAIN_LINE))
        .select(F.col("_metadata.file_name").alias("name"))
        .distinct()
        .collect()
    )
    found = {str(r["name"]) for r in rows}
    LOG.info(
        "CSV: %d of %d large files read line by line in splits; %d with quoted newlines "
        "(or stray quotes) read whole",
        len(paths) - len(found),
        len(paths),
        len(found),
    )
    return found
