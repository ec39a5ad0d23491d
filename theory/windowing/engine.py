"""The grouping stage: group by key and window, fire panes, hold the output watermark.

:class:`GroupByWindowEngine` is a GroupByKey under a
:class:`~theory.windowing.strategy.WindowingStrategy`, giving the panes Beam Python's streaming
runner (``BundleBasedDirectRunner``: ``GeneralTriggerDriver`` under the direct runner's
watermark manager) gives, pane for pane. Its calls mirror a TestStream script, and each
returns the panes it fires, in firing order. :func:`theory.windowing.runner.run_script`
runs a whole script, here or on the vectorised path (:mod:`theory.windowing.fast_path`).

Rules (all times µs; IW is the input watermark, OW the output watermark, both as the
runner sees them when a batch is processed). Each says where it comes from, and why:

- **Batches.** A batch (the elements of one call, per key) is grouped per window.
- **Expired data is dropped.** An (element, window) with ``IW > window.end +
  allowed_lateness`` is dropped (``dropped["expired"]``; Beam drops it silently): the
  window is past its lateness horizon, so its panes are over. Note ``window.end``, not
  ``max_timestamp``: Beam Python's ``GeneralTriggerDriver`` keeps one more µs than the
  Beam model's ``max_timestamp + allowed_lateness`` (Java's ``LateDataDroppingDoFnRunner``).
- **Element holds.** Each window of a batch adds one hold: the policy's combination of the
  output times of its elements (see :mod:`theory.windowing.strategy`) that are ``>= OW``.
  An element behind the output watermark gets none: it is *too late to hold* (Beam's rule,
  runners-core ``WatermarkHold.addElementHold``), since the output watermark has already
  passed it and a hold there could not keep it back. Under ``END_OF_WINDOW`` every batch
  holds at ``window.max_timestamp``, late or not: Beam Python's ``DependsOnlyOnWindow.merge``
  ignores the filtered times. Late panes are then output at the end of the window.
- **Firing.** The trigger runs on each window of the batch; if it says so (with IW as the
  watermark) the window fires at once. Data for a window whose trigger finished is dropped
  (``dropped["closed"]``): Beam keeps a tombstone for it. Timers fire once the input
  watermark (watermark timers) or processing time (processing-time timers) reaches them:
  all due timers in one batch, in timestamp order; each passes its own timestamp to the
  trigger as "the watermark" (as Beam's ``process_timer`` does).
- **Timing.** A pane's timing compares the *output watermark* (element firings) or the
  timer's timestamp (timer firings) with ``window.max_timestamp``: at or before it the pane
  is EARLY, after it ON_TIME for the first non-speculative timer pane, else LATE (Beam's
  ``GeneralTriggerDriver._output``). So a late pane can be EARLY when a hold keeps the
  output watermark back; the Beam model would say LATE.
- **Releasing holds.** A pane releases its window's holds, except a pane fired before
  ``window.end`` (by OW) under a trigger with an ON_TIME pane: Beam keeps the hold "in case
  there is an empty pane that needs to be fired at the end of the window".
- **The output watermark** is ``min(IW, smallest hold - 1 µs)`` (the runner's
  ``get_earliest_hold`` subtracts the 1 µs), recomputed after every batch; it is not
  latched and moves backwards when a batch adds a hold below it (the runner's watermark
  manager does the same).
- **Merging** windows (sessions) pool their elements, holds and trigger state
  (``MergeableStateAdapter``). A merged window that is new starts its pane index again at
  0: Beam clears the PaneInfo state of merged-away windows ("not preserved across merges").
  The merged holds stay, so an earlier END_OF_WINDOW hold keeps holding at its old
  ``max_timestamp``.
- **No garbage-collection hold.** Beam Python's streaming runner has none ("TODO: add late
  data and garbage-collection hold support"), so nothing closes a window at ``window.end +
  allowed_lateness`` and no closing pane is emitted: a window whose trigger never fires
  keeps its hold, and at the end the output watermark stays below ``MAX_TIMESTAMP``
  (Beam's runner reports "pipeline stall"). The model (Java's ``WatermarkHold``) would hold
  at ``window.end + allowed_lateness`` and close the window there. State that can never
  matter again (unreachable by new data, no timers, no hold) is freed, which no output
  can tell.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Hashable, Sequence
from enum import Enum
from typing import Any, Final, NamedTuple

import numpy as np

from theory.columns import as_int, check_timestamp
from theory.structures import Frontier
from theory.time import END_OF_GLOBAL_WINDOW, MAX_TIMESTAMP, MIN_TIMESTAMP
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

__all__ = ["STATE_HOLD", "GroupByWindowEngine", "Pane", "Timing"]

_GLOBAL_BOUNDS: Final = (MIN_TIMESTAMP, END_OF_GLOBAL_WINDOW)


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


# ----------------------------------------------------------------------------- state


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
        self.tomb = False  # the trigger finished: later data is dropped as "closed"
        self.index = 0
        self.nonspec = 0
        self.hold_min: int | None = None  # smallest hold: holds the output watermark
        self.hold_comb: int | None = None  # the policy's combination: the pane timestamp
        self.tags: dict[tuple[str, str], Any] = {}
        self.reach = reach  # input watermark from which no new data can reach the window
        self.alive = True
        self.timer = 0  # watermark-only triggers: sequence of the pending end-of-window timer


class _KeyState:
    """One key's windows (and, for merging fns, their bounds in start order)."""

    __slots__ = ("ends", "rank", "starts", "windows")

    def __init__(self, rank: int) -> None:
        self.rank = rank  # order of first arrival: the runner fires timers of keys in it
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


#: A timer in a heap: (timestamp µs, key rank, id sequence, timer sequence, id, name, domain),
#: so that due timers sort as Beam fires them.
_TimerEntry = tuple[int, int, int, int, _Id, Hashable, TimeDomain]


# ---------------------------------------------------------------------------- engine


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
        # EOW and LATEST combine holds into a pane timestamp by max, the others by min
        self._combine_max = self._policy is _EOW or self._policy is _LATEST
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
        #: A hold (µs) from state outside this engine (see :meth:`hold_externally`).
        self.external_hold = MAX_TIMESTAMP
        self._keys: dict[Hashable, _KeyState] = {}
        self._seq = 0
        self._ranks = 0
        self._wm_timers: list[_TimerEntry] = []
        self._pt_timers: list[_TimerEntry] = []
        self._simple_timers: list[tuple[int, int, _WinState]] = []
        #: Every window's smallest hold (µs), counted: its minimum holds the output watermark.
        self._holds = Frontier()
        self._gc_heap: list[tuple[int, int, _WinState]] = []
        #: (element, window) pairs dropped, by reason: "expired" or "closed".
        self.dropped: dict[str, int] = {"expired": 0, "closed": 0}
        #: (element, window) pairs that arrived late (timestamp < input watermark), grouped.
        self.late_elements = 0

    # -- public calls --------------------------------------------------------------

    def add_elements(self, elements: Sequence[tuple[Hashable, Any, int]]) -> list[Pane]:
        """Add ``(key, value, timestamp µs)`` elements arriving together (one batch);
        returns the panes they fire, then those of timers that became due. Nothing changes
        when an element is bad: ``TypeError`` when it is not a tuple or its timestamp not an
        integer, ``ValueError`` for a tuple of another length or a timestamp out of range."""
        elements = list(elements)
        for i, element in enumerate(elements):
            if not isinstance(element, tuple):
                raise TypeError(
                    f"elements[{i}] must be a (key, value, timestamp) tuple, got {element!r}"
                )
            if len(element) != 3:
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
        panes: list[Pane] = []
        iw, ow = self.input_watermark, self.output_watermark  # as the batch finds them
        by_key, expired = _group_rows(keys, element, starts, ends, lo, hi, iw - self._lateness)
        if expired:
            self.dropped["expired"] += expired
        for key, by_window in by_key.items():
            if by_window:
                self._process_key(key, by_window, values, stamps, iw, ow, panes)
        self._refresh()
        panes.extend(self._fire_timers())
        return panes

    def advance_watermark_to(self, watermark: int) -> list[Pane]:
        """Advance the input watermark to ``watermark`` µs (equal: no-op); returns the panes
        of the timers that become due. ``ValueError`` if it would move backwards."""
        watermark = check_timestamp(watermark, "watermark")
        if watermark < self.input_watermark:
            raise ValueError(
                f"watermark moved backwards: {watermark} µs < current input watermark "
                f"{self.input_watermark} µs"
            )
        self.input_watermark = watermark
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
        delta = as_int(delta, "delta")
        if delta < 0:
            raise ValueError(f"delta={delta} µs: processing time cannot move backwards")
        self.processing_time += delta
        return self._fire_timers()

    # -- introspection -------------------------------------------------------------

    def min_hold_value(self) -> int | None:
        """The stage's state hold (µs): the smallest window hold minus 1 µs, as Beam's
        runner holds the output watermark; None without holds."""
        holds = self._holds
        return holds.min() - 1 if holds else None

    def min_hold(self) -> tuple[int, Hashable, Any] | None:
        """The state hold (as :meth:`min_hold_value`) and the (key, window) holding it (the
        first, in order of arrival, if several do)."""
        if not self._holds:
            return None
        low = self._holds.min()
        ws = next(
            ws for ks in self._keys.values() for ws in ks.windows.values() if ws.hold_min == low
        )
        return low - 1, ws.key, self._window(ws.window)

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

    def next_timers(self) -> tuple[int | None, int | None]:
        """A lower bound of the earliest set timer (µs) in each domain, ``(watermark,
        processing time)``, None where none is set: no timer fires before the input
        watermark (processing time) reaches it. It may be early (a reset or cleared timer
        leaves a stale entry until it is due), never late; a runner can skip a stage with
        no input whose bounds are not due."""
        marks = [h[0][0] for h in (self._wm_timers, self._simple_timers) if h]
        return (min(marks) if marks else None), (self._pt_timers[0][0] if self._pt_timers else None)

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
        by_window: dict[Win, list[int]],
        values: Sequence[Any],
        stamps: Sequence[int],
        iw: int,
        ow: int,
        panes: list[Pane],
    ) -> None:
        """Beam's ``GeneralTriggerDriver.process_elements`` for one key's batch: group by
        window, merge, then add each window's hold and elements and run its trigger with IW
        as the watermark. Watermark-only triggers skip the trigger calls: their one timer,
        at the window's end, is set here, or, when already due, the window fires at once.
        ``by_window``: the key's unexpired element indexes per window, in arrival order."""
        ks = self._keys.get(key)
        if ks is None:
            self._ranks += 1
            ks = self._keys[key] = _KeyState(self._ranks)
        if self._merging:
            by_window = self._merge_new_windows(ks, by_window)
        policy, trigger = self._policy, self._trigger
        for window, idx in by_window.items():
            ws = ks.windows.get(window)
            if ws is not None and ws.tomb:
                self.dropped["closed"] += len(idx)  # the trigger finished: Beam ignores it
                continue
            hold = window[1] - 1 if policy is _EOW else self._batch_hold(window, idx, stamps, ow)
            if ws is None:
                ws = self._new_window(ks, key, window)
            if hold is not None:
                self._add_hold(ws, hold)
            ws.values.extend([values[i] for i in idx])
            self.late_elements += sum(1 for i in idx if stamps[i] < iw)
            if not self._simple:
                ctx = _Ctx(self, ws)
                trigger.on_element(window, ctx, len(idx))
                if trigger.should_fire(WATERMARK, iw, window, ctx):
                    finished = trigger.on_fire(iw, window, ctx)
                    panes.append(self._output(ws, bool(finished), ow, False))
            elif iw >= window[1]:  # the end-of-window timer is due: late data fires at once
                ws.timer = 0
                panes.append(self._output(ws, self._finishes, ow, False))
            elif not ws.timer:
                ws.timer = self._next()
                heapq.heappush(self._simple_timers, (window[1], ws.timer, ws))
            if ws.reach <= iw:
                self._maybe_free(ws)

    def _batch_hold(
        self, window: Win, idx: list[int], stamps: Sequence[int], ow: int
    ) -> int | None:
        """The hold the batch's elements ``idx`` add to ``window`` (µs), or None: the
        policy's combination of their output times not behind the output watermark ``ow``
        (older ones are too late to hold), always ``max_timestamp`` under END_OF_WINDOW
        (see the module docstring)."""
        policy = self._policy
        mts = window[1] - 1
        if policy is _EOW:
            return mts
        if self._element_policy:
            fn = policy.fn  # type: ignore[union-attr]
            iwin = self._window(window)
            outs = [t for t in (min(int(fn(stamps[i], iwin)), mts) for i in idx) if t >= ow]
        else:
            outs = [stamps[i] for i in idx if stamps[i] >= ow]
        if not outs:
            return None
        return max(outs) if policy is _LATEST else min(outs)

    # -- timers ----------------------------------------------------------------------

    def _fire_timers(self) -> list[Pane]:
        """Fire every due timer, batch after batch, until none is due."""
        if self._simple:
            return self._fire_simple()
        panes: list[Pane] = []
        trigger = self._trigger
        while True:
            fired = self._due_timers()
            if not fired:
                return panes
            for ts, _, _, _, ident, name, domain in fired:
                # Beam's process_timer: the timer's timestamp is "the watermark" of the
                # trigger calls and of the pane's timing, in both domains
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

    def _due_timers(self) -> list[_TimerEntry]:
        """Pop the due timers of both domains that are still set, in Beam's firing order
        (timestamp, key, window id, timer); stale heap entries (reset or cleared) are
        dropped."""
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
        fired.sort(key=lambda e: e[:4])
        return fired

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

    # -- panes -----------------------------------------------------------------------

    def _output(self, ws: _WinState, finished: bool, watermark: int, maybe_ontime: bool) -> Pane:
        """Beam's ``GeneralTriggerDriver._output``: ``watermark`` is the output watermark
        for element firings and the timer's timestamp for timer firings."""
        index = ws.index
        ws.index += 1
        window = ws.window
        timing, nonspec = self._timing(ws, watermark, maybe_ontime)
        values = tuple(ws.values)
        if finished:
            ws.values = []
            ws.tomb = True
        elif self._discarding:
            ws.values = []
        timestamp = ws.hold_comb
        if timestamp is None:
            timestamp = window[1] - 1  # no hold: the end of the window
        elif not (watermark < window[1] and self._ontime):
            self._release_hold(ws)  # (else kept for the ON_TIME pane: see the module)
        pane = (ws.key, self._window(window), values, timestamp, timing, index, nonspec)
        # Pane(...) without its Python-level __new__, as the fast path builds them
        return tuple.__new__(Pane, (*pane, index == 0, finished))

    def _timing(self, ws: _WinState, watermark: int, maybe_ontime: bool) -> tuple[Timing, int]:
        """The pane's timing and non-speculative index; counts the latter."""
        if watermark <= ws.window[1] - 1:
            nonspec = -1
            if ws.nonspec:  # a non-speculative pane came before (the runner logs a warning)
                nonspec = ws.nonspec
                ws.nonspec += 1
            return Timing.EARLY, nonspec
        nonspec = ws.nonspec
        ws.nonspec += 1
        return (Timing.ON_TIME if maybe_ontime and nonspec == 0 else Timing.LATE), nonspec

    def _window(self, window: Win) -> Any:
        """The pane's window: under ``GlobalWindows`` the global one, unless an element
        brought another (Beam groups by the windows its elements carry)."""
        if self._global and window == _GLOBAL_BOUNDS:
            return GLOBAL_WINDOW
        return trusted_interval_window(*window)

    # -- holds -----------------------------------------------------------------------

    def _add_hold(self, ws: _WinState, hold: int) -> None:
        """Add a hold (µs) to the window: the pane timestamp combines them by the policy,
        the output watermark is held by the smallest."""
        comb = ws.hold_comb
        if comb is None:
            ws.hold_comb = hold
        else:
            ws.hold_comb = max(comb, hold) if self._combine_max else min(comb, hold)
        low = ws.hold_min
        if low is None:
            ws.hold_min = hold
            self._holds.update(hold, 1)
        elif hold < low:
            ws.hold_min = hold
            self._holds.update_iter(((low, -1), (hold, 1)))

    def _combine(self, a: int, b: int) -> int:
        """Two holds combined as the policy combines output times (the pane timestamp)."""
        return max(a, b) if self._combine_max else min(a, b)

    def _release_hold(self, ws: _WinState) -> None:
        if ws.hold_min is not None:
            self._holds.update(ws.hold_min, -1)
        ws.hold_min = ws.hold_comb = None

    def _refresh(self) -> None:
        """Recompute the output watermark: ``min(IW, smallest hold - 1 µs)``."""
        iw = self.input_watermark
        holds = self._holds
        ow = min(iw, holds.min() - 1) if holds else iw
        self.output_watermark = min(ow, self.external_hold)

    def hold_externally(self, hold: int) -> None:
        """Hold the output watermark at ``hold`` µs (as :meth:`min_hold_value` gives a
        hold) for state kept outside this engine, e.g. the sessions a vectorised path runs
        beside it; ``MAX_TIMESTAMP`` for none."""
        self.external_hold = hold
        self._refresh()

    # -- windows ---------------------------------------------------------------------

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
            # new data may still merge into the window until IW passes end + gap + lateness
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

    # -- merging ---------------------------------------------------------------------

    def _merge_new_windows(
        self, ks: _KeyState, by_window: dict[Win, list[int]]
    ) -> dict[Win, list[int]]:
        """Merge the batch's new windows into the key's; the batch's elements per window
        after the merge (Beam's ``merged_windows_to_elements``)."""
        new = [w for w in by_window if w not in ks.windows]
        if not new:
            return by_window
        merged_away = self._merge(ks, new)
        if not merged_away:
            return by_window
        remapped: dict[Win, list[int]] = {}
        for w, lst in by_window.items():
            while w in merged_away:
                w = merged_away[w]
            got = remapped.get(w)
            if got is None:
                remapped[w] = list(lst)
            else:
                got.extend(lst)
        return remapped

    def _merge(self, ks: _KeyState, new: list[Win]) -> dict[Win, Win]:
        """Beam Python's ``Sessions.merge`` over the key's windows plus ``new``; merges
        state as ``MergeableStateAdapter`` does and calls the trigger's ``on_merge``.
        Returns where each merged-away window went."""
        merged_away: dict[Win, Win] = {}
        for group, result in _session_merges(ks.starts, ks.ends, new):
            target = self._merge_group(ks, group, result, merged_away)
            if self._simple:
                # on_merge clears the merged windows' end-of-window timers; the trigger sets
                # the result's again for the batch's elements
                if target is not None:
                    target.timer = 0
                continue
            ctx_ws = target if target is not None else _WinState(None, result, MAX_TIMESTAMP)
            self._trigger.on_merge(group, result, _Ctx(self, ctx_ws))
        return merged_away

    def _merge_group(
        self, ks: _KeyState, group: list[Win], result: Win, merged_away: dict[Win, Win]
    ) -> _WinState | None:
        """Move the state of the windows of ``group`` into ``result`` (new or not); the
        result's state, None when no window of the group had any."""
        windows = ks.windows
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
        return target

    def _absorb(self, ks: _KeyState, target: _WinState, m: _WinState) -> None:
        """Pool ``m``'s ids (and their timers), elements, counters, trigger state and holds
        into ``target``, and drop ``m``."""
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
        self._absorb_holds(target, m)
        self._drop_window(ks, m)

    def _absorb_holds(self, target: _WinState, m: _WinState) -> None:
        """Union ``m``'s holds into ``target``'s (``MergeableStateAdapter`` merges the hold
        states). The frontier keeps one count per window, at its smallest hold: two windows
        become one, so the larger of the two smallest holds is retracted; the pane
        timestamps combine by the policy (for EARLIEST the combination is the minimum, for
        LATEST and END_OF_WINDOW the maximum, of all holds)."""
        low, comb = m.hold_min, m.hold_comb
        if low is None or comb is None:
            return
        m.hold_min = m.hold_comb = None
        if target.hold_min is None or target.hold_comb is None:
            target.hold_min, target.hold_comb = low, comb  # the count moves with it
            return
        self._holds.update(max(target.hold_min, low), -1)
        target.hold_min = min(target.hold_min, low)
        target.hold_comb = self._combine(target.hold_comb, comb)


def _group_rows(
    keys: Sequence[Hashable],
    element: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    lo: int,
    hi: int,
    horizon: int,
) -> tuple[dict[Hashable, dict[Win, list[int]]], int]:
    """Rows ``lo..hi`` grouped in one pass by key (in order of first row, Beam's keyed
    bundles), then window (in order of first kept row), as element indexes in arrival
    order; without the expired rows (``IW > window.end + allowed_lateness``, i.e.
    ``window.end < horizon`` with ``horizon = IW - allowed_lateness``; see the module
    docstring), whose count is returned with the groups."""
    by_key: dict[Hashable, dict[Win, list[int]]] = {}
    expired = 0
    for r in range(lo, hi):
        e = element[r]
        k = keys[e]
        by_window = by_key.get(k)
        if by_window is None:
            by_window = by_key[k] = {}  # (a key whose rows all expired stays empty)
        end = ends[r]
        if end < horizon:
            expired += 1
            continue
        w = (starts[r], end)
        lst = by_window.get(w)
        if lst is None:
            by_window[w] = [e]
        else:
            lst.append(e)
    return by_key, expired


def _session_merges(
    starts: list[int], end_of: dict[int, int], new: list[Win]
) -> list[tuple[list[Win], Win]]:
    """Beam Python's ``Sessions.merge`` of a key's disjoint windows (sorted ``starts``,
    ``end_of[start]``) and ``new`` windows: each group of two or more strictly overlapping
    windows, sorted, with the window it becomes. Only old windows overlapping a new window
    can be in a group."""
    if len(new) == 1:
        # one new window: it and the old windows it overlaps form the only group
        s, e = new[0]
        i = bisect_left(starts, e)
        olds: list[Win] = []
        while i > 0 and end_of[starts[i - 1]] > s:
            olds.append((starts[i - 1], end_of[starts[i - 1]]))
            i -= 1
        if not olds:
            return []
        run_end = max(e, olds[0][1])  # olds[0] is the latest old window
        olds.append(new[0])
        olds.sort()
        return [(olds, (olds[0][0], run_end))]
    candidates = set(new)
    for s, e in new:
        i = bisect_left(starts, e)
        while i > 0 and end_of[starts[i - 1]] > s:
            candidates.add((starts[i - 1], end_of[starts[i - 1]]))
            i -= 1
    groups: list[tuple[list[Win], Win]] = []
    group: list[Win] = []
    run_end = MIN_TIMESTAMP
    for w in sorted(candidates):
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
    return groups
