"""Issue 17's kit with PySparkRunner --streaming passed as the runner: the same script
through ``assert_panes`` and ``tracing.run_with_watermarks`` on BundleBasedDirectRunner
and on PySparkRunner gives the same panes and the same watermark series."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

from beam_pipelines.convert import to_beam
from beam_pipelines.testing import assert_panes
from beam_pipelines.teststream import to_test_stream
from beam_pipelines.tracing import RunWatermarks, run_with_watermarks
from spark_backend.runner import PySparkRunner
from theory import AfterCount, AfterWatermark, Sessions, WindowingStrategy
from theory.series import union_times
from theory.time import MICROS_PER_MILLI, SECOND
from theory.windowing.script import ElementEvent, ProcessingTimeEvent, Script, WatermarkEvent
from theory.windowing.strategy import AccumulationMode, TimestampCombiner

pytestmark = pytest.mark.slow

S = SECOND

SCRIPT = Script(
    [
        ElementEvent([("a", 1, 3 * S), ("b", 2, 7 * S)]),
        WatermarkEvent(5 * S),
        ProcessingTimeEvent(S),
        ElementEvent([("a", 3, 12 * S), ("b", 5, 9 * S)]),
        WatermarkEvent(11 * S),
        ProcessingTimeEvent(2 * S),
        ElementEvent([("a", 4, 5 * S)]),  # late into a fired session, within the lateness
        WatermarkEvent(25 * S),
        ElementEvent([("b", 6, 2 * S)]),  # too late: dropped
        WatermarkEvent(40 * S),
    ]
)

#: Sessions with a late firing per late element, and holds at the earliest element.
STRATEGY = WindowingStrategy(
    Sessions("4s"),
    AfterWatermark(late=AfterCount(1)),
    AccumulationMode.ACCUMULATING,
    allowed_lateness="5s",
    timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
)

EOW = WindowingStrategy(Sessions("4s"), AfterWatermark(late=AfterCount(1)), allowed_lateness="5s")


class Group(beam.PTransform):
    """The user's transform: window, group, sum."""

    def __init__(self, strategy: WindowingStrategy) -> None:
        super().__init__()
        self._strategy = strategy

    def expand(self, pcoll: Any) -> Any:
        return (
            pcoll
            | "window" >> to_beam(self._strategy)
            | "group" >> beam.GroupByKey()
            | "sum" >> beam.MapTuple(lambda k, vs: (k, sum(vs)))
        )


def _key(rows: list[Any]) -> list[tuple[Any, ...]]:
    """Panes as comparable tuples, timestamps at Beam's coder precision."""
    return sorted(
        (
            repr(r.key),
            r.start,
            r.end,
            r.timestamp - r.timestamp % MICROS_PER_MILLI,
            r.timing,
            r.index,
            r.is_first,
            r.is_last,
            r.value,
        )
        for r in rows
    )


@pytest.mark.parametrize("strategy", [STRATEGY, EOW], ids=["earliest", "end-of-window"])
def test_assert_panes_passes_on_both_runners_with_the_same_panes(
    spark: Any, strategy: WindowingStrategy
) -> None:
    """End-of-window panes come out at ``end - 1 ms`` on PySparkRunner (Beam's coder), and
    assert_panes compares them so; the panes are otherwise the direct runner's."""
    direct = assert_panes(Group(strategy), SCRIPT, strategy, combine=sum)
    on_spark = assert_panes(Group(strategy), SCRIPT, strategy, combine=sum, runner=PySparkRunner())
    # three on-time panes and one more for the late element (LATE under end of window;
    # EARLY under EARLIEST, whose merged session waits on its hold: the model says so)
    assert sorted(r.timing for r in direct).count("ON_TIME") == 3 and len(direct) == 4
    assert _key(direct) == _key(on_spark)


def _run(runner: Any) -> RunWatermarks:
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(streaming=True))
    _ = pipeline | "events" >> to_test_stream(SCRIPT) | "user" >> Group(STRATEGY)
    _, marks = run_with_watermarks(pipeline)
    return marks


def test_traced_watermarks_are_the_same_on_both_runners(spark: Any) -> None:
    direct = _run(BundleBasedDirectRunner())
    on_spark = _run(PySparkRunner())
    common = sorted(set(direct) & set(on_spark))
    assert {"events", "user/window", "user/group", "user/sum"} <= set(common), common
    for label in common:
        for side in (0, 1):
            a, b = direct[label][side], on_spark[label][side]
            times = union_times([a, b])
            assert np.array_equal(a.at(times), b.at(times)), (label, side, a, b)
    # the GroupByKey's hold shows: its output waits below its input for a while
    group_in, group_out = on_spark["user/group"]
    times = union_times([group_in, group_out])
    assert np.any(group_out.at(times) < group_in.at(times))


def test_run_with_watermarks_refuses_a_runner_that_shows_none() -> None:
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | beam.Create([1]) | beam.Map(str)
    with pytest.raises(TypeError, match="FnApiRunner shows no watermarks"):
        run_with_watermarks(pipeline)
