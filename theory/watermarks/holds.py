"""Hold series: the minimum timestamp of the work in flight, as a step function.

Given work items that are in a stage over processing-time intervals ``[arrive, depart)``
(µs) and hold at ``timestamp`` (event time, µs) while there, :func:`inflight_min` is the
exact step function ``t -> min(timestamp of items with arrive <= t < depart)``, with
``MAX_TIMESTAMP`` when nothing is in flight. This is the output-buffer hold of a stage.
"""

from __future__ import annotations

import heapq

import numpy as np

from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP


def inflight_min(arrive: np.ndarray, depart: np.ndarray, timestamp: np.ndarray) -> StepSeries:
    """Exact minimum over in-flight items (see the module docstring).

    Items with ``depart <= arrive`` are never in flight. When departures are in arrival
    order (FIFO), the in-flight set is a contiguous run and a vectorised sparse-table
    range minimum is used; otherwise a heap sweep gives the same answer.
    """
    a = np.asarray(arrive, dtype=np.int64)
    d = np.asarray(depart, dtype=np.int64)
    ts = np.asarray(timestamp, dtype=np.int64)
    keep = d > a
    if not bool(np.any(keep)):
        return StepSeries(np.empty(0, np.int64), np.empty(0, np.int64), MAX_TIMESTAMP)
    a, d, ts = a[keep], d[keep], ts[keep]
    order = np.argsort(a, kind="stable")
    a, d, ts = a[order], d[order], ts[order]
    if d.size > 1 and bool(np.any(d[1:] < d[:-1])):
        return _heap_sweep(a, d, ts)
    times = np.unique(np.concatenate((a, d)))
    hi = np.searchsorted(a, times, side="right")  # items [0, hi) have arrived
    lo = np.searchsorted(d, times, side="right")  # items [0, lo) have left
    values = np.full(times.size, MAX_TIMESTAMP, dtype=np.int64)
    nonempty = lo < hi
    if bool(np.any(nonempty)):
        values[nonempty] = _range_min(ts, lo[nonempty], hi[nonempty])
    return StepSeries(times, values, MAX_TIMESTAMP).compressed()


def _range_min(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """min(x[lo[i]:hi[i]]) for every i (all ranges non-empty), by a sparse table."""
    length = hi - lo
    levels = int(np.max(length)).bit_length()
    table = [x]
    for k in range(1, levels):
        prev = table[-1]
        half = 1 << (k - 1)
        table.append(np.minimum(prev[:-half], prev[half:]))
    k = np.floor(np.log2(length)).astype(np.int64)
    out = np.empty(lo.size, dtype=np.int64)
    for level in np.unique(k):
        sel = k == level
        row = table[int(level)]
        l_sel = lo[sel]
        r_sel = hi[sel] - (1 << int(level))
        out[sel] = np.minimum(row[l_sel], row[r_sel])
    return out


def _heap_sweep(a: np.ndarray, d: np.ndarray, ts: np.ndarray) -> StepSeries:
    """The general (non-FIFO) case: sweep events in time order with a lazy-deletion heap."""
    times = np.unique(np.concatenate((a, d)))
    by_depart = np.argsort(d, kind="stable")
    heap: list[tuple[int, int]] = []
    gone = np.zeros(a.size, dtype=bool)
    values = np.empty(times.size, dtype=np.int64)
    ia = idp = 0
    for j, t in enumerate(times.tolist()):
        while ia < a.size and a[ia] <= t:
            heapq.heappush(heap, (int(ts[ia]), ia))
            ia += 1
        while idp < d.size and d[by_depart[idp]] <= t:
            gone[by_depart[idp]] = True
            idp += 1
        while heap and gone[heap[0][1]]:
            heapq.heappop(heap)
        values[j] = heap[0][0] if heap else MAX_TIMESTAMP
    return StepSeries(times, values, MAX_TIMESTAMP).compressed()
