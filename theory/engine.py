"""The grouping stage: group by key and window, fire panes, hold the output watermark.

:class:`GroupByWindowEngine` is the incremental form of a GroupByKey under a
:class:`~theory.windowing.WindowingStrategy`. Its calls mirror a TestStream script:
elements arrive, the input watermark advances, processing time advances. Each call returns
the panes it fires, in firing order.

Rules (all times µs; W is the input watermark when the call is made):

- An element is *late* when its timestamp is ``< W``. It is still grouped, but adds no hold.
- An (element, window) is *droppable* when ``W > window.max_timestamp + allowed_lateness``;
  it is dropped and counted under ``dropped["expired"]``. Data for a window whose trigger
  has finished is dropped and counted under ``dropped["closed"]``. Nothing is lost silently.
- A non-late element adds a hold at the output policy's value, clamped to
  ``[output watermark, window.max_timestamp]`` (runners-core ``WatermarkHold``).
- The ON_TIME pane fires when ``W > window.max_timestamp``. Data that arrives after the
  watermark has passed the window fires a LATE pane at once (DefaultTrigger).
- A pane's timestamp is the window's combined hold, or ``window.max_timestamp`` without one.
- A window's state is garbage-collected once ``W > window.max_timestamp + allowed_lateness``.
- The output watermark is ``max(old, min(W, holds))``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, check_timestamp
from theory.windowing import (
    AccumulationMode,
    TimestampCombiner,
    WindowingStrategy,
    assign_output_time,
    combine_holds,
    merge_holds,
)
from theory.windows import GLOBAL_WINDOW, GlobalWindows, IntervalWindow


class Timing(Enum):
    """A pane's timing relative to the input watermark, as Beam's ``PaneInfo.Timing``."""

    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class Pane:
    """One firing of one window of one key. ``timestamp`` is the output time (µs)."""

    key: Hashable
    window: Any
    values: tuple[Any, ...]
    timestamp: int
    timing: Timing
    index: int
    nonspeculative_index: int
    is_first: bool
    is_last: bool


class _WindowState:
    """Buffered values, combined hold and pane counters of one (key, window)."""

    __slots__ = ("closed", "hold", "index", "nonspeculative", "on_time_done", "values")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.hold: int | None = None
        self.index = 0
        self.nonspeculative = 0
        self.on_time_done = False
        self.closed = False


#: The hold component name the engine reports for its pending windows.
STATE_HOLD = "state:pending-windows"

#: A window inside the engine: its (start, end) in µs. Window objects are made for panes.
_Win = tuple[int, int]


class GroupByWindowEngine:
    """Incremental GroupByKey + windowing for one stage (see the module docstring)."""

    def __init__(self, strategy: WindowingStrategy) -> None:
        self.strategy = strategy
        self._window_fn: Any = strategy.window_fn
        self._global = isinstance(self._window_fn, GlobalWindows)
        self._merging = bool(getattr(self._window_fn, "is_merging", False))
        self._lateness = strategy.allowed_lateness
        self._policy = strategy.timestamp_combiner
        self._discarding = strategy.accumulation_mode is AccumulationMode.DISCARDING
        trigger: Any = strategy.trigger
        self._finishes = bool(trigger.finishes_after_watermark())
        self.input_watermark = MIN_TIMESTAMP
        self.output_watermark = MIN_TIMESTAMP
        self.processing_time = 0
        self._state: dict[Hashable, dict[_Win, _WindowState]] = {}
        # For merging window fns: per key, the sorted starts of its (disjoint) windows,
        # and each window's end by its start.
        self._starts: dict[Hashable, list[int]] = {}
        self._ends: dict[Hashable, dict[int, int]] = {}
        self._seq = 0
        self._fire_heap: list[tuple[int, int, Hashable, _Win]] = []
        self._gc_heap: list[tuple[int, int, Hashable, _Win]] = []
        self._hold_heap: list[tuple[int, int, Hashable, _Win]] = []
        #: (element, window) pairs dropped, by reason: "expired" or "closed".
        self.dropped: dict[str, int] = {"expired": 0, "closed": 0}
        #: Elements that arrived late (timestamp < input watermark) but were grouped.
        self.late_elements = 0

    # -- public calls --------------------------------------------------------------

    def add_elements(self, elements: Sequence[tuple[Hashable, Any, int]]) -> list[Pane]:
        """Add ``(key, value, timestamp)`` elements; returns panes fired by late data."""
        if not elements:
            return []
        for i, (_, _, ts) in enumerate(elements):
            check_timestamp(ts, f"elements[{i}] timestamp")
        stamps = [e[2] for e in elements]
        rows = self._window_fn.assign_array(np.asarray(stamps, dtype=np.int64))
        return self.add_rows(
            [e[0] for e in elements],
            [e[1] for e in elements],
            stamps,
            rows.element.tolist(),
            rows.start.tolist(),
            rows.end.tolist(),
            0,
            len(rows),
        )

    def add_rows(
        self,
        keys: Sequence[Hashable],
        values: Sequence[Any],
        stamps: Sequence[int],
        element: Sequence[int],
        starts: Sequence[int],
        ends: Sequence[int],
        lo: int,
        hi: int,
    ) -> list[Pane]:
        """Add pre-assigned rows ``lo..hi``: row r puts element ``element[r]`` (an index
        into keys/values/stamps) into window ``[starts[r], ends[r])``.

        The bulk form of :meth:`add_elements` for callers that assign windows for a whole
        stream at once (the simulator); timestamps must already be validated.
        """
        iw = self.input_watermark
        expired_before = iw - self._lateness  # max_timestamp < this  <=>  droppable
        touched: dict[tuple[Hashable, _Win], None] = {}
        state = self._state
        merging = self._merging
        for r in range(lo, hi):
            end = ends[r]
            if end - 1 < expired_before:
                # Droppable: the watermark is past the window's garbage-collection time.
                self.dropped["expired"] += 1
                continue
            i = element[r]
            key = keys[i]
            kstate = state.get(key)
            if kstate is None:
                kstate = state[key] = {}
            window = self._merge_into(key, kstate, starts[r], end) if merging else (starts[r], end)
            ws = kstate.get(window)
            if ws is None:
                ws = kstate[window] = _WindowState()
                self._schedule(key, window)
                if merging:
                    insort(self._starts.setdefault(key, []), window[0])
                    self._ends.setdefault(key, {})[window[0]] = window[1]
            if ws.closed:
                # The trigger finished: the window takes no more data.
                self.dropped["closed"] += 1
                continue
            ws.values.append(values[i])
            ts = stamps[i]
            if ts < iw:
                # Late data is grouped but holds nothing back.
                self.late_elements += 1
            else:
                self._add_hold(key, window, ws, ts)
            if window[1] - 1 < iw:
                touched[(key, window)] = None
        panes = []
        for key, window in touched:
            ws_now = state.get(key, {}).get(window)
            if ws_now is not None and not ws_now.closed:
                panes.append(self._fire(key, window, ws_now, on_time=False))
        self._update_output()
        return panes

    def advance_watermark_to(self, watermark: int) -> list[Pane]:
        """Advance the input watermark (µs); fires ON_TIME panes and collects garbage."""
        check_timestamp(watermark, "watermark")
        if watermark < self.input_watermark:
            raise ValueError(
                f"watermark moved backwards: {watermark} µs < current input watermark "
                f"{self.input_watermark} µs"
            )
        self.input_watermark = watermark
        panes: list[Pane] = []
        fire_heap = self._fire_heap
        state = self._state
        while fire_heap and fire_heap[0][0] < watermark:
            _, _, key, window = heapq.heappop(fire_heap)
            ws = state.get(key, {}).get(window)
            if ws is None or ws.on_time_done or ws.closed:
                continue  # merged away, collected, or already fired
            ws.on_time_done = True
            panes.append(self._fire(key, window, ws, on_time=True))
        gc_heap = self._gc_heap
        while gc_heap and gc_heap[0][0] < watermark:
            _, _, key, window = heapq.heappop(gc_heap)
            kstate = state.get(key)
            if kstate is None or kstate.pop(window, None) is None:
                continue  # merged away or already collected
            if self._merging:
                starts = self._starts[key]
                del starts[bisect_left(starts, window[0])]
                del self._ends[key][window[0]]
            if not kstate:
                del state[key]
                self._starts.pop(key, None)
                self._ends.pop(key, None)
        self._update_output()
        return panes

    def advance_watermark_to_infinity(self) -> list[Pane]:
        """Advance the input watermark to ``MAX_TIMESTAMP``, firing every window."""
        return self.advance_watermark_to(MAX_TIMESTAMP)

    def advance_processing_time(self, delta: int) -> list[Pane]:
        """Advance processing time by ``delta`` µs (no watermark trigger depends on it)."""
        if delta < 0:
            raise ValueError(f"processing time cannot move backwards: delta={delta} µs")
        self.processing_time += delta
        return []

    # -- introspection -------------------------------------------------------------

    def min_hold(self) -> tuple[int, Hashable, Any] | None:
        """The smallest hold and the (key, window) that holds it, or None."""
        if self.min_hold_value() is None:
            return None
        hold, _, key, window = self._hold_heap[0]
        return hold, key, self._window(window)

    def holds(self) -> dict[str, int]:
        """The named holds behind the output watermark (µs), empty when none."""
        found = self.min_hold()
        return {} if found is None else {STATE_HOLD: found[0]}

    def pending_windows(self) -> int:
        """How many (key, window) states are held."""
        return sum(len(k) for k in self._state.values())

    # -- internals -----------------------------------------------------------------

    def _window(self, window: _Win) -> Any:
        return GLOBAL_WINDOW if self._global else IntervalWindow(*window)

    def _schedule(self, key: Hashable, window: _Win) -> None:
        self._seq += 1
        mts = window[1] - 1
        heapq.heappush(self._fire_heap, (mts, self._seq, key, window))
        gc_time = min(mts + self._lateness, MAX_TIMESTAMP)
        heapq.heappush(self._gc_heap, (gc_time, self._seq, key, window))

    def _add_hold(self, key: Hashable, window: _Win, ws: _WindowState, ts: int) -> None:
        max_ts = window[1] - 1
        policy = self._policy
        if policy is TimestampCombiner.OUTPUT_AT_EOW:
            hold = max_ts
        else:
            hold = assign_output_time(policy, ts, self._window(window))
        # Never earlier than the output watermark, never past the end of the window.
        hold = min(max(hold, self.output_watermark), max_ts)
        old = ws.hold
        new = hold if old is None else combine_holds(policy, old, hold)
        if new != old:
            ws.hold = new
            self._seq += 1
            heapq.heappush(self._hold_heap, (new, self._seq, key, window))

    def _merge_into(
        self, key: Hashable, kstate: dict[_Win, _WindowState], start: int, end: int
    ) -> _Win:
        """Merge [start, end) with the key's overlapping windows; return the survivor.

        The key's windows are disjoint, so those overlapping [start, end) are a run of the
        sorted starts: the ones with ``w.start < end`` whose ``w.end > start``.
        """
        starts = self._starts.get(key)
        if not starts:
            return (start, end)
        end_of = self._ends[key]
        j = bisect_left(starts, end)  # windows [0, j) start before our end
        i = j
        ends: list[int] = []
        while i > 0:
            w_end = end_of[starts[i - 1]]
            if w_end <= start:
                break  # disjoint and sorted: no earlier window reaches us either
            ends.append(w_end)
            i -= 1
        if i == j:
            return (start, end)
        merged_start = min(start, starts[i])
        merged_end = max(end, *ends)
        merged = (merged_start, merged_end)
        if j - i == 1 and (starts[i], ends[0]) == merged:
            return merged
        # Reuse the first merged state for the result: a merged window is a new window,
        # so its pane counters start again (Beam clears PaneInfo state across merges).
        target = kstate.pop((starts[i], end_of.pop(starts[i])))
        target.index = target.nonspeculative = 0
        target.on_time_done = False
        holds = [] if target.hold is None else [target.hold]
        for w_start in starts[i + 1 : j]:
            ws = kstate.pop((w_start, end_of.pop(w_start)))
            target.values.extend(ws.values)
            if ws.hold is not None:
                holds.append(ws.hold)
            target.closed = target.closed or ws.closed
        del starts[i:j]
        insort(starts, merged_start)
        end_of[merged_start] = merged_end
        if not holds:
            target.hold = None
        elif self._policy is TimestampCombiner.OUTPUT_AT_EOW:
            target.hold = merged_end - 1
        else:
            target.hold = merge_holds(self._policy, self._window(merged), holds)
        kstate[merged] = target
        self._schedule(key, merged)
        if target.hold is not None:
            self._seq += 1
            heapq.heappush(self._hold_heap, (target.hold, self._seq, key, merged))
        return merged

    def _fire(self, key: Hashable, window: _Win, ws: _WindowState, *, on_time: bool) -> Pane:
        index = ws.index
        ws.index += 1
        if self.input_watermark <= window[1] - 1:
            timing, nonspec = Timing.EARLY, -1
        else:
            nonspec = ws.nonspeculative
            ws.nonspeculative += 1
            timing = Timing.ON_TIME if on_time and nonspec == 0 else Timing.LATE
        values = tuple(ws.values)
        timestamp = window[1] - 1 if ws.hold is None else ws.hold
        # The watermark is past the window: the hold has done its job.
        ws.hold = None
        finished = self._finishes
        if finished:
            ws.closed = True
            ws.values = []
        elif self._discarding:
            ws.values = []
        return Pane(
            key,
            self._window(window),
            values,
            timestamp,
            timing,
            index,
            nonspec,
            index == 0,
            finished,
        )

    def _update_output(self) -> None:
        found = self.min_hold_value()
        computed = self.input_watermark if found is None else min(self.input_watermark, found)
        if computed > self.output_watermark:
            self.output_watermark = computed

    def min_hold_value(self) -> int | None:
        """The smallest hold (µs), or None; :meth:`min_hold` without the window."""
        heap = self._hold_heap
        state = self._state
        while heap:
            hold, _, key, window = heap[0]
            ws = state.get(key, {}).get(window)
            if ws is not None and ws.hold == hold:
                return hold
            heapq.heappop(heap)  # stale: the hold moved, fired or was merged away
        return None
