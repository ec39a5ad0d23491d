"""Heuristic source watermarks (µs): bounded out-of-orderness and a dynamic set of
partitions (docs/semantics.md, "Source watermarks").

A heuristic watermark is an estimate: data can arrive below it, and is then late. Each
has a vectorised ``*_curve`` and an incremental generator (:class:`LatchedWatermark`)
that give the same answers (package docstring).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Self

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import (
    COVER_EMPTY,
    cover_min,
    group_last,
    minus_clamped,
    plus_clamped,
    sorted_unique,
    stable_argsort_int,
)
from theory.columns import check_count, check_duration, check_timestamp
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
    "BoundedOutOfOrderness",
    "DynamicPartitionsWatermark",
    "bounded_out_of_orderness_curve",
    "dynamic_partitions_curve",
    "max_seen_minus",
]


# --------------------------------------------------------------------------- bounded OOO


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
    return max_seen_minus(event_time, arrival_time, partition, b)


def max_seen_minus(
    event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None, offset: int
) -> StepSeries:
    """``max event time seen - offset`` after each arrival time, clamped at MIN (µs).

    ``offset >= 0`` may exceed int64 (Flink's generator passes ``bound + 1``)."""
    e, a, _ = source_columns(event_time, arrival_time, partition)
    if a.size == 0:
        return empty_curve()
    e_s, a_s, _ = by_arrival(e, a)
    last = group_last(a_s)
    seen = np.maximum.accumulate(e_s)[last]
    return StepSeries(a_s[last], minus_clamped(seen, offset), MIN_TIMESTAMP)


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

    @property
    def max_seen(self) -> int | None:
        """The largest event time observed (µs), None before any element."""
        return self._max_seen

    def state(self) -> dict[str, int | None]:
        """Everything needed to resume (µs): bound, max seen, latched watermark,
        regressions, and the processing clock (last arrival, sealed time)."""
        return {
            "bound": self.bound,
            "max_seen": self._max_seen,
            "watermark": self._value,
            "regressions": self.regressions,
            "last_arrival": self._clock.last_arrival,
            "sealed": self._clock.sealed,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, int | None]) -> Self:
        """The generator :meth:`state` was taken from (``ValueError`` naming a missing or
        bad key)."""
        missing = [k for k in _BOUNDED_KEYS if k not in state]
        if missing:
            raise ValueError(f"BoundedOutOfOrderness state: missing key {missing[0]!r}")
        gen = cls(check_duration(state["bound"], "state['bound']"))
        for key, attr in (("max_seen", "_max_seen"), ("last_arrival", None), ("sealed", None)):
            value = state[key]
            if value is not None:
                value = check_timestamp(value, f"state[{key!r}]")
            if attr is not None:
                setattr(gen, attr, value)
            else:
                setattr(gen._clock, key, value)
        gen._value = check_timestamp(state["watermark"], "state['watermark']")
        gen.regressions = check_count(state["regressions"], "state['regressions']")
        return gen


_BOUNDED_KEYS = ("bound", "max_seen", "watermark", "regressions", "last_arrival", "sealed")


# --------------------------------------------------------------------------- dynamic partitions


def dynamic_partitions_curve(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    partition: ArrayLike | None = None,
    *,
    idle_timeout: int | None = None,
) -> StepSeries:
    """Heuristic over a dynamic set of partitions (all µs).

    Computed after each arrival time: the minimum, over the partitions seen so far, of
    the largest event time read from each (on a time-ordered log, its latest element's;
    the largest does not depend on the order of rows arriving together). A partition
    that appears later with older data is not covered by the watermark, so its data is
    late.

    With ``idle_timeout``: a partition whose latest element arrived at ``a`` is idle at
    processing times ``t > a + idle_timeout`` (from ``a + idle_timeout + 1``) and left out
    of the minimum until it produces again; when every partition is idle the watermark
    stays put. The step times then also hold those expiry instants that are not arrival
    times (at an arrival time the elements come first, then the idle partitions drop out).

    Each element holds the minimum over an interval of *slots* (the step times, in
    order): from its arrival until its partition's next element arrives or it expires.
    :func:`~theory.arrays.cover_min` takes the minimum of all the holds at once.
    """
    timeout = None if idle_timeout is None else check_duration(idle_timeout, "idle_timeout")
    e, a, p = source_columns(event_time, arrival_time, partition)
    n = a.size
    if n == 0:
        return empty_curve()
    e_s, a_s, p_s = by_arrival(e, a, p)
    # Intervals are built in partition order (each partition's slots ascending), where an
    # element's successor in its partition is the next entry; cover_min ignores order.
    parts = partitions_or_zero(p_s, n)
    po = stable_argsort_int(parts)
    pp = parts[po]
    same = np.zeros(n, dtype=bool)  # same[j]: po[j] has a successor po[j + 1]
    np.equal(pp[1:], pp[:-1], out=same[:-1])
    if timeout is None or MAX_TIMESTAMP - timeout - 1 < MIN_TIMESTAMP:
        slot_t, lo, hi = _slots_without_expiry(a_s, po, same)
    else:
        slot_t, lo, hi = _slots_with_expiry(a_s, po, same, timeout)
    computed = cover_min(lo, hi, _running_max_by_group(e_s[po], same), slot_t.size)
    computed[computed == COVER_EMPTY] = MIN_TIMESTAMP  # all idle: stays put
    last = group_last(slot_t)  # computed after every row of a time, then latched
    return StepSeries(slot_t[last], np.maximum.accumulate(computed[last]), MIN_TIMESTAMP)


def _running_max_by_group(values: np.ndarray, same: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` within each run of a grouped array (``same[j]``:
    entry ``j + 1`` is in entry ``j``'s group). Exact on int64: the maximum is taken over
    dense ranks offset by the group number, so groups never mix."""
    n = values.size
    if n == 0:
        return values.copy()
    distinct, rank = np.unique(values, return_inverse=True)
    group = np.zeros(n, dtype=np.int64)
    group[1:] = np.cumsum(~same[:-1])
    key = group * n + rank.reshape(-1)
    np.maximum.accumulate(key, out=key)
    return distinct[key - group * n]


def _slots_without_expiry(
    a_s: np.ndarray, po: np.ndarray, same: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slot times (the arrivals) and each element's slot interval ``[lo, hi)``, in
    partition order: held until the partition's next element (or the end)."""
    n = a_s.size
    lo = po.astype(np.int64, copy=False)
    hi = np.full(n, n, dtype=np.int64)
    hi[:-1] = np.where(same[:-1], lo[1:], n)
    return a_s, lo, hi


def _slots_with_expiry(
    a_s: np.ndarray, po: np.ndarray, same: np.ndarray, timeout: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slot times (the arrivals and the expiry instants that are no arrival) and each
    element's slot interval, in partition order: held until the partition's next element
    or its expiry ``arrival + timeout + 1``, whichever is first."""
    n = a_s.size
    limit = MAX_TIMESTAMP - timeout - 1  # arrivals after it never expire in range
    a_p = a_s[po]
    exp_p = plus_clamped(a_p, timeout + 1)
    later = np.ones(n, dtype=bool)  # successor arrives after the expiry (or none)
    np.greater(a_p[1:], exp_p[:-1], out=later[:-1])
    later |= ~same
    cand = sorted_unique(exp_p[(a_p <= limit) & later])
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
    expiry = plus_clamped(a_s, timeout + 1)
    hi_exp = np.where(a_s <= limit, np.searchsorted(slot_t, expiry, side="left"), m)
    lo = el_slot[po]
    hi = hi_exp[po]
    np.minimum(hi[:-1], np.where(same[:-1], lo[1:], m), out=hi[:-1])
    return slot_t, lo, hi


class DynamicPartitionsWatermark(LatchedWatermark):
    """Incremental :func:`dynamic_partitions_curve` (``idle_timeout`` in µs, >= 0, or None).

    Each active partition holds a :class:`~theory.structures.Frontier` at the largest
    event time read from it; the watermark is the frontier, latched once per arrival
    time: while rows of one arrival time are read, :meth:`current` is the latch of the
    value before that time with the frontier so far (it may fall back within the time),
    and after its last row it is the curve's value there. Partitions may appear at any
    time. ``advance_to(t)`` applies the idle expiries up to ``t``, recomputing at each
    expiry instant (the vectorised curve steps there too).
    """

    def __init__(self, idle_timeout: int | None = None) -> None:
        super().__init__()
        self.idle_timeout = (
            None if idle_timeout is None else check_duration(idle_timeout, "idle_timeout")
        )
        self._holds = Frontier()
        self._latest: dict[int, int] = {}  # active partition -> its hold (largest event time)
        self._largest: dict[int, int] = {}  # partition -> largest event time read from it
        self._arrived: dict[int, int] = {}  # partition -> its latest arrival
        self._expiries: list[tuple[int, int]] = []  # (instant, partition); stale ones skipped
        self._now: int | None = None  # latest processing time already computed at
        self._base: tuple[int, int, int] | None = None  # (time, value, regressions) before it

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        e = check_timestamp(event_time, "event_time")
        a = self._check_arrival(arrival_time)
        part = int(partition)
        self._expire(a - 1, evaluate=True)  # idle instants before ``a`` come first
        if self._base is None or self._base[0] != a:
            self._base = (a, self._value, self.regressions)
        old = self._latest.get(part)
        hold = max(e, self._largest.get(part, e))
        self._largest[part] = hold
        if old is None:
            self._holds.add(hold)
        else:
            self._holds.move(old, hold)
        self._latest[part] = hold
        self._arrived[part] = a
        if self.idle_timeout is not None and a + self.idle_timeout + 1 <= MAX_TIMESTAMP:
            heapq.heappush(self._expiries, (a + self.idle_timeout + 1, part))
        self._expire(a, evaluate=False)  # idle from ``a`` on: out of the value at ``a``
        self._now = a
        _, self._value, self.regressions = self._base  # latched once per arrival time
        self._latch(self._holds.min())  # ``part`` holds: never empty

    def _on_advance(self, t: int) -> None:
        self._expire(t, evaluate=True)
        self._now = t if self._now is None else max(self._now, t)

    def _expire(self, through: int, *, evaluate: bool) -> None:
        """Release the holds of the partitions idle at instants ``<= through``; with
        ``evaluate``, latch the frontier at each instant not computed at yet (an instant
        where every partition is idle leaves the watermark where it is)."""
        heap = self._expiries
        while heap and heap[0][0] <= through:
            s = heap[0][0]
            released = False
            while heap and heap[0][0] == s:
                _, part = heapq.heappop(heap)
                released = self._release_if_idle(part, s) or released
            if evaluate and released and (self._now is None or s > self._now):
                self._now = s
                if self._holds:
                    self._latch(self._holds.min())

    def _release_if_idle(self, part: int, instant: int) -> bool:
        """Release ``part``'s hold if ``instant`` is its current expiry (not stale: it did
        not produce again since, nor was it released already)."""
        assert self.idle_timeout is not None
        if part not in self._latest or self._arrived[part] + self.idle_timeout + 1 != instant:
            return False
        self._holds.retract(self._latest.pop(part))
        return True
