"""TestStream elements that carry their own window (Beam's ``WindowedValueHolder``),
against BundleBasedDirectRunner: each keeps its timestamp, windows and pane through the
TestStream's output, through a stage edge (a GroupByKey groups it in its own window)
and into a DoFn, on the default configuration and with every stage on Spark."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing import test_stream
from apache_beam.testing.test_stream import WindowedValueHolder
from apache_beam.transforms.window import IntervalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming, WindowedValue

pytestmark = pytest.mark.slow


def _held(value: Any, at: float, windows: tuple[Any, ...], index: int = 0) -> WindowedValueHolder:
    pane = PaneInfo(index == 0, False, PaneInfoTiming.EARLY, index, -1)
    return WindowedValueHolder(WindowedValue(value, Timestamp(at), windows, pane))


class _Record(beam.DoFn):
    def process(
        self,
        element: Any,
        timestamp: Any = beam.DoFn.TimestampParam,
        window: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[Any]:
        yield ("record", element, timestamp, window, pane.index, pane.timing)


def _build(p: Any, capture: Any) -> None:
    intervals = (
        test_stream.TestStream()
        .advance_watermark_to(3)
        .add_elements([_held(("k", 1), 5, (IntervalWindow(5, 10),))])
        .add_elements(
            [
                _held(("k", 2), 7.5, (IntervalWindow(5, 10),), index=1),
                _held(("j", 3), 12, (IntervalWindow(10, 20), IntervalWindow(12, 13))),
            ]
        )
        .advance_watermark_to_infinity()
    )
    held = p | "Intervals" >> intervals
    recorded = held | "R" >> beam.ParDo(_Record())
    grouped = (
        held
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs, w=beam.DoFn.WindowParam: ("group", k, sorted(vs), w))
    )
    (recorded, grouped) | beam.Flatten() | beam.ParDo(capture)


@pytest.mark.parametrize("driver_stages", [True, False], ids=["default", "spark-stages"])
def test_own_windows_equal_the_direct_runner(run_pipeline: Any, driver_stages: bool) -> None:
    from spark_backend.runner import PySparkRunner

    # the GroupByKey's windowing is global (the elements bring their windows), which
    # Beam refuses on an unbounded input unless told
    expected, _ = run_pipeline(_build, runner=BundleBasedDirectRunner(), allow_unsafe_triggers=True)
    ours, _ = run_pipeline(
        _build, runner=PySparkRunner(driver_stages=driver_stages), allow_unsafe_triggers=True
    )
    assert ("group", "k", [1, 2], IntervalWindow(5, 10)) in expected
    assert sorted(ours, key=repr) == sorted(expected, key=repr)
