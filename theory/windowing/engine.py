"""The grouping stage: group by key and window, fire panes, hold the output watermark.

:class:`GroupByWindowEngine` is a GroupByKey under a
:class:`~theory.windowing.strategy.WindowingStrategy`, giving the panes Beam Python's streaming
runner (``BundleBasedDirectRunner``: ``GeneralTriggerDriver`` under the direct runner's
watermark manager) gives, pane for pane. Its calls mirror a TestStream script, and each
returns the panes it fires, in firing order.

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

:func:`theory.windowing.runner.run_script` runs a whole script, here or on the vectorised
path of :mod:`theory.windowing.fast_path`.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Hashable, Sequence
from enum import Enum
from typing import Any, NamedTuple

import numpy as np

from theory.columns import check_timestamp
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
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
from theory.windowing.windows import (
    GLOBAL_WINDOW,
    GlobalWindows,
    Sessions,
    trusted_interval_window,
)


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
        return GLOBAL_WINDOW if self._global else trusted_interval_window(*window)

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


__all__ = ["STATE_HOLD", "GroupByWindowEngine", "Pane", "Timing"]
