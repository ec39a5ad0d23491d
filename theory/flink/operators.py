"""The flink semantics profile: Flink's watermark generation, idleness, alignment and windows.

Everything here follows Flink 2.3 (the code paths were checked against the
``apache-flink==2.3`` jars, see ``tests/theory/test_flink.py``), but in the project's units.

Conventions (DESIGN.md "Time"):

- All times are int **microseconds**. Flink counts milliseconds; convert at the edge with
  :mod:`theory.flink.conventions`.
- Every watermark in this module is in **Flink's convention**: ``W`` asserts that no more
  elements with timestamp ``<= W`` will come. ``flink_to_core`` (``W + 1``) gives the core
  (Beam) value. Java's ``Long.MIN_VALUE`` / ``Long.MAX_VALUE`` are ``MIN_TIMESTAMP`` /
  ``MAX_TIMESTAMP`` here.
- A Flink watermark ``W_ms`` in milliseconds is ``W_ms * 1000 + 999`` µs: "no more data with
  ``ts_ms <= W_ms``" is "no more data with ``ts_us <= W_ms * 1000 + 999``". With that
  mapping, bounded out-of-orderness ``max - bound - 1`` computed in µs on ms-aligned data is
  exactly the converted ms value, so every comparison Flink makes (window firing, lateness,
  cleanup) gives the same answer in both units.

Contents:

1. Periodic emission (``TimestampsAndWatermarksOperator`` + ``BoundedOutOfOrdernessWatermarks``,
   optionally wrapped in ``WatermarksWithIdleness``): the incremental
   :class:`PeriodicWatermarks` and the vectorised :func:`periodic_watermarks`, which agree.
2. Watermark alignment: :func:`simulate_alignment`, a small deterministic model of sources
   paused by ``max_allowed_drift``.
3. Event-time windows: :class:`Tumbling`, :class:`Sliding`, :class:`Sessions` assigners and
   :class:`WindowOperator` (``EventTimeTrigger``, allowed lateness, late side output, state
   cleanup), with :func:`run_flink_windows` on a whole stream.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import as_int, check_duration, check_timestamp, time_column
from theory.flink.conventions import (
    flink_to_core,
)
from theory.flink.valve import StreamStatus
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.windowing.windows import IntervalWindow

__all__ = [
    "AlignmentResult",
    "Assigner",
    "Emitted",
    "Firing",
    "FlinkWindowsResult",
    "LateElement",
    "PeriodicOutputs",
    "PeriodicWatermarks",
    "Sessions",
    "Sliding",
    "Tumbling",
    "WatermarkSchedule",
    "WindowOperator",
    "flink_intersects",
    "flink_merge_windows",
    "idle_detected_at",
    "per_event_watermarks",
    "periodic_schedule",
    "periodic_watermarks",
    "run_flink_windows",
    "simulate_alignment",
    "window_start_with_offset",
]

#: Flink's default ``pipeline.watermark-alignment.buffer-size`` (2.3).
DEFAULT_ALIGNMENT_BUFFER: Final[int] = 3


def _bounded(max_seen: int | None, bound: int) -> int:
    """``max_seen - bound - 1`` clamped at MIN (MIN before any element): Flink's value."""
    if max_seen is None:
        return MIN_TIMESTAMP
    return max(MIN_TIMESTAMP, max_seen - bound - 1)


# ============================================================================ 1. periodic


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
        self._last_arrival: int | None = None
        self._sealed: int | None = None
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
        self._last_arrival = a
        self._max_seen = e if self._max_seen is None else max(self._max_seen, e)
        self._counter += 1
        self._idle_now = False
        return out

    def advance_to(self, processing_time: int) -> list[Emitted]:
        """Processing time reached ``processing_time`` (µs): fire every timer ``<=`` it. Later
        elements must arrive after it."""
        t = self._check_clock(processing_time)
        self._sealed = t
        return self._fire_until(t)

    def finish(self, at: int | None = None) -> list[Emitted]:
        """End of input at processing time ``at`` (default: the last arrival, else ``start``):
        timers ``<= at``, a final periodic emit at ``at``, then ``MAX_TIMESTAMP``."""
        if at is None:
            at = max(x for x in (self._last_arrival, self._sealed, self.start) if x is not None)
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
        t = check_timestamp(processing_time, "processing_time")
        for prev, what in ((self._last_arrival, "an element arrived"), (self._sealed, "advanced")):
            if prev is not None and t < prev:
                raise ValueError(
                    f"processing_time={t} µs goes back in time: already {what} at {prev} µs"
                )
        return t

    def _check_arrival(self, arrival_time: int) -> int:
        if self._finished:
            raise ValueError("the input has finished: no more events or time")
        a = check_timestamp(arrival_time, "arrival_time")
        if a < self.start:
            raise ValueError(f"arrival_time={a} µs is before the operator opened at {self.start}")
        if self._last_arrival is not None and a < self._last_arrival:
            raise ValueError(
                f"arrival_time={a} µs is before the previous arrival {self._last_arrival} µs: "
                "elements must come in arrival order"
            )
        if self._sealed is not None and a <= self._sealed:
            raise ValueError(
                f"arrival_time={a} µs is not after advance_to({self._sealed}): elements at or "
                "before that processing time were declared complete"
            )
        return a

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
        return self._emit(now, _bounded(self._max_seen, self.bound))

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



def _minus_bound(x: np.ndarray, bound: int) -> np.ndarray:
    """``max(x - bound - 1, MIN_TIMESTAMP)`` elementwise, without int64 overflow."""
    threshold = MIN_TIMESTAMP + bound + 1
    if threshold > MAX_TIMESTAMP:
        return np.full(x.shape, MIN_TIMESTAMP, dtype=np.int64)
    return np.maximum(x, np.int64(threshold)) - np.int64(bound + 1)


def _ceil_div(a: np.ndarray, b: int) -> np.ndarray:
    return -((-a) // b)


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
    e = time_column(event_time, "event_time")
    a = time_column(arrival_time, "arrival_time")
    if e.size != a.size:
        raise ValueError(f"event_time has {e.size} elements but arrival_time has {a.size}")
    order = np.argsort(a, kind="stable")
    e, a = e[order], a[order]
    n = int(a.size)
    if n and int(a[0]) < s0:
        raise ValueError(f"arrival_time {int(a[0])} µs is before the operator opened at {s0}")
    # first timer at or after each arrival (elements at a timer's time come before it)
    k_of = np.maximum(_ceil_div(a - s0, step), 1) if n else np.empty(0, dtype=np.int64)
    if until is None:
        end = s0 + int(k_of[-1]) * step if n else s0
    else:
        end = check_timestamp(until, "until")
        if n and int(a[-1]) > end:
            raise ValueError(f"arrival_time {int(a[-1])} µs is after until={end} µs")
        if end < s0:
            raise ValueError(f"until={end} µs is before start={s0} µs")
    last_k = (end - s0) // step  # timers 1..last_k fire

    # timers that saw new elements ("active"), and the generator's value at each
    in_range = k_of <= last_k
    ks = np.unique(k_of[in_range])
    seen = np.searchsorted(k_of, ks, side="right")  # elements read by each active timer
    prefix_max = np.maximum.accumulate(e) if n else e
    vals = _minus_bound(prefix_max[seen - 1], b) if ks.size else ks
    prev = np.concatenate(([MIN_TIMESTAMP], np.maximum.accumulate(vals)[:-1])) if ks.size else ks
    emit = vals > prev
    w_k, w_v = ks[emit], vals[emit]

    idle_k = np.empty(0, dtype=np.int64)
    run_start_last: int | None = None  # first timer of the inactive run that contains last_k
    idle_now_last = False
    if timeout is not None and last_k >= 1:
        # inactive runs: [1, k1 - 1], [k_j + 1, k_{j+1} - 1], [k_m + 1, last_k]
        starts = np.concatenate(([1], ks + 1))
        ends = np.concatenate((ks - 1, [last_k]))
        keep = starts <= ends
        starts, ends = starts[keep], ends[keep]
        first_idle = starts + (timeout // step + 1)
        idle_k = first_idle[first_idle <= ends]
        if starts.size and int(ends[-1]) == last_k:
            run_start_last = int(starts[-1])
            idle_now_last = int(first_idle[-1]) <= last_k
    # statuses: an idle candidate is emitted if no IDLE was emitted since the last watermark
    group = np.searchsorted(w_k, idle_k, side="left")  # watermarks emitted before it
    real = np.ones(idle_k.size, dtype=bool)
    real[1:] = group[1:] != group[:-1]
    idle_k, group = idle_k[real], group[real]
    active_before = np.zeros(w_k.size, dtype=bool)
    active_before[group[group < w_k.size]] = True
    output_idle_last = bool(group.size) and int(group[-1]) == w_k.size

    # merge: per watermark [ACTIVE?, W], per idle candidate [IDLE]; ordered by timer index
    t_list = [s0 + idle_k * step, s0 + w_k[active_before] * step, s0 + w_k * step]
    k_list = [
        np.full(idle_k.size, KIND_IDLE),
        np.full(int(active_before.sum()), KIND_ACTIVE),
        np.full(w_k.size, KIND_WATERMARK),
    ]
    v_list = [np.zeros(idle_k.size, np.int64), np.zeros(int(active_before.sum()), np.int64), w_v]
    rank = [np.zeros(idle_k.size), np.zeros(int(active_before.sum())), np.ones(w_k.size)]
    times = np.concatenate(t_list).astype(np.int64)
    kinds = np.concatenate(k_list).astype(np.int64)
    values = np.concatenate(v_list).astype(np.int64)
    o = np.lexsort((np.concatenate(rank), times))
    times, kinds, values = times[o], kinds[o], values[o]

    if finish:
        # rebuild the incremental state after timer last_k and let it finish at `end`
        gen = PeriodicWatermarks(b, step, start=s0, idle_timeout=timeout)
        n_seen = int(np.searchsorted(k_of, last_k, side="right"))
        gen._next_timer = s0 + (last_k + 1) * step
        gen._current = int(w_v[-1]) if w_v.size else MIN_TIMESTAMP
        gen._max_seen = int(prefix_max[-1]) if n else None
        gen._counter = n
        gen._last_counter = n_seen if last_k >= 1 else 0
        if timeout is not None and run_start_last is not None:
            gen._inactive_since = s0 + run_start_last * step
        gen._idle_now = idle_now_last and n_seen == n
        gen._output_idle = output_idle_last
        gen._last_arrival = int(a[-1]) if n else None
        tail = gen.finish(end)
        if tail:
            ft = np.array([x.time for x in tail], dtype=np.int64)
            fk = np.array(
                [
                    KIND_WATERMARK
                    if isinstance(x.output, int)
                    else (KIND_IDLE if x.output is StreamStatus.IDLE else KIND_ACTIVE)
                    for x in tail
                ],
                dtype=np.int64,
            )
            fv = np.array([x.output if isinstance(x.output, int) else 0 for x in tail], np.int64)
            times = np.concatenate((times, ft))
            kinds = np.concatenate((kinds, fk))
            values = np.concatenate((values, fv))
    return PeriodicOutputs(times, kinds, values)


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


# ============================================================================ 2. alignment


@dataclass(frozen=True, eq=False)
class AlignmentResult:
    """What :func:`simulate_alignment` records (all µs).

    - ``read_time[s][i]``: processing time at which source ``s`` read its record ``i``.
    - ``watermark[s]``: a step series of source ``s``'s emitted watermark (Flink convention).
    - ``paused[s]``: the ``(from, to)`` processing-time intervals in which source ``s`` was
      paused (``to`` is when it resumed, or the end of the run).
    - ``announce_times`` / ``max_desired``: each coordinator announcement
      (``group minimum + max_allowed_drift``).
    - ``order``: ``(source, index)`` of every record in the order read (by read time, then
      source, then index).
    """

    read_time: list[np.ndarray]
    watermark: list[StepSeries]
    paused: list[list[tuple[int, int]]]
    announce_times: np.ndarray
    max_desired: np.ndarray
    order: list[tuple[int, int]] = field(repr=False)
    end_time: int = 0


def simulate_alignment(
    sources: Sequence[ArrayLike],
    *,
    bound: int,
    max_allowed_drift: int,
    update_interval: int,
    tick: int,
    records_per_tick: int = 1,
    buffer_size: int = DEFAULT_ALIGNMENT_BUFFER,
    max_ticks: int = 10_000_000,
) -> AlignmentResult:
    """Watermark alignment (``WatermarkStrategy.withWatermarkAlignment``): sources whose
    watermark runs ahead of the group's minimum by more than ``max_allowed_drift`` are paused.

    ``sources[s]`` lists source ``s``'s record event times (µs) in the order it reads them. A
    small deterministic model of Flink 2.3's ``SourceOperator`` and ``SourceCoordinator``:

    - Processing time advances in ticks: ``t_n = n * tick`` µs, ``n = 1, 2, ...``. In each
      tick every source that is not paused and not exhausted reads its next
      ``records_per_tick`` records, stamped ``t_n``; then it emits its bounded
      out-of-orderness watermark ``max - bound - 1`` if that is higher (a periodic emit per
      tick). A source has no watermark (``UNINITIALIZED``) before its first record.
    - At every ``t_n`` that is a multiple of ``update_interval`` (which must be a multiple of
      ``tick``), after reading: each source pushes its latest watermark into a ring of
      ``buffer_size`` samples (initially ``UNINITIALIZED``) and reports the latest to the
      coordinator (exhausted sources report ``MAX``, as idle ones do; uninitialized ones report
      nothing); the coordinator announces ``max_desired = min(last report of every source) +
      max_allowed_drift``; every source is then paused iff ``max_desired`` is below the oldest
      sample in its ring (``buffer_size = 0``: the latest watermark, Flink's pre-2.3 rule). The
      announcement reaches sources with no delay (Flink's takes up to two update intervals;
      the ring absorbs that).
    - The run ends when every source is exhausted.

    The source holding the group minimum is never paused, so the run always ends.
    """
    b = check_duration(bound, "bound")
    drift = check_duration(max_allowed_drift, "max_allowed_drift")
    dt = check_duration(tick, "tick", allow_zero=False)
    upd = check_duration(update_interval, "update_interval", allow_zero=False)
    if upd % dt:
        raise ValueError(f"update_interval={upd} µs must be a multiple of tick={dt} µs")
    if isinstance(records_per_tick, bool) or not isinstance(records_per_tick, int):
        raise TypeError(f"records_per_tick must be an int, got {records_per_tick!r}")
    if records_per_tick < 1:
        raise ValueError(f"records_per_tick must be >= 1, got {records_per_tick}")
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 0:
        raise ValueError(f"buffer_size must be an int >= 0, got {buffer_size!r}")
    logs = [time_column(s, f"sources[{i}]") for i, s in enumerate(sources)]
    if not logs:
        raise ValueError("simulate_alignment needs at least one source")
    every = upd // dt
    m = len(logs)
    pos = [0] * m
    max_seen: list[int | None] = [None] * m
    latest: list[int | None] = [None] * m  # None = UNINITIALIZED
    rings: list[list[int | None]] = [[None] * buffer_size for _ in range(m)]
    reports: dict[int, int] = {}
    paused = [False] * m
    paused_since: list[int | None] = [None] * m
    pauses: list[list[tuple[int, int]]] = [[] for _ in range(m)]
    reads: list[np.ndarray] = [np.zeros(log.size, dtype=np.int64) for log in logs]
    wm_t: list[list[int]] = [[] for _ in range(m)]
    wm_v: list[list[int]] = [[] for _ in range(m)]
    ann_t: list[int] = []
    ann_v: list[int] = []
    n = 0
    while any(pos[s] < logs[s].size for s in range(m)):
        n += 1
        if n > max_ticks:
            raise RuntimeError(f"simulate_alignment did not finish within {max_ticks} ticks")
        now = n * dt
        for s in range(m):
            if paused[s] or pos[s] >= logs[s].size:
                continue
            hi = min(pos[s] + records_per_tick, logs[s].size)
            reads[s][pos[s]:hi] = now
            top = int(logs[s][pos[s]:hi].max())
            seen = max_seen[s]
            max_seen[s] = top if seen is None else max(seen, top)
            pos[s] = hi
            w = _bounded(max_seen[s], b)
            last = latest[s]
            if w > MIN_TIMESTAMP and (last is None or w > last):
                latest[s] = w
                wm_t[s].append(now)
                wm_v[s].append(w)
        if n % every:
            continue
        for s in range(m):
            if buffer_size:
                rings[s].append(latest[s])
                rings[s].pop(0)
            last = latest[s]
            if pos[s] >= logs[s].size:
                reports[s] = MAX_TIMESTAMP
            elif last is not None:
                reports[s] = last
        if not reports:
            continue
        desired = min(min(reports.values()) + drift, MAX_TIMESTAMP)
        ann_t.append(now)
        ann_v.append(desired)
        for s in range(m):
            oldest = rings[s][0] if buffer_size else latest[s]
            should_pause = oldest is not None and desired < oldest and pos[s] < logs[s].size
            since = paused_since[s]
            if should_pause and since is None:
                paused[s], paused_since[s] = True, now
            elif not should_pause and since is not None:
                pauses[s].append((since, now))
                paused[s], paused_since[s] = False, None
    end = n * dt
    for s in range(m):
        since = paused_since[s]
        if since is not None:
            pauses[s].append((since, end))
    order = sorted(
        ((int(reads[s][i]), s, i) for s in range(m) for i in range(logs[s].size)),
    )
    return AlignmentResult(
        read_time=reads,
        watermark=[
            StepSeries(np.array(wm_t[s], np.int64), np.array(wm_v[s], np.int64), MIN_TIMESTAMP)
            for s in range(m)
        ],
        paused=pauses,
        announce_times=np.array(ann_t, dtype=np.int64),
        max_desired=np.array(ann_v, dtype=np.int64),
        order=[(s, i) for _, s, i in order],
        end_time=end,
    )


# ============================================================================ 3. windows


def window_start_with_offset(timestamp: int, offset: int, size: int) -> int:
    """Flink's ``TimeWindow.getWindowStartWithOffset`` (µs): Java's truncating remainder
    ``r = (ts - offset) % size``, then ``ts - r`` (``ts - (r + size)`` if ``r < 0``).

    The result is the largest ``start <= ts`` with ``start ≡ offset (mod size)``.
    """
    d = timestamp - offset
    r = abs(d) % size
    if d < 0:
        r = -r
    return timestamp - (r + size) if r < 0 else timestamp - r


def flink_intersects(a: IntervalWindow, b: IntervalWindow) -> bool:
    """Flink's ``TimeWindow.intersects``: ``a.start <= b.end and a.end >= b.start``.

    Inclusive: windows that merely touch (``a.end == b.start``) intersect, so Flink merges
    touching session windows. Beam's rule (``IntervalWindow.intersects`` in
    :mod:`theory.windowing.windows`) is strict and keeps them apart.
    """
    return a.start <= b.end and a.end >= b.start


def flink_merge_windows(
    windows: Iterable[IntervalWindow],
) -> list[tuple[frozenset[IntervalWindow], IntervalWindow]]:
    """Flink's ``TimeWindow.mergeWindows``: sort by start, sweep, merge runs of windows that
    :func:`flink_intersects` the running cover. Returns ``(members, cover)`` for each run of
    two or more *distinct* windows (members are a set, as in Flink's ``HashSet``)."""
    ws = sorted(windows, key=lambda w: w.start)
    out: list[tuple[frozenset[IntervalWindow], IntervalWindow]] = []
    cover: IntervalWindow | None = None
    members: set[IntervalWindow] = set()
    for w in ws:
        if cover is not None and flink_intersects(cover, w):
            cover = IntervalWindow(min(cover.start, w.start), max(cover.end, w.end))
            members.add(w)
        else:
            if cover is not None and len(members) > 1:
                out.append((frozenset(members), cover))
            cover, members = w, {w}
    if cover is not None and len(members) > 1:
        out.append((frozenset(members), cover))
    return out



@dataclass(frozen=True)
class Tumbling:
    """``TumblingEventTimeWindows.of(size, offset)`` (µs): ``[start, start + size)`` with
    ``start = window_start_with_offset(ts, offset, size)``. Flink requires
    ``abs(offset) < size`` (so ``size > 0``)."""

    size: int
    offset: int = 0

    def __post_init__(self) -> None:
        size, offset = as_int(self.size, "size"), as_int(self.offset, "offset")
        if size <= 0:
            raise ValueError(f"Tumbling window size must be > 0 µs, got {size}")
        if not abs(offset) < size:
            raise ValueError(
                f"Tumbling windows need abs(offset) < size (Flink's rule), got size={size} µs, "
                f"offset={offset} µs"
            )
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "offset", offset)

    @property
    def is_merging(self) -> bool:
        return False

    def assign(self, ts: int) -> list[IntervalWindow]:
        start = window_start_with_offset(ts, self.offset, self.size)
        return [IntervalWindow(start, start + self.size)]


#: Flink's ``SlidingEventTimeWindows.MAX_WINDOW_NUM``: at most this many windows per element.
MAX_WINDOW_NUM: Final[int] = 10_000_000


@dataclass(frozen=True)
class Sliding:
    """``SlidingEventTimeWindows.of(size, slide, offset)`` (µs). Windows start at
    ``window_start_with_offset(ts, offset, slide)`` and every ``slide`` before it while
    ``start > ts - size``, latest first (Flink's order). Flink requires
    ``abs(offset) < slide``, ``size > 0`` and ``size // slide <= 10_000_000``."""

    size: int
    slide: int
    offset: int = 0

    def __post_init__(self) -> None:
        size = as_int(self.size, "size")
        slide = as_int(self.slide, "slide")
        offset = as_int(self.offset, "offset")
        if size <= 0 or slide <= 0:
            raise ValueError(f"Sliding windows need size > 0 and slide > 0 µs, got {size}, {slide}")
        if not abs(offset) < slide:
            raise ValueError(
                "Sliding windows need abs(offset) < slide and size > 0 (Flink's rule), got "
                f"size={size} µs, slide={slide} µs, offset={offset} µs"
            )
        if size // slide > MAX_WINDOW_NUM:
            raise ValueError(f"Sliding windows need size // slide <= {MAX_WINDOW_NUM}")
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "slide", slide)
        object.__setattr__(self, "offset", offset)

    @property
    def is_merging(self) -> bool:
        return False

    def assign(self, ts: int) -> list[IntervalWindow]:
        last = window_start_with_offset(ts, self.offset, self.slide)
        return [
            IntervalWindow(s, s + self.size) for s in range(last, ts - self.size, -self.slide)
        ]


@dataclass(frozen=True)
class Sessions:
    """``EventTimeSessionWindows.withGap(gap)`` (µs): each element gets ``[ts, ts + gap)``;
    windows merge when they :func:`flink_intersects` (touching ones too). ``gap > 0``."""

    gap: int

    def __post_init__(self) -> None:
        gap = as_int(self.gap, "gap")
        if gap <= 0:
            raise ValueError(f"session gap must be > 0 µs (Flink: 0 < size), got {gap}")
        object.__setattr__(self, "gap", gap)

    @property
    def is_merging(self) -> bool:
        return True

    def assign(self, ts: int) -> list[IntervalWindow]:
        return [IntervalWindow(ts, ts + self.gap)]


Assigner = Tumbling | Sliding | Sessions


@dataclass(frozen=True)
class Firing:
    """One window emission: ``key``, ``window``, the pane's ``values`` (everything added since
    the window was created: Flink's ``EventTimeTrigger`` fires without purging), the
    operator's ``watermark`` at firing (µs, Flink convention) and its ``cause``: ``"timer"``
    (the watermark passed ``window.max_timestamp``) or ``"late"`` (an element arrived within
    the allowed lateness after the window had fired)."""

    key: Hashable
    window: IntervalWindow
    values: tuple[object, ...]
    watermark: int
    cause: str

    @property
    def count(self) -> int:
        """Number of elements in the pane."""
        return len(self.values)


@dataclass(frozen=True)
class LateElement:
    """An element sent to the late side output: every window it belongs to was late, and
    ``timestamp + allowed_lateness <= watermark`` (µs, Flink convention)."""

    key: Hashable
    timestamp: int
    value: object
    watermark: int


_END: Final[int] = MAX_TIMESTAMP  # Long.MAX_VALUE: "end of time"


class WindowOperator:
    """Flink's ``WindowOperator`` with ``EventTimeTrigger`` for one keyed stream (all µs,
    Flink convention: a watermark ``W`` says no more elements with timestamp ``<= W``).

    - ``process_element`` assigns windows; for a merging assigner the new window is merged
      into the key's in-flight windows first (``MergingWindowSet.addWindow``), and the
      lateness test applies to the result. A window is late when
      ``cleanup_time <= watermark``, where ``cleanup_time = max_timestamp + allowed_lateness``
      (``MAX_TIMESTAMP``, "end of time", if that would pass it). A late window is skipped.
    - The trigger: if ``window.max_timestamp <= watermark`` already, the element fires the
      window at once (a late firing within the allowed lateness: the whole pane again);
      otherwise a timer at ``max_timestamp``. A cleanup timer at ``cleanup_time`` is set too
      (none for "end of time").
    - An element all of whose windows were skipped goes to the late side output (or is
      counted in ``num_late_records_dropped`` without one) if ``ts + allowed_lateness <=
      watermark``; otherwise it is silently dropped (Flink does the same, e.g. in the gaps of
      sliding windows with ``slide > size``), counted in ``num_skipped``.
    - ``process_watermark(W)`` sets the watermark, then fires timers ``<= W`` in timestamp
      order: a timer at ``max_timestamp`` emits the pane; one at ``cleanup_time`` drops the
      window's state. Flink's order among equal timer timestamps is unspecified (a heap); here
      it is registration order.
    """

    def __init__(
        self, assigner: Assigner, allowed_lateness: int = 0, *, late_side_output: bool = True
    ) -> None:
        if not isinstance(assigner, (Tumbling, Sliding, Sessions)):
            raise TypeError(
                "assigner must be a theory.flink Tumbling, Sliding or Sessions, "
                f"got {assigner!r}"
            )
        self.assigner = assigner
        self.allowed_lateness = check_duration(allowed_lateness, "allowed_lateness")
        self.late_side_output = bool(late_side_output)
        self.watermark = MIN_TIMESTAMP
        self.late: list[LateElement] = []
        self.num_late_records_dropped = 0
        self.num_skipped = 0
        self._contents: dict[tuple[Hashable, IntervalWindow], list[object]] = {}
        self._in_flight: dict[Hashable, dict[IntervalWindow, IntervalWindow]] = {}
        self._timers: dict[tuple[int, Hashable, IntervalWindow], int] = {}
        self._heap: list[tuple[int, int, Hashable, IntervalWindow]] = []
        self._seq = 0

    # ---------------------------------------------------------------- public

    def process_element(self, key: Hashable, timestamp: int, value: object = None) -> list[Firing]:
        """One element (``timestamp`` µs) of ``key``; returns the firings it causes."""
        ts = check_timestamp(timestamp, "timestamp")
        hash(key)
        windows = self.assigner.assign(ts)
        for w in windows:
            if w.max_timestamp > MAX_TIMESTAMP:
                raise ValueError(
                    f"window {w!r} of timestamp {ts} µs ends after MAX_TIMESTAMP; Flink's "
                    "end-of-time watermark could never fire it"
                )
        out: list[Firing] = []
        skipped = True
        for window in windows:
            if self.assigner.is_merging:
                actual = self._add_window(key, window)
                if self._is_window_late(actual):
                    self._in_flight[key].pop(actual)
                    continue
                state_window = self._in_flight[key][actual]
            else:
                if self._is_window_late(window):
                    continue
                actual = state_window = window
            skipped = False
            self._contents.setdefault((key, state_window), []).append(value)
            if actual.max_timestamp <= self.watermark:  # EventTimeTrigger.onElement: FIRE
                out.append(self._firing(key, actual, state_window, "late"))
            else:
                self._register(actual.max_timestamp, key, actual)
            self._register_cleanup(key, actual)
        if skipped:
            if ts + self.allowed_lateness <= self.watermark:
                if self.late_side_output:
                    self.late.append(LateElement(key, ts, value, self.watermark))
                else:
                    self.num_late_records_dropped += 1
            else:
                self.num_skipped += 1
        return out

    def process_watermark(self, watermark: int) -> list[Firing]:
        """Advance the watermark (µs, Flink convention) and fire the timers it passes."""
        w = check_timestamp(watermark, "watermark")
        if w < self.watermark:
            raise ValueError(f"watermark {w} µs is below the current one {self.watermark} µs")
        self.watermark = w
        out: list[Firing] = []
        while self._heap and self._heap[0][0] <= w:
            ts, seq, key, window = heapq.heappop(self._heap)
            if self._timers.get((ts, key, window)) != seq:
                continue  # deleted or re-registered
            del self._timers[(ts, key, window)]
            out += self._on_event_time(ts, key, window)
        return out

    def end_of_input(self) -> list[Firing]:
        """The final ``Long.MAX_VALUE`` watermark of a bounded input (``MAX_TIMESTAMP``)."""
        return self.process_watermark(_END)

    def cleanup_time(self, window: IntervalWindow) -> int:
        """``window.max_timestamp + allowed_lateness``; ``MAX_TIMESTAMP`` ("end of time") if
        that reaches it."""
        c = window.max_timestamp + self.allowed_lateness
        return _END if c >= _END else c

    def in_flight(self, key: Hashable) -> list[IntervalWindow]:
        """The key's in-flight windows: merged sessions for :class:`Sessions`, else the windows
        holding state."""
        if self.assigner.is_merging:
            return sorted(self._in_flight.get(key, {}))
        return sorted(w for (k, w) in self._contents if k == key)

    @property
    def num_timers(self) -> int:
        """Registered event-time timers (fire and cleanup)."""
        return len(self._timers)

    # ---------------------------------------------------------------- internals

    def _is_window_late(self, window: IntervalWindow) -> bool:
        return self.cleanup_time(window) <= self.watermark

    def _register(self, ts: int, key: Hashable, window: IntervalWindow) -> None:
        k = (ts, key, window)
        if k in self._timers:  # HeapPriorityQueueSet: a timer exists once
            return
        self._seq += 1
        self._timers[k] = self._seq
        heapq.heappush(self._heap, (ts, self._seq, key, window))

    def _delete(self, ts: int, key: Hashable, window: IntervalWindow) -> None:
        self._timers.pop((ts, key, window), None)

    def _register_cleanup(self, key: Hashable, window: IntervalWindow) -> None:
        c = self.cleanup_time(window)
        if c != _END:
            self._register(c, key, window)

    def _firing(
        self, key: Hashable, window: IntervalWindow, state_window: IntervalWindow, cause: str
    ) -> Firing:
        values = tuple(self._contents.get((key, state_window), ()))
        return Firing(key, window, values, self.watermark, cause)

    def _on_event_time(self, ts: int, key: Hashable, window: IntervalWindow) -> list[Firing]:
        if self.assigner.is_merging:
            state_window = self._in_flight.get(key, {}).get(window)
            if state_window is None:
                return []  # timer of a window merged or cleaned since
        else:
            state_window = window
        out: list[Firing] = []
        if ts == window.max_timestamp and self._contents.get((key, state_window)):
            out.append(self._firing(key, window, state_window, "timer"))
        if ts == self.cleanup_time(window):
            self._contents.pop((key, state_window), None)
            self._delete(window.max_timestamp, key, window)
            if self.assigner.is_merging:
                self._in_flight[key].pop(window, None)
        return out

    def _add_window(self, key: Hashable, new: IntervalWindow) -> IntervalWindow:
        """``MergingWindowSet.addWindow`` with the operator's merge callback."""
        flight = self._in_flight.setdefault(key, {})
        result = new
        for members, cover in flink_merge_windows([*flight, new]):
            merged = set(members)
            if new in merged:
                merged.discard(new)
                result = cover
            target = flight[min(merged, key=lambda w: (w.start, w.end))]
            merged_states = [flight.pop(w) for w in sorted(merged, key=lambda w: w.start)]
            flight[cover] = target
            merged_states.remove(target)
            if not (cover in merged and len(merged) == 1):
                # EventTimeTrigger.onMerge, then clear each merged window's trigger and GC timer
                if cover.max_timestamp > self.watermark:
                    self._register(cover.max_timestamp, key, cover)
                for w in sorted(merged, key=lambda w: w.start):
                    self._delete(w.max_timestamp, key, w)
                    c = self.cleanup_time(w)
                    if c != _END:
                        self._delete(c, key, w)
                pane = self._contents.setdefault((key, target), [])
                for s in merged_states:
                    pane.extend(self._contents.pop((key, s), []))
        if result == new:
            flight[new] = new
        return result


# ------------------------------------------------------------------ whole-stream runner


@dataclass(frozen=True, eq=False)
class WatermarkSchedule:
    """Watermarks interleaved with a stream of ``n`` elements: ``value[j]`` (µs, Flink
    convention) is emitted after the first ``after[j]`` elements. ``after`` is
    non-decreasing in ``[0, n]``; a value not above the last emitted one is suppressed."""

    after: np.ndarray
    value: np.ndarray

    def __post_init__(self) -> None:
        a = np.asarray(self.after, dtype=np.int64)
        v = np.asarray(self.value, dtype=np.int64)
        if a.ndim != 1 or a.shape != v.shape:
            raise ValueError(f"after and value must be 1-d of one length, got {a.shape}, {v.shape}")
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
    v = _minus_bound(np.maximum.accumulate(e), b)
    return WatermarkSchedule(np.arange(1, e.size + 1, dtype=np.int64), v)


def periodic_schedule(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    *,
    bound: int,
    interval: int,
    start: int = 0,
    until: int | None = None,
) -> WatermarkSchedule:
    """The watermarks of :func:`periodic_watermarks` placed in the element stream: each goes
    after the elements arriving at or before its timer. ``arrival_time`` must be
    non-decreasing (the stream order)."""
    a = time_column(arrival_time, "arrival_time")
    if a.size > 1 and bool(np.any(a[1:] < a[:-1])):
        raise ValueError("arrival_time must be non-decreasing: the elements' stream order")
    outs = periodic_watermarks(
        event_time, a, bound=bound, interval=interval, start=start, until=until
    )
    after = np.searchsorted(a, outs.watermark_times, side="right").astype(np.int64)
    return WatermarkSchedule(after, outs.watermarks)


@dataclass(frozen=True)
class FlinkWindowsResult:
    """What :func:`run_flink_windows` produced: the ``firings`` in order, the ``late`` side
    output in order, and the operator's counters."""

    firings: list[Firing]
    late: list[LateElement]
    num_late_records_dropped: int
    num_skipped: int
    final_watermark: int


def run_flink_windows(
    events: Sequence[tuple[Hashable, int, object]],
    watermarks: WatermarkSchedule | Sequence[int | None],
    assigner: Assigner,
    allowed_lateness: int = 0,
    *,
    end_of_input: bool = True,
    late_side_output: bool = True,
) -> FlinkWindowsResult:
    """Run a :class:`WindowOperator` over one stream (parallelism 1), all µs.

    ``events`` are ``(key, timestamp, value)`` in stream order. ``watermarks`` is either a
    :class:`WatermarkSchedule` or one entry per event: the Flink-convention watermark the
    generator emits right after that event (``None`` for none). As Flink's watermark output
    does, a watermark not strictly above the last emitted one is dropped. With
    ``end_of_input`` the final ``Long.MAX_VALUE`` watermark flushes every window.
    """
    n = len(events)
    if isinstance(watermarks, WatermarkSchedule):
        schedule = watermarks
        if schedule.after.size and int(schedule.after[-1]) > n:
            raise ValueError(f"watermark schedule goes past the {n} events")
        after = [int(x) for x in schedule.after]
        values = [int(x) for x in schedule.value]
    else:
        if len(watermarks) != n:
            raise ValueError(
                f"watermarks has {len(watermarks)} entries for {n} events: give one per event "
                "(None for none) or a WatermarkSchedule"
            )
        after, values = [], []
        for i, w in enumerate(watermarks):
            if w is not None:
                after.append(i + 1)
                values.append(check_timestamp(w, f"watermarks[{i}]"))
    op = WindowOperator(assigner, allowed_lateness, late_side_output=late_side_output)
    firings: list[Firing] = []
    emitted = MIN_TIMESTAMP
    j = 0
    for i in range(n + 1):
        while j < len(after) and after[j] == i:
            if values[j] > emitted:
                emitted = values[j]
                firings += op.process_watermark(emitted)
            j += 1
        if i == n:
            break
        ev = events[i]
        if len(ev) != 3:
            raise ValueError(f"events[{i}] must be (key, timestamp, value), got {ev!r}")
        try:
            firings += op.process_element(ev[0], ev[1], ev[2])
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"events[{i}]: {exc}") from exc
    if end_of_input:
        firings += op.end_of_input()
    return FlinkWindowsResult(
        firings=firings,
        late=list(op.late),
        num_late_records_dropped=op.num_late_records_dropped,
        num_skipped=op.num_skipped,
        final_watermark=op.watermark,
    )
