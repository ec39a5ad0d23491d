"""Windowing strategies: window fn, trigger, accumulation, lateness and output timestamps.

This follows Beam Python's ``Windowing`` and ``TimestampCombiner`` as its streaming runner
applies them (``GeneralTriggerDriver``); all times are µs. Output-timestamp policies:

- ``OUTPUT_AT_EOW``: a pane's timestamp is ``window.max_timestamp``.
- ``OUTPUT_AT_EARLIEST`` (and ``OUTPUT_AT_EARLIEST_TRANSFORMED``, the same in Beam Python):
  the minimum of the window's element holds.
- ``OUTPUT_AT_LATEST``: the maximum of them.
- :class:`ElementPolicy`: a user function ``(timestamp, window) -> output time``, clamped to
  ``window.max_timestamp`` and combined with ``min`` (no Beam counterpart).
- :func:`legacy_sliding_output_time`: the old Java ``SlidingWindows.getOutputTime`` rule
  (opt-in; Beam removed it in BEAM-12011).

Holds, as Beam Python's runner keeps them (a batch is the elements of one key arriving
together, e.g. one TestStream event):

- each batch adds one hold per window: the policy's combination of the output times of the
  batch's elements that are ``>=`` the stage's output watermark, or nothing if none are.
  Under ``OUTPUT_AT_EOW`` the hold is ``window.max_timestamp`` for every batch, late or not;
- a pane's timestamp is the combination of the window's holds, or ``window.max_timestamp``
  without one; the holds are released by the pane unless it is a speculative pane of a
  trigger with an ON_TIME pane (they then carry to the next pane);
- the stage's output watermark is held at *the smallest hold minus 1 µs*, whatever the
  policy (so under ``OUTPUT_AT_LATEST`` the earliest batch holds it);
- merging windows unions their holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from theory.columns import DurationLike, as_duration
from theory.windowing.triggers import DefaultTrigger, Trigger
from theory.windowing.windows import GlobalWindows, IntervalWindow, SlidingWindows


class AccumulationMode(Enum):
    """Whether a pane carries the values of earlier panes of its window."""

    DISCARDING = "discarding"
    ACCUMULATING = "accumulating"


class TimestampCombiner(Enum):
    """Beam's output-timestamp policies.

    ``OUTPUT_AT_EARLIEST_TRANSFORMED`` asks the window fn for each element's output time;
    no Beam Python window fn overrides ``get_transformed_output_time``, so it behaves as
    ``OUTPUT_AT_EARLIEST`` (Beam Python's SlidingWindows does not shift output times).
    """

    OUTPUT_AT_EOW = "end_of_window"
    OUTPUT_AT_EARLIEST = "earliest"
    OUTPUT_AT_LATEST = "latest"
    OUTPUT_AT_EARLIEST_TRANSFORMED = "earliest_transformed"


class WindowLike(Protocol):
    """What a policy needs of a window: its last timestamp (µs)."""

    @property
    def max_timestamp(self) -> int: ...


@dataclass(frozen=True)
class ElementPolicy:
    """A user-chosen output time per element, ``fn(timestamp, window) -> µs``, combined by
    min and clamped to ``window.max_timestamp``."""

    fn: Callable[[int, IntervalWindow], int]
    name: str = "element"


def legacy_sliding_output_time(window_fn: SlidingWindows) -> ElementPolicy:
    """Java's pre-BEAM-12011 ``SlidingWindows.getOutputTime``: an element's output time in
    window N+1 is at least the end of window N, ``max(ts, window.end - period)``, so the
    output of overlapping windows does not hold each other back. Opt-in."""
    if not isinstance(window_fn, SlidingWindows):
        raise TypeError(
            f"the overlapping-window adjustment needs SlidingWindows, got {window_fn!r}"
        )
    period = window_fn.period

    def shift(ts: int, window: IntervalWindow) -> int:
        return max(ts, window.end - period)

    return ElementPolicy(shift, "legacy-sliding")


OutputPolicy = TimestampCombiner | ElementPolicy

_MAX_COMBINED = (TimestampCombiner.OUTPUT_AT_EOW, TimestampCombiner.OUTPUT_AT_LATEST)


def assign_output_time(policy: OutputPolicy, timestamp: int, window: WindowLike) -> int:
    """The hold one element asks for under ``policy`` (µs)."""
    if policy is TimestampCombiner.OUTPUT_AT_EOW:
        return window.max_timestamp
    if isinstance(policy, ElementPolicy):
        return min(int(policy.fn(timestamp, window)), window.max_timestamp)  # type: ignore[arg-type]
    return timestamp


def combine_holds(policy: OutputPolicy, a: int, b: int) -> int:
    """Combine two holds of one window: ``max`` for LATEST and END_OF_WINDOW, else ``min``."""
    if policy in _MAX_COMBINED:
        return max(a, b)
    return min(a, b)


class ClosingBehavior(Enum):
    """Whether a final pane is emitted at garbage collection when it would be empty.

    Beam Python's streaming runner ignores it: it never garbage-collects windows and emits
    no closing pane. Kept so strategies can state it.
    """

    FIRE_IF_NON_EMPTY = "fire_if_non_empty"
    FIRE_ALWAYS = "fire_always"


@dataclass(frozen=True, init=False)
class WindowingStrategy:
    """Window fn, trigger, accumulation mode, allowed lateness (µs) and output policy.

    ``allowed_lateness`` may also be given as a ``timedelta`` or a string (``"1m"``); it is
    stored as µs.

    Rejected as Beam rejects them at ``GroupByKey`` (``ValueError``), unless
    ``allow_unsafe_triggers`` (Beam's ``--allow_unsafe_triggers``):

    - ``GlobalWindows`` with ``DefaultTrigger``: it never fires on unbounded data;
    - a trigger that may finish (``may_lose_data`` is ``MAY_FINISH``), e.g. ``AfterCount``,
      or ``AfterWatermark()`` without late firings under non-zero allowed lateness.
    """

    window_fn: object
    trigger: Trigger = field(default_factory=DefaultTrigger)
    accumulation_mode: AccumulationMode = AccumulationMode.DISCARDING
    allowed_lateness: int = 0
    timestamp_combiner: OutputPolicy = TimestampCombiner.OUTPUT_AT_EOW
    closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY
    allow_unsafe_triggers: bool = False

    def __init__(
        self,
        window_fn: object,
        trigger: Trigger | None = None,
        accumulation_mode: AccumulationMode = AccumulationMode.DISCARDING,
        allowed_lateness: DurationLike = 0,
        timestamp_combiner: OutputPolicy = TimestampCombiner.OUTPUT_AT_EOW,
        closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY,
        allow_unsafe_triggers: bool = False,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "window_fn", window_fn)
        set_(self, "trigger", DefaultTrigger() if trigger is None else trigger)
        set_(self, "accumulation_mode", accumulation_mode)
        set_(self, "allowed_lateness", as_duration(allowed_lateness, "allowed_lateness"))
        set_(self, "timestamp_combiner", timestamp_combiner)
        set_(self, "closing_behavior", closing_behavior)
        set_(self, "allow_unsafe_triggers", allow_unsafe_triggers)
        self._check()

    def _check(self) -> None:
        if not hasattr(self.window_fn, "assign_array"):
            raise TypeError(f"window_fn must be a WindowFn, got {self.window_fn!r}")
        if not isinstance(self.trigger, Trigger):
            raise TypeError(
                f"trigger must be a theory.windowing.triggers trigger, got {self.trigger!r}"
            )
        if not isinstance(self.accumulation_mode, AccumulationMode):
            raise TypeError(
                f"accumulation_mode must be an AccumulationMode, got {self.accumulation_mode!r}"
            )
        if not isinstance(self.timestamp_combiner, (TimestampCombiner, ElementPolicy)):
            raise TypeError(
                f"timestamp_combiner must be a TimestampCombiner or ElementPolicy, "
                f"got {self.timestamp_combiner!r}"
            )
        if not isinstance(self.closing_behavior, ClosingBehavior):
            raise TypeError(
                f"closing_behavior must be a ClosingBehavior, got {self.closing_behavior!r}"
            )
        if self.allow_unsafe_triggers:
            return
        if isinstance(self.window_fn, GlobalWindows) and isinstance(self.trigger, DefaultTrigger):
            raise ValueError(
                "GlobalWindows with DefaultTrigger never fires on unbounded data (Beam rejects "
                "it at GroupByKey); use another trigger, or allow_unsafe_triggers=True"
            )
        if self.trigger.may_finish(self.allowed_lateness):
            raise ValueError(
                f"unsafe trigger {self.trigger!r}: it may finish and drop data (Beam's "
                f"MAY_FINISH, allowed_lateness={self.allowed_lateness} µs); Beam rejects it "
                "unless --allow_unsafe_triggers: pass allow_unsafe_triggers=True"
            )
