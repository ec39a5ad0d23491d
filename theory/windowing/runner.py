"""Run a whole script through a grouping stage: :func:`run_script`.

A script runs on the vectorised path (:mod:`theory.windowing.fast_path`) where that path
models it, else event by event on the incremental
:class:`~theory.windowing.engine.GroupByWindowEngine`. Both give the same
:class:`~theory.windowing.script.ScriptResult` (a property test checks it), so the choice
is only a matter of speed. All times are µs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from theory.columns import check_bool
from theory.windowing.engine import GroupByWindowEngine, Pane
from theory.windowing.fast_path import run_fast
from theory.windowing.script import (
    ElementEvent,
    Event,
    ProcessingTimeEvent,
    Script,
    ScriptResult,
    WatermarkEvent,
)
from theory.windowing.strategy import WindowingStrategy
from theory.windowing.triggers import REAL_TIME

__all__ = ["run_script"]


def run_script(
    events: Script | Iterable[Event],
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
    incremental engine (tested); it falls back to the engine where it does not model the
    script (:func:`theory.windowing.fast_path.run_fast` returns the
    :class:`~theory.windowing.fast_path.Refusal` saying why).
    """
    if not isinstance(strategy, WindowingStrategy):
        raise TypeError(
            f"strategy must be a WindowingStrategy, got {type(strategy).__name__} "
            f"({strategy!r}); e.g. WindowingStrategy(FixedWindows(size))"
        )
    for name, flag in (("to_infinity", to_infinity), ("fast", fast)):
        check_bool(flag, name)
    evs = events.events if isinstance(events, Script) else Script(list(events)).events
    if fast and to_infinity:
        result = run_fast(evs, strategy)
        if isinstance(result, ScriptResult):
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


def _assign_script(evs: tuple[Event, ...], strategy: WindowingStrategy) -> _Rows | None:
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


class _Recorder:
    """The panes of a run and the watermarks after each event (µs)."""

    def __init__(self, n_events: int) -> None:
        self.panes: list[Pane] = []
        self.pane_event: list[int] = []
        self.processing_time = np.empty(n_events, np.int64)
        self.input_watermark = np.empty(n_events, np.int64)
        self.output_watermark = np.empty(n_events, np.int64)

    def record(self, i: int, fired: list[Pane], engine: GroupByWindowEngine) -> None:
        self.panes.extend(fired)
        self.pane_event.extend([i] * len(fired))
        self.processing_time[i] = engine.processing_time
        self.input_watermark[i] = engine.input_watermark
        self.output_watermark[i] = engine.output_watermark

    def result(self, engine: GroupByWindowEngine) -> ScriptResult:
        return ScriptResult(
            self.panes,
            np.asarray(self.pane_event, np.int64),
            self.processing_time,
            self.input_watermark,
            self.output_watermark,
            dict(engine.dropped),
            engine.late_elements,
            engine.stalled,
            engine.pending_timers()[REAL_TIME.value],
        )


def _run_incremental(
    evs: tuple[Event, ...], strategy: WindowingStrategy, to_infinity: bool
) -> ScriptResult:
    """The script event by event on a :class:`GroupByWindowEngine`, windows assigned for
    all elements at once up front."""
    engine = GroupByWindowEngine(strategy)
    recorder = _Recorder(len(evs) + (1 if to_infinity else 0))
    bulk = _assign_script(evs, strategy)
    batch = 0  # the next non-empty element event's rows in ``bulk``
    for i, ev in enumerate(evs):
        if isinstance(ev, ElementEvent):
            if bulk is None:
                fired = engine.add_elements(ev.elements)
            elif ev.elements:
                lo, hi = bulk.bounds[batch], bulk.bounds[batch + 1]
                batch += 1
                fired = engine.add_rows(*bulk[:6], lo, hi)
            else:
                fired = []
        elif isinstance(ev, WatermarkEvent):
            fired = engine.advance_watermark_to(ev.watermark)
        else:
            assert isinstance(ev, ProcessingTimeEvent)
            fired = engine.advance_processing_time(ev.delta)
        recorder.record(i, fired, engine)
    if to_infinity:
        recorder.record(len(evs), engine.advance_watermark_to_infinity(), engine)
    return recorder.result(engine)
