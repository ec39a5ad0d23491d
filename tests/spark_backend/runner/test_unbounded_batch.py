"""Unbounded splittable reads in a batch pipeline, against FnApiRunner.

FnApiRunner runs an unbounded read in batch by resuming its residuals until the
restriction is done; PySparkRunner does the same in the task
(:func:`spark_backend.runner.stages.bundles.run_partition`). Both shapes Beam's suite
builds: ``PeriodicImpulse`` with a stop (its timestamps in the past, so that both runs
fire the same instants), and a splittable DoFn that defers its remainder with a resume
delay after every position; each then windowed and grouped. They run with the default
configuration and with every stage on Spark (``driver_stages=False``).
"""

# Beam declares a DoFn's restriction provider as a default argument (RestrictionParam).
# ruff: noqa: B008

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.transforms import window
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.utils.timestamp import Duration, Timestamp

from spark_backend.runner import PySparkRunner
from spark_backend.runner.stages.bundles import resume_delay

pytestmark = pytest.mark.slow

RUNNERS = pytest.mark.parametrize(
    "make",
    [PySparkRunner, lambda: PySparkRunner(driver_stages=False)],
    ids=["default", "spark-stages"],
)


class _Positions(beam.transforms.core.RestrictionProvider):
    """Positions ``[0, element)`` of an element."""

    def initial_restriction(self, element: int) -> OffsetRange:
        return OffsetRange(0, element)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element: int, restriction: OffsetRange) -> int:
        return int(restriction.size())


class _DeferringTicks(beam.DoFn):
    """Unbounded per element: claims one position per bundle, emits it timestamped at
    ``position`` seconds, and defers the remainder by 5 ms."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element: int, tracker: Any = beam.DoFn.RestrictionParam(_Positions())) -> Any:
        position = tracker.current_restriction().start
        if tracker.try_claim(position):
            yield window.TimestampedValue((f"k{element}", position), Timestamp(position))
            tracker.defer_remainder(Duration(micros=5_000))


def unbounded_reads(p: beam.Pipeline) -> dict[str, Any]:
    impulses = p | PeriodicImpulse(
        start_timestamp=Timestamp(1000), stop_timestamp=Timestamp(1003), fire_interval=0.25
    )
    ticks = p | beam.Create([3, 5]) | beam.ParDo(_DeferringTicks())
    return {
        "impulses": impulses,
        "impulses grouped": impulses
        | beam.WithKeys(0)
        | beam.WindowInto(window.SlidingWindows(1, 0.5))
        | beam.GroupByKey(),
        "ticks": ticks,
        "ticks grouped": ticks
        | "Fixed" >> beam.WindowInto(window.FixedWindows(2))
        | "Group ticks" >> beam.GroupByKey(),
    }


@RUNNERS
def test_unbounded_reads_run_in_batch_as_on_fn_api_runner(differential: Any, make: Any) -> None:
    differential(unbounded_reads, on=make())


def _residual(delay_micros: int | None) -> beam_fn_api_pb2.DelayedBundleApplication:
    residual = beam_fn_api_pb2.DelayedBundleApplication()
    if delay_micros is not None:
        residual.requested_time_delay.FromMicroseconds(delay_micros)
    return residual


def test_a_round_of_residuals_waits_for_the_shortest_delay_they_asked_for() -> None:
    def response(*delays: int | None) -> beam_fn_api_pb2.ProcessBundleResponse:
        return beam_fn_api_pb2.ProcessBundleResponse(residual_roots=[_residual(d) for d in delays])

    assert resume_delay(response(30_000, 5_000, 2_000_000)) == 5_000
    assert resume_delay(response(30_000, None)) == 0  # one asked for no delay
    assert resume_delay(response()) == 0
