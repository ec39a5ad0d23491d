"""Late data counted: Beam Java's ``droppedDueToLateness`` per GroupByKey and Combine,
equal to theory's engine's dropped count on the same input; 0 in batch."""

from __future__ import annotations

import io
import sys
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import TimestampedValue

from beam_pipelines.convert import beam_windowing
from beam_pipelines.teststream import to_test_stream
from spark_backend.runner import PySparkRunner
from spark_backend.runner.grouping.late_data import DROPPED_DUE_TO_LATENESS, NAMESPACE
from theory.time import MAX_TIMESTAMP, SECOND
from theory.windowing.runner import run_script
from theory.windowing.script import ElementEvent, Script, WatermarkEvent
from theory.windowing.strategy import WindowingStrategy
from theory.windowing.windows import FixedWindows

pytestmark = pytest.mark.slow

#: 10 s windows, 5 s allowed lateness; one key per late element, so that a lifted
#: combine's accumulators are its elements.
STRATEGY = WindowingStrategy(FixedWindows(10 * SECOND), allowed_lateness=5 * SECOND)
SCRIPT = Script(
    [
        ElementEvent([("a", 1, 1 * SECOND), ("b", 2, 12 * SECOND)]),
        WatermarkEvent(18 * SECOND),
        ElementEvent([("c", 3, 2 * SECOND), ("d", 4, 13 * SECOND)]),  # c: expired
        WatermarkEvent(40 * SECOND),
        ElementEvent([("e", 5, 3 * SECOND), ("f", 6, 14 * SECOND), ("g", 7, 45 * SECOND)]),
    ]
)


def dropped(result: Any) -> dict[str, int]:
    query = MetricsFilter().with_namespace(NAMESPACE).with_name(DROPPED_DUE_TO_LATENESS)
    return {r.key.step: r.committed for r in result.metrics().query(query)["counters"]}


def build(p: beam.Pipeline, source: Any) -> None:
    windowed = p | source | "window" >> beam.WindowInto(**beam_windowing(STRATEGY))
    _ = windowed | "GBK" >> beam.GroupByKey()
    _ = windowed | "Fixed/CombinePerKey(sum)" >> beam.CombinePerKey(sum)


@pytest.fixture(scope="module")
def streamed_run(spark: Any) -> tuple[Any, str]:
    """The pipeline run --streaming on SCRIPT, and what it showed on a terminal."""
    p = beam.Pipeline(
        runner=PySparkRunner(), options=PipelineOptions(streaming=True, key_partitions=1)
    )
    build(p, "events" >> to_test_stream(SCRIPT))
    stderr, terminal = sys.stderr, _Terminal()
    sys.stderr = terminal  # the run shows its progress on a terminal
    try:
        result = p.run()
        result.wait_until_finish()
    finally:
        sys.stderr = stderr
    return result, terminal.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def streamed(streamed_run: tuple[Any, str]) -> Any:
    return streamed_run[0]


def test_each_micro_batch_shows_one_progress_line(streamed_run: tuple[Any, str]) -> None:
    result, shown = streamed_run
    lines = [x for x in shown.splitlines() if x.startswith("PySparkRunner batch ")]
    assert [x.split(":")[0] for x in lines] == [
        f"PySparkRunner batch {n}" for n in range(result.batches)
    ]


def test_dropped_due_to_lateness_equals_the_engines_count(streamed: Any) -> None:
    result = streamed
    expected = run_script(SCRIPT, STRATEGY).dropped["expired"]
    assert expected == 3
    assert dropped(result) == {"GBK": expected, "Fixed/CombinePerKey(sum)": expected}
    by_step = MetricsFilter().with_name(DROPPED_DUE_TO_LATENESS).with_step("GBK")
    (gbk,) = result.metrics().query(by_step)["counters"]
    assert gbk.committed == expected


def test_dropped_due_to_lateness_reads_zero_in_batch(spark: Any) -> None:
    p = beam.Pipeline(runner=PySparkRunner())
    create = beam.Create([("a", 1), ("b", 2)]) | beam.Map(lambda kv: TimestampedValue(kv, 1))
    build(p, "events" >> create)
    result = p.run()
    result.wait_until_finish()
    counts = dropped(result)  # Create's own Reshuffle has a GroupByKey too
    assert {"GBK", "Fixed/CombinePerKey(sum)"} <= set(counts)
    assert set(counts.values()) == {0}


def test_why_takes_a_composite_label_and_shows_the_drops(streamed: Any) -> None:
    at = int(streamed.watermarks()["GBK"]["output"].times[-1])
    why = streamed.why("Fixed/CombinePerKey(sum)", at)
    assert why[0][0].startswith("Fixed/CombinePerKey(sum)/")
    assert why.dropped == {"Fixed/CombinePerKey(sum)": 3}
    assert "Fixed/CombinePerKey(sum): droppedDueToLateness 3" in str(why)
    assert streamed.why("GBK", at).dropped == {"GBK": 3}
    with pytest.raises(KeyError, match=r"'Fixed/CombinePerKey\(sum\)'"):
        streamed.why("Fixed/CombinePerKey(summ)", at)


def test_watermarks_print_as_a_table_with_infinities(streamed: Any) -> None:
    table = streamed.watermarks()
    text = str(table)
    (gbk,) = [line for line in text.splitlines() if line.startswith("GBK ")]
    assert gbk.split() == ["GBK", "+∞", "+∞"]  # both at the end, no hold left
    assert "<td>GBK</td><td>+∞</td>" in table._repr_html_()
    assert int(table["GBK"]["output"].values[-1]) == MAX_TIMESTAMP  # raw µs kept
