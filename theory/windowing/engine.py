"""The grouping stage: group by key and window, fire panes, hold the output watermark.

:class:`GroupByWindowEngine` is a GroupByKey under a
:class:`~theory.windowing.strategy.WindowingStrategy`, giving the panes Beam Python's streaming
runner (``BundleBasedDirectRunner``: ``GeneralTriggerDriver`` under the direct runner's
watermark manager) gives, pane for pane. Its calls mirror a TestStream script, and each
returns the panes it fires, in firing order. :func:`run_script` runs a whole script.

Rules (all times µs; IW is the input watermark, OW the output watermark, both as the
runner sees them when a batch is processed):

- A batch (the elements of one call, per key) is grouped per window. An (element, window)
  with ``IW > window.end + allowed_lateness`` is dropped (``dropped["expired"]``; Beam drops
  it silently). Note ``window.end``, not ``max_timestamp``: the runner keeps one more µs
  than the Beam model's ``max_timestamp + allowed_lateness``.
- Each window of the batch adds a hold (see :mod:`theory.windowing.strategy`), its
  elements, and runs
  the trigger; if the trigger says so (with IW as the watermark) the window fires at once.
  Data for a window whose trigger finished is dropped (``dropped["closed"]``).
- Timers fire once the input watermark (watermark timers) or processing time
  (processing-time timers) reaches them: all due timers in one batch, in timestamp order;
  each passes its own timestamp to the trigger as "the watermark".
- A pane's timing compares the *output watermark* (element firings) or the timer's
  timestamp (timer firings) with ``window.max_timestamp``: at or before it the pane is
  EARLY, after it ON_TIME for the first non-speculative timer pane, else LATE. So a late
  pane can be EARLY when a hold keeps the output watermark back; the Beam model would say
  LATE.
- OW is ``min(IW, smallest hold - 1 µs)``, recomputed after every batch; it is not latched
  and moves backwards when a batch adds a hold below it (the runner does this too).
- Merging windows (sessions) pool their elements, holds and trigger state; a merged window
  that is new starts its pane index again at 0 (the runner keeps no PaneInfo state across
  merges). The merged holds stay, so an earlier END_OF_WINDOW hold keeps holding.
- Nothing is garbage-collected at ``window.end + allowed_lateness`` and no closing pane is
  emitted: a window whose trigger never fires keeps its hold, and at the end the output
  watermark stays below ``MAX_TIMESTAMP`` (Beam's runner reports "pipeline stall").
  State that can never matter again (unreachable by new data, no timers, no hold) is freed.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import accumulate, chain, count, repeat
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import numpy as np

from theory.columns import check_timestamp
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.windowing.script import ElementEvent, ProcessingTimeEvent, Script, WatermarkEvent
from theory.windowing.strategy import (
    AccumulationMode,
    ElementPolicy,
    TimestampCombiner,
    WindowingStrategy,
)
from theory.windowing.triggers import (
    REAL_TIME,
    WATERMARK,
    AfterWatermark,
    TimeDomain,
    Win,
    combine_tag,
)
from theory.windowing.windows import GLOBAL_WINDOW, GlobalWindows, IntervalWindow, Sessions


class Timing(Enum):
    """A pane's timing, as Beam's ``PaneInfo.Timing``."""

    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"
    UNKNOWN = "UNKNOWN"


class Pane(NamedTuple):
    """One firing of one window of one key. ``timestamp`` is the output time (µs)."""

    key: Hashable
    window: Any
    values: tuple[Any, ...]
    timestamp: int
    timing: Timing
    index: int  # type: ignore[assignment]  # the pane index; shadows tuple.index
    nonspeculative_index: int
    is_first: bool
    is_last: bool


#: The hold component name the engine reports for its windows' element holds.
STATE_HOLD = "state:pending-windows"

_EOW = TimestampCombiner.OUTPUT_AT_EOW
_LATEST = TimestampCombiner.OUTPUT_AT_LATEST
_ON_TIME, _LATE = Timing.ON_TIME, Timing.LATE


class _Id:
    """One Beam window id: the unit under which the runner stores timers. A merged window
    owns the ids of the windows merged into it; its timers stay on them."""

    __slots__ = ("timers", "tseq", "win")

    def __init__(self, win: _WinState) -> None:
        self.win = win
        #: (name, domain) -> (timestamp µs, insertion sequence)
        self.timers: dict[tuple[Hashable, TimeDomain], tuple[int, int]] = {}
        self.tseq = 0  # when this id's timer map was created (Beam iterates in that order)


class _WinState:
    """State of one (key, window): elements, holds, pane counters, trigger state, ids."""

    __slots__ = (
        "alive",
        "hold_comb",
        "hold_min",
        "ids",
        "index",
        "key",
        "nonspec",
        "reach",
        "tags",
        "timer",
        "tomb",
        "values",
        "window",
    )

    def __init__(self, key: Hashable, window: Win, reach: int) -> None:
        self.key = key
        self.window = window
        self.ids: list[_Id] = []
        self.values: list[Any] = []
        self.tomb = False
        self.index = 0
        self.nonspec = 0
        self.hold_min: int | None = None  # smallest hold: holds the output watermark
        self.hold_comb: int | None = None  # the policy's combination: the pane timestamp
        self.tags: dict[tuple[str, str], Any] = {}
        self.reach = reach  # input watermark from which no new data can reach the window
        self.alive = True
        self.timer = 0  # watermark-only triggers: sequence of the pending end-of-window timer


class _KeyState:
    __slots__ = ("ends", "rank", "starts", "windows")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.windows: dict[Win, _WinState] = {}
        self.starts: list[int] = []  # merging fns: sorted starts of the (disjoint) windows
        self.ends: dict[int, int] = {}


class _Ctx:
    """The trigger context of one window (see :class:`theory.windowing.triggers.TriggerContext`)."""

    __slots__ = ("eng", "prefix", "ws")

    def __init__(self, eng: GroupByWindowEngine, ws: _WinState, prefix: str = "") -> None:
        self.eng = eng
        self.ws = ws
        self.prefix = prefix

    @property
    def now(self) -> int:
        return self.eng.processing_time

    def get(self, tag: str) -> Any:
        return self.ws.tags.get((self.prefix, tag), 0)

    def add(self, tag: str, value: Any) -> None:
        tags = self.ws.tags
        k = (self.prefix, tag)
        old = tags.get(k)
        tags[k] = value if old is None else combine_tag(tag, old, value)

    def clear(self, tag: str) -> None:
        self.ws.tags.pop((self.prefix, tag), None)

    def set_timer(self, name: Hashable, domain: TimeDomain, timestamp: int) -> None:
        self.eng._set_timer(self.ws, (self.prefix, name), domain, timestamp)

    def clear_timer(self, name: Hashable, domain: TimeDomain) -> None:
        full = ((self.prefix, name), domain)
        for i in self.ws.ids:
            i.timers.pop(full, None)

    def nested(self, prefix: str) -> _Ctx:
        return _Ctx(self.eng, self.ws, self.prefix + prefix)


_TimerEntry = tuple[int, int, int, int, _Id, Hashable, TimeDomain]


class GroupByWindowEngine:
    """Incremental GroupByKey + windowing for one stage (see the module docstring)."""

    def __init__(self, strategy: WindowingStrategy) -> None:
        if not isinstance(strategy, WindowingStrategy):
            raise TypeError(f"strategy must be a WindowingStrategy, got {strategy!r}")
        self.strategy = strategy
        self._window_fn: Any = strategy.window_fn
        self._global = isinstance(self._window_fn, GlobalWindows)
        self._merging = bool(getattr(self._window_fn, "is_merging", False))
        self._gap = self._window_fn.gap if isinstance(self._window_fn, Sessions) else 0
        self._lateness = strategy.allowed_lateness
        self._policy = strategy.timestamp_combiner
        self._element_policy = isinstance(self._policy, ElementPolicy)
        self._discarding = strategy.accumulation_mode is AccumulationMode.DISCARDING
        self._trigger = strategy.trigger
        self._ontime = bool(self._trigger.has_ontime_pane())
        # DefaultTrigger and AfterWatermark() come down to one watermark timer per window at
        # its end; they skip the general trigger machinery (same panes, tested).
        self._simple = self._trigger.watermark_only()
        self._finishes = isinstance(self._trigger, AfterWatermark)
        #: The stage's input watermark (µs).
        self.input_watermark = MIN_TIMESTAMP
        #: The stage's output watermark (µs): ``min(input, holds)``, not latched (see module).
        self.output_watermark = MIN_TIMESTAMP
        #: Processing time (µs), from 0 as Beam's TestClock.
        self.processing_time = 0
        self._keys: dict[Hashable, _KeyState] = {}
        self._seq = 0
        self._ranks = 0
        self._wm_timers: list[_TimerEntry] = []
        self._pt_timers: list[_TimerEntry] = []
        self._simple_timers: list[tuple[int, int, _WinState]] = []
        self._hold_heap: list[tuple[int, int, _WinState]] = []
        self._gc_heap: list[tuple[int, int, _WinState]] = []
        #: (element, window) pairs dropped, by reason: "expired" or "closed".
        self.dropped: dict[str, int] = {"expired": 0, "closed": 0}
        #: (element, window) pairs that arrived late (timestamp < input watermark), grouped.
        self.late_elements = 0

    # -- public calls --------------------------------------------------------------

    def add_elements(self, elements: Sequence[tuple[Hashable, Any, int]]) -> list[Pane]:
        """Add ``(key, value, timestamp µs)`` elements arriving together (one batch);
        returns the panes they fire, then those of timers that became due."""
        elements = list(elements)
        for i, element in enumerate(elements):
            if not isinstance(element, tuple) or len(element) != 3:
                raise ValueError(f"elements[{i}] must be (key, value, timestamp), got {element!r}")
            check_timestamp(element[2], f"elements[{i}] timestamp")
        if not elements:
            return []
        stamps = [int(e[2]) for e in elements]
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
        """Add pre-assigned rows ``lo..hi`` as one batch: row r puts element ``element[r]``
        (an index into keys/values/stamps) into window ``[starts[r], ends[r])``.

        The bulk form of :meth:`add_elements` for callers that assign windows for a whole
        stream at once (the simulator); timestamps must already be validated.
        """
        by_key: dict[Hashable, list[int]] = {}
        for r in range(lo, hi):
            k = keys[element[r]]
            rows = by_key.get(k)
            if rows is None:
                by_key[k] = [r]
            else:
                rows.append(r)
        panes: list[Pane] = []
        iw, ow = self.input_watermark, self.output_watermark
        for key, rows in by_key.items():
            self._process_key(key, rows, values, stamps, element, starts, ends, iw, ow, panes)
        self._refresh()
        panes.extend(self._fire_timers())
        return panes

    def advance_watermark_to(self, watermark: int) -> list[Pane]:
        """Advance the input watermark to ``watermark`` µs (equal: no-op); returns the panes
        of the timers that become due."""
        check_timestamp(watermark, "watermark")
        if watermark < self.input_watermark:
            raise ValueError(
                f"watermark moved backwards: {watermark} µs < current input watermark "
                f"{self.input_watermark} µs"
            )
        self.input_watermark = int(watermark)
        self._refresh()
        panes = self._fire_timers()
        self._collect_garbage()
        return panes

    def advance_watermark_to_infinity(self) -> list[Pane]:
        """Advance the input watermark to ``MAX_TIMESTAMP``, as a TestStream ends."""
        return self.advance_watermark_to(MAX_TIMESTAMP)

    def advance_processing_time(self, delta: int) -> list[Pane]:
        """Advance processing time by ``delta`` µs (>= 0); returns the panes of the
        processing-time timers that become due."""
        if isinstance(delta, bool) or not isinstance(delta, (int, np.integer)):
            raise TypeError(f"delta must be an integer number of microseconds, got {delta!r}")
        if delta < 0:
            raise ValueError(f"processing time cannot move backwards: delta={delta} µs")
        self.processing_time += int(delta)
        return self._fire_timers()

    # -- introspection -------------------------------------------------------------

    def min_hold_value(self) -> int | None:
        """The stage's state hold (µs): the smallest window hold minus 1 µs, as Beam's
        runner holds the output watermark; None without holds."""
        found = self._min_hold_state()
        return None if found is None else found.hold_min - 1  # type: ignore[operator]

    def min_hold(self) -> tuple[int, Hashable, Any] | None:
        """The state hold (as :meth:`min_hold_value`) and the (key, window) holding it."""
        ws = self._min_hold_state()
        if ws is None:
            return None
        return ws.hold_min - 1, ws.key, self._window(ws.window)  # type: ignore[operator]

    def holds(self) -> dict[str, int]:
        """The named holds behind the output watermark (µs), empty when none."""
        value = self.min_hold_value()
        return {} if value is None else {STATE_HOLD: value}

    def pending_windows(self) -> int:
        """How many (key, window) states are kept."""
        return sum(len(k.windows) for k in self._keys.values())

    def pending_timers(self) -> dict[str, int]:
        """How many timers are set, by time domain (``"watermark"``, ``"processing_time"``)."""
        out = {WATERMARK.value: 0, REAL_TIME.value: 0}
        for ks in self._keys.values():
            for ws in ks.windows.values():
                if ws.timer:
                    out[WATERMARK.value] += 1
                for i in ws.ids:
                    for _, domain in i.timers:
                        out[domain.value] += 1
        return out

    @property
    def stalled(self) -> bool:
        """Whether the input watermark is at infinity but holds keep the output below it
        (Beam's runner then fails with "pipeline stall", or never ends if processing-time
        timers are pending)."""
        return self.input_watermark >= MAX_TIMESTAMP and self.output_watermark < MAX_TIMESTAMP

    # -- batches ---------------------------------------------------------------------

    def _process_key(
        self,
        key: Hashable,
        rows: list[int],
        values: Sequence[Any],
        stamps: Sequence[int],
        element: Sequence[int],
        starts: Sequence[int],
        ends: Sequence[int],
        iw: int,
        ow: int,
        panes: list[Pane],
    ) -> None:
        """Beam's ``GeneralTriggerDriver.process_elements`` for one key's batch."""
        lateness = self._lateness
        w2e: dict[Win, list[int]] = {}
        dropped = 0
        for r in rows:
            end = ends[r]
            if iw > end + lateness:
                dropped += 1
                continue
            w = (starts[r], end)
            lst = w2e.get(w)
            if lst is None:
                w2e[w] = [element[r]]
            else:
                lst.append(element[r])
        if dropped:
            self.dropped["expired"] += dropped
        if not w2e:
            return
        ks = self._keys.get(key)
        if ks is None:
            self._ranks += 1
            ks = self._keys[key] = _KeyState(self._ranks)
        if self._merging:
            new = [w for w in w2e if w not in ks.windows]
            if new:
                merged_away = self._merge(ks, new)
                if merged_away:
                    remapped: dict[Win, list[int]] = {}
                    for w, lst in w2e.items():
                        while w in merged_away:
                            w = merged_away[w]
                        got = remapped.get(w)
                        if got is None:
                            remapped[w] = list(lst)
                        else:
                            got.extend(lst)
                    w2e = remapped
        policy = self._policy
        trigger = self._trigger
        for window, idx in w2e.items():
            ws = ks.windows.get(window)
            if ws is not None and ws.tomb:
                self.dropped["closed"] += len(idx)
                continue
            mts = window[1] - 1
            # the batch's hold for this window
            if policy is _EOW:
                out: int | None = mts
            else:
                if self._element_policy:
                    fn = policy.fn  # type: ignore[union-attr]
                    iwin = self._window(window)
                    outs = [min(int(fn(stamps[i], iwin)), mts) for i in idx]
                    outs = [t for t in outs if t >= ow]
                else:
                    outs = [stamps[i] for i in idx if stamps[i] >= ow]
                if not outs:
                    out = None
                elif policy is _LATEST:
                    out = max(outs)
                else:
                    out = min(outs)
            if ws is None:
                ws = self._new_window(ks, key, window)
            if out is not None:
                self._add_hold(ws, out)
            ws.values.extend([values[i] for i in idx])
            late = sum(1 for i in idx if stamps[i] < iw)
            if late:
                self.late_elements += late
            if self._simple:
                end = window[1]
                if iw >= end:
                    ws.timer = 0
                    panes.append(self._output(ws, self._finishes, ow, False))
                elif not ws.timer:
                    ws.timer = self._next()
                    heapq.heappush(self._simple_timers, (end, ws.timer, ws))
            else:
                ctx = _Ctx(self, ws)
                trigger.on_element(window, ctx, len(idx))
                if trigger.should_fire(WATERMARK, iw, window, ctx):
                    finished = trigger.on_fire(iw, window, ctx)
                    panes.append(self._output(ws, bool(finished), ow, False))
            if ws.reach <= iw:
                self._maybe_free(ws)

    def _fire_timers(self) -> list[Pane]:
        """Fire every due timer, batch after batch, until none is due."""
        if self._simple:
            return self._fire_simple()
        panes: list[Pane] = []
        trigger = self._trigger
        while True:
            fired: list[_TimerEntry] = []
            for heap, mark in (
                (self._wm_timers, self.input_watermark),
                (self._pt_timers, self.processing_time),
            ):
                while heap and heap[0][0] <= mark:
                    entry = heapq.heappop(heap)
                    ident = entry[4]
                    if ident.timers.get((entry[5], entry[6])) == (entry[0], entry[3]):
                        fired.append(entry)
            if not fired:
                return panes
            fired.sort(key=lambda e: e[:4])
            for ts, _, _, _, ident, name, domain in fired:
                ident.timers.pop((name, domain), None)
                ws = ident.win
                if ws.tomb:
                    continue
                ctx = _Ctx(self, ws)
                window = ws.window
                if trigger.should_fire(domain, ts, window, ctx):
                    finished = trigger.on_fire(ts, window, ctx)
                    panes.append(self._output(ws, bool(finished), ts, domain is WATERMARK))
                if ws.reach <= self.input_watermark:
                    self._maybe_free(ws)
            self._refresh()

    def _fire_simple(self) -> list[Pane]:
        """Watermark-only triggers: the end-of-window timers due, fired as one batch."""
        heap = self._simple_timers
        iw = self.input_watermark
        fired: list[_WinState] = []
        while heap and heap[0][0] <= iw:
            _, seq, ws = heapq.heappop(heap)
            if ws.alive and ws.timer == seq:
                fired.append(ws)
        if not fired:
            return []
        panes = []
        for ws in fired:
            ws.timer = 0
            panes.append(self._output(ws, self._finishes, ws.window[1], True))
            if ws.reach <= iw:
                self._maybe_free(ws)
        self._refresh()
        return panes

    def _output(self, ws: _WinState, finished: bool, watermark: int, maybe_ontime: bool) -> Pane:
        """Beam's ``GeneralTriggerDriver._output``: ``watermark`` is the output watermark
        for element firings and the timer's timestamp for timer firings."""
        index = ws.index
        ws.index += 1
        window = ws.window
        mts = window[1] - 1
        if watermark <= mts:
            timing = Timing.EARLY
            nonspec = -1
            if ws.nonspec:
                nonspec = ws.nonspec
                ws.nonspec += 1
        else:
            nonspec = ws.nonspec
            ws.nonspec += 1
            timing = Timing.ON_TIME if maybe_ontime and nonspec == 0 else Timing.LATE
        values = tuple(ws.values)
        if finished:
            ws.values = []
            ws.tomb = True
        elif self._discarding:
            ws.values = []
        hold = ws.hold_comb
        if hold is None:
            timestamp = mts
        else:
            timestamp = hold
            if not (watermark < window[1] and self._ontime):
                ws.hold_min = ws.hold_comb = None
        return Pane(
            ws.key,
            self._window(window),
            values,
            timestamp,
            timing,
            index,
            nonspec,
            index == 0,
            finished,
        )

    # -- state -----------------------------------------------------------------------

    def _window(self, window: Win) -> Any:
        return GLOBAL_WINDOW if self._global else _interval(*window)

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _new_window(self, ks: _KeyState, key: Hashable, window: Win) -> _WinState:
        ws = self._make_window(key, window)
        if not self._simple:
            ws.ids.append(_Id(ws))
        self._register(ks, ws)
        return ws

    def _make_window(self, key: Hashable, window: Win) -> _WinState:
        if self._merging:
            reach = window[1] + self._gap + self._lateness
        else:
            reach = window[1] + self._lateness + 1
        return _WinState(key, window, reach)

    def _register(self, ks: _KeyState, ws: _WinState) -> None:
        window = ws.window
        ks.windows[window] = ws
        if self._merging:
            insort(ks.starts, window[0])
            ks.ends[window[0]] = window[1]
        if ws.reach <= MAX_TIMESTAMP:
            heapq.heappush(self._gc_heap, (ws.reach, self._next(), ws))

    def _add_hold(self, ws: _WinState, hold: int) -> None:
        comb = ws.hold_comb
        if comb is None:
            ws.hold_comb = hold
        elif self._policy is _EOW or self._policy is _LATEST:
            ws.hold_comb = max(comb, hold)
        else:
            ws.hold_comb = min(comb, hold)
        low = ws.hold_min
        if low is None or hold < low:
            ws.hold_min = hold
            heapq.heappush(self._hold_heap, (hold, self._next(), ws))

    def _min_hold_state(self) -> _WinState | None:
        heap = self._hold_heap
        while heap:
            hold, _, ws = heap[0]
            if ws.alive and ws.hold_min == hold:
                return ws
            heapq.heappop(heap)  # stale: released, lowered, merged or freed
        return None

    def _refresh(self) -> None:
        ws = self._min_hold_state()
        iw = self.input_watermark
        if ws is None:
            self.output_watermark = iw
        else:
            self.output_watermark = min(iw, ws.hold_min - 1)  # type: ignore[operator]

    def _set_timer(self, ws: _WinState, name: Hashable, domain: TimeDomain, ts: int) -> None:
        if not ws.ids:
            ws.ids.append(_Id(ws))
        ident = ws.ids[0]
        timers = ident.timers
        if not timers:
            ident.tseq = self._next()
        k = (name, domain)
        old = timers.get(k)
        if old is not None:
            if old[0] == ts:
                return
            entry = (ts, old[1])
        else:
            entry = (ts, self._next())
        timers[k] = entry
        ks = self._keys[ws.key]
        heap = self._wm_timers if domain is WATERMARK else self._pt_timers
        heapq.heappush(heap, (ts, ks.rank, ident.tseq, entry[1], ident, name, domain))

    def _merge(self, ks: _KeyState, new: list[Win]) -> dict[Win, Win]:
        """Beam Python's ``Sessions.merge`` over the key's windows plus ``new``; merges
        state as ``MergeableStateAdapter`` does and calls the trigger's ``on_merge``.

        The key's windows are disjoint, so only those overlapping a new window can merge.
        """
        starts, end_of = ks.starts, ks.ends
        groups: list[tuple[list[Win], Win]] = []
        if len(new) == 1:
            # one new window: it and the old windows it overlaps form the only group
            s, e = new[0]
            i = bisect_left(starts, e)
            olds: list[Win] = []
            while i > 0 and end_of[starts[i - 1]] > s:
                olds.append((starts[i - 1], end_of[starts[i - 1]]))
                i -= 1
            if not olds:
                return {}
            run_end = max(e, olds[0][1])  # olds[0] is the latest old window
            olds.append(new[0])
            olds.sort()
            groups.append((olds, (olds[0][0], run_end)))
        else:
            cand = set(new)
            for s, e in new:
                i = bisect_left(starts, e)
                while i > 0 and end_of[starts[i - 1]] > s:
                    cand.add((starts[i - 1], end_of[starts[i - 1]]))
                    i -= 1
            group: list[Win] = []
            run_end = MIN_TIMESTAMP
            for w in sorted(cand):
                if group and run_end > w[0]:
                    group.append(w)
                    run_end = max(run_end, w[1])
                else:
                    if len(group) > 1:
                        groups.append((group, (group[0][0], run_end)))
                    group = [w]
                    run_end = w[1]
            if len(group) > 1:
                groups.append((group, (group[0][0], run_end)))
        merged_away: dict[Win, Win] = {}
        windows = ks.windows
        for group, result in groups:
            movers = []
            for w in group:
                if w != result:
                    merged_away[w] = result
                    ws = windows.get(w)
                    if ws is not None:
                        ws.index = ws.nonspec = 0  # PaneInfo state is not kept across merges
                        movers.append(ws)
            target = windows.get(result)
            if movers:
                fresh = target is None
                if target is None:
                    target = self._make_window(movers[0].key, result)
                for m in movers:
                    self._absorb(ks, target, m)
                if fresh:
                    self._register(ks, target)
            if self._simple:
                # on_merge clears the merged windows' end-of-window timers; the trigger sets
                # the result's again for the batch's elements
                if target is not None:
                    target.timer = 0
                continue
            ctx_ws = target if target is not None else _WinState(None, result, MAX_TIMESTAMP)
            self._trigger.on_merge(group, result, _Ctx(self, ctx_ws))
        return merged_away

    def _absorb(self, ks: _KeyState, target: _WinState, m: _WinState) -> None:
        for ident in m.ids:
            ident.win = target
        target.ids.extend(m.ids)
        target.values.extend(m.values)
        target.tomb = target.tomb or m.tomb
        target.index += m.index
        target.nonspec += m.nonspec
        for tag, value in m.tags.items():
            old = target.tags.get(tag)
            target.tags[tag] = value if old is None else combine_tag(tag[1], old, value)
        if m.hold_min is not None:
            assert m.hold_comb is not None
            self._add_hold(target, m.hold_min)
            if m.hold_comb != m.hold_min:
                self._add_hold(target, m.hold_comb)
        self._drop_window(ks, m)

    def _drop_window(self, ks: _KeyState, ws: _WinState) -> None:
        ws.alive = False
        del ks.windows[ws.window]
        if self._merging:
            del ks.starts[bisect_left(ks.starts, ws.window[0])]
            del ks.ends[ws.window[0]]

    def _maybe_free(self, ws: _WinState) -> None:
        """Free a window no data can reach any more, with no timers and no hold."""
        if not ws.alive or ws.hold_min is not None or ws.timer:
            return
        for ident in ws.ids:
            if ident.timers:
                return
        ks = self._keys[ws.key]
        self._drop_window(ks, ws)
        if not ks.windows:
            del self._keys[ws.key]

    def _collect_garbage(self) -> None:
        heap = self._gc_heap
        iw = self.input_watermark
        while heap and heap[0][0] <= iw:
            _, _, ws = heapq.heappop(heap)
            self._maybe_free(ws)


# ------------------------------------------------------------------------ scripts


@dataclass(frozen=True)
class ScriptResult:
    """Panes and watermarks of a script run: ``panes[i]`` fired at event ``pane_event[i]``;
    the watermark arrays have one entry per event (after it), µs."""

    panes: list[Pane]
    pane_event: np.ndarray
    processing_time: np.ndarray
    input_watermark: np.ndarray
    output_watermark: np.ndarray
    dropped: dict[str, int] = field(default_factory=dict)
    late_elements: int = 0
    #: Output watermark below MAX_TIMESTAMP after the end (Beam: "pipeline stall").
    stalled: bool = False
    #: Processing-time timers still set at the end (with ``stalled``, Beam never finishes).
    pending_processing_timers: int = 0


def run_script(
    events: Script | Iterable[ElementEvent | WatermarkEvent | ProcessingTimeEvent],
    strategy: WindowingStrategy,
    *,
    to_infinity: bool = True,
    fast: bool = True,
) -> ScriptResult:
    """Run a TestStream-like script through a :class:`GroupByWindowEngine`.

    ``to_infinity`` ends the script with the watermark at ``MAX_TIMESTAMP`` (a TestStream
    always does; the final entry of the watermark arrays is that step).

    With ``fast`` (default), scripts under DefaultTrigger or AfterWatermark() on
    non-merging windows go through a vectorised path that gives the same result as the
    incremental engine (tested); it falls back to the engine when late data meets a held
    output watermark, the one case it does not model.
    """
    evs = events.events if isinstance(events, Script) else tuple(Script(list(events)).events)
    if fast and to_infinity:
        result = _run_fast(evs, strategy)
        if result is not None:
            return result
    return _run_incremental(evs, strategy, to_infinity)


class _Rows(NamedTuple):
    """A script's elements with their windows, as :meth:`GroupByWindowEngine.add_rows`
    takes them; the rows of the k-th non-empty element event are
    ``bounds[k]..bounds[k + 1]``."""

    keys: list[Hashable]
    values: list[Any]
    stamps: list[int]
    element: list[int]
    starts: list[int]
    ends: list[int]
    bounds: list[int]


def _assign_script(
    evs: tuple[ElementEvent | WatermarkEvent | ProcessingTimeEvent, ...],
    strategy: WindowingStrategy,
) -> _Rows | None:
    """Windows for all the script's elements in one vectorised call (timestamps µs, checked
    by :class:`ElementEvent`); None where that call overflows, so that batch by batch
    :meth:`GroupByWindowEngine.add_elements` raises at the batch it would."""
    chunks = [ev.elements for ev in evs if isinstance(ev, ElementEvent) and ev.elements]
    flat = list(chain.from_iterable(chunks))
    n = len(flat)
    stamps = np.fromiter(map(itemgetter(2), flat), np.int64, n)
    try:
        rows = strategy.window_fn.assign_array(stamps)  # type: ignore[attr-defined]
    except OverflowError:
        return None
    first = np.zeros(len(chunks) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, chunks), np.int64, len(chunks)), out=first[1:])
    # rows come grouped by element, in ascending element order
    bounds = np.searchsorted(rows.element, first, side="left")
    return _Rows(
        list(map(itemgetter(0), flat)),
        list(map(itemgetter(1), flat)),
        stamps.tolist(),
        rows.element.tolist(),
        rows.start.tolist(),
        rows.end.tolist(),
        bounds.tolist(),
    )


def _run_incremental(
    evs: tuple[ElementEvent | WatermarkEvent | ProcessingTimeEvent, ...],
    strategy: WindowingStrategy,
    to_infinity: bool,
) -> ScriptResult:
    engine = GroupByWindowEngine(strategy)
    panes: list[Pane] = []
    pane_event: list[int] = []
    n = len(evs) + (1 if to_infinity else 0)
    pt = np.empty(n, np.int64)
    iw = np.empty(n, np.int64)
    ow = np.empty(n, np.int64)
    bulk = _assign_script(evs, strategy)
    batch = 0
    for i, ev in enumerate(evs):
        if isinstance(ev, ElementEvent):
            if bulk is None:
                fired = engine.add_elements(ev.elements)
            elif ev.elements:
                lo, hi = bulk.bounds[batch], bulk.bounds[batch + 1]
                batch += 1
                k, v, t, e, st, en, _ = bulk
                fired = engine.add_rows(k, v, t, e, st, en, lo, hi)
            else:
                fired = []
        elif isinstance(ev, WatermarkEvent):
            fired = engine.advance_watermark_to(ev.watermark)
        else:
            fired = engine.advance_processing_time(ev.delta)
        panes.extend(fired)
        pane_event.extend([i] * len(fired))
        pt[i], iw[i], ow[i] = (
            engine.processing_time,
            engine.input_watermark,
            engine.output_watermark,
        )
    if to_infinity:
        fired = engine.advance_watermark_to_infinity()
        panes.extend(fired)
        pane_event.extend([len(evs)] * len(fired))
        pt[-1], iw[-1], ow[-1] = (
            engine.processing_time,
            engine.input_watermark,
            engine.output_watermark,
        )
    return ScriptResult(
        panes,
        np.asarray(pane_event, np.int64),
        pt,
        iw,
        ow,
        dict(engine.dropped),
        engine.late_elements,
        engine.stalled,
        engine.pending_timers()[REAL_TIME.value],
    )


# --------------------------------------------------------------------- fast path


def _interval(start: int, end: int) -> IntervalWindow:
    """An IntervalWindow of bounds known to be valid ints, without re-validating them."""
    w = object.__new__(IntervalWindow)
    object.__setattr__(w, "start", start)
    object.__setattr__(w, "end", end)
    return w


def _records(group: np.ndarray, val: np.ndarray) -> np.ndarray:
    """Mask of the entries strictly below every earlier entry of the same group (entries
    grouped contiguously, groups ascending): a segmented running minimum, computed as one
    running minimum by giving later groups lower offsets."""
    n = val.size
    if n == 0:
        return np.zeros(0, bool)
    low = int(val.min())
    span = int(val.max()) - low + 1
    top = int(group[-1])
    if span * (top + 1) >= 1 << 62:
        return np.ones(n, bool)  # no room for offsets: keep every entry (still exact)
    v = (val - low) + (top - group) * span
    run = np.minimum.accumulate(v)
    out = np.empty(n, bool)
    out[0] = True
    out[1:] = v[1:] < run[:-1]
    return out


def _interval_min(n: int, lo: np.ndarray, hi: np.ndarray, val: np.ndarray) -> np.ndarray:
    """For each point 0..n-1, the minimum ``val`` over the intervals ``[lo, hi]`` holding it
    (MAX_TIMESTAMP where none): a segment tree, built level by level with numpy."""
    size = 1 << max(1, (n - 1).bit_length())
    node = np.full(2 * size, MAX_TIMESTAMP, dtype=np.int64)
    keep = lo <= hi
    left, right, v = lo[keep] + size, hi[keep] + size + 1, val[keep]
    while left.size:
        m = left < right
        left, right, v = left[m], right[m], v[m]
        odd = (left & 1) == 1
        np.minimum.at(node, left[odd], v[odd])
        left = left + odd
        odd = (right & 1) == 1
        right = right - odd
        np.minimum.at(node, right[odd], v[odd])
        left >>= 1
        right >>= 1
    k = 1
    while k < size:
        parents = node[k : 2 * k]
        np.minimum(node[2 * k : 4 * k : 2], parents, out=node[2 * k : 4 * k : 2])
        np.minimum(node[2 * k + 1 : 4 * k : 2], parents, out=node[2 * k + 1 : 4 * k : 2])
        k *= 2
    return node[size : size + n]


#: Event kinds of the fast path's scan (exact types; anything else goes to the engine).
_KIND = {ElementEvent: 0, WatermarkEvent: 1, ProcessingTimeEvent: 2}
_ELEMENTS = attrgetter("elements")
_WATERMARK = attrgetter("watermark")
_DELTA = attrgetter("delta")
_KEY, _VALUE, _TS = itemgetter(0), itemgetter(1), itemgetter(2)
_new_tuple = tuple.__new__


def _scan(
    evs: tuple[ElementEvent | WatermarkEvent | ProcessingTimeEvent, ...],
) -> tuple[np.ndarray, np.ndarray, list[tuple[Hashable, Any, int]], np.ndarray] | None:
    """The script's event series, without a per-event Python loop: the input watermark
    and processing time (µs) after each event plus one final ``MAX_TIMESTAMP`` step, the
    elements in order, and each element's event index. None for an event that is not
    exactly one of the three script types."""
    n_ev = len(evs) + 1
    try:
        kinds = np.fromiter(map(_KIND.__getitem__, map(type, evs)), np.int8, n_ev - 1)
    except KeyError:
        return None
    get = evs.__getitem__
    iw_after = np.full(n_ev, MIN_TIMESTAMP, np.int64)
    pos = np.flatnonzero(kinds == 1)
    if pos.size:
        iw_after[pos] = np.fromiter(map(_WATERMARK, map(get, pos.tolist())), np.int64, pos.size)
        np.maximum.accumulate(iw_after, out=iw_after)  # scripts never move it backwards
    iw_after[-1] = MAX_TIMESTAMP
    pt_after = np.zeros(n_ev, np.int64)
    pos = np.flatnonzero(kinds == 2)
    if pos.size:
        # Python ints, so a sum past int64 raises OverflowError as the engine does
        pt_after[pos] = np.asarray(list(accumulate(map(_DELTA, map(get, pos.tolist())))), np.int64)
        np.maximum.accumulate(pt_after, out=pt_after)  # deltas are >= 0
    pos = np.flatnonzero(kinds == 0)
    chunks = list(map(_ELEMENTS, map(get, pos.tolist())))
    counts = np.fromiter(map(len, chunks), np.int64, len(chunks))
    return iw_after, pt_after, list(chain.from_iterable(chunks)), np.repeat(pos, counts)


def _group_order(key: np.ndarray, start: np.ndarray, n_keys: int) -> np.ndarray:
    """``np.lexsort((start, key))``: rows by key, then start, then position (stable), as two
    stable sorts (a radix sort for the small key codes)."""
    if n_keys > 1 << 15:
        return np.lexsort((start, key))
    by_start = np.argsort(start, kind="stable")
    if n_keys <= 1:
        return by_start
    return by_start[np.argsort(key[by_start].astype(np.int16), kind="stable")]


def _run_fast(
    evs: tuple[ElementEvent | WatermarkEvent | ProcessingTimeEvent, ...],
    strategy: WindowingStrategy,
) -> ScriptResult | None:
    """The whole script at once, for watermark-only triggers on non-merging windows.

    Under these triggers a window's first non-late batch sets its end-of-window timer, which
    fires (ON_TIME) at the first watermark event reaching ``window.end``; each batch of data
    for a window already past fires at once. What the engine computes element by element
    is then a function of the input watermark alone, except where the output watermark
    matters: holds of elements older than the input watermark (EARLIEST/LATEST), and late
    panes, which are LATE and release their hold only if the output watermark is past the
    window. The output watermark is computed from the non-late holds (a segment tree over
    events) and checked to put every such case on the simple side; if not, None (the
    caller runs the incremental engine).
    """
    trigger = strategy.trigger
    fn = strategy.window_fn
    policy = strategy.timestamp_combiner
    if (
        not trigger.watermark_only()
        or getattr(fn, "is_merging", False)
        or not isinstance(policy, TimestampCombiner)
    ):
        return None
    finishes = isinstance(trigger, AfterWatermark)
    accumulating = strategy.accumulation_mode is AccumulationMode.ACCUMULATING
    lateness = strategy.allowed_lateness
    n_ev = len(evs) + 1
    scanned = _scan(evs)
    if scanned is None:
        return None
    iw_after, pt_after, flat, ev_el = scanned
    del scanned
    n = len(flat)
    ts_el = np.fromiter(map(_TS, flat), np.int64, n)
    try:
        rows = fn.assign_array(ts_el)  # type: ignore[attr-defined]
    except OverflowError:
        return None
    # key codes in one pass: a new key gets the next code, in order of first appearance
    index: defaultdict[Hashable, int] = defaultdict(count().__next__)
    try:
        kcode_el = np.fromiter(map(index.__getitem__, map(_KEY, flat)), np.int64, n)
    except TypeError:
        return None  # unhashable key: let the engine raise its own error
    # an object array, not a list: the garbage collector need not scan it
    values_el = np.fromiter(map(_VALUE, flat), object, n)
    del flat
    el = rows.element
    start, end = rows.start, rows.end
    iw_before = np.empty(n_ev, np.int64)  # the input watermark each event arrives at
    iw_before[0] = MIN_TIMESTAMP
    iw_before[1:] = iw_after[:-1]
    r_ev = ev_el[el]
    r_iw = iw_before[r_ev]
    # droppable: input watermark > end + lateness, without int64 overflow
    gap = r_iw.view(np.uint64) - end.view(np.uint64)
    expired = (r_iw > end) & (gap > np.uint64(lateness))
    n_expired = int(np.count_nonzero(expired))
    # group the kept rows by (key, window), keeping arrival order inside a group
    # (a non-merging window is determined by its start)
    if n_expired:
        kept = np.flatnonzero(~expired)
        order = kept[_group_order(kcode_el[el[kept]], start[kept], len(index))]
    else:
        order = _group_order(kcode_el[el], start, len(index))
    el, start, end, r_ev, r_iw = el[order], start[order], end[order], r_ev[order], r_iw[order]
    r_ts = ts_el[el]
    r_key = kcode_el[el]
    past = r_iw >= end  # the window's timer is due: data for it fires at once
    m = el.shape[0]
    if m:
        new_group = np.empty(m, bool)
        new_group[0] = True
        new_group[1:] = (r_key[1:] != r_key[:-1]) | (start[1:] != start[:-1])
    else:
        new_group = np.zeros(0, bool)
    g_first = np.flatnonzero(new_group)
    gid = np.cumsum(new_group) - 1
    g_end = end[g_first]
    g_fire = np.searchsorted(iw_after, g_end, side="left")  # the timer's watermark event
    if np.any(g_fire >= n_ev):
        return None  # a window ending past MAX_TIMESTAMP never fires: leave it to the engine
    ontime = ~past
    # ON_TIME rows come first in a group (the watermark only rises): count them
    g_on = np.add.reduceat(ontime, g_first, dtype=np.int64) if m else np.zeros(0, np.int64)
    # batches: (group, event) runs
    new_batch = new_group.copy()
    if m:
        new_batch[1:] |= r_ev[1:] != r_ev[:-1]
    b_first = np.flatnonzero(new_batch)
    b_last = np.append(b_first[1:], m)
    b_gid = gid[b_first]
    b_ev = r_ev[b_first]
    b_late = past[b_first]
    # AfterWatermark(): after the first pane of a group, later data is dropped (closed)
    closed = np.zeros(m, bool)
    if finishes:
        late_rank = np.zeros(b_first.size, np.int64)
        if b_first.size:
            # rank of each late batch within its group
            lb = np.flatnonzero(b_late)
            if lb.size:
                newg = np.ones(lb.size, bool)
                newg[1:] = b_gid[lb[1:]] != b_gid[lb[:-1]]
                starts_at = np.maximum.accumulate(np.where(newg, np.arange(lb.size), 0))
                late_rank[lb] = np.arange(lb.size) - starts_at
        closed_batch = b_late & ((g_on[b_gid] > 0) | (late_rank > 0))
        closed = np.repeat(closed_batch, b_last - b_first)
        firing_late = b_late & ~closed_batch
    else:
        firing_late = b_late
    # holds of the non-late batches: each lasts from its event to its group's timer event
    exact = policy is TimestampCombiner.OUTPUT_AT_EOW
    passing = ontime if exact else ontime & (r_ts >= r_iw)
    hold_val = end - 1 if exact else r_ts
    on_b = ~b_late
    if policy is TimestampCombiner.OUTPUT_AT_LATEST and m:
        # one hold per batch: the batch's max passing timestamp
        bmax = np.full(b_first.size, MIN_TIMESTAMP - 1, np.int64)
        bidx = np.repeat(np.arange(b_first.size), b_last - b_first)
        np.maximum.at(bmax, bidx[passing], r_ts[passing])
        has = np.flatnonzero(on_b & (bmax >= MIN_TIMESTAMP))
        has = has[_records(b_gid[has], bmax[has])]
        h_lo, h_hi, h_val = b_ev[has], g_fire[b_gid[has]] - 1, bmax[has] - 1
    else:
        # a hold matters only if below every earlier hold of its window (all end together)
        rows = np.flatnonzero(passing)
        rows = rows[_records(gid[rows], hold_val[rows])]
        h_lo = r_ev[rows]
        h_hi = g_fire[gid[rows]] - 1
        h_val = hold_val[rows] - 1
    held = _interval_min(n_ev, h_lo, h_hi, h_val)
    ow_after = np.minimum(iw_after, held)
    ow_before = np.empty(n_ev, np.int64)
    ow_before[0] = MIN_TIMESTAMP
    ow_before[1:] = ow_after[:-1]
    # checks: the cases the engine would handle differently
    if np.any(ow_before[b_ev[firing_late]] < g_end[b_gid[firing_late]]):
        return None  # a late pane while the output watermark is held at or before the window
    if not exact:
        old = ontime & (r_ts < r_iw)
        if np.any(r_ts[old] >= ow_before[r_ev[old]]):
            return None  # an element older than the input watermark still adds a hold
    # the panes
    grouped = ~closed
    g_key = r_key[g_first]
    if exact:
        gts = g_end - 1
    else:
        # the ON_TIME pane's timestamp: the policy over the group's passing rows
        n_pass = np.bincount(gid[passing], minlength=g_first.size)
        if policy is _LATEST:
            gts = np.full(g_first.size, MIN_TIMESTAMP, np.int64)
            np.maximum.at(gts, gid[passing], r_ts[passing])
        else:
            gts = np.full(g_first.size, MAX_TIMESTAMP, np.int64)
            np.minimum.at(gts, gid[passing], r_ts[passing])
        gts = np.where(n_pass == 0, g_end - 1, gts)
    on = np.flatnonzero(g_on > 0)
    lb = np.flatnonzero(firing_late)
    lg = b_gid[lb]
    # each late pane's index: the ON_TIME pane (if any), then late panes in order
    newg = np.ones(lb.size, bool)
    newg[1:] = lg[1:] != lg[:-1]
    run_start = np.maximum.accumulate(np.where(newg, np.arange(lb.size), 0))
    late_idx = np.arange(lb.size) - run_start + (g_on[lg] > 0)
    # pane columns: the ON_TIME panes, then the late ones; then in firing order (stable)
    pane_ev = np.concatenate([g_fire[on], b_ev[lb]])
    order = np.argsort(pane_ev, kind="stable")
    p_group = np.concatenate([on, lg])[order]
    p_lo = np.concatenate([g_first[on], g_first[lg] if accumulating else b_first[lb]])[order]
    p_hi = np.concatenate([g_first[on] + g_on[on], b_last[lb]])[order]
    p_ts = np.concatenate([gts[on], g_end[lg] - 1])[order]
    p_idx = np.concatenate([np.zeros(on.size, np.int64), late_idx])[order]
    p_late = (order >= on.size).tolist()
    key_of = list(index)
    keys = map(key_of.__getitem__, g_key[p_group].tolist())
    if isinstance(fn, GlobalWindows):
        windows: Iterable[Any] = repeat(GLOBAL_WINDOW)
    else:
        p_start = start[g_first][p_group]
        w_start, first = np.unique(p_start, return_index=True)
        w_start_list = w_start.tolist()
        w_end_list = g_end[p_group][first].tolist()
        made = dict(zip(w_start_list, map(_interval, w_start_list, w_end_list), strict=True))
        windows = map(made.__getitem__, p_start.tolist())
    # each pane's values: a slice of the grouped values
    grouped_values = values_el[el]
    del values_el
    slices = map(grouped_values.__getitem__, map(slice, p_lo.tolist(), p_hi.tolist()))
    values = map(tuple, map(np.ndarray.tolist, slices))
    timing = (_ON_TIME, _LATE)
    idx = p_idx.tolist()
    columns = zip(
        keys,
        windows,
        values,
        p_ts.tolist(),
        map(timing.__getitem__, p_late),
        idx,
        idx,
        (p_idx == 0).tolist(),
        repeat(finishes),
    )
    panes: list[Pane] = list(map(_new_tuple, repeat(Pane), columns))
    late_grouped = int(np.count_nonzero(grouped & (r_ts < r_iw)))
    return ScriptResult(
        panes,
        pane_ev[order],
        pt_after,
        iw_after,
        ow_after,
        {"expired": n_expired, "closed": int(closed.sum())},
        late_grouped,
        False,
        0,
    )


__all__ = [
    "STATE_HOLD",
    "GroupByWindowEngine",
    "Pane",
    "ScriptResult",
    "Timing",
    "run_script",
]
