"""The driver's side views without Spark: the default trigger keeps every element and is
ready by the watermark; a triggered view is ready at its first pane and each pane
replaces it (discarding: its own elements; accumulating: all so far), with processing-time
triggers firing as the clock passes their delay; a resumed view keeps this run's coder."""

from __future__ import annotations

import uuid
from typing import Any

import apache_beam as beam
from apache_beam.coders import VarIntCoder, coders
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.coders.coders import WindowedValueCoder
from apache_beam.runners import pipeline_context
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipelines.convert import to_theory
from spark_backend.runner.grouping.group_by_key import split_elements
from spark_backend.runner.streaming.side_views import SideView
from theory.windowing.engine import GroupByWindowEngine

S = 1_000_000
GLOBAL = window.GlobalWindow()


def coder_of(window_coder: Any) -> tuple[str, bytes, Any]:
    context = pipeline_context.PipelineContext()
    coder = WindowedValueCoder(VarIntCoder(), window_coder)
    coder_id = context.coders.get_id(coder)
    return coder_id, context.to_runner_api().SerializeToString(), coder


def chunk(coder: Any, values: list[tuple[int, int, Any]]) -> bytes:
    """Windowed values ``(value, seconds, window)`` as one chunk."""
    out = create_OutputStream()
    for value, seconds, w in values:
        coder.get_impl().encode_to_stream(WindowedValue(value, Timestamp(seconds), (w,)), out, True)
    return out.get()


def view_values(view: SideView, coder: Any) -> dict[tuple[int, int], list[int]]:
    out: dict[tuple[int, int], list[int]] = {}
    for bounds, encoded in view.elements.items():
        values = [e.value for b in encoded for e, _ in split_elements(b, coder.get_impl())]
        out[bounds] = sorted(values)
    return out


def triggered(mode: Any, after: Any) -> SideView:
    strategy = beam.WindowInto(
        window.GlobalWindows(), trigger=trigger.Repeatedly(after), accumulation_mode=mode
    )
    engine = GroupByWindowEngine(to_theory(strategy, allow_unsafe_triggers=True))
    coder_id, _, _ = coder_of(coders.GlobalWindowCoder())
    return SideView(b"materialize:side", coder_id, "side", engine)


def test_a_default_view_keeps_every_element_and_is_ready_by_the_watermark() -> None:
    coder_id, components, coder = coder_of(coders.IntervalWindowCoder())
    job = uuid.uuid4().hex
    view = SideView(b"materialize:side", coder_id, "side")
    w0, w1 = window.IntervalWindow(0, 10), window.IntervalWindow(10, 20)
    view.update([chunk(coder, [(1, 1, w0), (2, 12, w1)])], 5 * S, 0, job, components)
    view.update([chunk(coder, [(3, 3, w0)])], 10 * S, 0, job, components)  # late: kept
    assert view_values(view, coder) == {(0, 10 * S): [1, 3], (10 * S, 20 * S): [2]}
    ready = view.readiness(10 * S)
    assert ready.ready(w0) and not ready.ready(w1) and not ready.panes
    assert not view.readiness(10 * S - 1).ready(w0)
    assert view.readiness(20 * S).ready(w1)
    assert not view.readiness(20 * S).ready(GLOBAL)


def test_a_triggered_view_is_ready_at_its_first_pane_and_each_pane_replaces_it() -> None:
    _, components, coder = coder_of(coders.GlobalWindowCoder())
    job = uuid.uuid4().hex
    for mode, second in (
        (trigger.AccumulationMode.DISCARDING, [3]),
        (trigger.AccumulationMode.ACCUMULATING, [1, 2, 3]),
    ):
        view = triggered(mode, trigger.AfterCount(1))
        assert not view.readiness(0).ready(GLOBAL)
        view.update([chunk(coder, [(1, 1, GLOBAL), (2, 2, GLOBAL)])], 0, 0, job, components)
        assert view.readiness(0).ready(GLOBAL)  # a pane, with the watermark far behind
        assert view_values(view, coder) == {view_key(): [1, 2]}
        view.update([chunk(coder, [(3, 3, GLOBAL)])], 0, S, job, components)
        assert view_values(view, coder) == {view_key(): second}, mode


def view_key() -> tuple[int, int]:
    from theory.time import END_OF_GLOBAL_WINDOW, MIN_TIMESTAMP

    return MIN_TIMESTAMP, END_OF_GLOBAL_WINDOW


def test_a_processing_time_trigger_fires_as_the_clock_passes_its_delay() -> None:
    _, components, coder = coder_of(coders.GlobalWindowCoder())
    job = uuid.uuid4().hex
    view = triggered(trigger.AccumulationMode.DISCARDING, trigger.AfterProcessingTime(5))
    view.update([chunk(coder, [(7, 1, GLOBAL)])], 0, 100 * S, job, components)
    assert not view.readiness(0).ready(GLOBAL)  # no pane before the delay
    view.update([], 0, 104 * S, job, components)
    assert not view.readiness(0).ready(GLOBAL)
    view.update([], 0, 105 * S, job, components)
    assert view.readiness(0).ready(GLOBAL)
    assert view_values(view, coder) == {view_key(): [7]}


def test_a_resumed_view_keeps_this_runs_coder_and_the_committed_contents() -> None:
    old = SideView(b"materialize:side", "old-coder", "old producer")
    old.elements[(0, 10)].append(b"x")
    old.panes.add((0, 10))
    fresh = SideView(b"materialize:side", "new-coder", "producer")
    resumed = fresh.resumed(old)
    assert (resumed.coder_id, resumed.producer) == ("new-coder", "producer")
    assert dict(resumed.elements) == {(0, 10): [b"x"]} and resumed.panes == {(0, 10)}
