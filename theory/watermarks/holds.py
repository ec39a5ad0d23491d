"""Hold series: the minimum timestamp of the work in flight, as a step function.

Given work items that are in a stage over processing-time intervals ``[arrive, depart)``
(µs) and hold at ``timestamp`` (event time, µs) while there, :func:`inflight_min` is the
exact step function ``t -> min(timestamp of items with arrive <= t < depart)``, with
``MAX_TIMESTAMP`` when nothing is in flight. This is the output-buffer hold of a stage.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import range_min, sorted_union
from theory.columns import int_column, same_length
from theory.series import StepSeries
from theory.structures import Frontier
from theory.time import MAX_TIMESTAMP

__all__ = ["inflight_min"]


def inflight_min(arrive: ArrayLike, depart: ArrayLike, timestamp: ArrayLike) -> StepSeries:
    """Exact minimum over in-flight items (see the module docstring).

    Items with ``depart <= arrive`` are never in flight. When departures are in arrival
    order (FIFO), the in-flight set is a contiguous run and a vectorised sparse-table
    range minimum is used; otherwise a sweep over a :class:`Frontier` of the holds gives
    the same answer. Columns are 1-d integers of one length (:mod:`theory.columns`).
    """
    a = int_column(arrive, "arrive")
    d = int_column(depart, "depart")
    ts = int_column(timestamp, "timestamp")
    same_length("arrive", a.size, depart=d, timestamp=ts)
    keep = d > a
    if not bool(np.any(keep)):
        return StepSeries(np.empty(0, np.int64), np.empty(0, np.int64), MAX_TIMESTAMP)
    a, d, ts = a[keep], d[keep], ts[keep]
    order = np.argsort(a, kind="stable")
    a, d, ts = a[order], d[order], ts[order]
    times = sorted_union((a, d))
    if d.size > 1 and bool(np.any(d[1:] < d[:-1])):
        values = _frontier_sweep(times, a, d, ts)
    else:
        values = _fifo_values(times, a, d, ts)
    return StepSeries(times, values, MAX_TIMESTAMP).compressed()


def _fifo_values(times: np.ndarray, a: np.ndarray, d: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """FIFO (``a`` and ``d`` sorted): the items in flight at ``t`` are a contiguous run."""
    hi = np.searchsorted(a, times, side="right")  # items [0, hi) have arrived
    lo = np.searchsorted(d, times, side="right")  # items [0, lo) have left
    values = np.full(times.size, MAX_TIMESTAMP, dtype=np.int64)
    nonempty = lo < hi
    if bool(np.any(nonempty)):
        values[nonempty] = range_min(ts, lo[nonempty], hi[nonempty])
    return values


def _frontier_sweep(times: np.ndarray, a: np.ndarray, d: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The general (non-FIFO) case: at each of ``times`` take the holds of the items that
    arrived and release those of the items that left, then read the frontier.

    Faster than a lazy-deletion heap sweep, also when items share timestamps (as panes
    at a window's end do)."""
    by_depart = np.argsort(d, kind="stable")
    taken = ts.tolist()
    released = ts[by_depart].tolist()
    arrived = np.searchsorted(a, times, side="right").tolist()
    departed = np.searchsorted(d[by_depart], times, side="right").tolist()
    holds = Frontier()
    add, retract = holds.add, holds.retract
    values: list[int] = []
    ia = idp = 0
    for ea, ed in zip(arrived, departed, strict=True):
        for x in taken[ia:ea]:
            add(x)
        for x in released[idp:ed]:
            retract(x)
        ia, idp = ea, ed
        values.append(holds.min(MAX_TIMESTAMP))
    return np.array(values, dtype=np.int64)
