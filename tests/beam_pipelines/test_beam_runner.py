"""The Beam harness: conversions, packed pipelines, and its guard against runs that never
end."""

import pytest
from apache_beam.runners.direct import transform_evaluator
from apache_beam.transforms import trigger as bt
from apache_beam.transforms import window as bw
from apache_beam.utils.timestamp import Duration

from beam_pipelines.beam_runner import (
    beam_trigger,
    beam_window_fn,
    beam_windowing,
    canonical_panes,
    run_beam,
    run_beam_packed,
    skeleton,
)
from beam_pipelines.differential import observe_beam, random_group
from theory.time import MIN_TIMESTAMP
from theory.windowing import triggers as tt
from theory.windowing.engine import Timing
from theory.windowing.script import ElementEvent, ProcessingTimeEvent, Script, WatermarkEvent
from theory.windowing.strategy import ElementPolicy, TimestampCombiner, WindowingStrategy
from theory.windowing.windows import (
    FixedWindows,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
)

S = 1_000_000


def test_window_fn_and_trigger_conversion():
    assert beam_window_fn(FixedWindows(10 * S, 3 * S)) == bw.FixedWindows(10, 3)
    assert beam_window_fn(SlidingWindows(10 * S, 5 * S)) == bw.SlidingWindows(10, 5)
    assert beam_window_fn(Sessions(7 * S)) == bw.Sessions(7)
    assert beam_window_fn(GlobalWindows()) == bw.GlobalWindows()
    trigger = tt.AfterWatermark(
        early=tt.AfterProcessingTime(2 * S),
        late=tt.OrFinally(tt.Repeatedly(tt.AfterCount(2)), tt.AfterAll(tt.Never(), tt.Always())),
    )
    # (Beam's AfterProcessingTime has no __eq__: compare reprs)
    assert repr(beam_trigger(trigger)) == repr(
        bt.AfterWatermark(
            early=bt.AfterProcessingTime(2),
            late=bt.OrFinally(
                bt.Repeatedly(bt.AfterCount(2)), bt.AfterAll(bt._Never(), bt.Always())
            ),
        )
    )
    assert beam_trigger(tt.AfterEach(tt.DefaultTrigger(), tt.AfterAny(tt.AfterCount(1)))) == (
        bt.AfterEach(bt.DefaultTrigger(), bt.AfterAny(bt.AfterCount(1)))
    )
    kw = beam_windowing(
        WindowingStrategy(
            FixedWindows(S),
            allowed_lateness=5000,
            timestamp_combiner=TimestampCombiner.OUTPUT_AT_LATEST,
        )
    )
    assert kw["allowed_lateness"] == Duration(micros=5000)
    assert kw["timestamp_combiner"] == bw.TimestampCombiner.OUTPUT_AT_LATEST


def test_conversion_refuses_what_beam_cannot_express():
    with pytest.raises(ValueError, match="whole seconds"):
        beam_trigger(tt.AfterProcessingTime(1500))
    with pytest.raises(ValueError, match="milliseconds"):
        beam_windowing(WindowingStrategy(FixedWindows(S), allowed_lateness=1))
    with pytest.raises(ValueError, match="user-chosen"):
        beam_windowing(WindowingStrategy(FixedWindows(S), timestamp_combiner=ElementPolicy(max)))


def test_panes_come_back_with_pane_info():
    run = run_beam(
        [ElementEvent([("k", 1, 3000), ("k", 2, 4000)]), WatermarkEvent(12 * S)],
        WindowingStrategy(FixedWindows(10 * S)),
    )
    (pane,) = run.panes[0]
    assert (pane.key, pane.window, sorted(pane.values)) == ("k", IntervalWindow(0, 10 * S), [1, 2])
    assert (pane.timestamp, pane.timing, pane.index, pane.nonspeculative_index) == (
        10 * S - 1,
        Timing.ON_TIME,
        0,
        0,
    )
    assert pane.is_first and not pane.is_last and not run.stalled


def test_packed_run_equals_separate_runs():
    # each branch is its own GroupByKey: packing must not change any script's panes
    group = random_group(7, scripts=3)
    assert len({skeleton(c.script) for c in group}) == 1
    packed = run_beam_packed([(c.script, c.strategy) for c in group])
    for case, panes in zip(group, packed.panes, strict=True):
        alone = run_beam(case.script, case.strategy)
        assert canonical_panes(panes) == canonical_panes(alone.panes[0]), case.label
    with pytest.raises(ValueError, match="share"):
        run_beam_packed(
            [([WatermarkEvent(S)], group[0].strategy), ([WatermarkEvent(2 * S)], group[0].strategy)]
        )


def test_a_run_that_never_ends_times_out():
    # a hold plus a processing-time timer that nothing advances to: the direct runner
    # waits forever; the engine says so (stalled, one pending processing-time timer)
    strategy = WindowingStrategy(
        FixedWindows(10 * S),
        tt.Repeatedly(tt.AfterProcessingTime(5 * S)),
        allow_unsafe_triggers=True,
    )
    with pytest.raises(TimeoutError, match="waiting forever"):
        run_beam([ElementEvent([("a", 1, 3 * S)]), ProcessingTimeEvent(S)], strategy, timeout=2)


def test_observed_output_watermark_follows_holds_and_the_watch_is_removed():
    before = transform_evaluator._TestStreamEvaluator.process_element
    script = Script(
        [
            ElementEvent([("a", 1, 3 * S)]),
            WatermarkEvent(5 * S),
            ElementEvent([]),  # no TestStream event
            ElementEvent([("b", 2, 4 * S)]),
            WatermarkEvent(12 * S),
        ]
    )
    strategy = WindowingStrategy(
        FixedWindows(10 * S), timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST
    )
    seen = observe_beam(script, strategy)
    # held 1 µs below the earliest hold (3 s) until the window fires at 12 s
    assert seen.output_watermark == [MIN_TIMESTAMP, 3 * S - 1, 3 * S - 1, 12 * S]
    assert transform_evaluator._TestStreamEvaluator.process_element is before
