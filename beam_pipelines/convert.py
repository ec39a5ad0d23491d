"""Windowing strategies between Beam and :mod:`theory`, both ways.

- :func:`to_theory` takes what a Beam author has: a ``beam.WindowInto``, a Beam
  ``Windowing`` (``pcoll.windowing``), or a runner-API ``WindowingStrategy`` proto, and
  returns a :class:`theory.WindowingStrategy`: window fn, trigger, accumulation mode,
  allowed lateness (µs) and timestamp combiner.
- :func:`to_beam` takes a :class:`theory.WindowingStrategy` and returns the
  ``beam.WindowInto`` that applies it; :func:`beam_windowing` gives its keyword arguments.

What the other side cannot express fails with ``ValueError`` (``TypeError`` for an object
that is not a strategy, window fn or trigger at all) naming the part: a custom Beam
``WindowFn`` or trigger, ``AfterSynchronizedProcessingTime``, the RETRACTING mode, a
user-chosen output policy (:class:`theory.windowing.strategy.ElementPolicy`), a
``FIRE_ALWAYS`` closing behaviour (Beam Python's ``WindowInto`` has none), allowed lateness
not in whole milliseconds, ``AfterProcessingTime`` delays not in whole seconds (Beam
Python's are seconds). Beam wraps ``AfterWatermark``'s early and late triggers in
``Repeatedly``, as theory does, so both sides round-trip.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.transforms import core
from apache_beam.transforms import trigger as bt
from apache_beam.transforms import window as bw
from apache_beam.utils.timestamp import Duration, Timestamp

from theory.time import MICROS_PER_MILLI, MICROS_PER_SECOND
from theory.windowing import triggers as tt
from theory.windowing.strategy import (
    AccumulationMode,
    ClosingBehavior,
    TimestampCombiner,
    WindowingStrategy,
)
from theory.windowing.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows

__all__ = [
    "beam_trigger",
    "beam_window_fn",
    "beam_windowing",
    "theory_trigger",
    "theory_window_fn",
    "to_beam",
    "to_theory",
]

_COMBINER = {
    TimestampCombiner.OUTPUT_AT_EOW: bw.TimestampCombiner.OUTPUT_AT_EOW,
    TimestampCombiner.OUTPUT_AT_EARLIEST: bw.TimestampCombiner.OUTPUT_AT_EARLIEST,
    TimestampCombiner.OUTPUT_AT_LATEST: bw.TimestampCombiner.OUTPUT_AT_LATEST,
    TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED: (
        bw.TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
    ),
}
_FROM_COMBINER = {v: k for k, v in _COMBINER.items()}
_ACCUMULATION = {
    AccumulationMode.DISCARDING: bt.AccumulationMode.DISCARDING,
    AccumulationMode.ACCUMULATING: bt.AccumulationMode.ACCUMULATING,
}
_FROM_ACCUMULATION = {v: k for k, v in _ACCUMULATION.items()}


# ------------------------------------------------------------------ theory -> Beam


def beam_window_fn(fn: object) -> bw.WindowFn:
    """The Beam window fn of a :mod:`theory.windowing.windows` window fn."""
    if isinstance(fn, FixedWindows):
        return bw.FixedWindows(Duration(micros=fn.size), Timestamp(micros=fn.offset))
    if isinstance(fn, SlidingWindows):
        return bw.SlidingWindows(
            Duration(micros=fn.size), Duration(micros=fn.period), Timestamp(micros=fn.offset)
        )
    if isinstance(fn, Sessions):
        return bw.Sessions(Duration(micros=fn.gap))
    if isinstance(fn, GlobalWindows):
        return bw.GlobalWindows()
    raise TypeError(f"window_fn: no Beam window fn for {fn!r}")


def beam_trigger(trigger: tt.Trigger) -> bt.TriggerFn:
    """The Beam trigger of a :mod:`theory.windowing.triggers` trigger."""
    if isinstance(trigger, tt.DefaultTrigger):
        return bt.DefaultTrigger()
    if isinstance(trigger, tt.AfterWatermark):
        return bt.AfterWatermark(
            early=None if trigger.early is None else beam_trigger(trigger.early),
            late=None if trigger.late is None else beam_trigger(trigger.late),
        )
    if isinstance(trigger, tt.AfterProcessingTime):
        if trigger.delay % MICROS_PER_SECOND:
            raise ValueError(
                f"trigger: Beam Python's AfterProcessingTime takes whole seconds, got "
                f"{trigger.delay} µs"
            )
        return bt.AfterProcessingTime(trigger.delay // MICROS_PER_SECOND)
    if isinstance(trigger, tt.AfterCount):
        return bt.AfterCount(trigger.count)
    if isinstance(trigger, tt.Repeatedly):
        return bt.Repeatedly(beam_trigger(trigger.underlying))
    if isinstance(trigger, tt.OrFinally):
        return bt.OrFinally(*(beam_trigger(t) for t in trigger.triggers))
    if isinstance(trigger, tt.AfterAny):
        return bt.AfterAny(*(beam_trigger(t) for t in trigger.triggers))
    if isinstance(trigger, tt.AfterAll):
        return bt.AfterAll(*(beam_trigger(t) for t in trigger.triggers))
    if isinstance(trigger, tt.AfterEach):
        return bt.AfterEach(*(beam_trigger(t) for t in trigger.triggers))
    if isinstance(trigger, tt.Never):
        return bt._Never()
    if isinstance(trigger, tt.Always):
        return bt.Always()
    raise TypeError(f"trigger: no Beam trigger for {trigger!r}")


def beam_windowing(strategy: WindowingStrategy) -> dict[str, Any]:
    """Keyword arguments for ``beam.WindowInto`` equivalent to ``strategy``."""
    if not isinstance(strategy, WindowingStrategy):
        raise TypeError(f"strategy must be a theory WindowingStrategy, got {strategy!r}")
    if strategy.allowed_lateness % MICROS_PER_MILLI:
        raise ValueError(
            "allowed_lateness must be whole milliseconds for Beam, got "
            f"{strategy.allowed_lateness} µs"
        )
    combiner = strategy.timestamp_combiner
    if not isinstance(combiner, TimestampCombiner):
        raise ValueError(
            f"timestamp_combiner: Beam has no user-chosen output policy like {combiner!r}"
        )
    if strategy.closing_behavior is not ClosingBehavior.FIRE_IF_NON_EMPTY:
        raise ValueError(
            f"closing_behavior: Beam Python's WindowInto has no {strategy.closing_behavior.name}"
        )
    return {
        "windowfn": beam_window_fn(strategy.window_fn),
        "trigger": beam_trigger(strategy.trigger),
        "accumulation_mode": _ACCUMULATION[strategy.accumulation_mode],
        "timestamp_combiner": _COMBINER[combiner],
        "allowed_lateness": Duration(micros=strategy.allowed_lateness),
    }


def to_beam(strategy: WindowingStrategy) -> beam.WindowInto:
    """The ``beam.WindowInto`` applying ``strategy`` (see the module docstring)."""
    return beam.WindowInto(**beam_windowing(strategy))


# ------------------------------------------------------------------ Beam -> theory


def theory_window_fn(fn: object) -> object:
    """The :mod:`theory.windowing.windows` window fn of a Beam window fn (µs)."""
    if type(fn) is bw.FixedWindows:
        return FixedWindows(int(fn.size.micros), int(fn.offset.micros))
    if type(fn) is bw.SlidingWindows:
        return SlidingWindows(int(fn.size.micros), int(fn.period.micros), int(fn.offset.micros))
    if type(fn) is bw.Sessions:
        return Sessions(int(fn.gap_size.micros))
    if type(fn) is bw.GlobalWindows:
        return GlobalWindows()
    if isinstance(fn, bw.WindowFn):
        raise ValueError(
            f"window_fn: {type(fn).__name__} has no theory counterpart (only Beam's "
            "FixedWindows, SlidingWindows, Sessions and GlobalWindows convert)"
        )
    raise TypeError(f"window_fn: not a Beam WindowFn: {fn!r}")


def theory_trigger(trigger: Any, *, _path: str = "trigger") -> tt.Trigger:
    """The :mod:`theory.windowing.triggers` trigger of a Beam trigger; an unconvertible
    part is named by its path (``trigger.late.underlying``)."""
    kind = type(trigger)
    if kind is bt.DefaultTrigger:
        return tt.DefaultTrigger()
    if kind is bt.AfterWatermark:
        return tt.AfterWatermark(
            early=None
            if trigger.early is None
            else theory_trigger(trigger.early, _path=f"{_path}.early"),
            late=None
            if trigger.late is None
            else theory_trigger(trigger.late, _path=f"{_path}.late"),
        )
    if kind is bt.AfterProcessingTime:
        delay = trigger.delay
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            raise TypeError(f"{_path}: AfterProcessingTime delay must be seconds, got {delay!r}")
        return tt.AfterProcessingTime(int(Duration.of(delay).micros))
    if kind is bt.AfterCount:
        return tt.AfterCount(trigger.count)
    if kind is bt.Repeatedly:
        return tt.Repeatedly(theory_trigger(trigger.underlying, _path=f"{_path}.underlying"))
    if kind in (bt.OrFinally, bt.AfterAny, bt.AfterAll, bt.AfterEach):
        subs = [
            theory_trigger(t, _path=f"{_path}.triggers[{i}]")
            for i, t in enumerate(trigger.triggers)
        ]
        if kind is bt.OrFinally:
            return tt.OrFinally(*subs)
        return {bt.AfterAny: tt.AfterAny, bt.AfterAll: tt.AfterAll, bt.AfterEach: tt.AfterEach}[
            kind
        ](*subs)
    if kind is bt._Never:
        return tt.Never()
    if kind is bt.Always:
        return tt.Always()
    if isinstance(trigger, bt.TriggerFn):
        raise ValueError(f"{_path}: {kind.__name__} has no theory counterpart")
    raise TypeError(f"{_path}: not a Beam trigger: {trigger!r}")


def _windowing(beam_strategy: object) -> core.Windowing:
    if isinstance(beam_strategy, core.WindowInto):
        return beam_strategy.windowing
    if isinstance(beam_strategy, core.Windowing):
        return beam_strategy
    if isinstance(beam_strategy, beam_runner_api_pb2.WindowingStrategy):
        context = pipeline_context.PipelineContext()
        try:
            return core.Windowing.from_runner_api(beam_strategy, context)
        except Exception as e:
            raise ValueError(f"WindowingStrategy proto: Beam cannot read it: {e}") from e
    raise TypeError(
        "expected a beam.WindowInto, a Beam Windowing or a runner-API WindowingStrategy, "
        f"got {type(beam_strategy).__name__}"
    )


def to_theory(beam_strategy: object, *, allow_unsafe_triggers: bool = False) -> WindowingStrategy:
    """The :class:`theory.WindowingStrategy` of a ``beam.WindowInto``, a Beam
    ``Windowing`` or a runner-API ``WindowingStrategy`` proto.

    ``allow_unsafe_triggers`` is Beam's ``--allow_unsafe_triggers`` (a pipeline option, not
    part of the strategy): without it theory refuses the strategies Beam refuses at
    ``GroupByKey``."""
    w = _windowing(beam_strategy)
    mode = _FROM_ACCUMULATION.get(w.accumulation_mode)
    if mode is None:
        raise ValueError(f"accumulation_mode: {w.accumulation_mode!r} has no theory counterpart")
    combiner = _FROM_COMBINER.get(w.timestamp_combiner)
    if combiner is None:
        raise ValueError(f"timestamp_combiner: {w.timestamp_combiner!r} has no theory counterpart")
    return WindowingStrategy(
        theory_window_fn(w.windowfn),
        theory_trigger(w.triggerfn),
        mode,
        int(w.allowed_lateness.micros),
        combiner,
        allow_unsafe_triggers=allow_unsafe_triggers,
    )
