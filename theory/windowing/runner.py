"""Run a whole script through a grouping stage: :func:`run_script`.

A script runs on the vectorised path (:mod:`theory.windowing.fast_path`) where that path
models it, else event by event on the incremental
:class:`~theory.windowing.engine.GroupByWindowEngine`. Both give the same
:class:`~theory.windowing.script.ScriptResult` (a property test checks it), so the choice
is only a matter of speed. All times are µs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import replace
from itertools import chain
from operator import itemgetter
from typing import Any, Final, NamedTuple

import numpy as np

from theory.columns import check_bool
from theory.time import MAX_TIMESTAMP
from theory.windowing.count_path import run_count_columns
from theory.windowing.engine import GroupByWindowEngine, Pane
from theory.windowing.fast_path import (
    Refusal,
    ScriptColumns,
    run_fast_columns,
    script_columns,
    take_elements,
)
from theory.windowing.pane_columns import PaneColumns, key_list
from theory.windowing.script import (
    ElementEvent,
    Event,
    ProcessingTimeEvent,
    Script,
    ScriptResult,
    WatermarkEvent,
)
from theory.windowing.select import WindowingPath, script_path
from theory.windowing.session_path import engine_session_elements, run_sessions_columns
from theory.windowing.strategy import WindowingStrategy
from theory.windowing.triggers import REAL_TIME

__all__ = ["run_columns", "run_script"]


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

    With ``fast`` (default), scripts go through the vectorised path
    :func:`theory.windowing.select.script_path` selects, which gives the same result as the
    incremental engine (tested) where it models them:
    :func:`theory.windowing.fast_path.run_fast` for non-merging windows under
    DefaultTrigger or AfterWatermark(), :func:`theory.windowing.count_path.run_count_columns`
    for non-merging windows under count-based early/late firings or
    ``Repeatedly(AfterCount)``, :func:`theory.windowing.session_path.run_sessions_columns`
    for sessions under either (count triggers: :mod:`theory.windowing.session_counts`).
    It falls back to the
    engine where it does not model the script; ``result.path`` says which ran and
    ``result.refusal`` why the vectorised one did not (a
    :class:`~theory.windowing.fast_path.Refusal`).
    """
    if not isinstance(strategy, WindowingStrategy):
        raise TypeError(
            f"strategy must be a WindowingStrategy, got {type(strategy).__name__} "
            f"({strategy!r}); e.g. WindowingStrategy(FixedWindows(size))"
        )
    for name, flag in (("to_infinity", to_infinity), ("fast", fast)):
        check_bool(flag, name)
    evs = events.events if isinstance(events, Script) else Script(list(events)).events
    refusal: str | None = None
    if fast and to_infinity:
        columns = script_columns(evs)
        if columns is None:
            refusal = str(Refusal.EVENT_TYPE)
        else:
            result = _run_vectorised(columns, strategy)
            if isinstance(result, ScriptResult):
                return result
            refusal = result
    return replace(_run_incremental(evs, strategy, to_infinity), refusal=refusal)


def run_columns(
    columns: ScriptColumns,
    strategy: WindowingStrategy,
    *,
    fast: bool = True,
    build: bool = True,
    external: np.ndarray | None = None,
) -> ScriptResult:
    """:func:`run_script` on a script given as columns (the simulator's form: at each event
    its elements arrive, then the watermark and processing time move; the last event's
    watermark must be ``MAX_TIMESTAMP``). Timestamps must already be validated; a window
    bound past int64 raises ``OverflowError``. Without ``build``, a vectorised run leaves
    ``panes`` empty and gives them only as ``pane_columns``.

    ``external``: a hold (µs) after each event from state kept outside this run (other
    keys of the same stage, run elsewhere): the output watermark is held by it too, as
    the batches of the next event find it; ``state_hold`` stays this run's own."""
    if columns.iw_after.size == 0 or columns.iw_after[-1] != MAX_TIMESTAMP:
        raise ValueError("columns: the last event's watermark must be MAX_TIMESTAMP")
    refusal = None
    if fast:
        result = _run_vectorised(columns, strategy, build, external)
        if isinstance(result, ScriptResult):
            return result
        refusal = result
    return replace(_run_incremental_columns(columns, strategy, external), refusal=refusal)


def _run_vectorised(
    columns: ScriptColumns,
    strategy: WindowingStrategy,
    build: bool = True,
    external: np.ndarray | None = None,
) -> ScriptResult | str:
    """The vectorised path :func:`~theory.windowing.select.script_path` selects, or its
    refusal."""
    run = _PATHS[script_path(strategy)]
    result = run(columns, strategy, build=build, external=external)
    if isinstance(result, ScriptResult):
        return replace(result, path="vectorised")
    if result in (Refusal.LATE_SESSION_DATA, Refusal.MERGING_PARTS):
        return _run_mixed(columns, strategy, build, external, result)
    return str(result)


_PATHS: Final = {
    WindowingPath.WATERMARK: run_fast_columns,
    WindowingPath.COUNT: run_count_columns,
    WindowingPath.SESSIONS: run_sessions_columns,
}


def _run_mixed(
    columns: ScriptColumns,
    strategy: WindowingStrategy,
    build: bool,
    external: np.ndarray | None,
    why: Refusal,
) -> ScriptResult | str:
    """Sessions with late data (or, under early count firings, in several parts) on the
    engine, the others on the vectorised path, the engine's output watermark held by
    theirs too. Exact: sessions never merge with each other, and the vectorised ones (no
    late data) do not depend on the output watermark (their elements are never too late
    to hold, their panes never late, their early panes EARLY at any output watermark)."""
    late = engine_session_elements(columns, strategy)
    simple = run_sessions_columns(_subset(columns, ~late), strategy, build=build)
    if isinstance(simple, Refusal):
        return str(simple)
    assert simple.state_hold is not None and simple.pane_columns is not None
    held = simple.state_hold if external is None else np.minimum(simple.state_hold, external)
    slow = _run_incremental_columns(_subset(columns, late), strategy, held)
    assert slow.state_hold is not None
    event = np.concatenate([simple.pane_event, slow.pane_event])
    order = np.argsort(event, kind="stable")
    both = PaneColumns.concat([simple.pane_columns, PaneColumns.from_panes(slow.panes)])
    panes = list(simple.panes) + list(slow.panes) if build else []
    return replace(
        slow,
        panes=[panes[i] for i in order.tolist()] if build else [],
        pane_event=event[order],
        dropped={k: simple.dropped.get(k, 0) + v for k, v in slow.dropped.items()},
        late_elements=simple.late_elements + slow.late_elements,
        pane_columns=both.take(order),
        state_hold=np.minimum(simple.state_hold, slow.state_hold),
        path="mixed",
        refusal=str(why),
    )


def _subset(columns: ScriptColumns, mask: np.ndarray) -> ScriptColumns:
    """The script with only the elements of ``mask`` (the same events)."""
    return take_elements(columns, np.flatnonzero(mask))


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
        self.state_hold = np.empty(n_events, np.int64)

    def record(self, i: int, fired: list[Pane], engine: GroupByWindowEngine) -> None:
        self.panes.extend(fired)
        self.pane_event.extend([i] * len(fired))
        self.processing_time[i] = engine.processing_time
        self.input_watermark[i] = engine.input_watermark
        self.output_watermark[i] = engine.output_watermark
        hold = engine.min_hold_value()
        self.state_hold[i] = MAX_TIMESTAMP if hold is None else hold

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
            state_hold=self.state_hold,
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


def _run_incremental_columns(
    columns: ScriptColumns, strategy: WindowingStrategy, external: np.ndarray | None = None
) -> ScriptResult:
    """The columns event by event on a :class:`GroupByWindowEngine`: each event's rows,
    then its watermark, then its processing time; ``external``: a hold (µs) after each
    event from state run beside the engine (:meth:`GroupByWindowEngine.hold_externally`),
    which holds its output watermark (the recorded state hold is the engine's own)."""
    engine = GroupByWindowEngine(strategy)
    n_ev = columns.iw_after.size
    recorder = _Recorder(n_ev)
    assigned = strategy.window_fn.assign_array(columns.ts)  # type: ignore[attr-defined]
    first_element = np.searchsorted(columns.element_event, np.arange(n_ev + 1), side="left")
    bounds = np.searchsorted(assigned.element, first_element, side="left").tolist()
    rows = (
        key_list(columns.key),
        columns.value.tolist(),
        columns.ts.tolist(),
        assigned.element.tolist(),
        assigned.start.tolist(),
        assigned.end.tolist(),
    )
    iw_after, pt_after = columns.iw_after.tolist(), columns.pt_after.tolist()
    for i in range(n_ev):
        lo, hi = bounds[i], bounds[i + 1]
        fired = engine.add_rows(*rows, lo, hi) if hi > lo else []
        if iw_after[i] > engine.input_watermark:
            fired += engine.advance_watermark_to(iw_after[i])
        if pt_after[i] > engine.processing_time:
            fired += engine.advance_processing_time(pt_after[i] - engine.processing_time)
        if external is not None:
            engine.hold_externally(int(external[i]))
        recorder.record(i, fired, engine)
    return recorder.result(engine)
