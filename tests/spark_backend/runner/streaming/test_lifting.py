"""Streaming's fast paths: which ``Combine.PerKey`` is lifted (no Spark), and a lifted,
lean pipeline against Beam's BundleBasedDirectRunner and against the reference
(``PySparkRunner(fast_paths=False)``: every stage on Beam's bundles, nothing lifted).

The differential pipeline has windows on both sides of 0 (Beam's coder rounds
timestamps toward zero, so a lifted accumulator stamped at ``max_timestamp`` = -1 µs
comes out at 0: the GroupByKey must group by the window it carries), late elements
within the allowed lateness (late panes) and beyond it (dropped), and two TestStream
events per batch key.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import environments, trigger, window
from apache_beam.utils.timestamp import Timestamp

from spark_backend.runner.plan.plan import LEAN, plan_pipeline
from spark_backend.runner.streaming.lifting import relabel_lifted_groups
from spark_backend.runner.streaming.sources import streaming_proto
from tests.spark_backend.runner.streaming.test_differential import coder_micros
from tests.spark_backend.runner.streaming.test_streaming import Observe, tv

S = 1_000_000
PRECOMBINE = common_urns.combine_components.COMBINE_PER_KEY_PRECOMBINE.urn


def _plan(windowing: Any, lift: bool = True) -> Any:
    p = beam.Pipeline()
    stream = TestStream().add_elements([beam.window.TimestampedValue(("a", 1), 2)])
    (
        p
        | "events" >> stream
        | "window" >> windowing
        | "count" >> beam.CombinePerKey(beam.combiners.CountCombineFn())
        | "show" >> beam.Map(str)
    )
    proto = p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())
    prepared, _ = streaming_proto(proto, lift=lift)
    plan = plan_pipeline(prepared, stateful_roots=True, lean=lift)
    return relabel_lifted_groups(plan, prepared)


def _urns(plan: Any) -> set[str]:
    return {
        t.spec.urn
        for spec in plan.stages
        for t in beam_fn_api_pb2.ProcessBundleDescriptor.FromString(
            spec.descriptor
        ).transforms.values()
    }


@pytest.mark.parametrize(
    ("windowing", "lifted"),
    [
        (beam.WindowInto(window.FixedWindows(10)), True),
        (beam.WindowInto(window.SlidingWindows(10, 5), allowed_lateness=30), True),
        (
            beam.WindowInto(
                window.FixedWindows(10),
                trigger=trigger.AfterWatermark(
                    early=trigger.AfterProcessingTime(5), late=trigger.AfterCount(1)
                ),
                accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                allowed_lateness=60,
            ),
            True,
        ),
        # a bare AfterWatermark(): its early/late triggers are unset, Beam lifts none
        (
            beam.WindowInto(
                window.FixedWindows(10),
                trigger=trigger.AfterWatermark(),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
            ),
            False,
        ),
        (beam.WindowInto(window.Sessions(10)), False),  # merging
        (
            beam.WindowInto(
                window.FixedWindows(10),
                timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST,
            ),
            False,
        ),
        (
            beam.WindowInto(
                window.FixedWindows(10),
                trigger=trigger.AfterWatermark(early=trigger.AfterCount(2)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
            ),
            False,
        ),
    ],
)
def test_a_combine_is_lifted_only_when_its_panes_stay_the_same(
    windowing: Any, lifted: bool
) -> None:
    plan = _plan(windowing)
    assert (PRECOMBINE in _urns(plan)) == lifted
    # either way the GroupByKey keeps the pipeline's own leaf label (the watermarks')
    assert [g.label for g in plan.groups.values()] == ["count/GroupByKey"]


def test_the_reference_lifts_nothing_and_runs_every_stage_on_beams_bundles() -> None:
    plan = _plan(beam.WindowInto(window.FixedWindows(10)), lift=False)
    assert PRECOMBINE not in _urns(plan)
    assert not any(spec.path == LEAN for spec in plan.stages)
    fast = _plan(beam.WindowInto(window.FixedWindows(10)))
    assert any(spec.path == LEAN for spec in fast.stages)


def lifted_counts(p: beam.Pipeline, capture: Any) -> None:
    """Counts and sums per key in 10 s windows from -20 s, with late data, lifted."""
    events = (
        TestStream()
        .add_elements([tv("a", 1, -15), tv("a", 2, -0.001), tv("b", 3, -5), tv("a", 4, 1)])
        .add_elements([tv("b", 5, -0.5), tv("a", 6, 9.999), tv("b", 7, 12)])
        .advance_watermark_to(Timestamp(micros=0))
        .add_elements([tv("a", 8, -3), tv("b", 9, 4)])  # late in [-10, 0): a late pane
        .advance_watermark_to(Timestamp(micros=15 * S))
        .add_elements([tv("a", 10, -12), tv("b", 11, 14)])  # [-20,-10) expired: dropped
        .advance_watermark_to(Timestamp(micros=40 * S))
    )
    windowed = (
        p
        | "events" >> events
        | "window" >> beam.WindowInto(window.FixedWindows(10), allowed_lateness=8)
    )
    counts = windowed | "count" >> beam.CombinePerKey(beam.combiners.CountCombineFn())
    sums = windowed | "sum" >> beam.CombinePerKey(sum)
    (
        (counts, sums)
        | beam.Flatten()
        | "observe" >> beam.ParDo(Observe())
        | "capture" >> beam.ParDo(capture)
    )


def test_lifted_lean_counts_match_bundle_based_direct_runner_and_the_reference(
    run_pipeline: Any,
) -> None:
    from spark_backend.runner import PySparkRunner

    beam_out, _ = run_pipeline(lifted_counts, runner=BundleBasedDirectRunner())
    ours, result = run_pipeline(lifted_counts, key_partitions=2)
    reference, _ = run_pipeline(
        lifted_counts, runner=PySparkRunner(fast_paths=False), key_partitions=2
    )
    timings = {o[3] for o in beam_out}
    assert len(timings) == 2, "the reference should fire on-time and late panes"
    # Beam's windowed-value coder keeps whole ms, rounded toward zero (test_streaming)
    through_coder = [(o[0], coder_micros(o[1]), *o[2:]) for o in beam_out]
    assert sorted(ours) == sorted(through_coder) == sorted(reference)
    # both lifted GroupByKeys are tracked under their own labels
    marks = result.watermarks()
    assert {"count/GroupByKey", "sum/GroupByKey"} <= set(marks)
