"""Building strategies and reading panes in the engine's tests (``theory.windowing``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from theory.windowing import triggers as tt
from theory.windowing.script import (
    ElementEvent,
    Event,
    ProcessingTimeEvent,
    ScriptResult,
    WatermarkEvent,
)
from theory.windowing.strategy import WindowingStrategy
from theory.windowing.windows import FixedWindows, WindowFn

#: One second (µs).
S = 1_000_000


def strat(
    trigger: tt.Trigger | None = None, fn: WindowFn | None = None, **kw: Any
) -> WindowingStrategy:
    """A strategy: ``fn`` (default 10 s fixed windows), ``trigger`` (default
    DefaultTrigger), unsafe triggers allowed, other fields from ``kw``."""
    kw.setdefault("allow_unsafe_triggers", True)
    return WindowingStrategy(fn or FixedWindows(10 * S), trigger or tt.DefaultTrigger(), **kw)


def summary(result: ScriptResult) -> list[tuple[object, ...]]:
    """Each pane as (key, sorted values, timing name, index, nonspeculative index, last)."""
    return [
        (p.key, tuple(sorted(p.values)), p.timing.name, p.index, p.nonspeculative_index, p.is_last)
        for p in result.panes
    ]


def canon(result: ScriptResult) -> list[tuple[object, ...]]:
    """Each pane with its event, values as a multiset, in a canonical order (the order
    within an event is the runner's choice)."""
    return sorted(
        (int(ev), repr(p.key), p.window.start, p.window.end, tuple(sorted(p.values)), p[3:])
        for p, ev in zip(result.panes, result.pane_event, strict=True)
    )


def assert_same(fast: ScriptResult, slow: ScriptResult, path: str = "vectorised") -> None:
    """``fast`` ran on ``path`` and equals the incremental ``slow``: every pane, the
    watermark and state-hold series, drops, late counts, stall and pending timers."""
    assert fast.path == path, fast.refusal
    assert slow.path == "incremental"
    assert canon(fast) == canon(slow)
    for series in ("processing_time", "input_watermark", "output_watermark", "state_hold"):
        assert np.array_equal(getattr(fast, series), getattr(slow, series)), series
    assert (fast.dropped, fast.late_elements, fast.stalled, fast.pending_processing_timers) == (
        slow.dropped,
        slow.late_elements,
        slow.stalled,
        slow.pending_processing_timers,
    )


def script_of(ops: list[tuple[str, Any]]) -> list[Event]:
    """A script from drawn ops: ``("el", [(key, offset), ...])`` elements at the
    watermark plus their offset (negative: late), ``("wm", step)``, ``("pt", delta)``."""
    events: list[Event] = []
    value = wm = 0
    for op, arg in ops:
        if op == "el":
            events.append(ElementEvent([(k, value + i, wm + d) for i, (k, d) in enumerate(arg)]))
            value += len(arg)
        elif op == "wm":
            wm += arg
            events.append(WatermarkEvent(wm))
        else:
            events.append(ProcessingTimeEvent(arg))
    return events


def script_ops(
    keys: str = "abc",
    offsets: tuple[int, int] = (-12, 30),
    batch: int = 4,
    step: int = 12,
    processing_time: bool = True,
) -> st.SearchStrategy[list[tuple[str, Any]]]:
    """Hypothesis ops for :func:`script_of`: element batches of up to ``batch`` over
    ``keys`` at the watermark plus an offset in ``offsets``, watermark steps up to
    ``step``, and processing-time steps if ``processing_time``."""
    kinds = [
        st.tuples(
            st.just("el"),
            st.lists(
                st.tuples(st.sampled_from(keys), st.integers(*offsets)),
                min_size=1,
                max_size=batch,
            ),
        ),
        st.tuples(st.just("wm"), st.integers(0, step)),
    ]
    if processing_time:
        kinds.append(st.tuples(st.just("pt"), st.integers(1, 5)))
    return st.lists(st.one_of(kinds), max_size=30)
