"""PySparkRunner --streaming: sources and watermarks, GroupByKey/Combine against Beam's
BundleBasedDirectRunner, the deliberate divergence, stopping, and the refusals."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.runner import PipelineState
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger, userstate, window
from apache_beam.utils.timestamp import Timestamp

from spark_backend.runner import UnsupportedTransformError
from theory.time import MAX_TIMESTAMP

pytestmark = pytest.mark.slow

S = 1_000_000


def tv(key: str, value: int, seconds: float) -> window.TimestampedValue:
    return window.TimestampedValue((key, value), Timestamp(micros=int(seconds * S)))


def streaming(**extra: Any) -> PipelineOptions:
    return PipelineOptions(streaming=True, **extra)


class Observe(beam.DoFn):
    """Each element with its timestamp (µs), window and pane, as one comparable tuple."""

    def process(
        self,
        element: Any,
        timestamp: Any = beam.DoFn.TimestampParam,
        w: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Any:
        key, value = element
        value = sorted(value) if isinstance(value, list) else value
        yield (
            repr((key, value)),
            int(timestamp.micros),
            repr(w),
            pane.timing,
            pane.index,
            pane.is_first,
            pane.is_last,
        )


def two_streams() -> tuple[TestStream, TestStream]:
    """A busy stream and a quiet one: the quiet one sends its watermark once, then nothing."""
    busy = (
        TestStream()
        .add_elements([tv("a", 1, 1)])
        .advance_processing_time(1)
        .advance_watermark_to(Timestamp(micros=5 * S))
        .advance_processing_time(1)
        .add_elements([tv("a", 2, 6)])
        .advance_watermark_to(Timestamp(micros=20 * S))
        .advance_processing_time(1)
    )
    quiet = TestStream().advance_watermark_to(Timestamp(micros=3 * S))
    return busy, quiet


def test_a_source_sending_nothing_keeps_its_watermark(run_pipeline: Any) -> None:
    def build(p: beam.Pipeline, capture: Any) -> None:
        busy, quiet = two_streams()
        merged = (p | "busy" >> busy, p | "quiet" >> quiet) | "merge" >> beam.Flatten()
        merged | "values" >> beam.Map(lambda kv: kv[1]) | "capture" >> beam.ParDo(capture)

    values, result = run_pipeline(build)
    assert sorted(values) == [1, 2]
    marks = result.watermarks()
    busy_out, quiet_out = marks["busy"]["output"], marks["quiet"]["output"]
    merge_in = marks["merge"]["input"]
    # test clock (s): 0 -> 1 -> 2 -> 3 as the busy stream's processing-time events say
    at = [0, 1 * S, 2 * S, 3 * S]
    low = busy_out.at(0).item()
    assert low < 0  # the busy stream had sent no watermark by the end of processing time 0
    assert busy_out.at(at).tolist() == [low, 5 * S, 20 * S, MAX_TIMESTAMP]
    assert quiet_out.at(at).tolist() == [3 * S, 3 * S, 3 * S, MAX_TIMESTAMP]
    # the flatten reads both: the quiet source holds it at 3 s while the busy one is at 20 s
    assert merge_in.at(at).tolist() == [low, 3 * S, 3 * S, MAX_TIMESTAMP]
    assert result.why("values", 2 * S) == [
        ("values", "input"),
        ("merge", "input"),
        ("quiet", "source:watermark"),
    ]


def windowed_sums(p: beam.Pipeline, capture: Any) -> None:
    """Per-key sums in 10 s windows with early and late firings, accumulating."""
    events = (
        TestStream()
        .add_elements([tv("a", 1, 1), tv("b", 2, 2)])
        .add_elements([tv("a", 3, 4)])
        .advance_watermark_to(Timestamp(micros=12 * S))
        .add_elements([tv("a", 5, 3)])  # late, within the allowed lateness
        .advance_watermark_to(Timestamp(micros=30 * S))
    )
    (
        p
        | "events" >> events
        | "window"
        >> beam.WindowInto(
            window.FixedWindows(10),
            trigger=trigger.AfterWatermark(early=trigger.AfterCount(2), late=trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
            allowed_lateness=60,
        )
        | "sum" >> beam.CombinePerKey(sum)
        | "observe" >> beam.ParDo(Observe())
        | "capture" >> beam.ParDo(capture)
    )


def coder_rounded(observed: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Timestamps as Beam's windowed-value coder carries them: whole milliseconds."""
    return [(o[0], o[1] // 1000 * 1000, *o[2:]) for o in observed]


def test_combine_per_key_with_triggers_matches_bundle_based_direct_runner(
    run_pipeline: Any,
) -> None:
    beam_out, _ = run_pipeline(windowed_sums, runner=BundleBasedDirectRunner())
    ours, result = run_pipeline(windowed_sums, key_partitions=2)
    assert beam_out, "the reference fired no pane"
    assert sorted(ours) == sorted(coder_rounded(beam_out))
    assert result.state == PipelineState.DONE and not result.stalled
    # deliberate divergence: a pane at the window's max_timestamp (end - 1 µs) on Beam's
    # direct runner comes out at end - 1 ms here, as the coder carries milliseconds
    assert {o[1] for o in beam_out} == {10 * S - 1}
    assert {o[1] for o in ours} == {10 * S - 1000}


def test_max_batches_stops_after_that_many_batches(run_pipeline: Any) -> None:
    def build(p: beam.Pipeline, capture: Any) -> None:
        events = TestStream()
        for i in range(5):
            events = events.add_elements([tv("a", i, i)])
        p | events | beam.Map(lambda kv: kv[1]) | beam.ParDo(capture)

    values, result = run_pipeline(build, max_batches=2)
    assert sorted(values) == [0, 1]
    assert result.batches == 2 and result.state == PipelineState.DONE


# -- refusals, before any Spark work ----------------------------------------------------


def run_refused(build: Any, *flags: str) -> None:
    from spark_backend.runner import PySparkRunner

    p = beam.Pipeline(runner=PySparkRunner(), options=PipelineOptions(list(flags)))
    build(p)
    p.run()


def one_stream(p: beam.Pipeline) -> Any:
    return p | "MyStream" >> TestStream().add_elements([("k", 1)])


def test_test_stream_in_batch_is_refused_as_streaming_only() -> None:
    with pytest.raises(UnsupportedTransformError, match=r"'MyStream'.*streaming-only.*--streaming"):
        run_refused(lambda p: one_stream(p) | beam.Map(str))


class _StatefulWithSide(beam.DoFn):
    SEEN = userstate.BagStateSpec("seen", VarIntCoder())

    def process(self, kv: Any, side: Any, seen: Any = beam.DoFn.StateParam(SEEN)) -> Any:  # noqa: B008
        yield kv


def test_side_input_on_a_stateful_dofn_in_streaming_is_refused_naming_it() -> None:
    def build(p: beam.Pipeline) -> None:
        # a KV side, as the main input: Beam's ParDo.to_runner_api picks the stateful
        # DoFn's "main" input from a set of names, which may be the side input's
        # (hash order); a side of ints then fails Beam's own translation half the time
        side = beam.pvalue.AsList(p | "side" >> beam.Create([("k", 1)]))
        one_stream(p) | "Keep" >> beam.ParDo(_StatefulWithSide(), side)

    with pytest.raises(UnsupportedTransformError, match=r"'Keep'.*side inputs on a stateful"):
        run_refused(build, "--streaming")


@pytest.mark.parametrize(
    ("flags", "error", "message"),
    [
        (["--max_batches", "2"], ValueError, "--max_batches needs --streaming"),
        (["--key_partitions", "2"], ValueError, "--key_partitions needs --streaming"),
        (["--streaming", "--max_batches", "0"], ValueError, "max_batches must be >= 1, got 0"),
        (["--streaming", "--key_partitions", "0"], ValueError, "key_partitions must be >= 1"),
    ],
)
def test_bad_streaming_options_are_refused(flags: list[str], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        run_refused(lambda p: p | beam.Create([1]), *flags)


def test_cancel_stops_at_a_batch_boundary(spark: Any) -> None:
    from spark_backend.runner import PySparkRunner

    events = TestStream()
    for i in range(50):
        events = events.add_elements([tv("a", i, i)])
    p = beam.Pipeline(runner=PySparkRunner(), options=streaming())
    p | events | beam.Map(lambda kv: kv[1])
    result = p.run()
    assert result.wait_until_finish(duration=1) is None  # 50 Spark jobs take longer than 1 ms
    assert result.cancel() == PipelineState.CANCELLED
    assert result.wait_until_finish() == PipelineState.CANCELLED
    assert 0 <= result.batches < 50


def chained_groups(p: beam.Pipeline, capture: Any) -> None:
    """Per-key sums in 10 s windows, then per window the count of keys: a GroupByKey
    reading another's output in the same batch."""
    events = (
        TestStream()
        .add_elements([tv("a", 1, 1), tv("b", 2, 2), tv("c", 4, 12)])
        .advance_watermark_to(Timestamp(micros=11 * S))
        .add_elements([tv("a", 3, 15)])
        .advance_watermark_to(Timestamp(micros=25 * S))
    )
    (
        p
        | "events" >> events
        | "window" >> beam.WindowInto(window.FixedWindows(10))
        | "sum" >> beam.CombinePerKey(sum)
        | "rekey" >> beam.Map(lambda kv: ("all", kv[1]))
        | "count" >> beam.GroupByKey()
        | "observe" >> beam.ParDo(Observe())
        | "capture" >> beam.ParDo(capture)
    )


def test_chained_group_by_keys_match_bundle_based_direct_runner(run_pipeline: Any) -> None:
    beam_out, _ = run_pipeline(chained_groups, runner=BundleBasedDirectRunner())
    ours, result = run_pipeline(chained_groups, key_partitions=2)
    assert len(beam_out) == 2, "the reference should fire one pane per window"
    assert sorted(ours) == sorted(coder_rounded(beam_out))
    marks = result.watermarks()
    # the second GroupByKey reads the first one's output: its input follows that output
    first_out, second_in = marks["sum/GroupByKey"]["output"], marks["count"]["input"]
    assert second_in.values.tolist() == first_out.values.tolist()
