"""Which CSV files Spark may read line by line, split across tasks, and still read as
pyarrow (theory's reader) reads them.

Spark's CSV reader reads a quoted newline only with ``multiLine``, which reads each file
in one task. A file whose every line is *plain* (each field unquoted and free of ``"``,
or quoted and closed on the same line) reads the same either way. So a file no larger
than Spark's largest split (``spark.sql.files.maxPartitionBytes``, 128 MiB by default)
is read whole, and a larger one is first scanned for a line that is not plain (one
Spark job over the text, no Python worker): a plain file is read line by line, in as
many tasks as it has splits; any other keeps ``multiLine``. (Below a split's size the
scan does not pay: ``bench/csv_read.py``.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

__all__ = ["DEFAULT_PARTITION_BYTES", "PLAIN_LINE", "max_partition_bytes", "not_plain_files"]

LOG = logging.getLogger(__name__)

_FIELD: Final[str] = r'(?:"(?:[^"]++|"")*+"|[^",\r\n]*+)'  # quoted first
#: A line (as Spark's text reader gives it, without its end) that holds no quoted
#: newline and no stray quote, under pyarrow's and Spark's CSV rules.
PLAIN_LINE: Final[str] = rf"^{_FIELD}(?:,{_FIELD})*+\r?$"


def max_partition_bytes(spark: SparkSession) -> int:
    """``spark.sql.files.maxPartitionBytes`` in bytes: Spark's largest split. A file no
    larger is read whole (one task at most costs one split's time); a larger one is
    worth the text scan. Without the JVM's conf (Spark Connect), Spark's default."""
    try:
        conf = spark._jsparkSession.sessionState().conf()  # the SQLConf Spark uses itself
        return int(conf.filesMaxPartitionBytes())
    except AttributeError:  # a Spark Connect session has no JVM here
        return DEFAULT_PARTITION_BYTES


#: Spark's default ``spark.sql.files.maxPartitionBytes``.
DEFAULT_PARTITION_BYTES: Final[int] = 128 << 20


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
