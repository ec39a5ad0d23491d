"""The columns of a source trace, checked and in arrival order, for the vectorised curves.

A source trace is three columns of one length: ``event_time`` and ``arrival_time``
(µs timestamps) and an optional integer ``partition``. The curves read the elements in
arrival (processing-time) order, ties in trace order (a stable sort), as the
incremental generators observe them.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import stable_order
from theory.columns import int_column, same_length, time_column
from theory.series import StepSeries
from theory.time import MIN_TIMESTAMP

__all__ = ["by_arrival", "empty_curve", "partitions_or_zero", "source_columns"]


def source_columns(
    event_time: ArrayLike | None, arrival_time: ArrayLike, partition: ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The checked int64 columns ``(event_time, arrival_time, partition)``.

    ``event_time`` None means ingress (the arrival times); ``partition`` stays None when
    not given. Errors follow :mod:`theory.columns` and name the column."""
    a = time_column(arrival_time, "arrival_time")
    e = a if event_time is None else time_column(event_time, "event_time")
    p = None if partition is None else int_column(partition, "partition")
    same_length("arrival_time", a.size, event_time=e, partition=p)
    return e, a, p


def by_arrival(
    e: np.ndarray, a: np.ndarray, p: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The columns stably sorted by arrival time (no copy when already sorted)."""
    order = stable_order(a)
    if order is None:
        return e, a, p
    return e[order], a[order], None if p is None else p[order]


def partitions_or_zero(p: np.ndarray | None, n: int) -> np.ndarray:
    """The partition column, or one partition 0 for all ``n`` elements when None."""
    return np.zeros(n, dtype=np.int64) if p is None else p


def empty_curve() -> StepSeries:
    """The curve of an empty trace: no steps, ``MIN_TIMESTAMP`` throughout."""
    return StepSeries(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), MIN_TIMESTAMP)
