"""Running on Spark: results, metrics, failures and the ways a Beam author selects it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.runner import PipelineState
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from spark_backend.runner import PipelineFailedError
from spark_backend.runner.plan.plan import LEAN
from tests.helpers.events import FileEvent

pytestmark = pytest.mark.slow


class _Measured(beam.DoFn):
    def __init__(self) -> None:
        self.seen = Metrics.counter("test", "seen")
        self.sizes = Metrics.distribution("test", "sizes")
        self.last = Metrics.gauge("test", "last")

    def process(self, x: int) -> Any:
        self.seen.inc()
        self.sizes.update(x)
        self.last.set(7)
        yield x


def _metrics_pipeline(p: beam.Pipeline) -> None:
    p | beam.Create(list(range(50))) | beam.Reshuffle() | "Measure" >> beam.ParDo(_Measured())


def _committed(result: Any, name: str, kind: str) -> Any:
    found = result.metrics().query(MetricsFilter().with_name(name).with_step("Measure"))[kind]
    assert len(found) == 1, found
    return found[0].committed


def test_metrics_equal_fn_api_runners(runner: Any) -> None:
    results = []
    for chosen in (FnApiRunner(), runner):
        p = beam.Pipeline(runner=chosen)
        _metrics_pipeline(p)
        result = p.run()
        result.wait_until_finish()
        results.append(result)
    reference, spark = results
    assert spark.state == PipelineState.DONE
    (measure,) = [path for name, path in spark.stage_paths.items() if "Measure" in name]
    assert measure == LEAN  # the metrics below come from the lean path's containers
    assert _committed(spark, "seen", "counters") == _committed(reference, "seen", "counters") == 50
    assert _committed(spark, "sizes", "distributions") == _committed(
        reference, "sizes", "distributions"
    )
    assert _committed(spark, "last", "gauges").value == 7
    assert spark.metrics().query(MetricsFilter().with_name("absent"))["counters"] == []


def test_a_raising_dofn_fails_the_run_with_its_message_and_label(runner: Any) -> None:
    p = beam.Pipeline(runner=runner)
    p | beam.Create([1, 2, 0]) | "Invert" >> beam.Map(lambda x: 1 / x)
    with pytest.raises(PipelineFailedError) as err:
        p.run().wait_until_finish()
    message = str(err.value)
    assert "ZeroDivisionError: division by zero" in message
    assert "[while running 'Invert']" in message


def test_runner_named_by_dotted_path_in_test_pipeline(spark: Any) -> None:
    options = PipelineOptions(["--runner=spark_backend.PySparkRunner"])
    with test_pipeline.TestPipeline(options=options, blocking=True) as p:
        words = p | beam.Create(["a b", "b c c"]) | beam.FlatMap(str.split)
        counts = words | beam.combiners.Count.PerElement()
        assert_that(counts, equal_to([("a", 1), ("b", 2), ("c", 2)]))


def test_assert_that_failure_fails_the_run(runner: Any) -> None:
    with pytest.raises(PipelineFailedError, match="Failed assert"):  # noqa: SIM117
        with beam.Pipeline(runner=runner) as p:
            assert_that(p | beam.Create([1, 2]), equal_to([1, 3]))


def _held(x: int, started: FileEvent, release: FileEvent) -> int:
    """Says it started, then holds its task until released (at most 120 s)."""
    started.set()
    if not release.wait(120):
        raise TimeoutError("never released")
    return x


def test_wait_with_a_duration_and_cancel(runner: Any, tmp_path: Path) -> None:
    started, release = FileEvent(tmp_path / "started"), FileEvent(tmp_path / "release")
    p = beam.Pipeline(runner=runner)
    p | beam.Create(list(range(8))) | beam.Reshuffle() | beam.Map(_held, started, release)
    result = p.run()
    try:
        assert started.wait(120), "no element reached the held Map"
        assert result.wait_until_finish(duration=10) is None  # still running after 10 ms
        assert result.state == PipelineState.RUNNING
        assert result.cancel() == PipelineState.CANCELLED
        assert result.wait_until_finish() == PipelineState.CANCELLED
    finally:
        release.set()
