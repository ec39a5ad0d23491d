"""Flink's periodic watermark generation and idleness, in µs, Flink convention.

``TimestampsAndWatermarksOperator`` driving ``BoundedOutOfOrdernessWatermarks``, optionally
wrapped in ``WatermarksWithIdleness`` (checked against the apache-flink 2.3 jars, see
``tests/theory/flink/test_flink_oracle.py``):

- :class:`PeriodicWatermarks`, element by element, and :func:`periodic_watermarks`, the
  same outputs over a whole trace (:class:`PeriodicOutputs`);
- :func:`idle_detected_at`: when ``withIdleness`` declares a stream idle;
- schedules: the watermarks placed in the element stream (:class:`WatermarkSchedule`),
  per element (:func:`per_event_watermarks`) or periodic (:meth:`PeriodicOutputs.schedule`),
  the input of :func:`theory.flink.windows.run_flink_windows`.

All times are int µs. Every watermark is in Flink's convention (``W``: no more elements
with timestamp ``<= W``); see :mod:`theory.flink.conventions` for the conversions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import minus_clamped, sorted_unique
from theory.columns import check_duration, check_timestamp, int_column, same_length, time_column
from theory.flink.conventions import flink_bounded_watermark, flink_to_core
from theory.flink.valve import StreamStatus
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.latch import ArrivalClock

__all__ = [
    "KIND_ACTIVE",
    "KIND_IDLE",
    "KIND_WATERMARK",
    "Emitted",
    "PeriodicOutputs",
    "PeriodicWatermarks",
    "WatermarkSchedule",
    "idle_detected_at",
    "per_event_watermarks",
    "periodic_watermarks",
]


class Emitted(NamedTuple):
    """One output of the watermark operator at processing time ``time`` (µs): a Flink-convention
    watermark (``int``, µs) or a :class:`~theory.flink.valve.StreamStatus`."""

    time: int
    output: int | StreamStatus


def _check_interval(interval: int) -> int:
    return check_duration(interval, "auto_watermark_interval", allow_zero=False)


def _check_timeout(timeout: int | None) -> int | None:
    if timeout is None:
        return None
    return check_duration(timeout, "idle_timeout", allow_zero=False)


# ================================================================== element by element


class PeriodicWatermarks:
    """Flink's ``TimestampsAndWatermarksOperator`` driving ``BoundedOutOfOrdernessWatermarks``
    (optionally inside ``WatermarksWithIdleness``), element by element.

    All times µs; outputs are Flink-convention watermarks. Model of processing time:

    - The operator opens at ``start``; its timer fires at ``start + k * interval``,
      ``k = 1, 2, ...`` (Flink re-registers ``now + interval`` in each callback; an ideal
      timer with no lag). Elements arriving at exactly a timer's time are read before it.
    - ``on_event`` only updates the maximum seen (``onEvent`` emits nothing).
    - At each timer (``onPeriodicEmit``) the generator offers ``max_seen - bound - 1``; the
      output drops it unless it is strictly above the last emitted one (``WatermarkEmitter``).
    - With ``idle_timeout``: Flink's ``IdlenessTimer``, evaluated only at timers. A timer
      that saw no element since the previous one starts the countdown at its own time; a later
      timer with no element in between marks the stream idle once strictly more than
      ``idle_timeout`` has passed since the countdown started. While idle the generator is not
      asked for a watermark. ``IDLE`` is emitted once; the output becomes ``ACTIVE`` again only
      when a strictly higher watermark is emitted (an element alone does not flip it back).
    - ``finish(at)`` is the end of input: timers up to ``at``, one last periodic emit at
      ``at`` (Flink's ``finish()``), then the ``Long.MAX_VALUE`` watermark (``MAX_TIMESTAMP``).

    Each call returns the :class:`Emitted` items it caused, in order.
    """

    def __init__(
        self,
        bound: int,
        interval: int,
        *,
        start: int = 0,
        idle_timeout: int | None = None,
    ) -> None:
        self.bound = check_duration(bound, "bound")
        self.interval = _check_interval(interval)
        self.start = check_timestamp(start, "start")
        self.idle_timeout = _check_timeout(idle_timeout)
        self._max_seen: int | None = None
        self._current = MIN_TIMESTAMP  # WatermarkEmitter.currentWatermark
        self._output_idle = False  # WatermarkEmitter.idle
        self._idle_now = False  # WatermarksWithIdleness.isIdleNow
        self._counter = 0  # IdlenessTimer.counter
        self._last_counter = 0  # IdlenessTimer.lastCounter
        self._inactive_since: int | None = None  # IdlenessTimer.startOfInactivityNanos
        self._next_timer = self.start + self.interval
        self._clock = ArrivalClock()
        self._finished = False

    # ---------------------------------------------------------------- public

    @property
    def current_watermark(self) -> int:
        """The last watermark emitted (µs, Flink convention); MIN before any."""
        return self._current

    @property
    def is_idle(self) -> bool:
        """Whether the output's last status is ``IDLE``."""
        return self._output_idle

    @property
    def next_timer(self) -> int:
        """Processing time (µs) of the next periodic emit."""
        return self._next_timer

    def on_event(self, event_time: int, arrival_time: int) -> list[Emitted]:
        """Read one element (µs). Fires the timers strictly before ``arrival_time`` first."""
        e = check_timestamp(event_time, "event_time")
        a = self._check_arrival(arrival_time)
        out = self._fire_until(a - 1)
        self._clock.last_arrival = a
        self._max_seen = e if self._max_seen is None else max(self._max_seen, e)
        self._counter += 1
        self._idle_now = False
        return out

    def advance_to(self, processing_time: int) -> list[Emitted]:
        """Processing time reached ``processing_time`` (µs): fire every timer ``<=`` it. Later
        elements must arrive after it."""
        t = self._check_clock(processing_time)
        self._clock.sealed = t
        return self._fire_until(t)

    def finish(self, at: int | None = None) -> list[Emitted]:
        """End of input at processing time ``at`` (default: the last arrival, else ``start``):
        timers ``<= at``, a final periodic emit at ``at``, then ``MAX_TIMESTAMP``."""
        if at is None:
            clock = self._clock
            at = max(x for x in (clock.last_arrival, clock.sealed, self.start) if x is not None)
        t = self._check_clock(at)
        out = self._fire_until(t)
        out += self._periodic_emit(t)
        out += self._emit(t, MAX_TIMESTAMP)
        self._finished = True
        return out

    # ---------------------------------------------------------------- internals

    def _check_clock(self, processing_time: int) -> int:
        if self._finished:
            raise ValueError("the input has finished: no more events or time")
        return self._clock.check_advance(processing_time)

    def _check_arrival(self, arrival_time: int) -> int:
        """Check the arrival order without recording it: the element is read only after
        the timers strictly before it have fired."""
        if self._finished:
            raise ValueError("the input has finished: no more events or time")
        a = check_timestamp(arrival_time, "arrival_time")
        if a < self.start:
            raise ValueError(f"arrival_time={a} µs is before the operator opened at {self.start}")
        return self._clock.arrive(a, commit=False)

    def _fire_until(self, t: int) -> list[Emitted]:
        out: list[Emitted] = []
        while self._next_timer <= t:
            now = self._next_timer
            out += self._periodic_emit(now)
            self._next_timer = now + self.interval
        return out

    def _check_if_idle(self, now: int) -> bool:
        """Flink's ``IdlenessTimer.checkIfIdle`` at processing time ``now``."""
        if self._counter != self._last_counter:
            self._last_counter = self._counter
            self._inactive_since = None
            return False
        if self._inactive_since is None:
            self._inactive_since = now
            return False
        assert self.idle_timeout is not None
        return now - self._inactive_since > self.idle_timeout

    def _periodic_emit(self, now: int) -> list[Emitted]:
        if self.idle_timeout is not None and self._check_if_idle(now):
            if self._idle_now:
                return []
            self._idle_now = True
            if self._output_idle:
                return []
            self._output_idle = True
            return [Emitted(now, StreamStatus.IDLE)]
        return self._emit(now, flink_bounded_watermark(self._max_seen, self.bound))

    def _emit(self, now: int, value: int) -> list[Emitted]:
        if value <= self._current:
            return []
        self._current = value
        out: list[Emitted] = []
        if self._output_idle:
            self._output_idle = False
            out.append(Emitted(now, StreamStatus.ACTIVE))
        out.append(Emitted(now, value))
        return out


#: Output kinds in :class:`PeriodicOutputs`.
KIND_WATERMARK: Final[int] = 0
KIND_IDLE: Final[int] = 1
KIND_ACTIVE: Final[int] = 2
_KIND_STATUS: Final[dict[int, StreamStatus]] = {
    KIND_IDLE: StreamStatus.IDLE,
    KIND_ACTIVE: StreamStatus.ACTIVE,
}


@dataclass(frozen=True, eq=False)
class PeriodicOutputs:
    """The outputs of :func:`periodic_watermarks`, in order, as int64 arrays.

    ``times`` (processing µs), ``kinds`` (``KIND_WATERMARK``, ``KIND_IDLE``, ``KIND_ACTIVE``)
    and ``values`` (the watermark, µs, Flink convention; 0 for statuses).
    """

    times: np.ndarray
    kinds: np.ndarray
    values: np.ndarray

    def items(self) -> list[Emitted]:
        """As the list of :class:`Emitted` that :class:`PeriodicWatermarks` returns."""
        return [
            Emitted(int(t), int(v) if k == KIND_WATERMARK else _KIND_STATUS[int(k)])
            for t, k, v in zip(self.times, self.kinds, self.values, strict=True)
        ]

    @property
    def watermark_times(self) -> np.ndarray:
        """Processing times (µs) of the emitted watermarks."""
        return self.times[self.kinds == KIND_WATERMARK]

    @property
    def watermarks(self) -> np.ndarray:
        """The emitted watermarks (µs, Flink convention), strictly increasing."""
        return self.values[self.kinds == KIND_WATERMARK]

    def core_series(self) -> StepSeries:
        """The emitted watermarks as a step series over processing time, **core** convention
        (``flink_to_core``), ``MIN_TIMESTAMP`` before the first. Of several watermarks at one
        time (the end of input) the last counts."""
        return StepSeries.from_events(
            self.watermark_times, flink_to_core(self.watermarks), MIN_TIMESTAMP
        )

    def schedule(self, arrival_time: ArrayLike) -> WatermarkSchedule:
        """These watermarks placed in the element stream: each goes after the elements
        arriving at or before its timer. ``arrival_time`` (µs) is the stream, so it must be
        non-decreasing; it should be the trace these outputs were computed from."""
        a = time_column(arrival_time, "arrival_time")
        if a.size > 1 and bool(np.any(a[1:] < a[:-1])):
            raise ValueError("arrival_time must be non-decreasing: the elements' stream order")
        after = np.searchsorted(a, self.watermark_times, side="right").astype(np.int64)
        return WatermarkSchedule(after, self.watermarks)


# ========================================================================== whole trace


def periodic_watermarks(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    *,
    bound: int,
    interval: int,
    start: int = 0,
    until: int | None = None,
    idle_timeout: int | None = None,
    finish: bool = False,
) -> PeriodicOutputs:
    """Vectorised :class:`PeriodicWatermarks` over a whole trace (all µs, Flink convention).

    Elements are read in stable arrival order; arrivals must be ``>= start``. Timers fire at
    ``start + k * interval`` for every such time ``<= until``; ``until`` defaults to the first
    timer at or after the last arrival (no timer for an empty trace). With ``finish`` the input
    ends at ``until``: a final periodic emit there, then ``MAX_TIMESTAMP``. Same outputs as
    feeding the incremental object ``on_event`` per element, then ``advance_to(until)`` (or
    ``finish(until)``).

    Only timers that follow an arrival can change the watermark, so the work is O(n log n)
    whatever the number of timers.
    """
    b = check_duration(bound, "bound")
    step = _check_interval(interval)
    s0 = check_timestamp(start, "start")
    timeout = _check_timeout(idle_timeout)
    grid = _timer_grid(event_time, arrival_time, s0, step, until)
    marks = _timer_watermarks(grid, b)
    idleness = _idle_timers(grid, marks.reading, timeout)
    statuses = _statuses(marks.emit_k, idleness.idle_k)
    outputs = _merge_outputs(grid, marks, statuses)
    if not finish:
        return outputs
    gen = _generator_after_last_timer(grid, b, timeout, marks, idleness, statuses)
    return _concat(outputs, _as_outputs(gen.finish(grid.end)))


@dataclass(frozen=True, eq=False)
class _TimerGrid:
    """A trace read against the timers: elements in arrival order (``e``, ``a``), ``k_of[i]``
    the first timer at or after arrival ``i`` (an element arriving at a timer's time is read
    before it), and timers ``1..last_k`` firing, at ``start + k * step`` µs, up to ``end``."""

    e: np.ndarray
    a: np.ndarray
    k_of: np.ndarray
    start: int
    step: int
    end: int
    last_k: int

    def time(self, k: np.ndarray) -> np.ndarray:
        """The processing times (µs) of timers ``k``."""
        return self.start + k * self.step


def _timer_grid(
    event_time: ArrayLike, arrival_time: ArrayLike, s0: int, step: int, until: int | None
) -> _TimerGrid:
    """Check the trace, order it by arrival (stable) and place it on the timer grid."""
    e = time_column(event_time, "event_time")
    a = time_column(arrival_time, "arrival_time")
    same_length("arrival_time", a.size, event_time=e)
    order = np.argsort(a, kind="stable")
    e, a = e[order], a[order]
    n = int(a.size)
    if n and int(a[0]) < s0:
        raise ValueError(f"arrival_time {int(a[0])} µs is before the operator opened at {s0}")
    k_of = np.maximum(_ceil_div(a - s0, step), 1) if n else np.empty(0, dtype=np.int64)
    if until is None:
        end = s0 + int(k_of[-1]) * step if n else s0
    else:
        end = check_timestamp(until, "until")
        if n and int(a[-1]) > end:
            raise ValueError(f"arrival_time {int(a[-1])} µs is after until={end} µs")
        if end < s0:
            raise ValueError(f"until={end} µs is before start={s0} µs")
    return _TimerGrid(e, a, k_of, s0, step, end, (end - s0) // step)


def _ceil_div(a: np.ndarray, b: int) -> np.ndarray:
    return -((-a) // b)


class _TimerWatermarks(NamedTuple):
    """``reading``: the timers (in ``1..last_k``) that read new elements; ``emit_k`` /
    ``emit_v``: the timers that emit a watermark and the watermarks (µs)."""

    reading: np.ndarray
    emit_k: np.ndarray
    emit_v: np.ndarray


def _timer_watermarks(grid: _TimerGrid, bound: int) -> _TimerWatermarks:
    """Only a timer that read new elements can raise the generator's value: its value there,
    emitted when above every earlier one (``WatermarkEmitter`` drops the rest)."""
    ks = sorted_unique(grid.k_of[grid.k_of <= grid.last_k])  # k_of is sorted
    if not ks.size:
        return _TimerWatermarks(ks, ks, ks)
    seen = np.searchsorted(grid.k_of, ks, side="right")  # elements read by each such timer
    vals = minus_clamped(np.maximum.accumulate(grid.e)[seen - 1], bound + 1)
    prev = np.concatenate(([MIN_TIMESTAMP], np.maximum.accumulate(vals)[:-1]))
    emit = vals > prev
    return _TimerWatermarks(ks, ks[emit], vals[emit])


class _Idleness(NamedTuple):
    """``idle_k``: the timers at which the idleness timer fires (IDLE candidates);
    ``last_run_start``: the first timer of the run of reading-free timers that reaches
    ``last_k`` (None if ``last_k`` read elements); ``idle_at_last``: idle at ``last_k``."""

    idle_k: np.ndarray
    last_run_start: int | None
    idle_at_last: bool


def _idle_timers(grid: _TimerGrid, reading: np.ndarray, timeout: int | None) -> _Idleness:
    """In each run of timers that read nothing, the first starts the countdown and the one
    ``timeout // step + 1`` later is the first strictly more than ``timeout`` after it."""
    last_k = grid.last_k
    if timeout is None or last_k < 1:
        return _Idleness(np.empty(0, dtype=np.int64), None, False)
    # runs without reads: [1, k1 - 1], [k_j + 1, k_{j+1} - 1], [k_m + 1, last_k]
    starts = np.concatenate(([1], reading + 1))
    ends = np.concatenate((reading - 1, [last_k]))
    keep = starts <= ends
    starts, ends = starts[keep], ends[keep]
    first_idle = starts + (timeout // grid.step + 1)
    idle_k = first_idle[first_idle <= ends]
    if starts.size and int(ends[-1]) == last_k:
        return _Idleness(idle_k, int(starts[-1]), int(first_idle[-1]) <= last_k)
    return _Idleness(idle_k, None, False)


class _Statuses(NamedTuple):
    """``idle_k``: the timers that emit IDLE; ``active_before[j]``: watermark ``j`` is
    preceded by ACTIVE; ``idle_at_end``: the output is IDLE after the last timer."""

    idle_k: np.ndarray
    active_before: np.ndarray
    idle_at_end: bool


def _statuses(emit_k: np.ndarray, idle_k: np.ndarray) -> _Statuses:
    """IDLE goes out at a candidate unless IDLE already went out since the last watermark
    (the output toggles only); the first watermark after an IDLE brings ACTIVE first."""
    group = np.searchsorted(emit_k, idle_k, side="left")  # watermarks emitted before it
    first = np.ones(idle_k.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    idle_k, group = idle_k[first], group[first]
    active_before = np.zeros(emit_k.size, dtype=bool)
    active_before[group[group < emit_k.size]] = True
    return _Statuses(idle_k, active_before, bool(group.size) and int(group[-1]) == emit_k.size)


def _merge_outputs(grid: _TimerGrid, marks: _TimerWatermarks, st: _Statuses) -> PeriodicOutputs:
    """Per watermark ``[ACTIVE?, W]``, per IDLE timer ``[IDLE]``, ordered by timer (statuses
    before the watermark at one timer)."""
    idle_k, active_k, w_k = st.idle_k, marks.emit_k[st.active_before], marks.emit_k
    n_status = idle_k.size + active_k.size
    times = np.concatenate((grid.time(idle_k), grid.time(active_k), grid.time(w_k)))
    kinds = np.concatenate(
        (
            np.full(idle_k.size, KIND_IDLE),
            np.full(active_k.size, KIND_ACTIVE),
            np.full(w_k.size, KIND_WATERMARK),
        )
    )
    values = np.concatenate((np.zeros(n_status, np.int64), marks.emit_v))
    rank = np.concatenate((np.zeros(n_status), np.ones(w_k.size)))
    o = np.lexsort((rank, times))
    return PeriodicOutputs(
        times.astype(np.int64)[o], kinds.astype(np.int64)[o], values.astype(np.int64)[o]
    )


def _generator_after_last_timer(
    grid: _TimerGrid,
    bound: int,
    timeout: int | None,
    marks: _TimerWatermarks,
    idleness: _Idleness,
    statuses: _Statuses,
) -> PeriodicWatermarks:
    """The incremental generator in the state the trace leaves it in after timer ``last_k``,
    so that its ``finish`` produces the end of input."""
    n = int(grid.e.size)
    n_seen = int(np.searchsorted(grid.k_of, grid.last_k, side="right"))
    gen = PeriodicWatermarks(bound, grid.step, start=grid.start, idle_timeout=timeout)
    gen._next_timer = grid.start + (grid.last_k + 1) * grid.step
    gen._current = int(marks.emit_v[-1]) if marks.emit_v.size else MIN_TIMESTAMP
    gen._max_seen = int(grid.e.max()) if n else None
    gen._counter = n
    gen._last_counter = n_seen if grid.last_k >= 1 else 0
    if timeout is not None and idleness.last_run_start is not None:
        gen._inactive_since = grid.start + idleness.last_run_start * grid.step
    gen._idle_now = idleness.idle_at_last and n_seen == n
    gen._output_idle = statuses.idle_at_end
    gen._clock.last_arrival = int(grid.a[-1]) if n else None
    return gen


def _kind(output: int | StreamStatus) -> int:
    if isinstance(output, StreamStatus):
        return KIND_IDLE if output is StreamStatus.IDLE else KIND_ACTIVE
    return KIND_WATERMARK


def _as_outputs(items: list[Emitted]) -> PeriodicOutputs:
    """:class:`Emitted` items as :class:`PeriodicOutputs` arrays."""
    return PeriodicOutputs(
        np.array([x.time for x in items], dtype=np.int64),
        np.array([_kind(x.output) for x in items], dtype=np.int64),
        np.array([x.output if isinstance(x.output, int) else 0 for x in items], np.int64),
    )


def _concat(first: PeriodicOutputs, then: PeriodicOutputs) -> PeriodicOutputs:
    return PeriodicOutputs(
        np.concatenate((first.times, then.times)),
        np.concatenate((first.kinds, then.kinds)),
        np.concatenate((first.values, then.values)),
    )


def idle_detected_at(
    last_arrival: int | None, *, interval: int, idle_timeout: int, start: int = 0
) -> int:
    """When ``withIdleness(idle_timeout)`` marks a stream idle whose last element arrived at
    ``last_arrival`` (``None``: no element at all), all µs, under the timer model of
    :class:`PeriodicWatermarks`.

    The timer after the element's own timer starts the countdown; idleness is declared at the
    first timer strictly more than ``idle_timeout`` later. So it is always later than
    ``last_arrival + idle_timeout + interval`` and no later than
    ``last_arrival + idle_timeout + 3 * interval`` (Flink's javadoc: up to the timeout plus
    three emission intervals).
    """
    step = _check_interval(interval)
    timeout = check_duration(idle_timeout, "idle_timeout", allow_zero=False)
    s0 = check_timestamp(start, "start")
    if last_arrival is None:
        run_start = 1
    else:
        a = check_timestamp(last_arrival, "last_arrival")
        if a < s0:
            raise ValueError(f"last_arrival={a} µs is before start={s0} µs")
        run_start = max(-((s0 - a) // step), 1) + 1
    return s0 + (run_start + timeout // step + 1) * step


# ========================================================================== schedules


@dataclass(frozen=True, eq=False)
class WatermarkSchedule:
    """Watermarks interleaved with a stream of ``n`` elements: ``value[j]`` (µs, Flink
    convention) is emitted after the first ``after[j]`` elements. ``after`` is
    non-decreasing in ``[0, n]``; a value not above the last emitted one is suppressed."""

    after: np.ndarray
    value: np.ndarray

    def __post_init__(self) -> None:
        a = int_column(self.after, "after")
        v = time_column(self.value, "value")
        same_length("after", a.size, value=v)
        if a.size and (int(a.min()) < 0 or bool(np.any(a[1:] < a[:-1]))):
            raise ValueError("after must be non-decreasing and >= 0")
        object.__setattr__(self, "after", a)
        object.__setattr__(self, "value", v)


def per_event_watermarks(event_time: ArrayLike, *, bound: int) -> WatermarkSchedule:
    """Bounded out-of-orderness made punctuated: after every element, ``max - bound - 1``
    (µs, Flink convention). This is what the periodic generator would emit if its timer fired
    after every element, and what the real-Flink oracle's Java generator emits."""
    b = check_duration(bound, "bound")
    e = time_column(event_time, "event_time")
    if e.size == 0:
        return WatermarkSchedule(np.empty(0, np.int64), np.empty(0, np.int64))
    v = minus_clamped(np.maximum.accumulate(e), b + 1)
    return WatermarkSchedule(np.arange(1, e.size + 1, dtype=np.int64), v)
