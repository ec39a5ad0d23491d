"""Flink's event-time windows, in µs, Flink convention.

- assigners: :class:`Tumbling`, :class:`Sliding`, :class:`Sessions` (Flink's
  ``TimeWindow`` arithmetic: :func:`window_start_with_offset`, the inclusive
  :func:`flink_intersects` and :func:`flink_merge_windows`);
- :class:`WindowOperator`: ``WindowOperator`` with ``EventTimeTrigger``, allowed lateness,
  the late side output and state cleanup, its :class:`Firing` and :class:`LateElement`
  records;
- :func:`run_flink_windows`: the operator over a whole stream and a
  :class:`~theory.flink.generation.WatermarkSchedule`.

All times are int µs; a watermark ``W`` says no more elements with timestamp ``<= W``.
Checked against the apache-flink 2.3 jars (``tests/theory/flink/test_flink_oracle.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from theory.columns import as_int, check_duration, check_timestamp
from theory.flink.generation import WatermarkSchedule
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.windowing.windows import IntervalWindow

__all__ = [
    "MAX_WINDOW_NUM",
    "Assigner",
    "Firing",
    "FlinkWindowsResult",
    "LateElement",
    "Sessions",
    "Sliding",
    "Tumbling",
    "WindowOperator",
    "flink_intersects",
    "flink_merge_windows",
    "run_flink_windows",
    "window_start_with_offset",
]


# ========================================================================== assigners


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
        return [IntervalWindow(s, s + self.size) for s in range(last, ts - self.size, -self.slide)]


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


# =========================================================================== operator


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
                f"assigner must be a theory.flink Tumbling, Sliding or Sessions, got {assigner!r}"
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
        out: list[Firing] = []
        skipped = True
        for window in self._assign(ts):
            placed = self._place(key, window)
            if placed is None:
                continue  # the window is late: skipped
            actual, state_window = placed
            skipped = False
            self._contents.setdefault((key, state_window), []).append(value)
            if actual.max_timestamp <= self.watermark:  # EventTimeTrigger.onElement: FIRE
                out.append(self._firing(key, actual, state_window, "late"))
            else:
                self._register(actual.max_timestamp, key, actual)
            self._register_cleanup(key, actual)
        if skipped:
            self._skip(key, ts, value)
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

    def _assign(self, ts: int) -> list[IntervalWindow]:
        """The assigner's windows for ``ts``; one ending after ``MAX_TIMESTAMP`` is refused,
        since Flink's end-of-time watermark could never fire it."""
        windows = self.assigner.assign(ts)
        for w in windows:
            if w.max_timestamp > MAX_TIMESTAMP:
                raise ValueError(
                    f"window {w!r} of timestamp {ts} µs ends after MAX_TIMESTAMP; Flink's "
                    "end-of-time watermark could never fire it"
                )
        return windows

    def _place(
        self, key: Hashable, window: IntervalWindow
    ) -> tuple[IntervalWindow, IntervalWindow] | None:
        """The window the element lands in and the window keying its state (they differ
        after session merges), or None if that window is late. A merging assigner merges
        first and tests the merged window, as Flink does."""
        if not self.assigner.is_merging:
            return None if self._is_window_late(window) else (window, window)
        actual = self._add_window(key, window)
        if self._is_window_late(actual):
            self._in_flight[key].pop(actual)
            return None
        return actual, self._in_flight[key][actual]

    def _skip(self, key: Hashable, ts: int, value: object) -> None:
        """An element none of whose windows took it: late side output (or counted as dropped)
        if ``ts + allowed_lateness <= watermark`` (``isElementLate``), else silently skipped."""
        if ts + self.allowed_lateness > self.watermark:
            self.num_skipped += 1
        elif self.late_side_output:
            self.late.append(LateElement(key, ts, value, self.watermark))
        else:
            self.num_late_records_dropped += 1

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
                self._merge_state(key, cover, merged, target, merged_states)
        if result == new:
            flight[new] = new
        return result

    def _merge_state(
        self,
        key: Hashable,
        cover: IntervalWindow,
        merged: set[IntervalWindow],
        target: IntervalWindow,
        merged_states: list[IntervalWindow],
    ) -> None:
        """The operator's merge callback: ``EventTimeTrigger.onMerge`` (a timer at the cover's
        end unless already passed), clear each merged window's trigger and cleanup timers, and
        merge the panes into ``target``'s state."""
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


# ================================================================ whole-stream runner


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
    pending = _watermarks_after(watermarks, len(events))
    op = WindowOperator(assigner, allowed_lateness, late_side_output=late_side_output)
    firings: list[Firing] = []
    emitted = MIN_TIMESTAMP
    for i, marks in enumerate(pending):
        for w in marks:
            if w > emitted:  # Flink's watermark output drops one not above the last
                emitted = w
                firings += op.process_watermark(w)
        if i < len(events):
            firings += _process_event(op, events[i], i)
    if end_of_input:
        firings += op.end_of_input()
    return FlinkWindowsResult(
        firings=firings,
        late=list(op.late),
        num_late_records_dropped=op.num_late_records_dropped,
        num_skipped=op.num_skipped,
        final_watermark=op.watermark,
    )


def _watermarks_after(
    watermarks: WatermarkSchedule | Sequence[int | None], n: int
) -> list[list[int]]:
    """``pending[i]``: the watermarks (µs) emitted after the first ``i`` of ``n`` events, in
    order, from a schedule or from one entry (or None) per event."""
    pending: list[list[int]] = [[] for _ in range(n + 1)]
    if isinstance(watermarks, WatermarkSchedule):
        if watermarks.after.size and int(watermarks.after[-1]) > n:
            raise ValueError(f"watermark schedule goes past the {n} events")
        for after, value in zip(watermarks.after.tolist(), watermarks.value.tolist(), strict=True):
            pending[after].append(value)
        return pending
    if len(watermarks) != n:
        raise ValueError(
            f"watermarks has {len(watermarks)} entries for {n} events: give one per event "
            "(None for none) or a WatermarkSchedule"
        )
    for i, w in enumerate(watermarks):
        if w is not None:
            pending[i + 1].append(check_timestamp(w, f"watermarks[{i}]"))
    return pending


def _process_event(op: WindowOperator, event: tuple[Hashable, int, object], i: int) -> list[Firing]:
    """``events[i]`` through ``op``; a bad event's error names its index."""
    if len(event) != 3:
        raise ValueError(f"events[{i}] must be (key, timestamp, value), got {event!r}")
    try:
        return op.process_element(event[0], event[1], event[2])
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"events[{i}]: {exc}") from exc
