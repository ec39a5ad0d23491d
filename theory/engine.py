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
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, check_timestamp
from theory.windowing import (
    AccumulationMode,
    WindowingStrategy,
    assign_output_time,
    combine_holds,
    merge_holds,
)


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


class GroupByWindowEngine:
    """Incremental GroupByKey + windowing for one stage (see the module docstring)."""

    def __init__(self, strategy: WindowingStrategy) -> None:
        self.strategy = strategy
        self._window_fn: Any = strategy.window_fn
        self._merging = bool(getattr(self._window_fn, "is_merging", False))
        self._lateness = strategy.allowed_lateness
        self._policy = strategy.timestamp_combiner
        self._discarding = strategy.accumulation_mode is AccumulationMode.DISCARDING
        trigger: Any = strategy.trigger
        self._finishes = bool(trigger.finishes_after_watermark())
        self.input_watermark = MIN_TIMESTAMP
        self.output_watermark = MIN_TIMESTAMP
        self.processing_time = 0
        self._state: dict[Hashable, dict[Any, _WindowState]] = {}
        self._seq = 0
        self._fire_heap: list[tuple[int, int, Hashable, Any]] = []
        self._gc_heap: list[tuple[int, int, Hashable, Any]] = []
        self._hold_heap: list[tuple[int, int, Hashable, Any]] = []
        #: (element, window) pairs dropped, by reason: "expired" or "closed".
        self.dropped: dict[str, int] = {"expired": 0, "closed": 0}
        #: Elements that arrived late (timestamp < input watermark) but were grouped.
        self.late_elements = 0

    # -- public calls --------------------------------------------------------------

    def add_elements(self, elements: Sequence[tuple[Hashable, Any, int]]) -> list[Pane]:
        """Add ``(key, value, timestamp)`` elements; returns panes fired by late data."""
        for i, (_, _, ts) in enumerate(elements):
            check_timestamp(ts, f"elements[{i}] timestamp")
        iw = self.input_watermark
        expired_before = iw - self._lateness  # max_timestamp < this  <=>  droppable
        touched: dict[tuple[Hashable, Any], None] = {}
        assign = self._window_fn.assign
        for key, value, ts in elements:
            for proto in assign(ts):
                if proto.max_timestamp < expired_before:
                    # Droppable: the watermark is past the window's garbage-collection time.
                    self.dropped["expired"] += 1
                    continue
                kstate = self._state.get(key)
                if kstate is None:
                    kstate = self._state[key] = {}
                window = self._merge_into(key, kstate, proto) if self._merging else proto
                ws = kstate.get(window)
                if ws is None:
                    ws = kstate[window] = _WindowState()
                    self._schedule(key, window)
                if ws.closed:
                    # The trigger finished: the window takes no more data.
                    self.dropped["closed"] += 1
                    continue
                ws.values.append(value)
                if ts < iw:
                    # Late data is grouped but holds nothing back.
                    self.late_elements += 1
                else:
                    self._add_hold(key, window, ws, ts)
                if window.max_timestamp < iw:
                    touched[(key, window)] = None
        panes = []
        for key, window in touched:
            ws_now = self._state.get(key, {}).get(window)
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
        while fire_heap and fire_heap[0][0] < watermark:
            _, _, key, window = heapq.heappop(fire_heap)
            ws = self._state.get(key, {}).get(window)
            if ws is None or ws.on_time_done or ws.closed:
                continue  # merged away, collected, or already fired
            ws.on_time_done = True
            panes.append(self._fire(key, window, ws, on_time=True))
        gc_heap = self._gc_heap
        while gc_heap and gc_heap[0][0] < watermark:
            _, _, key, window = heapq.heappop(gc_heap)
            kstate = self._state.get(key)
            if kstate is not None and kstate.pop(window, None) is not None and not kstate:
                del self._state[key]
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
        heap = self._hold_heap
        while heap:
            hold, _, key, window = heap[0]
            ws = self._state.get(key, {}).get(window)
            if ws is not None and ws.hold == hold:
                return hold, key, window
            heapq.heappop(heap)  # stale: the hold moved, fired or was merged away
        return None

    def holds(self) -> dict[str, int]:
        """The named holds behind the output watermark (µs), empty when none."""
        found = self.min_hold()
        return {} if found is None else {STATE_HOLD: found[0]}

    def pending_windows(self) -> int:
        """How many (key, window) states are held."""
        return sum(len(k) for k in self._state.values())

    # -- internals -----------------------------------------------------------------

    def _schedule(self, key: Hashable, window: Any) -> None:
        self._seq += 1
        mts = window.max_timestamp
        heapq.heappush(self._fire_heap, (mts, self._seq, key, window))
        heapq.heappush(self._gc_heap, (min(mts + self._lateness, MAX_TIMESTAMP), self._seq, key, window))

    def _add_hold(self, key: Hashable, window: Any, ws: _WindowState, ts: int) -> None:
        hold = assign_output_time(self._policy, ts, window)
        # Never earlier than the output watermark, never past the end of the window.
        hold = min(max(hold, self.output_watermark), window.max_timestamp)
        ws.hold = hold if ws.hold is None else combine_holds(self._policy, ws.hold, hold)
        self._seq += 1
        heapq.heappush(self._hold_heap, (ws.hold, self._seq, key, window))

    def _merge_into(self, key: Hashable, kstate: dict[Any, _WindowState], proto: Any) -> Any:
        """Merge ``proto`` with the key's overlapping windows; return the surviving window."""
        overlapping = [w for w in kstate if w.start < proto.end and proto.start < w.end]
        if not overlapping:
            return proto
        start = min(proto.start, *(w.start for w in overlapping))
        end = max(proto.end, *(w.end for w in overlapping))
        merged = type(proto)(start, end)
        if len(overlapping) == 1 and overlapping[0] == merged:
            return merged
        target = _WindowState()
        holds = []
        for w in sorted(overlapping):
            ws = kstate.pop(w)
            target.values.extend(ws.values)
            if ws.hold is not None:
                holds.append(ws.hold)
            target.closed = target.closed or ws.closed
        target.hold = merge_holds(self._policy, merged, holds)
        kstate[merged] = target
        self._schedule(key, merged)
        if target.hold is not None:
            self._seq += 1
            heapq.heappush(self._hold_heap, (target.hold, self._seq, key, merged))
        return merged

    def _fire(self, key: Hashable, window: Any, ws: _WindowState, *, on_time: bool) -> Pane:
        index = ws.index
        ws.index += 1
        if self.input_watermark <= window.max_timestamp:
            timing, nonspec = Timing.EARLY, -1
        else:
            nonspec = ws.nonspeculative
            ws.nonspeculative += 1
            timing = Timing.ON_TIME if on_time and nonspec == 0 else Timing.LATE
        values = tuple(ws.values)
        timestamp = window.max_timestamp if ws.hold is None else ws.hold
        # The watermark is past the window: the hold has done its job.
        ws.hold = None
        finished = self._finishes
        if finished:
            ws.closed = True
            ws.values = []
        elif self._discarding:
            ws.values = []
        return Pane(key, window, values, timestamp, timing, index, nonspec, index == 0, finished)

    def _update_output(self) -> None:
        found = self.min_hold()
        computed = self.input_watermark if found is None else min(self.input_watermark, found[0])
        if computed > self.output_watermark:
            self.output_watermark = computed


def run_batches(
    engine: GroupByWindowEngine, batches: Iterable[tuple[Sequence[tuple[Hashable, Any, int]], int]]
) -> list[Pane]:
    """Feed (elements, then watermark) batches in order; return all panes fired."""
    out: list[Pane] = []
    for elements, watermark in batches:
        out.extend(engine.add_elements(elements))
        out.extend(engine.advance_watermark_to(watermark))
    return out
