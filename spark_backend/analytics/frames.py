"""Small helpers between Spark, Arrow and pandas, shared by the analytics modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["by_name", "concat_batches", "python_scalar", "session_of", "to_pandas"]


def session_of(df: DataFrame) -> Any:
    """The SparkSession of ``df``."""
    return df.sparkSession


def to_pandas(df: DataFrame) -> pd.DataFrame:
    """``df.toPandas()`` (Arrow), typed."""
    return cast(pd.DataFrame, df.toPandas())


def python_scalar(x: Any) -> Any:
    """A numpy scalar as the Python value (holders are compared and keyed as such)."""
    return x.item() if isinstance(x, np.generic) else x


def by_name(name: str) -> Column:
    """A column by its exact name (strategy names hold ':' and '.')."""
    return F.col("`" + name.replace("`", "``") + "`")


def concat_batches(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    """The non-empty batches of a ``mapInArrow`` task as one table (None if none)."""
    got = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(got) if got else None
