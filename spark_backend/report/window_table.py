"""``windows.parquet``: the comparison's per-window results, one row per strategy and
(key, fixed window), as ``analyze`` and ``demo`` write them (both engines alike).

Columns (times and durations integer µs, exact; each time with its ISO-8601 UTC string
beside it; null where a window never fires): ``strategy``, ``key``, ``window_start_us``
/ ``_utc``, ``window_end_us`` / ``_utc``, ``elements`` (rows the window eventually
receives), ``first_fire_time_us`` / ``_utc`` (its first pane), ``count_at_first_firing``,
``final_count`` (rows in its last pane), ``completeness_at_first_firing``
(``count_at_first_firing / elements``), ``latency_us`` (``first_fire_time - window_end``)
and ``fired_by_end_of_input`` (docs/semantics.md, "End of input").
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from spark_backend.report.tables import time_cell

__all__ = ["COLUMNS", "utc_strings", "window_table"]

#: The columns of ``windows.parquet``, in order.
COLUMNS = (
    "strategy", "key", "window_start_us", "window_start_utc", "window_end_us",
    "window_end_utc", "elements", "first_fire_time_us", "first_fire_time_utc",
    "count_at_first_firing", "final_count", "completeness_at_first_firing", "latency_us",
    "fired_by_end_of_input",
)


def utc_strings(us: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """ISO-8601 UTC strings of the µs times (``inf``/``-inf`` at the bounds) where
    ``valid`` (None: everywhere), null elsewhere; each distinct time formatted once."""
    uniq, inverse = np.unique(us, return_inverse=True)
    text = np.array([time_cell(int(v)) for v in uniq], dtype=object)[inverse.reshape(-1)]
    return pa.array(text, pa.string(), mask=None if valid is None else ~valid)


def _int(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    """int64 where ``valid``, null elsewhere."""
    return pa.array(values.astype(np.int64), pa.int64(), mask=~valid)


def window_table(frame: pd.DataFrame) -> pa.Table:
    """``windows.parquet`` of :func:`spark_backend.analytics.windows.windows`'s frame
    (the local engine builds the same frame)."""
    start = frame["window_start"].to_numpy(np.int64)
    end = frame["window_end"].to_numpy(np.int64)
    fire = frame["fire_time"].to_numpy(np.int64)
    fired = fire != -1
    always = np.ones(start.size, dtype=bool)
    cols = {
        "strategy": pa.array(frame["strategy"].astype(str).tolist(), pa.string()),
        "key": pa.array(frame["key"].tolist()),
        "window_start_us": _int(start, always),
        "window_start_utc": utc_strings(start),
        "window_end_us": _int(end, always),
        "window_end_utc": utc_strings(end),
        "elements": _int(frame["elements"].to_numpy(np.int64), always),
        "first_fire_time_us": _int(fire, fired),
        "first_fire_time_utc": utc_strings(fire, fired),
        "count_at_first_firing": _int(frame["first_pane"].to_numpy(np.int64), always),
        "final_count": _int(frame["final_pane"].to_numpy(np.int64), always),
        "completeness_at_first_firing": pa.array(
            frame["completeness"].to_numpy(np.float64), pa.float64()
        ),
        "latency_us": _int(np.where(fired, fire - end, 0), fired),
        "fired_by_end_of_input": pa.array(
            frame["fired_by_end_of_input"].to_numpy(bool), pa.bool_()
        ),
    }
    return pa.table(cols)
