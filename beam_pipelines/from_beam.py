"""Beam windowing -> theory windowing: the inverse of :mod:`beam_pipelines.beam_runner`'s
conversions, for runners that decide panes with theory's engine.

:func:`theory_strategy` turns a Beam ``core.Windowing`` (window fn, trigger, accumulation
mode, timestamp combiner, allowed lateness) into a
:class:`theory.windowing.strategy.WindowingStrategy`; :func:`theory_window_fn` and
:func:`theory_trigger` convert the parts. Times become µs. Only what the engine models
converts: Beam's Fixed, Sliding, Sessions and Global windows and its trigger language; any
other window fn or trigger raises ``TypeError`` naming it. Beam already checked the
strategy when the pipeline was built (unsafe triggers refused unless
``--allow_unsafe_triggers``), so the result is built with ``allow_unsafe_triggers``.
"""

from __future__ import annotations

from typing import Any

from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms import trigger as bt
from apache_beam.transforms import window as bw

from theory.time import MICROS_PER_SECOND
from theory.windowing import triggers as tt
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows

__all__ = ["theory_strategy", "theory_trigger", "theory_window_fn"]

_OutputTime = beam_runner_api_pb2.OutputTime.Enum
_COMBINER = {
    _OutputTime.END_OF_WINDOW: TimestampCombiner.OUTPUT_AT_EOW,
    _OutputTime.EARLIEST_IN_PANE: TimestampCombiner.OUTPUT_AT_EARLIEST,
    _OutputTime.LATEST_IN_PANE: TimestampCombiner.OUTPUT_AT_LATEST,
}


def theory_window_fn(fn: Any) -> object:
    """The theory window fn of a Beam window fn (sizes and offsets in µs)."""
    if isinstance(fn, bw.FixedWindows):
        return FixedWindows(int(fn.size.micros), int(fn.offset.micros))
    if isinstance(fn, bw.SlidingWindows):
        return SlidingWindows(int(fn.size.micros), int(fn.period.micros), int(fn.offset.micros))
    if isinstance(fn, bw.Sessions):
        return Sessions(int(fn.gap_size.micros))
    if isinstance(fn, bw.GlobalWindows):
        return GlobalWindows()
    raise TypeError(f"no theory window fn for Beam's {fn!r}")


def theory_trigger(trigger: Any) -> tt.Trigger:
    """The theory trigger of a Beam trigger (processing-time delays in µs)."""
    if isinstance(trigger, bt.DefaultTrigger):
        return tt.DefaultTrigger()
    if isinstance(trigger, bt.AfterWatermark):
        early, late = trigger.early, trigger.late
        return tt.AfterWatermark(
            early=None if early is None else theory_trigger(early),
            late=None if late is None else theory_trigger(late),
        )
    if isinstance(trigger, bt.AfterProcessingTime):
        return tt.AfterProcessingTime(round(trigger.delay * MICROS_PER_SECOND))
    if isinstance(trigger, bt.AfterCount):
        return tt.AfterCount(int(trigger.count))
    if isinstance(trigger, bt.Repeatedly):
        return tt.Repeatedly(theory_trigger(trigger.underlying))
    if isinstance(trigger, bt.OrFinally):
        main, finally_ = trigger.triggers
        return tt.OrFinally(theory_trigger(main), theory_trigger(finally_))
    if isinstance(trigger, bt.AfterAny):
        return tt.AfterAny(*(theory_trigger(t) for t in trigger.triggers))
    if isinstance(trigger, bt.AfterAll):
        return tt.AfterAll(*(theory_trigger(t) for t in trigger.triggers))
    if isinstance(trigger, bt.AfterEach):
        return tt.AfterEach(*(theory_trigger(t) for t in trigger.triggers))
    if isinstance(trigger, bt._Never):
        return tt.Never()
    if isinstance(trigger, bt.Always):
        return tt.Always()
    raise TypeError(f"no theory trigger for Beam's {trigger!r}")


def theory_strategy(windowing: Any) -> WindowingStrategy:
    """The theory strategy of a Beam ``core.Windowing`` (see the module docstring)."""
    combiner = _COMBINER.get(windowing.timestamp_combiner)
    if combiner is None:
        raise TypeError(f"no theory timestamp combiner for {windowing.timestamp_combiner!r}")
    discarding = windowing.accumulation_mode == bt.AccumulationMode.DISCARDING
    return WindowingStrategy(
        theory_window_fn(windowing.windowfn),
        theory_trigger(windowing.triggerfn),
        AccumulationMode.DISCARDING if discarding else AccumulationMode.ACCUMULATING,
        int(windowing.allowed_lateness.micros),
        combiner,
        allow_unsafe_triggers=True,
    )
