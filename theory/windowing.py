"""Windowing strategies: window fn, trigger, accumulation, lateness and output timestamps.

This follows Beam's ``Windowing`` and ``TimestampCombiner``. Output-timestamp policies
(all µs):

- ``OUTPUT_AT_EOW``: a pane's timestamp is ``window.max_timestamp``.
- ``OUTPUT_AT_EARLIEST``: the minimum of the pane's non-late element timestamps.
- ``OUTPUT_AT_LATEST``: the maximum of them.
- :class:`ElementPolicy`: a user function ``(timestamp, window) -> output time``, combined
  with ``min`` (it is a hold: the earliest requested output time wins).

A non-late element adds a hold at the policy's value, clamped to be no earlier than the
stage's output watermark and no later than ``window.max_timestamp``; a late element adds
none. A pane's timestamp is the window's combined hold, or ``window.max_timestamp`` when
there is none, so late panes sit at the end of the window, as Beam does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from theory.time import check_duration
from theory.windows import IntervalWindow


class AccumulationMode(Enum):
    """Whether a pane carries the values of earlier panes of its window."""

    DISCARDING = "discarding"
    ACCUMULATING = "accumulating"


class TimestampCombiner(Enum):
    """Beam's output-timestamp policies."""

    OUTPUT_AT_EOW = "end_of_window"
    OUTPUT_AT_EARLIEST = "earliest"
    OUTPUT_AT_LATEST = "latest"


class WindowLike(Protocol):
    """What a policy needs of a window: its last timestamp (µs)."""

    @property
    def max_timestamp(self) -> int: ...


@dataclass(frozen=True)
class ElementPolicy:
    """A user-chosen output time per element, ``fn(timestamp, window) -> µs``, combined by min."""

    fn: Callable[[int, IntervalWindow], int]
    name: str = "element"


OutputPolicy = TimestampCombiner | ElementPolicy


def assign_output_time(policy: OutputPolicy, timestamp: int, window: WindowLike) -> int:
    """The hold one element asks for under ``policy`` (µs), before clamping."""
    if policy is TimestampCombiner.OUTPUT_AT_EOW:
        return window.max_timestamp
    if isinstance(policy, ElementPolicy):
        return int(policy.fn(timestamp, window))  # type: ignore[arg-type]
    return timestamp


def combine_holds(policy: OutputPolicy, a: int, b: int) -> int:
    """Combine two holds of one window: ``max`` for LATEST, ``min`` otherwise."""
    if policy is TimestampCombiner.OUTPUT_AT_LATEST:
        return max(a, b)
    return min(a, b)


def merge_holds(policy: OutputPolicy, window: WindowLike, holds: list[int]) -> int | None:
    """The hold of a merged window (Beam's ``TimestampCombiner.merge``): its
    ``max_timestamp`` under END_OF_WINDOW, else the combination of ``holds``; None when
    no merged window had a hold."""
    if not holds:
        return None
    if policy is TimestampCombiner.OUTPUT_AT_EOW:
        return window.max_timestamp
    result = holds[0]
    for h in holds[1:]:
        result = combine_holds(policy, result, h)
    return result


class ClosingBehavior(Enum):
    """Whether the final pane at garbage collection is emitted when it would be empty."""

    FIRE_IF_NON_EMPTY = "fire_if_non_empty"
    FIRE_ALWAYS = "fire_always"


@dataclass(frozen=True)
class WindowingStrategy:
    """Window fn, trigger, accumulation mode, allowed lateness (µs) and output policy."""

    window_fn: object
    trigger: object = None
    accumulation_mode: AccumulationMode = AccumulationMode.DISCARDING
    allowed_lateness: int = 0
    timestamp_combiner: OutputPolicy = TimestampCombiner.OUTPUT_AT_EOW
    closing_behavior: ClosingBehavior = ClosingBehavior.FIRE_IF_NON_EMPTY

    def __post_init__(self) -> None:
        check_duration(self.allowed_lateness, "allowed_lateness")
        if not hasattr(self.window_fn, "assign"):
            raise TypeError(f"window_fn must be a WindowFn, got {self.window_fn!r}")
        if self.trigger is None:
            from theory.triggers import DefaultTrigger

            object.__setattr__(self, "trigger", DefaultTrigger())
        if not isinstance(self.accumulation_mode, AccumulationMode):
            raise TypeError(
                f"accumulation_mode must be an AccumulationMode, got {self.accumulation_mode!r}"
            )
        if not isinstance(self.timestamp_combiner, (TimestampCombiner, ElementPolicy)):
            raise TypeError(
                f"timestamp_combiner must be a TimestampCombiner or ElementPolicy, "
                f"got {self.timestamp_combiner!r}"
            )
