"""Who holds the static-partitions perfect watermark back, over processing time (µs).

Under the static-partitions perfect watermark each partition (or key) ``p`` has the
watermark ``W_p(t)``, the minimum event time of its elements arriving after ``t`` (its
next unread event time when its log is time-ordered), and ``W(t) = min_p W_p(t)``
(:func:`~theory.watermarks.perfect.perfect_curve` is its value). The holder at ``t`` is
the argmin: the smallest ``(event_time, holder)`` arriving after ``t``, ties going to the
smallest holder id. It is constant between consecutive arrival times.

:func:`holder_runs` finds the maximal runs of one holder over a chunk of arrivals (a
bucket of an arrival-time-bucketed trace, see ``spark_backend.analytics.holdback``): what
arrives after the chunk enters as ``carry``, the smallest ``(event_time, holder)`` of the
later chunks, and the chunk's last interval ends at ``next_arrival``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from theory.watermarks.buckets import equal_runs

__all__ = ["HolderRuns", "holder_runs"]

#: Runs as three lists: holders, starts and ends (µs, ``[start, end)``), by start.
HolderRuns = tuple[list[Any], list[int], list[int]]


def holder_runs(
    arrival_time: np.ndarray,
    event_time: np.ndarray,
    holder: np.ndarray,
    carry: tuple[int, Any] | None = None,
    next_arrival: int | None = None,
) -> HolderRuns:
    """The runs ``(holder, start, end)`` of the holder over the intervals between the
    chunk's consecutive arrival times (module docstring), joined where one holder holds
    adjacent intervals. ``arrival_time`` must be sorted (rows with equal arrival times
    may come in any order); ``holder`` ids must be ordered (ints or strings).

    After the last arrival the holder is the ``carry``'s until ``next_arrival``; with no
    ``next_arrival`` nothing is left to arrive, so there is no holder and no run."""
    times, _, ends = equal_runs(arrival_time)
    if arrival_time.size == 0:
        return [], [], []
    who, known = _holders_after_each_arrival(event_time, holder, ends, carry)
    stop = np.empty(times.size, dtype=np.int64)
    stop[:-1] = times[1:]
    if next_arrival is None:
        known[-1] = False  # after the last arrival nothing is left: no holder
        stop[-1] = times[-1]
    else:
        stop[-1] = next_arrival
    sel = np.flatnonzero(known)
    if sel.size == 0:
        return [], [], []
    hs, st, en = who[sel], times[sel], stop[sel]
    brk = np.flatnonzero(np.asarray(hs[1:] != hs[:-1], dtype=bool) | (st[1:] != en[:-1])) + 1
    first = np.concatenate(([0], brk))
    last = np.concatenate((brk, [sel.size])) - 1
    return hs[first].tolist(), st[first].tolist(), en[last].tolist()


def _holders_after_each_arrival(
    e: np.ndarray, h: np.ndarray, ends: np.ndarray, carry: tuple[int, Any] | None
) -> tuple[np.ndarray, np.ndarray]:
    """The holder of the smallest ``(event_time, holder)`` arriving after each arrival
    time (the chunk's later rows or the carry), and whether there is one."""
    m = e.size
    order = np.lexsort((h, e))
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m)
    best = np.minimum.accumulate(rank[::-1])[::-1]  # rank of the (e, h)-min of rows i..
    idx = np.append(best, m)[ends]  # m = "no local row"
    has_local = idx < m
    safe = np.where(has_local, idx, 0)
    le, lh = e[order[safe]], h[order[safe]]
    holder = np.empty(ends.size, dtype=object if h.dtype == object else h.dtype)
    known = has_local.copy()
    holder[has_local] = lh[has_local]
    if carry is not None:
        ce, ch = carry
        use_carry = ~has_local | (ce < le) | ((ce == le) & np.asarray(ch < lh, dtype=bool))
        holder[use_carry] = ch
        known |= use_carry
    return holder, known
