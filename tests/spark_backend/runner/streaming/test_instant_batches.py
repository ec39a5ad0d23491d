"""The streaming driver's TestStream sources without Spark: a TestStream of several output
tags (one source per tag), and ``--test_stream_batches=instant`` (one batch per
processing time)."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream as BeamTestStream
from apache_beam.transforms import environments
from apache_beam.transforms.window import TimestampedValue
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_pipelines.teststream import from_trace
from spark_backend.runner.plan.options import stream_batching
from spark_backend.runner.streaming.driver import schedule
from spark_backend.runner.streaming.sources import (
    ELEMENTS,
    PROCESSING_TIME,
    WATERMARK,
    TestStreamSource,
    streaming_proto,
)
from spark_backend.runner.streaming.watermarks import PipelineWatermarks
from tests.spark_backend.runner.streaming.events import EVENT
from theory.data.trace import Trace
from theory.time import MAX_TIMESTAMP


def _proto(pipeline: beam.Pipeline) -> object:
    return pipeline.to_runner_api(
        default_environment=environments.EmbeddedPythonEnvironment.default()
    )


@settings(max_examples=80, deadline=None)
@given(
    events=st.lists(st.tuples(EVENT, st.sampled_from(["t[a]", "t[b]"])), max_size=12),
    impulses=st.lists(st.sampled_from(["i1"]), unique=True),
)
def test_instant_batches_send_each_event_once_as_beam_orders_them(
    events: list[tuple[tuple[str, object], str]], impulses: list[str]
) -> None:
    """Per batch: at most one clock step, first; elements; then watermarks. Together the
    batches send every event once, in order, and no run is cut short: a batch ends only
    before a clock step or before elements that follow a watermark."""
    source = TestStreamSource(
        "t", "c", tuple(e for e, _ in events), tuple(t for _, t in events), ("t[a]", "t[b]")
    )
    batches = list(schedule({"t": source}, impulses, per_instant=True))
    assert [b.number for b in batches] == list(range(len(batches)))
    sent_elements: dict[str, int] = {"t[a]": 0, "t[b]": 0}
    for batch in batches[:-1]:
        for target, payload in batch.elements.items():
            sent_elements[target] += len(payload)
    expected = {"t[a]": 0, "t[b]": 0}
    for (kind, _), target in events:
        expected[target] += int(kind == ELEMENTS)
    assert sent_elements == expected
    # each clock step opens a batch of its own: the batches' steps are the events'
    steps = [p for (k, p), _ in events if k == PROCESSING_TIME]
    assert [b.clock_advance for b in batches if b.clock_advance] == steps
    # a batch starts at a clock step, or at elements after a watermark in the batch
    starts = 0
    current: list[str] = []
    for (kind, _), _ in events:
        if not current or kind == PROCESSING_TIME or (kind == ELEMENTS and WATERMARK in current):
            starts += 1
            current = []
        current.append(kind)
    assert len(batches) - 1 == starts
    assert set(batches[-1].watermarks) == {"t[a]", "t[b]", *impulses}
    assert all(w == MAX_TIMESTAMP for w in batches[-1].watermarks.values())


def test_a_test_stream_of_several_tags_is_one_source_per_tag_with_its_events() -> None:
    p = beam.Pipeline()
    stream = (
        BeamTestStream(output_tags={"a", "b"})
        .add_elements([TimestampedValue(1, 2)], tag="a")
        .advance_watermark_to(5, tag="b")
        .advance_processing_time(3)
        .add_elements([TimestampedValue(2, 4)], tag="b")
    )
    outputs = p | "t" >> stream
    outputs["a"] | "ma" >> beam.Map(str)
    outputs["b"] | "mb" >> beam.Map(str)
    prepared, sources = streaming_proto(_proto(p))  # type: ignore[arg-type]
    source = sources["t"]
    assert source.outputs == ("t[a]", "t[b]")
    assert [source.target(i) for i in range(len(source.events))] == ["t[a]", "t[b]", "t", "t[b]"]
    graph = PipelineWatermarks(prepared).graph
    assert sorted(graph.sources()) == ["t[a]", "t[b]"]
    assert graph.upstream("ma") == ("t[a]",) and graph.upstream("mb") == ("t[b]",)


def test_a_replayed_trace_is_one_instant_batch_per_arrival_time() -> None:
    """from_trace's events: per arrival time a clock step, each tag's elements, then
    each tag's watermark: one batch per distinct arrival time (and a last one)."""
    rng = np.random.default_rng(3)
    arrival = np.sort(rng.integers(0, 20, 200)) * 1_000_000
    event = arrival - rng.integers(0, 5, 200) * 1_000_000
    trace = Trace(event, arrival, rng.integers(0, 4, 200), np.ones(200))
    tags = ["a" if k % 2 else "b" for k in trace.key.tolist()]
    p = beam.Pipeline()
    outputs = p | "t" >> from_trace(trace, "bounded:2s", tags=tags)
    for tag, pcoll in outputs.items():
        pcoll | f"m{tag}" >> beam.Map(str)
    _, sources = streaming_proto(_proto(p))  # type: ignore[arg-type]
    batches = list(schedule(sources, [], per_instant=True))
    assert len(batches) == np.unique(arrival).size + 1
    assert sum(len(v) for b in batches for v in b.elements.values()) == 200


def test_the_batching_option_is_checked() -> None:
    assert stream_batching(PipelineOptions([])) == "event"
    assert stream_batching(PipelineOptions(["--test_stream_batches=instant"])) == "instant"
    with pytest.raises(ValueError, match="test_stream_batches must be one of event, instant"):
        stream_batching(PipelineOptions(test_stream_batches="often"))
