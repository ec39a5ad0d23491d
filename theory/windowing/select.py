"""The one place that decides which vectorised path runs a windowing strategy.

:func:`script_path` is the path :func:`~theory.windowing.runner.run_script` (and
``run_columns``) tries before the incremental engine; each path may still refuse a script
it does not model (a :class:`~theory.windowing.fast_path.Refusal`).
:func:`whole_batch_path` is the path of a batch GroupByKey (all elements, then the
watermark to ``MAX_TIMESTAMP``), where the engine gives Beam's batch trigger driver's panes;
:func:`lifts_combine` says whether a streaming ``Combine.PerKey`` may combine partial
accumulators before its GroupByKey with the same panes. The runner (which bytes cross a
stage) and ``run_script`` ask these; none decides on its own.
"""

from __future__ import annotations

from enum import Enum

from theory.windowing.strategy import WindowingStrategy
from theory.windowing.triggers import (
    AfterAny,
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    DefaultTrigger,
    Never,
    Repeatedly,
    Trigger,
)
from theory.windowing.windows import FixedWindows, Sessions, SlidingWindows

__all__ = ["WindowingPath", "lifts_combine", "script_path", "whole_batch_path"]


class WindowingPath(Enum):
    """A vectorised grouping path."""

    WATERMARK = "watermark"  # fast_path: non-merging windows under watermark-only triggers
    COUNT = "count"  # count_path: non-merging windows under count-based triggers
    SESSIONS = "sessions"  # session_path (session_counts under count triggers)


def script_path(strategy: WindowingStrategy) -> WindowingPath:
    """The vectorised path for ``strategy``: SESSIONS for merging window fns, WATERMARK
    for the others under ``DefaultTrigger`` or a bare ``AfterWatermark()``, else COUNT."""
    if getattr(strategy.window_fn, "is_merging", False):
        return WindowingPath.SESSIONS
    if strategy.trigger.watermark_only():
        return WindowingPath.WATERMARK
    return WindowingPath.COUNT


_BATCH_WINDOW_FNS = (FixedWindows, SlidingWindows, Sessions)


def whole_batch_path(strategy: WindowingStrategy) -> WindowingPath | str:
    """The path of a batch GroupByKey under ``strategy`` (WATERMARK or SESSIONS), or a
    sentence saying why the engine does not model it there: it takes Fixed, Sliding and
    Sessions windows under ``DefaultTrigger`` or a bare ``AfterWatermark()``."""
    if type(strategy.window_fn) not in _BATCH_WINDOW_FNS:
        return f"window fn {type(strategy.window_fn).__name__} is not Fixed, Sliding or Sessions"
    if not strategy.trigger.watermark_only():
        return f"trigger {strategy.trigger!r} is not the default or a bare AfterWatermark()"
    return script_path(strategy)


def lifts_combine(trigger: Trigger, *, merging: bool, end_of_window: bool) -> bool:
    """Whether a streaming ``Combine.PerKey`` may be lifted (partial accumulators per task,
    then the GroupByKey) with the same panes: windows that do not merge (``merging``),
    output at the end of the window (``end_of_window``), and a ``trigger`` Beam's
    ``lift_combiners`` lifts."""
    return not merging and end_of_window and _lifted_trigger(trigger)


def _lifted_trigger(trigger: Trigger | None) -> bool:
    """Beam's ``lift_combiners`` rule: no element count above 1, no ``AfterAll``,
    ``AfterEach`` or ``OrFinally``; an ``AfterWatermark`` without early or late firings
    is not lifted (Beam's rule reads their absence as an unknown trigger)."""
    if trigger is None:
        return False
    if isinstance(trigger, DefaultTrigger | Always | Never | AfterProcessingTime):
        return True
    if isinstance(trigger, AfterCount):
        return trigger.count == 1
    if isinstance(trigger, AfterWatermark):
        return _lifted_trigger(trigger.early) and _lifted_trigger(trigger.late)
    if isinstance(trigger, Repeatedly):
        return _lifted_trigger(trigger.underlying)
    if type(trigger) is AfterAny:  # OrFinally is an AfterAny Beam does not lift
        return all(_lifted_trigger(t) for t in trigger.triggers)
    return False
