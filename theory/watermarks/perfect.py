"""Perfect source watermarks (µs): ingress timestamping, the perfect watermark of a
finite trace (and its uncapped oracle), and a static set of partitions.

A perfect watermark is never passed by data: no element arrives with an event time
below the watermark at its arrival (docs/semantics.md, "Source watermarks"). It knows every
event that has happened and none that has not, so it never passes the clock: at an
arrival time ``t``, ``W(t) <= t`` (ingress, exact at ``t + 1``, is the one exception:
every later element is stamped later). The *oracle* (``perfect:oracle``) drops that cap
and knows the future events too; it is for research only. Each has a vectorised
``*_curve`` and an incremental generator (:class:`LatchedWatermark`) that give the same
answers (package docstring).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import group_last, sorted_unique, stable_argsort_int
from theory.columns import check_timestamp, time_column
from theory.series import StepSeries
from theory.structures import Frontier
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.latch import LatchedWatermark
from theory.watermarks.source_trace import (
    by_arrival,
    empty_curve,
    partitions_or_zero,
    source_columns,
)

__all__ = [
    "IngressWatermark",
    "PerfectWatermark",
    "StaticPartitionsWatermark",
    "ingress_curve",
    "ingress_timestamps",
    "perfect_curve",
    "perfect_oracle_curve",
    "static_partitions_curve",
]


# --------------------------------------------------------------------------- ingress


def ingress_timestamps(arrival_time: ArrayLike) -> np.ndarray:
    """Ingress timestamping: each element's event time is its arrival time (µs, int64)."""
    return time_column(arrival_time, "arrival_time").copy()


def ingress_curve(arrival_time: ArrayLike) -> StepSeries:
    """Perfect watermark under ingress timestamping: ``W(t) = t + 1`` at each arrival ``t``.

    After the elements arriving at ``t`` are emitted, every later element is stamped with
    a later arrival time ``>= t + 1``, so ``t + 1`` is exact (capped at MAX_TIMESTAMP).
    Between arrivals the true value keeps rising with the clock; see
    :meth:`IngressWatermark.advance_to`.
    """
    a = time_column(arrival_time, "arrival_time")
    if a.size == 0:
        return empty_curve()
    times = sorted_unique(a)
    return StepSeries(times, np.minimum(times + 1, MAX_TIMESTAMP), MIN_TIMESTAMP)


class IngressWatermark(LatchedWatermark):
    """Incremental :func:`ingress_curve`. ``event_time`` is ignored: ingress re-stamps
    every element with its ``arrival_time``."""

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        a = self._check_arrival(arrival_time)
        self._latch(min(a + 1, MAX_TIMESTAMP))

    def _on_advance(self, t: int) -> None:
        self._latch(min(t + 1, MAX_TIMESTAMP))


# --------------------------------------------------------------------------- perfect oracle


def _suffix_min(e: np.ndarray) -> np.ndarray:
    """``out[i] = min(e[i:])`` (µs), with ``out[len(e)] = MAX_TIMESTAMP`` (nothing left)."""
    suffix = np.empty(e.size + 1, dtype=np.int64)
    suffix[-1] = MAX_TIMESTAMP
    if e.size:  # (written in place, from the end: no temporary)
        np.minimum.accumulate(e[::-1], out=suffix[-2::-1])
    return suffix


def perfect_oracle_curve(
    event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
) -> StepSeries:
    """The uncapped oracle over a finite trace (``perfect:oracle``, research only):
    ``W(t) = min event_time over elements arriving > t`` (µs), ``MAX_TIMESTAMP`` once
    nothing remains. It knows events that have not happened yet, so it can run ahead of
    processing time (and windows can fire before they end). No element is ever late
    against it. ``partition`` is accepted for a uniform signature and ignored.
    """
    return _perfect(event_time, arrival_time, partition, capped=False)


def perfect_curve(
    event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
) -> StepSeries:
    """The perfect watermark of a finite trace (µs): at each arrival time ``t``,
    ``W(t) = min(t, min event_time over elements arriving > t)``.

    It never passes the clock (``W(t) <= t``: an event with a later time has not
    happened), so no window fires before its end and no latency is negative; it is
    never passed by data either (an element arriving after ``t`` with event time below
    ``t`` had happened by ``t``). ``partition`` is ignored. See
    :func:`perfect_oracle_curve` for the uncapped form.
    """
    return _perfect(event_time, arrival_time, partition, capped=True)


def _perfect(
    event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None, *, capped: bool
) -> StepSeries:
    e, a, _ = source_columns(event_time, arrival_time, partition)
    if a.size == 0:
        return empty_curve()
    e_s, a_s, _ = by_arrival(e, a)
    last = group_last(a_s)
    times = a_s[last]
    last += 1  # (group_last's own array) the suffix after each arrival time
    values = _suffix_min(e_s)[last]
    if capped:
        np.minimum(values, times, out=values)
    return StepSeries(times, values, MIN_TIMESTAMP)


class PerfectWatermark(LatchedWatermark):
    """Incremental :func:`perfect_curve` (``oracle=True``: :func:`perfect_oracle_curve`),
    built from the whole trace.

    After each element: the minimum event time of the elements not yet observed (µs),
    capped at the element's arrival time unless ``oracle``. Elements must be observed in
    arrival order, each exactly once; within one arrival time any order is accepted.
    Like the curve, the value moves only at arrivals (``advance_to`` changes nothing).
    """

    def __init__(
        self, event_time: ArrayLike, arrival_time: ArrayLike, *, oracle: bool = False
    ) -> None:
        super().__init__()
        if not isinstance(oracle, bool):
            raise TypeError(f"oracle must be a bool, got {oracle!r}")
        self.oracle = oracle
        e, a, _ = source_columns(event_time, arrival_time)
        order = np.lexsort((e, a))
        self._e = e[order]  # by arrival, then event time within an arrival time
        a_s = a[order]
        self._suffix = _suffix_min(self._e)
        self._ends = group_last(a_s) + 1  # end of each arrival time's run in self._e
        self._times = a_s[self._ends - 1]  # the distinct arrival times
        self._group = -1  # the arrival time being observed
        self._start = 0
        self._end = 0
        self._pos = 0  # first element of the group not yet observed (by event time)
        self._left: Counter[int] = Counter()  # the group's unobserved event times

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        e = check_timestamp(event_time, "event_time")
        a = self._check_arrival(arrival_time, commit=False)
        if self._group < 0 or a != int(self._times[self._group]):
            self._next_group(a)
        if self._left[e] == 0:
            raise ValueError(
                f"element (event_time={e}, arrival_time={a}) is not in the oracle's trace "
                "or was already observed"
            )
        self._commit_arrival(a)
        self._left[e] -= 1
        while self._pos < self._end and self._left[int(self._e[self._pos])] == 0:
            self._pos += 1
        head = int(self._e[self._pos]) if self._pos < self._end else MAX_TIMESTAMP
        unread = min(head, int(self._suffix[self._end]))
        self._latch(unread if self.oracle else min(unread, a))

    def _next_group(self, a: int) -> None:
        """Start the next arrival time, ``a``; refuse it if the trace says otherwise."""
        if self._group >= 0 and self._pos < self._end:
            raise ValueError(
                f"arrival_time={a} µs, but element event_time={int(self._e[self._pos])} arriving "
                f"at {int(self._times[self._group])} µs was never observed"
            )
        g = self._group + 1
        if g >= self._times.size or int(self._times[g]) != a:
            what = (
                "the trace has no more elements"
                if g >= self._times.size
                else (f"the next elements arrive at {int(self._times[g])} µs")
            )
            raise ValueError(f"arrival_time={a} µs does not match the oracle's trace: {what}")
        self._group = g
        self._start = self._end
        self._end = int(self._ends[g])
        self._pos = self._start
        self._left = Counter(self._e[self._start : self._end].tolist())


# --------------------------------------------------------------------------- static partitions


def _partition_logs(e_s: np.ndarray, p_s: np.ndarray) -> dict[int, np.ndarray]:
    """Per-partition event times in arrival order (the partitions' logs)."""
    if p_s.size == 0:
        return {}
    po = stable_argsort_int(p_s)
    pe, pp = e_s[po], p_s[po]
    starts = np.concatenate(([0], np.flatnonzero(pp[1:] != pp[:-1]) + 1))
    ends = np.append(starts[1:], pp.size)
    return {int(pp[s]): pe[s:t] for s, t in zip(starts.tolist(), ends.tolist(), strict=True)}


def static_partitions_curve(
    event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
) -> StepSeries:
    """Static set of partitions known in full to the source: ``W(t) = min(t, min over
    partitions of the least event time not yet read from it)`` (µs; an exhausted
    partition counts as MAX_TIMESTAMP).

    Each partition's log is its elements in arrival order, in any event-time order: the
    source knows the whole static set, so it knows each log's least unread event time
    (on a time-ordered log, the next unread one). The minimum over partitions of their
    least unread event times is the least unread event time of the whole set, so the
    curve equals :func:`perfect_curve` whatever the partitioning
    (docs/semantics.md, "Static partitions").
    """
    e, a, p = source_columns(event_time, arrival_time, partition)
    return perfect_curve(e, a, p)


class StaticPartitionsWatermark(LatchedWatermark):
    """Incremental :func:`static_partitions_curve` over known logs.

    ``partition_logs`` maps partition id to its event times in log order (µs), in any
    event-time order. ``observe(e, a, p)`` must read the next unread element of ``p``.
    Each partition holds a :class:`~theory.structures.Frontier` at the least event time
    of its unread suffix (a suffix minimum of its log); the value is their minimum capped
    at the arrival time (it never passes the clock).
    """

    def __init__(self, partition_logs: Mapping[int, ArrayLike]) -> None:
        super().__init__()
        self._logs: dict[int, np.ndarray] = {}
        self._least: dict[int, np.ndarray] = {}  # least event time of log[c:], per c
        for part, log in partition_logs.items():
            arr = time_column(log, f"partition_logs[{part}]")
            self._logs[int(part)] = arr
            self._least[int(part)] = _suffix_min(arr)
        self._cursor = dict.fromkeys(self._logs, 0)
        # each partition holds at its least unread event time until it is exhausted
        self._heads = Frontier(int(self._least[p][0]) for p, log in self._logs.items() if log.size)

    @classmethod
    def from_trace(
        cls, event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
    ) -> StaticPartitionsWatermark:
        """Logs built from a trace: each partition's elements in (stable) arrival order."""
        e, a, p = source_columns(event_time, arrival_time, partition)
        e_s, _, p_s = by_arrival(e, a, p)
        return cls(_partition_logs(e_s, partitions_or_zero(p_s, e.size)))

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        e = check_timestamp(event_time, "event_time")
        part = int(partition)
        if part not in self._logs:
            raise ValueError(f"partition {part} is not one of the static partitions")
        log, c = self._logs[part], self._cursor[part]
        if c >= log.size:
            raise ValueError(f"partition {part} is exhausted ({log.size} elements), got {e} µs")
        if int(log[c]) != e:
            raise ValueError(
                f"partition {part}: the next unread element (index {c}) has event time "
                f"{int(log[c])} µs, got {e} µs"
            )
        a = self._check_arrival(arrival_time)
        self._cursor[part] = c + 1
        least = self._least[part]
        if c + 1 < log.size:
            self._heads.move(int(least[c]), int(least[c + 1]))
        else:
            self._heads.retract(int(least[c]))
        self._latch(min(self._heads.min(MAX_TIMESTAMP), a))
