"""beam_pipelines.tracing: the direct runner's watermarks of a TestStream pipeline against
theory.run_script's, the series, and the Beam version check."""

from __future__ import annotations

import pytest

from beam_pipelines.beam_runner import group_by_window_label, run_beam
from beam_pipelines.differential import beam_events, random_case
from beam_pipelines.testing import assert_watermark_monotonic
from beam_pipelines.tracing import check_beam_version, trace_watermarks
from theory import AfterCount, AfterWatermark, FixedWindows, Sessions, WindowingStrategy
from theory.time import SECOND
from theory.windowing.runner import run_script
from theory.windowing.script import (
    ElementEvent,
    ProcessingTimeEvent,
    Script,
    WatermarkEvent,
)
from theory.windowing.strategy import TimestampCombiner

S = SECOND


def _compare(script: Script, strategy: WindowingStrategy) -> None:
    """After each event Beam sees, the GroupByWindow's traced input and output watermark
    equal the engine's; every traced series is monotonic."""
    with trace_watermarks() as trace:
        run_beam(script, strategy)
    ours = run_script(script, strategy)
    events = beam_events(script)
    traced = trace.after_each_event(group_by_window_label(), len(events))
    expected = [(int(ours.input_watermark[i]), int(ours.output_watermark[i])) for i in events]
    assert traced == expected
    for label in trace.labels():
        input_wm, output_wm = trace.series(label)
        assert_watermark_monotonic(input_wm, name=f"{label} input")
        assert_watermark_monotonic(output_wm, name=f"{label} output")


def test_traced_watermarks_equal_the_engines_with_a_hold() -> None:
    """EARLIEST holds the output at the earliest pending element (minus 1 µs)."""
    script = Script(
        [
            ElementEvent([("a", 1, 3 * S), ("b", 2, 7 * S)]),
            WatermarkEvent(5 * S),
            ProcessingTimeEvent(S),
            ElementEvent([("a", 3, 12 * S)]),
            WatermarkEvent(11 * S),
            ElementEvent([("a", 4, 8 * S)]),
            WatermarkEvent(25 * S),
        ]
    )
    strategy = WindowingStrategy(
        Sessions("4s"),
        AfterWatermark(late=AfterCount(1)),
        allowed_lateness="5s",
        timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
    )
    _compare(script, strategy)


@pytest.mark.parametrize("seed", [3, 11])
def test_traced_watermarks_equal_the_engines_on_drawn_cases(seed: int) -> None:
    case = random_case(seed)
    _compare(case.script, case.strategy)


def test_series_are_over_the_test_clock() -> None:
    script = Script(
        [ElementEvent([("a", 1, S)]), ProcessingTimeEvent(3 * S), WatermarkEvent(20 * S)]
    )
    with trace_watermarks() as trace:
        run_beam(script, WindowingStrategy(FixedWindows("10s")))
    _, output_wm = trace.series(group_by_window_label())
    assert output_wm.at(3 * S - 1) < 20 * S <= output_wm.at(3 * S)
    with pytest.raises(KeyError, match="no transform labelled 'nope'"):
        trace.records("nope")


def test_beam_version_is_checked() -> None:
    assert check_beam_version()  # the installed one is known
    with pytest.raises(RuntimeError, match=r"knows Beam 2\.77 only; Apache Beam 2\.60\.0"):
        check_beam_version("2.60.0")


def test_one_trace_at_a_time() -> None:
    with (
        trace_watermarks(),
        pytest.raises(RuntimeError, match="already active"),
        trace_watermarks(),
    ):
        pass
    with trace_watermarks():  # released after the first
        pass
