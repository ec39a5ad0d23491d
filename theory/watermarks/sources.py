"""Source watermarks: perfect and heuristic generators, incremental and vectorised.

Conventions (all times int µs, see DESIGN.md "Time" and "Source watermarks"):

- A watermark ``W`` asserts that no more non-late data with event time ``< W`` will
  arrive (Beam's convention). Flink's ``<= W`` lives in :mod:`theory.flink.conventions`.
- Every watermark starts at ``MIN_TIMESTAMP`` and is latched monotonic:
  ``new = max(old, computed)``. A computed value below the current one is kept out and
  counted in ``regressions``.
- Elements are read in arrival (processing-time) order; ties keep their trace order (a
  stable sort). The watermark is recomputed and latched after every element; the value
  *at* processing time ``t`` is the one after the last element arriving at ``t`` (elements
  at ``t`` come first, then the watermark at ``t`` includes them).

Each generator has an incremental object (``observe`` / ``current`` / ``regressions`` /
``advance_to``) and a vectorised ``*_curve(event_time, arrival_time, partition=None, ...)``
returning a :class:`~theory.series.StepSeries` whose step times are the unique arrival
times (plus idle-expiry instants for :func:`dynamic_partitions_curve` with a timeout) and
whose values are the latched watermark at those times (:func:`percentile_source_curve`
also steps at event times: see there). Both give identical answers.

``advance_to(t)`` declares that processing time has reached ``t`` and that every element
arriving at or before ``t`` has been observed; later elements must arrive after ``t``.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import INT64_MAX, check_duration, check_timestamp, int_column, time_column
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, parse_duration
from theory.watermarks.percentile import PercentileWatermark, check_p, percentile_curve

__all__ = [
    "BoundedOutOfOrderness",
    "DynamicPartitionsWatermark",
    "IngressWatermark",
    "LatchedWatermark",
    "PercentileSourceWatermark",
    "PerfectWatermark",
    "SourceWatermark",
    "SourceWatermarkSpec",
    "StaticPartitionsWatermark",
    "bounded_out_of_orderness_curve",
    "dynamic_partitions_curve",
    "ingress_curve",
    "ingress_timestamps",
    "make_source_watermark",
    "parse_duration",
    "percentile_source_curve",
    "perfect_curve",
    "static_partitions_curve",
]

_EMPTY: Final[int] = INT64_MAX  # "no partition covers this slot" in _cover_min


# --------------------------------------------------------------------------- protocol


@runtime_checkable
class SourceWatermark(Protocol):
    """An incremental source watermark (event time, µs, Beam convention)."""

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        """Read one element (times in µs), in arrival order."""
        ...

    def current(self) -> int:
        """The latched watermark after everything observed so far (µs)."""
        ...

    @property
    def regressions(self) -> int:
        """How many computed values fell below the latched one (and were ignored)."""
        ...


class LatchedWatermark:
    """Base of the incremental generators: latching, regression count, processing clock.

    Subclasses implement :meth:`observe` and may override :meth:`_on_advance`.
    """

    def __init__(self) -> None:
        self._value: int = MIN_TIMESTAMP
        self.regressions: int = 0
        self._last_arrival: int | None = None
        self._sealed: int | None = None

    def current(self) -> int:
        """The latched watermark (µs); ``MIN_TIMESTAMP`` before any information."""
        return self._value

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        """Read one element (µs) in arrival order."""
        raise NotImplementedError

    def advance_to(self, processing_time: int) -> None:
        """Processing time reached ``processing_time`` (µs) with every element at or before
        it observed. Only generators whose value moves with time alone change."""
        t = check_timestamp(processing_time, "processing_time")
        for prev, what in ((self._last_arrival, "an element arrived"), (self._sealed, "advanced")):
            if prev is not None and t < prev:
                raise ValueError(
                    f"processing_time={t} µs goes back in time: already {what} at {prev} µs"
                )
        self._sealed = t
        self._on_advance(t)

    def _on_advance(self, t: int) -> None:
        """Hook for :meth:`advance_to`; the default changes nothing."""

    def _check_arrival(self, arrival_time: int, *, commit: bool = True) -> int:
        """Validate the arrival order; record it as the latest arrival when ``commit``."""
        a = check_timestamp(arrival_time, "arrival_time")
        if self._last_arrival is not None and a < self._last_arrival:
            raise ValueError(
                f"arrival_time={a} µs is before the previous arrival {self._last_arrival} µs: "
                "elements must be observed in arrival order"
            )
        if self._sealed is not None and a <= self._sealed:
            raise ValueError(
                f"arrival_time={a} µs is not after advance_to({self._sealed}): elements at or "
                "before that processing time were declared complete"
            )
        if commit:
            self._last_arrival = a
        return a

    def _latch(self, computed: int) -> None:
        if computed < self._value:
            self.regressions += 1
        else:
            self._value = computed


# --------------------------------------------------------------------------- array helpers


def _trace(
    event_time: ArrayLike | None, arrival_time: ArrayLike, partition: ArrayLike | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    a = time_column(arrival_time, "arrival_time")
    e = a if event_time is None else time_column(event_time, "event_time")
    if e.size != a.size:
        raise ValueError(f"event_time has {e.size} elements but arrival_time has {a.size}")
    p = None
    if partition is not None:
        p = int_column(partition, "partition")
        if p.size != a.size:
            raise ValueError(f"partition has {p.size} elements but arrival_time has {a.size}")
    return e, a, p


def _arrival_order(a: np.ndarray) -> np.ndarray | None:
    """Stable arrival order, or None when ``a`` is already sorted."""
    if a.size < 2 or bool(np.all(a[1:] >= a[:-1])):
        return None
    return np.argsort(a, kind="stable")


def _take(x: np.ndarray | None, order: np.ndarray | None) -> np.ndarray | None:
    if x is None or order is None:
        return x
    return x[order]


def _group_last(sorted_times: np.ndarray) -> np.ndarray:
    """Index of the last entry of each run of equal values in a sorted array."""
    brk = np.flatnonzero(sorted_times[1:] != sorted_times[:-1])
    return np.append(brk, sorted_times.size - 1)


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sort + dedupe; avoids np.unique's slow hash path)."""
    s = np.sort(x)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _stable_argsort_int(p: np.ndarray) -> np.ndarray:
    """Stable argsort of integer ids (one or two radix passes when they span < 2**32)."""
    if p.size == 0:
        return np.empty(0, dtype=np.intp)
    lo, hi = int(p.min()), int(p.max())
    if hi - lo < 1 << 16:
        return np.argsort((p - lo).astype(np.uint16), kind="stable")
    if hi - lo < 1 << 32:
        q = (p - lo).astype(np.uint32)
        first = np.argsort((q & 0xFFFF).astype(np.uint16), kind="stable")
        return first[np.argsort((q[first] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(p, kind="stable")


def _minus_clamped(x: np.ndarray, d: int) -> np.ndarray:
    """``max(x - d, MIN_TIMESTAMP)`` for ``x`` in [MIN, MAX] and ``d >= 0``, without overflow."""
    if d == 0:
        return x.copy()
    threshold = MIN_TIMESTAMP + d
    if threshold > MAX_TIMESTAMP:
        return np.full(x.shape, MIN_TIMESTAMP, dtype=np.int64)
    lifted = np.maximum(x, np.int64(threshold))
    if d <= INT64_MAX:
        return lifted - np.int64(d)
    return (lifted - np.int64(MAX_TIMESTAMP)) - np.int64(d - MAX_TIMESTAMP)


def _expiry(a: np.ndarray, timeout: int, limit: int) -> np.ndarray:
    """``a + timeout + 1`` where ``a <= limit = MAX - timeout - 1`` (garbage elsewhere)."""
    clipped = np.minimum(a, np.int64(limit))
    if timeout + 1 <= INT64_MAX:
        return clipped + np.int64(timeout + 1)
    return (clipped - np.int64(limit)) + np.int64(MAX_TIMESTAMP)  # limit < 0: no overflow


def _empty_series() -> StepSeries:
    return StepSeries(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), MIN_TIMESTAMP)


def _cover_min(lo: np.ndarray, hi: np.ndarray, val: np.ndarray, m: int) -> np.ndarray:
    """For each slot ``j`` in ``[0, m)``, the minimum ``val[i]`` over ``lo[i] <= j < hi[i]``.

    Slots no interval covers get ``_EMPTY``. An offline sparse table of range-chmin updates:
    each interval is two overlapping power-of-two blocks; levels are pushed down top to
    bottom. O(n + m log m) numpy work, one Python iteration per level.
    """
    out_empty = np.full(m, _EMPTY, dtype=np.int64)
    length = hi - lo
    keep = length > 0
    if not bool(np.all(keep)):
        lo, hi, val, length = lo[keep], hi[keep], val[keep], length[keep]
    if length.size == 0:
        return out_empty
    level = (np.frexp(length.astype(np.float64))[1] - 1).astype(np.int8)
    order = np.argsort(level, kind="stable")
    bounds = np.searchsorted(level[order], np.arange(int(level.max()) + 2))
    cur: np.ndarray | None = None
    for lev in range(int(level.max()), -1, -1):
        w = 1 << lev
        if cur is None:
            new = np.full(m - w + 1, _EMPTY, dtype=np.int64)
        else:  # cur[i] covers [i, i + 2w): push it to new[i] and new[i + w]
            k = cur.size
            new = np.empty(m - w + 1, dtype=np.int64)
            if k <= w:
                new[:k] = cur
                new[k:w] = _EMPTY
                new[w:] = cur
            else:
                new[:w] = cur[:w]
                np.minimum(cur[w:], cur[: k - w], out=new[w:k])
                new[k:] = cur[k - w :]
        sel = order[bounds[lev] : bounds[lev + 1]]
        if sel.size:
            v = val[sel]
            np.minimum.at(new, lo[sel], v)
            np.minimum.at(new, hi[sel] - w, v)
        cur = new
    assert cur is not None and cur.size == m
    return cur


# --------------------------------------------------------------------------- 1. ingress


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
        return _empty_series()
    times = _sorted_unique(a)
    return StepSeries(times, np.minimum(times + 1, MAX_TIMESTAMP), MIN_TIMESTAMP)


class IngressWatermark(LatchedWatermark):
    """Incremental :func:`ingress_curve`. ``event_time`` is ignored: ingress re-stamps
    every element with its ``arrival_time``."""

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        a = self._check_arrival(arrival_time)
        self._latch(min(a + 1, MAX_TIMESTAMP))

    def _on_advance(self, t: int) -> None:
        self._latch(min(t + 1, MAX_TIMESTAMP))


# --------------------------------------------------------------------------- 2. perfect oracle


def perfect_curve(
    event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
) -> StepSeries:
    """Oracle over a finite trace: ``W(t) = min event_time over elements arriving > t``.

    ``MAX_TIMESTAMP`` once nothing remains. No element is ever late against it.
    ``partition`` is accepted for a uniform signature and ignored.
    """
    e, a, _ = _trace(event_time, arrival_time, partition)
    if a.size == 0:
        return _empty_series()
    order = _arrival_order(a)
    e_s, a_s = _take(e, order), _take(a, order)
    assert e_s is not None and a_s is not None
    suffix = np.empty(e_s.size + 1, dtype=np.int64)
    suffix[-1] = MAX_TIMESTAMP
    suffix[:-1] = np.minimum.accumulate(e_s[::-1])[::-1]
    last = _group_last(a_s)
    return StepSeries(a_s[last], suffix[last + 1], MIN_TIMESTAMP)


class PerfectWatermark(LatchedWatermark):
    """Incremental :func:`perfect_curve`: an oracle that knows the whole trace.

    After each element: the minimum event time of the elements not yet observed (µs).
    Elements must be observed in arrival order, each exactly once; within one arrival
    time any order is accepted.
    """

    def __init__(self, event_time: ArrayLike, arrival_time: ArrayLike) -> None:
        super().__init__()
        e, a, _ = _trace(event_time, arrival_time, None)
        order = np.lexsort((e, a))
        self._e = e[order]
        a_s = a[order]
        self._suffix = np.empty(e.size + 1, dtype=np.int64)
        self._suffix[-1] = MAX_TIMESTAMP
        if e.size:
            self._suffix[:-1] = np.minimum.accumulate(self._e[::-1])[::-1]
        ends = _group_last(a_s) + 1 if a.size else np.empty(0, dtype=np.intp)
        self._times = a_s[ends - 1] if a.size else a_s
        self._ends = ends
        self._group = -1
        self._start = 0
        self._end = 0
        self._pos = 0
        self._left: Counter[int] = Counter()

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
        self._last_arrival = a
        self._left[e] -= 1
        while self._pos < self._end and self._left[int(self._e[self._pos])] == 0:
            self._pos += 1
        head = int(self._e[self._pos]) if self._pos < self._end else MAX_TIMESTAMP
        self._latch(min(head, int(self._suffix[self._end])))

    def _next_group(self, a: int) -> None:
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


# --------------------------------------------------------------------------- 3. static partitions


def _partition_logs(e_s: np.ndarray, p_s: np.ndarray) -> dict[int, np.ndarray]:
    """Per-partition event times in arrival order; raise if one is not time-ordered."""
    if p_s.size == 0:
        return {}
    po = _stable_argsort_int(p_s)
    pe, pp = e_s[po], p_s[po]
    bad = np.flatnonzero((pp[1:] == pp[:-1]) & (pe[1:] < pe[:-1]))
    starts = np.concatenate(([0], np.flatnonzero(pp[1:] != pp[:-1]) + 1))
    if bad.size:
        j = int(bad[0]) + 1
        part = int(pp[j])
        idx = j - int(starts[np.searchsorted(starts, j, side="right") - 1])
        _raise_unordered(part, idx, int(pe[j]), int(pe[j - 1]))
    ends = np.append(starts[1:], pp.size)
    return {int(pp[s]): pe[s:t] for s, t in zip(starts.tolist(), ends.tolist(), strict=True)}


def _raise_unordered(part: int, idx: int, value: int, previous: int) -> None:
    raise ValueError(
        f"partition {part} is not time-ordered: index {idx} has event time {value} µs, "
        f"below index {idx - 1} ({previous} µs)"
    )


def static_partitions_curve(
    event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
) -> StepSeries:
    """Static set of time-ordered partitions: ``W = min over partitions of the next unread
    event time`` (µs; an exhausted partition counts as MAX_TIMESTAMP).

    Each partition's log is its elements in arrival order; a log that is not
    non-decreasing raises ValueError naming the partition and index. On ordered logs this
    equals :func:`perfect_curve` (the next unread of a sorted log is its minimum unread).
    """
    e, a, p = _trace(event_time, arrival_time, partition)
    order = _arrival_order(a)
    e_s = _take(e, order)
    assert e_s is not None
    p_s = _take(p, order) if p is not None else np.zeros(e.size, dtype=np.int64)
    assert p_s is not None
    _partition_logs(e_s, p_s)
    return perfect_curve(e, a)


class StaticPartitionsWatermark(LatchedWatermark):
    """Incremental :func:`static_partitions_curve` over known logs.

    ``partition_logs`` maps partition id to its event times in log order (µs); each must
    be non-decreasing. ``observe(e, a, p)`` must read the next unread element of ``p``.
    """

    def __init__(self, partition_logs: Mapping[int, ArrayLike]) -> None:
        super().__init__()
        self._logs: dict[int, np.ndarray] = {}
        for part, log in partition_logs.items():
            arr = time_column(log, f"partition_logs[{part}]")
            bad = np.flatnonzero(arr[1:] < arr[:-1])
            if bad.size:
                j = int(bad[0]) + 1
                _raise_unordered(int(part), j, int(arr[j]), int(arr[j - 1]))
            self._logs[int(part)] = arr
        self._cursor = dict.fromkeys(self._logs, 0)
        self._heads = [(int(log[0]), part, 0) for part, log in self._logs.items() if log.size]
        heapq.heapify(self._heads)

    @classmethod
    def from_trace(
        cls, event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
    ) -> StaticPartitionsWatermark:
        """Logs built from a trace: each partition's elements in (stable) arrival order."""
        e, a, p = _trace(event_time, arrival_time, partition)
        order = _arrival_order(a)
        e_s = _take(e, order)
        assert e_s is not None
        p_s = _take(p, order) if p is not None else np.zeros(e.size, dtype=np.int64)
        assert p_s is not None
        return cls(_partition_logs(e_s, p_s))

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
        self._check_arrival(arrival_time)
        self._cursor[part] = c + 1
        if c + 1 < log.size:
            heapq.heappush(self._heads, (int(log[c + 1]), part, c + 1))
        heads = self._heads
        while heads and heads[0][2] != self._cursor[heads[0][1]]:
            heapq.heappop(heads)
        self._latch(heads[0][0] if heads else MAX_TIMESTAMP)


# --------------------------------------------------------------------------- 4./5. bounded OOO


def bounded_out_of_orderness_curve(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    partition: ArrayLike | None = None,
    *,
    bound: int,
) -> StepSeries:
    """Heuristic, Beam convention: ``W = max event time seen - bound`` (µs, >= MIN).

    An element is late iff it arrives after an element more than ``bound`` µs newer.
    ``partition`` is ignored.
    """
    b = check_duration(bound, "bound")
    return _max_seen_minus(event_time, arrival_time, partition, b)


def _max_seen_minus(
    event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None, offset: int
) -> StepSeries:
    """``max event time seen - offset`` after each arrival time, clamped at MIN (µs)."""
    e, a, _ = _trace(event_time, arrival_time, partition)
    if a.size == 0:
        return _empty_series()
    order = _arrival_order(a)
    e_s, a_s = _take(e, order), _take(a, order)
    assert e_s is not None and a_s is not None
    last = _group_last(a_s)
    seen = np.maximum.accumulate(e_s)[last]
    return StepSeries(a_s[last], _minus_clamped(seen, offset), MIN_TIMESTAMP)


class BoundedOutOfOrderness(LatchedWatermark):
    """Incremental :func:`bounded_out_of_orderness_curve` (``bound`` in µs, >= 0).

    The value is ``max seen - bound - _EXTRA``: ``_EXTRA`` is 0 in the core convention
    (no more ``ts < W``); Flink's generator, whose watermark says no more ``ts <= W``, is
    the same class with ``_EXTRA = 1`` (``theory.flink.conventions``)."""

    _EXTRA = 0

    def __init__(self, bound: int) -> None:
        super().__init__()
        self.bound = check_duration(bound, "bound")
        self._max_seen: int | None = None

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        e = check_timestamp(event_time, "event_time")
        self._check_arrival(arrival_time)
        self._max_seen = e if self._max_seen is None else max(self._max_seen, e)
        self._latch(max(MIN_TIMESTAMP, self._max_seen - self.bound - self._EXTRA))


# --------------------------------------------------------------------------- 6. dynamic


def dynamic_partitions_curve(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    partition: ArrayLike | None = None,
    *,
    idle_timeout: int | None = None,
) -> StepSeries:
    """Heuristic over a dynamic set of time-ordered logs (all µs).

    Computed after each element: the minimum, over the partitions seen so far, of the
    event time of the latest element read from each. A partition that appears later with
    older data is not covered by the watermark, so its data is late.

    With ``idle_timeout``: a partition whose latest element arrived at ``a`` is idle at
    processing times ``t > a + idle_timeout`` (from ``a + idle_timeout + 1``) and left out
    of the minimum until it produces again; when every partition is idle the watermark
    stays put. The step times then also hold those expiry instants that are not arrival
    times (at an arrival time the elements come first, then the idle partitions drop out).
    """
    timeout = None if idle_timeout is None else check_duration(idle_timeout, "idle_timeout")
    e, a, p = _trace(event_time, arrival_time, partition)
    n = a.size
    if n == 0:
        return _empty_series()
    order = _arrival_order(a)
    e_s, a_s = _take(e, order), _take(a, order)
    assert e_s is not None and a_s is not None
    p_s = _take(p, order) if p is not None else np.zeros(n, dtype=np.int64)
    assert p_s is not None
    # Intervals are built in partition order (each partition's slots ascending), where an
    # element's successor in its partition is the next entry; _cover_min ignores order.
    po = _stable_argsort_int(p_s)
    pp = p_s[po]
    same = np.zeros(n, dtype=bool)  # same[j]: po[j] has a successor po[j + 1]
    np.equal(pp[1:], pp[:-1], out=same[:-1])
    val = e_s[po]
    if timeout is None or MAX_TIMESTAMP - timeout - 1 < MIN_TIMESTAMP:
        slot_t = a_s
        m = n
        lo = po.astype(np.int64, copy=False)
        hi = np.full(n, n, dtype=np.int64)
        hi[:-1] = np.where(same[:-1], lo[1:], n)
    else:
        limit = MAX_TIMESTAMP - timeout - 1  # arrivals after it never expire in range
        a_p = a_s[po]
        can_p = a_p <= limit
        exp_p = _expiry(a_p, timeout, limit)
        later = np.ones(n, dtype=bool)  # successor arrives after the expiry (or none)
        np.greater(a_p[1:], exp_p[:-1], out=later[:-1])
        later |= ~same
        cand = _sorted_unique(exp_p[can_p & later])
        pos = np.searchsorted(a_s, cand)
        present = (pos < n) & (a_s[np.minimum(pos, n - 1)] == cand)
        extra = cand[~present]  # expiry instants that are not arrival times get own slots
        ins = pos[~present]  # arrivals before each extra instant
        el_slot = np.arange(n, dtype=np.int64)
        el_slot += np.cumsum(np.bincount(ins, minlength=n + 1)[:n])
        ex_slot = np.arange(extra.size, dtype=np.int64) + ins
        m = n + extra.size
        slot_t = np.empty(m, dtype=np.int64)
        slot_t[el_slot] = a_s
        slot_t[ex_slot] = extra
        can_expire = a_s <= limit
        expiry = _expiry(a_s, timeout, limit)
        hi_exp = np.where(can_expire, np.searchsorted(slot_t, expiry, side="left"), m)
        lo = el_slot[po]
        hi = hi_exp[po]
        np.minimum(hi[:-1], np.where(same[:-1], lo[1:], m), out=hi[:-1])
    computed = _cover_min(lo, hi, val, m)
    computed[computed == _EMPTY] = MIN_TIMESTAMP  # all idle: stays put
    latched = np.maximum.accumulate(computed)
    last = _group_last(slot_t)
    return StepSeries(slot_t[last], latched[last], MIN_TIMESTAMP)


class DynamicPartitionsWatermark(LatchedWatermark):
    """Incremental :func:`dynamic_partitions_curve` (``idle_timeout`` in µs, >= 0, or None).

    Partitions may appear at any time. ``advance_to(t)`` applies the idle expiries up to
    ``t``, recomputing at each expiry instant.
    """

    def __init__(self, idle_timeout: int | None = None) -> None:
        super().__init__()
        self.idle_timeout = (
            None if idle_timeout is None else check_duration(idle_timeout, "idle_timeout")
        )
        self._latest: dict[int, int] = {}
        self._arrived: dict[int, int] = {}
        self._version: dict[int, int] = {}
        self._values: list[tuple[int, int, int]] = []  # (event time, partition, version)
        self._expiries: list[tuple[int, int, int]] = []  # (instant, partition, version)
        self._now: int | None = None  # latest processing time already computed at

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        e = check_timestamp(event_time, "event_time")
        a = self._check_arrival(arrival_time)
        part = int(partition)
        self._expire(a - 1)
        ver = self._version.get(part, 0) + 1
        self._version[part] = ver
        self._latest[part] = e
        self._arrived[part] = a
        heapq.heappush(self._values, (e, part, ver))
        if self.idle_timeout is not None and a + self.idle_timeout + 1 <= MAX_TIMESTAMP:
            heapq.heappush(self._expiries, (a + self.idle_timeout + 1, part, ver))
        self._now = a
        computed = self._compute(a)
        assert computed is not None  # ``part`` is active
        self._latch(computed)
        if len(self._values) > 2 * len(self._version) + 64:
            self._values = [(v, q, self._version[q]) for q, v in self._latest.items()]
            heapq.heapify(self._values)

    def _on_advance(self, t: int) -> None:
        self._expire(t)
        self._now = t if self._now is None else max(self._now, t)

    def _active(self, part: int, ver: int, now: int) -> bool:
        if ver != self._version[part]:
            return False
        return self.idle_timeout is None or self._arrived[part] + self.idle_timeout >= now

    def _compute(self, now: int) -> int | None:
        heap = self._values
        while heap:
            v, part, ver = heap[0]
            if self._active(part, ver, now):
                return v
            heapq.heappop(heap)  # stale, or idle until it produces again (new version)
        return None

    def _expire(self, through: int) -> None:
        heap = self._expiries
        while heap and heap[0][0] <= through:
            s = heap[0][0]
            valid = False
            while heap and heap[0][0] == s:
                _, part, ver = heapq.heappop(heap)
                valid = valid or ver == self._version[part]
            if not valid or (self._now is not None and s <= self._now):
                continue
            self._now = s
            computed = self._compute(s)
            if computed is not None:
                self._latch(computed)


# --------------------------------------------------------------------------- 7. percentile


def percentile_source_curve(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    partition: ArrayLike | None = None,
    *,
    p: float,
    hold: bool = False,
) -> StepSeries:
    """The percentile watermark of DESIGN.md at the source (µs), an oracle over the trace.

    The active set is the *backlog* ``A(t) = {elements with event_time <= t < arrival_time}``:
    events that happened but have not arrived (an element arriving at or before its event
    time is never in it). ``W_p(t)`` is the order statistic of ``A(t)`` of 0-based rank
    ``floor((n - 1) * (1 - p))`` (``numpy.quantile(A, 1 - p, method="lower")``), or, where
    ``A(t)`` is empty, :func:`perfect_curve` (``hold=True``: no fallback, the watermark
    holds); latched. It is :func:`theory.watermarks.percentile.percentile_curve` with activation =
    event time and completion = arrival time, so its steps are at arrival times *and* at
    event times (also before the first arrival). This is ``percentile:<p>[:hold]`` of
    ``spark_backend.analytics``, exactly.

    ``p = 1`` equals :func:`perfect_curve` from the first arrival on (before it, the
    perfect curve is still at ``MIN_TIMESTAMP`` while this one is the minimum event time
    so far). A smaller ``p`` is pointwise at least as high. ``partition`` is ignored.
    """
    q = check_p(p)
    e, a, _ = _trace(event_time, arrival_time, partition)
    fallback = None if hold else perfect_curve(e, a)
    # completion = max(arrival, event): rows arriving before their event are never active
    return percentile_curve(e, e, np.maximum(a, e), q, fallback)


class PercentileSourceWatermark(LatchedWatermark):
    """Incremental :func:`percentile_source_curve`, an oracle that knows the whole trace.

    The backlog needs elements that have not arrived, so it is built from the trace. The
    elements are observed in arrival order (any order within one arrival time); every
    event time of a backlog element is an evaluation instant, applied as processing time
    passes it (by the next :meth:`observe` or by :meth:`advance_to`). The watermark at an
    arrival time is evaluated once every element arriving then was observed. The exact
    order statistics are a :class:`theory.watermarks.percentile.PercentileWatermark`, the fallback a
    :class:`PerfectWatermark`; ``regressions`` are the former's.
    """

    def __init__(
        self, event_time: ArrayLike, arrival_time: ArrayLike, p: float, *, hold: bool = False
    ) -> None:
        super().__init__()
        e, a, _ = _trace(event_time, arrival_time, None)
        self._pct = PercentileWatermark(p)
        self._perfect = PerfectWatermark(e, a)
        self.hold = hold
        self._starts: list[int] = np.sort(e[a > e]).tolist()  # activation instants
        self._next = 0
        times, counts = np.unique(a, return_counts=True)
        self._times: list[int] = times.tolist()
        self._counts: list[int] = counts.tolist()
        self._group = -1  # index of the arrival time being observed
        self._left = 0  # its elements not yet observed

    @property
    def p(self) -> float:
        """The percentile in (0, 1]."""
        return self._pct.p

    def _evaluate(self) -> None:
        self._pct.current(None if self.hold else self._perfect.current())
        self._value = self._pct.latched
        self.regressions = self._pct.regressions

    def _activate(self, t: int, *, evaluate_at_t: bool) -> None:
        """Apply the activations at instants ``<= t``, evaluating after each instant
        ``< t`` (and at ``t`` when ``evaluate_at_t``)."""
        starts, i, n = self._starts, self._next, len(self._starts)
        while i < n and starts[i] <= t:
            s = starts[i]
            while i < n and starts[i] == s:
                self._pct.activate(s)
                i += 1
            self._next = i
            if s < t or evaluate_at_t:
                self._evaluate()

    def _unobserved(self) -> str | None:
        if self._left:
            return f"{self._left} element(s) arriving at {self._times[self._group]} µs"
        return None

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        e = check_timestamp(event_time, "event_time")
        a = self._check_arrival(arrival_time, commit=False)
        if self._group < 0 or a != self._times[self._group]:
            g = self._group + 1
            missing = self._unobserved()
            if missing is not None or g >= len(self._times) or self._times[g] != a:
                what = (
                    f"{missing} were never observed"
                    if missing
                    else (
                        "the trace has no more elements"
                        if g >= len(self._times)
                        else f"the next elements arrive at {self._times[g]} µs"
                    )
                )
                raise ValueError(f"arrival_time={a} µs does not match the oracle's trace: {what}")
            self._activate(a, evaluate_at_t=False)  # activations at a come before a's arrivals
            self._group, self._left = g, self._counts[g]
        self._perfect.observe(e, a, partition)  # raises if (e, a) is not left in the trace
        self._last_arrival = a
        if e < a:
            self._pct.complete(e)
        self._left -= 1
        if not self._left:
            self._evaluate()

    def advance_to(self, processing_time: int) -> None:
        t = check_timestamp(processing_time, "processing_time")
        missing = self._unobserved()
        g = self._group + 1
        if missing is None and g < len(self._times) and self._times[g] <= t:
            missing = f"the elements arriving at {self._times[g]} µs"
        if missing is not None:
            raise ValueError(f"advance_to({t}): {missing} were never observed")
        super().advance_to(t)

    def _on_advance(self, t: int) -> None:
        self._activate(t, evaluate_at_t=True)


# --------------------------------------------------------------------------- registry

_SPEC_FORMS = (
    "perfect, ingress, static, bounded:<duration>, flink-bounded:<duration>, dynamic, "
    "dynamic:idle=<duration>, percentile:<p>, percentile:<p>:hold; durations like 500ms, "
    "30s, 2m, 1h or integer µs; p in (0, 1]"
)


@dataclass(frozen=True)
class SourceWatermarkSpec:
    """A parsed source-watermark spec; its curves and objects use the core convention."""

    spec: str
    kind: str
    bound: int | None = None
    idle_timeout: int | None = None
    p: float | None = None
    hold: bool = False

    def curve(
        self, event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
    ) -> StepSeries:
        """The vectorised watermark (µs) of this spec over a trace.

        For ``ingress`` the event times are ignored (elements are re-stamped with their
        arrival times; see :func:`ingress_timestamps`).
        """
        if self.kind == "perfect":
            return perfect_curve(event_time, arrival_time, partition)
        if self.kind == "ingress":
            return ingress_curve(arrival_time)
        if self.kind == "static":
            return static_partitions_curve(event_time, arrival_time, partition)
        if self.kind == "bounded":
            assert self.bound is not None
            return bounded_out_of_orderness_curve(event_time, arrival_time, bound=self.bound)
        if self.kind == "flink-bounded":
            assert self.bound is not None
            # the flink profile builds on this module, so its names are imported on use
            from theory.flink.conventions import (
                flink_bounded_out_of_orderness_curve,
                flink_to_core,
            )

            c = flink_bounded_out_of_orderness_curve(event_time, arrival_time, bound=self.bound)
            return StepSeries(c.times, flink_to_core(c.values), MIN_TIMESTAMP)
        if self.kind == "percentile":
            assert self.p is not None
            return percentile_source_curve(
                event_time, arrival_time, partition, p=self.p, hold=self.hold
            )
        return dynamic_partitions_curve(
            event_time, arrival_time, partition, idle_timeout=self.idle_timeout
        )

    def incremental(
        self,
        event_time: ArrayLike | None = None,
        arrival_time: ArrayLike | None = None,
        partition: ArrayLike | None = None,
    ) -> LatchedWatermark:
        """A fresh incremental generator. ``perfect``, ``static`` and ``percentile`` are
        oracles over a known trace and need ``event_time`` and ``arrival_time`` (and
        ``partition``)."""
        if self.kind in ("perfect", "static", "percentile"):
            if event_time is None or arrival_time is None:
                raise ValueError(
                    f"source watermark {self.spec!r} knows its trace in advance: "
                    "pass event_time and arrival_time to incremental()"
                )
            if self.kind == "perfect":
                return PerfectWatermark(event_time, arrival_time)
            if self.kind == "percentile":
                assert self.p is not None
                return PercentileSourceWatermark(event_time, arrival_time, self.p, hold=self.hold)
            return StaticPartitionsWatermark.from_trace(event_time, arrival_time, partition)
        if self.kind == "ingress":
            return IngressWatermark()
        if self.kind == "bounded":
            assert self.bound is not None
            return BoundedOutOfOrderness(self.bound)
        if self.kind == "flink-bounded":
            from theory.flink.conventions import FlinkBoundedOutOfOrderness, FlinkCoreView

            assert self.bound is not None
            return FlinkCoreView(FlinkBoundedOutOfOrderness(self.bound))
        return DynamicPartitionsWatermark(self.idle_timeout)


def make_source_watermark(spec: str) -> SourceWatermarkSpec:
    """Parse a spec: ``perfect``, ``ingress``, ``static``, ``bounded:30s``,
    ``flink-bounded:30s``, ``dynamic``, ``dynamic:idle=1m``, ``percentile:0.9`` or
    ``percentile:0.9:hold`` (:func:`percentile_source_curve`; ``hold``: no perfect
    fallback). Bad specs raise ValueError naming the spec."""
    if not isinstance(spec, str):
        raise ValueError(f"bad source watermark spec {spec!r}: expected a string ({_SPEC_FORMS})")
    text = spec.strip()
    name, _, arg = text.partition(":")
    try:
        if name in ("perfect", "ingress", "static", "dynamic") and not arg and ":" not in text:
            return SourceWatermarkSpec(spec, name)
        if name in ("bounded", "flink-bounded") and arg:
            return SourceWatermarkSpec(spec, name, bound=parse_duration(arg))
        if name == "dynamic" and arg.startswith("idle="):
            return SourceWatermarkSpec(spec, name, idle_timeout=parse_duration(arg[5:]))
        if name == "percentile" and arg:
            value, colon, mode = arg.partition(":")
            if colon and mode != "hold":
                raise ValueError(f"unknown percentile option {mode!r} (only 'hold')")
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"p must be a number in (0, 1], got {value!r}") from None
            p = check_p(number)
            return SourceWatermarkSpec(spec, name, p=p, hold=bool(colon))
    except ValueError as err:
        raise ValueError(f"bad source watermark spec {spec!r}: {err}") from None
    raise ValueError(f"bad source watermark spec {spec!r}: expected one of {_SPEC_FORMS}")
