"""A trace DataFrame collected to the driver as a :class:`theory.data.trace.Trace`."""

from __future__ import annotations

import numpy as np
from pyspark.sql import DataFrame

from theory.data.trace import Trace

__all__ = ["to_trace"]


def to_trace(df: DataFrame) -> Trace:
    """Collect a trace DataFrame (the columns of :mod:`theory.data.schema`) through Arrow."""
    table = df.toArrow()
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
    key = cols.get("key", np.zeros(table.num_rows, dtype=np.int64))
    if key.dtype.kind not in "iu":
        key = key.astype(object)
    return Trace(
        cols["event_time"].astype(np.int64),
        cols["arrival_time"].astype(np.int64),
        key,
        cols.get("value", np.ones(table.num_rows)),
        cols["partition"].astype(np.int64) if "partition" in cols else None,
        cols["publish_time"].astype(np.int64) if "publish_time" in cols else None,
    )
