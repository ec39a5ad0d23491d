"""The Beam author's kit: assert_panes against theory's engine on drawn scripts and
strategies, the TestStream builder, from_trace with tagged inputs, the watermark
assertions."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_pipelines.convert import to_beam
from beam_pipelines.testing import (
    assert_fires_at,
    assert_no_late_data,
    assert_panes,
    assert_watermark_monotonic,
)
from beam_pipelines.testing.builder import TestStreamBuilder
from beam_pipelines.testing.strategies import scripts, traces, windowing_strategies
from beam_pipelines.teststream import from_test_stream, from_trace, trace_events, trace_script
from theory import AfterCount, AfterWatermark, FixedWindows, StepSeries, WindowingStrategy
from theory.data.trace import Trace
from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI, MIN_TIMESTAMP, SECOND
from theory.watermarks.spec import make_source_watermark
from theory.windowing.runner import run_script
from theory.windowing.script import (
    ElementEvent,
    Event,
    ProcessingTimeEvent,
    Script,
    WatermarkEvent,
)


class _Group(beam.PTransform):
    def __init__(self, strategy: WindowingStrategy) -> None:
        super().__init__()
        self.strategy = strategy

    def expand(self, pcoll: Any) -> Any:
        return pcoll | to_beam(self.strategy) | beam.GroupByKey()


@settings(max_examples=6, suppress_health_check=[HealthCheck.too_slow])
@given(scripts("1s", max_events=6), windowing_strategies("1s"))
def test_assert_panes_agrees_with_beam_on_drawn_cases(
    script: Script, strategy: WindowingStrategy
) -> None:
    """A transform that applies the strategy and groups passes against the model."""
    assert_panes(_Group(strategy), script, strategy)


def test_assert_panes_with_a_combine_and_a_beam_strategy() -> None:
    strategy = WindowingStrategy(FixedWindows("10s"))
    script = (
        TestStreamBuilder()
        .elements([("a", 1, "1s"), ("a", 2, "2s"), ("b", 3, "12s")])
        .watermark("30s")
        .script()
    )

    class Sum(beam.PTransform):
        def expand(self, pcoll: Any) -> Any:
            return pcoll | to_beam(strategy) | beam.CombinePerKey(sum)

    rows = assert_panes(Sum(), script, to_beam(strategy), combine=sum)
    assert sorted((r.key, r.value, r.start) for r in rows) == [("a", 3, 0), ("b", 3, 10 * SECOND)]
    with pytest.raises(
        AssertionError, match=r"- model key='a'.*value=2\n  \+ beam  key='a'.*value=3"
    ):
        assert_panes(Sum(), script, to_beam(strategy), combine=len)


def test_assert_panes_checks_beams_limits_first() -> None:
    strategy = WindowingStrategy(FixedWindows("10s"))
    transform = _Group(strategy)
    with pytest.raises(ValueError, match=r"events\[0\] elements\[0\]: timestamp 1500 µs"):
        assert_panes(transform, [ElementEvent([("a", 1, 1500)])], strategy)
    with pytest.raises(ValueError, match=r"events\[1\]: processing-time step of 1500000 µs"):
        assert_panes(
            transform, [ElementEvent([("a", 1, 0)]), ProcessingTimeEvent(1_500_000)], strategy
        )
    with pytest.raises(TypeError, match="transform must be a Beam PTransform"):
        assert_panes(lambda p: p, [], strategy)  # type: ignore[arg-type]


def test_assert_panes_names_output_that_is_not_key_value() -> None:
    strategy = WindowingStrategy(FixedWindows("10s"))

    class Values(beam.PTransform):
        def expand(self, pcoll: Any) -> Any:
            return pcoll | to_beam(strategy) | beam.GroupByKey() | beam.Values()

    with pytest.raises(AssertionError, match=r"the transform output \[1\], not a \(key, value\)"):
        assert_panes(Values(), [ElementEvent([("a", 1, 0)])], strategy)


@settings(max_examples=25)
@given(
    traces(min_size=1, max_disorder="3s", straggler_fraction=0.3, straggler_delay="1m"),
    traces(min_size=1, max_disorder="3s", straggler_fraction=0.0),
)
def test_drawn_traces_have_bounded_disorder_and_stragglers(
    with_stragglers: Trace, without: Trace
) -> None:
    for trace, bound in ((with_stragglers, 60 * SECOND), (without, 3 * SECOND)):
        lag = trace.arrival_time - trace.event_time
        assert (lag >= 0).all() and (lag <= bound).all()
        assert (np.diff(trace.arrival_time) >= 0).all()  # in arrival order
        assert not (trace.event_time % MICROS_PER_MILLI).any()  # Beam's whole ms


def test_builder_accepts_durations_and_round_trips() -> None:
    b = TestStreamBuilder().elements([("k", "v", "1.5s")]).advance("2s").watermark("1m")
    assert b.script() == Script(
        [
            ElementEvent([("k", "v", 1_500_000)]),
            ProcessingTimeEvent(2 * SECOND),
            WatermarkEvent(60 * SECOND),
        ]
    )
    assert from_test_stream(b.build()) == b.script()


@settings(max_examples=40)
@given(traces(max_size=25), st.sampled_from(["perfect", "bounded:2s", "bounded:500ms"]))
def test_trace_script_replays_the_trace_under_its_watermark(trace: Trace, spec: str) -> None:
    script = trace_script(trace, spec)
    order = np.argsort(trace.arrival_time, kind="stable")
    assert [t for _, _, t in script.elements()] == trace.event_time[order].tolist()
    curve = make_source_watermark(spec).curve(trace.event_time, trace.arrival_time)
    now = 0
    for ev in script.events:
        if isinstance(ev, ProcessingTimeEvent):
            now += ev.delta
        elif isinstance(ev, WatermarkEvent):
            w = int(curve.at(now))
            assert ev.watermark == w - w % MICROS_PER_MILLI
    assert_watermark_monotonic(
        [ev.watermark for ev in script.events if isinstance(ev, WatermarkEvent)]
    )


def test_from_trace_tags_each_input_with_its_own_watermark() -> None:
    """Two inputs: "fast" (bounded:1s) passes its first window at 12 s, so its element
    of 8 s arriving at 13 s is late there, while "slow" (bounded:5s) is still behind.
    Each tag's panes on Beam (timing included) equal the engine's run of that tag's own
    script; a shared watermark would have made the 8 s element on time."""
    s = SECOND
    rows = [  # (tag, event s, arrival s)
        ("fast", 1, 1),
        ("fast", 2, 2),
        ("fast", 5, 5),
        ("fast", 30, 12),
        ("fast", 8, 13),
        ("slow", 3, 3),
        ("slow", 4, 20),
        ("slow", 15, 35),
    ]
    tags = np.array([r[0] for r in rows], dtype=object)
    trace = Trace(
        event_time=np.array([r[1] for r in rows], dtype=np.int64) * s,
        arrival_time=np.array([r[2] for r in rows], dtype=np.int64) * s,
        key=np.array(["k"] * len(rows), dtype=object),
        value=np.arange(len(rows), dtype=np.float64),
    )
    specs = {"fast": "bounded:1s", "slow": "bounded:5s"}
    pairs = trace_events(trace, specs, tags)
    assert {tag for tag, ev in pairs if isinstance(ev, WatermarkEvent)} == {"fast", "slow"}
    strategy = WindowingStrategy(
        FixedWindows("10s"), AfterWatermark(late=AfterCount(1)), allowed_lateness="1m"
    )
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.testing.util import assert_that, equal_to

    expected = {}
    for tag in ("fast", "slow"):
        own = Script([ev for t, ev in pairs if t in (tag, None)])
        panes = run_script(own, strategy).panes
        expected[tag] = [(p.window.start, p.timing.value, sorted(p.values)) for p in panes]
    assert (0, "LATE", [4.0]) in expected["fast"]
    assert all(timing == "ON_TIME" for _, timing, _ in expected["slow"])

    def pane(kv: Any, w: Any = beam.DoFn.WindowParam, p: Any = beam.DoFn.PaneInfoParam) -> Any:
        from apache_beam.utils.windowed_value import PaneInfoTiming

        return (int(w.start.micros), PaneInfoTiming.to_string(p.timing), sorted(kv[1]))

    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as pipeline:
        outputs = pipeline | from_trace(trace, specs, tags)
        for tag in ("fast", "slow"):
            panes = (
                outputs[tag]
                | f"window {tag}" >> to_beam(strategy)
                | f"group {tag}" >> beam.GroupByKey()
                | f"pane {tag}" >> beam.Map(pane)
            )
            assert_that(panes, equal_to(expected[tag]), label=f"check {tag}")


def _one_row(t: int) -> Trace:
    one = np.array([t], dtype=np.int64)
    return Trace(event_time=one, arrival_time=one, key=np.zeros(1, np.int64), value=np.zeros(1))


def test_from_trace_refuses_sub_millisecond_event_times() -> None:
    trace = Trace(
        event_time=np.array([1500]),
        arrival_time=np.array([2000]),
        key=np.array([0]),
        value=np.array([0.0]),
    )
    with pytest.raises(ValueError, match="row 0: event_time 1500 µs is not a whole millisecond"):
        from_trace(trace, "perfect")
    with pytest.raises(ValueError, match=r"tags must give one tag per row \(1\)"):
        from_trace(
            _one_row(1000),
            "perfect",
            ["a", "b"],
        )


def test_watermark_assertions_can_fail() -> None:
    assert_watermark_monotonic(StepSeries(np.array([1, 2]), np.array([5, 5])))
    with pytest.raises(AssertionError, match=r"\[1\] at processing time"):
        assert_watermark_monotonic(StepSeries(np.array([1, 2]), np.array([5, 4])))
    # no overflow from -inf to a time (np.diff would wrap around)
    assert_watermark_monotonic([MIN_TIMESTAMP, 13_000, MAX_TIMESTAMP])
    late: list[Event] = [WatermarkEvent(10 * SECOND), ElementEvent([("k", 1, 9 * SECOND)])]
    with pytest.raises(AssertionError, match=r"events\[1\] elements\[0\] key='k'"):
        assert_no_late_data(late)
    assert_no_late_data([ElementEvent([("k", 1, 9 * SECOND)]), WatermarkEvent(10 * SECOND)])
    result = run_script(
        [*late, ProcessingTimeEvent(SECOND)], WindowingStrategy(FixedWindows("10s"))
    )
    with pytest.raises(AssertionError, match=r"did not fire at processing time 7 µs"):
        assert_fires_at(result, (0, "10s"), 7)
    with pytest.raises(TypeError, match="needs a watermark"):
        assert_no_late_data(_one_row(1))
