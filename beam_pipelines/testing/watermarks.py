"""Assertions about watermarks, lateness and firing times (theory only; no Beam).

- :func:`assert_watermark_monotonic`: a watermark series never goes back;
- :func:`assert_no_late_data`: no element arrives below the watermark in force when it
  arrives (docs/semantics.md: late means ``timestamp < input watermark`` at arrival), for a script
  (its own watermark events) or a trace under a source watermark;
- :func:`assert_fires_at`: in a ``theory.run_script`` result, a window fires a pane at a
  given processing time.

Times are µs ints, or ``timedelta``s and strings like ``"10s"`` where durations are asked.
Each failure message names the element, index or pane that breaks the assertion.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import DurationLike, as_offset, int_column
from theory.data.trace import Trace
from theory.series import StepSeries
from theory.time import MIN_TIMESTAMP, format_timestamp
from theory.watermarks.spec import SourceWatermarkSpec, make_source_watermark
from theory.windowing.engine import Timing
from theory.windowing.script import ElementEvent, Script, ScriptResult, WatermarkEvent
from theory.windowing.windows import IntervalWindow

__all__ = ["assert_fires_at", "assert_no_late_data", "assert_watermark_monotonic"]

_SHOWN = 10


def assert_watermark_monotonic(series: StepSeries | ArrayLike, *, name: str = "watermark") -> None:
    """``series`` (a ``StepSeries``, or watermark values in order, µs) never decreases."""
    if isinstance(series, StepSeries):
        values, times = series.values, series.times
    else:
        values, times = int_column(series, name), None
    drops = np.flatnonzero(values[1:] < values[:-1]) + 1  # (np.diff overflows at ±inf)
    if drops.size:
        shown = []
        for i in drops[:_SHOWN].tolist():
            at = "" if times is None else f" at processing time {format_timestamp(int(times[i]))}"
            shown.append(
                f"  [{i}]{at}: {format_timestamp(int(values[i - 1]))} -> "
                f"{format_timestamp(int(values[i]))}"
            )
        raise AssertionError(f"{name} goes back {drops.size} time(s):\n" + "\n".join(shown))


def _late_in_script(script: Script) -> list[str]:
    late = []
    watermark = MIN_TIMESTAMP
    for i, ev in enumerate(script.events):
        if isinstance(ev, WatermarkEvent):
            watermark = max(watermark, ev.watermark)
        elif isinstance(ev, ElementEvent):
            for j, (key, value, t) in enumerate(ev.elements):
                if t < watermark:
                    late.append(
                        f"  events[{i}] elements[{j}] key={key!r} value={value!r}: timestamp "
                        f"{format_timestamp(t)} < watermark {format_timestamp(watermark)}"
                    )
    return late


def _late_in_trace(trace: Trace, watermark: StepSeries | str | SourceWatermarkSpec) -> list[str]:
    if isinstance(watermark, str):
        watermark = make_source_watermark(watermark)
    if isinstance(watermark, SourceWatermarkSpec):
        watermark = watermark.curve(trace.event_time, trace.arrival_time, trace.partition)
    if not isinstance(watermark, StepSeries):
        raise TypeError(
            f"watermark must be a StepSeries or a source watermark spec, got {watermark!r}"
        )
    before = watermark.before(trace.arrival_time)
    rows = np.flatnonzero(trace.event_time < before)
    return [
        f"  row {r} key={trace.key[r]!r}: event_time {format_timestamp(int(trace.event_time[r]))}"
        f" < watermark {format_timestamp(int(before[r]))} when it arrived at "
        f"{format_timestamp(int(trace.arrival_time[r]))}"
        for r in rows.tolist()
    ]


def assert_no_late_data(
    data: Script | Sequence[Any] | Trace,
    watermark: StepSeries | str | SourceWatermarkSpec | None = None,
) -> None:
    """No element of ``data`` is late. A script (or a list of its events) is judged
    against its own watermark events; a trace needs ``watermark``: a ``StepSeries`` over
    processing time or a source watermark spec (``"bounded:5s"``), evaluated just before
    each arrival."""
    if isinstance(data, Trace):
        if watermark is None:
            raise TypeError("assert_no_late_data of a trace needs a watermark")
        late = _late_in_trace(data, watermark)
    else:
        if watermark is not None:
            raise TypeError("a script carries its own watermarks: do not pass watermark")
        late = _late_in_script(data if isinstance(data, Script) else Script(list(data)))
    if late:
        raise AssertionError(
            f"{len(late)} late element(s):\n"
            + "\n".join(late[:_SHOWN])
            + ("\n  ..." if len(late) > _SHOWN else "")
        )


def _window(window: Any) -> IntervalWindow:
    if isinstance(window, IntervalWindow):
        return window
    if isinstance(window, tuple) and len(window) == 2:
        return IntervalWindow(
            as_offset(window[0], "window start"), as_offset(window[1], "window end")
        )
    raise TypeError(f"window must be an IntervalWindow or a (start, end) pair, got {window!r}")


def assert_fires_at(
    result: ScriptResult,
    window: IntervalWindow | tuple[DurationLike, DurationLike],
    processing_time: DurationLike,
    *,
    key: Hashable | None = None,
    timing: Timing | str | None = None,
) -> None:
    """A pane of ``window`` (of ``key``, of ``timing`` when given) fired at exactly
    ``processing_time`` in ``result`` (from ``theory.run_script``; processing time starts
    at 0 and moves with the script's processing-time events)."""
    if not isinstance(result, ScriptResult):
        raise TypeError(f"result must be a theory ScriptResult (run_script), got {result!r}")
    w = _window(window)
    at = as_offset(processing_time, "processing_time")
    want = None if timing is None else Timing(timing) if isinstance(timing, str) else timing
    fired = []
    for pane, event in zip(result.panes, result.pane_event.tolist(), strict=True):
        if pane.window != w or (key is not None and pane.key != key):
            continue
        if want is not None and pane.timing is not want:
            continue
        t = int(result.processing_time[event])
        if t == at:
            return
        fired.append(f"  key={pane.key!r} {pane.timing.value} index={pane.index} at {t} µs")
    what = f"window [{w.start}, {w.end}) µs" + ("" if key is None else f" of key {key!r}")
    what += "" if want is None else f" ({want.value})"
    raise AssertionError(
        f"{what} did not fire at processing time {at} µs; it fired:\n"
        + ("\n".join(fired) if fired else "  never")
    )
