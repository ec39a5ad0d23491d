"""TestStream elements taken from the pipeline object (streaming/elements.py), without
Spark: the driver's sources read the same events from a stripped proto plus the taken
elements as from the whole proto decoded with the TestStream's coder; the transforms get
their events back; a batch's slices round-trip; the default key partitions."""

from __future__ import annotations

import pickle
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.testing.test_stream import ElementEvent
from apache_beam.testing.test_stream import TestStream as BeamTestStream
from apache_beam.transforms import environments
from apache_beam.transforms.window import TimestampedValue
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_pipelines.teststream import from_trace
from spark_backend.runner.streaming.elements import Elements, stripped_test_streams
from spark_backend.runner.streaming.run import task_slots
from spark_backend.runner.streaming.sources import ELEMENTS, streaming_proto
from theory.data.trace import Trace


def _proto(pipeline: beam.Pipeline) -> Any:
    return pipeline.to_runner_api(
        default_environment=environments.EmbeddedPythonEnvironment.default()
    )


def _pipeline(trace: Trace, tags: list[str] | None) -> tuple[beam.Pipeline, BeamTestStream]:
    p = beam.Pipeline()
    stream = from_trace(trace, "bounded:2s", tags=tags)
    outputs = p | "t" >> stream
    for tag, pcoll in outputs.items() if tags else [("x", outputs)]:
        pcoll | f"m{tag}" >> beam.Map(str)
    return p, stream


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(0, 300),
    tagged=st.booleans(),
)
def test_stripped_elements_read_as_the_whole_proto_decoded(seed: int, n: int, tagged: bool) -> None:
    """Every event (kind, target, payload) is the same both ways, the stripped proto
    carries no element, and the TestStream has its events back afterwards."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.integers(0, 20, n)) * 1_000_000
    event = arrival - rng.integers(0, 5_000, n) * 1000
    keys = rng.integers(0, 6, n)
    trace = Trace(event, arrival, keys, rng.random(n))
    tags = ["a" if k % 2 else "b" for k in keys.tolist()] if tagged else None
    p, _ = _pipeline(trace, tags)
    whole = _proto(p)
    _, decoded = streaming_proto(whole)
    before = [id(t) for t in _streams(p)]
    events_before = [list(t._events) for t in _streams(p)]
    with stripped_test_streams(p) as stripped:
        bare = _proto(p)
    assert [list(t._events) for t in _streams(p)] == events_before  # given back
    assert [id(t) for t in _streams(p)] == before
    assert len(bare.SerializeToString()) < len(whole.SerializeToString()) or n == 0
    (transform,) = (t for t in bare.components.transforms.values() if t.unique_name == "t")
    payload = pb.TestStreamPayload.FromString(transform.spec.payload)
    assert all(not e.element_event.elements for e in payload.events)
    _, taken = streaming_proto(bare, stripped=stripped)
    assert taken.keys() == decoded.keys() == {"t"}
    ours, theirs = taken["t"], decoded["t"]
    assert ours.events == theirs.events
    assert [ours.target(i) for i in range(len(ours.events))] == [
        theirs.target(i) for i in range(len(theirs.events))
    ]
    sent = sum(len(p) for k, p in ours.events if k == ELEMENTS)
    assert sent == n


def test_sub_millisecond_timestamps_are_floored_as_the_proto_floors_them() -> None:
    stream = BeamTestStream().add_elements(
        [TimestampedValue(("k", 1), 0.0015), TimestampedValue(("k", 2), -0.0015)]
    )
    p = beam.Pipeline()
    p | "t" >> stream | "m" >> beam.Map(str)
    _, decoded = streaming_proto(_proto(p))
    with stripped_test_streams(p) as stripped:
        bare = _proto(p)
    _, taken = streaming_proto(bare, stripped=stripped)
    assert taken["t"].events == decoded["t"].events
    (_, elements), *_ = taken["t"].events
    assert elements.micros.tolist() == [1000, -2000]  # type: ignore[union-attr]


def test_nothing_is_stripped_without_a_pipeline_and_events_come_back_on_error() -> None:
    with stripped_test_streams(None) as stripped:
        assert stripped == {}
    p, stream = _pipeline(
        Trace(np.zeros(3, np.int64), np.zeros(3, np.int64), np.arange(3), np.ones(3)), None
    )
    events = list(stream._events)
    with pytest.raises(RuntimeError, match="boom"), stripped_test_streams(p):
        assert all(not e.timestamped_values for e in stream._events if isinstance(e, ElementEvent))
        raise RuntimeError("boom")
    assert stream._events == events


@given(
    values=st.lists(st.tuples(st.integers(0, 9), st.floats(allow_nan=False)), max_size=60),
    parts=st.integers(1, 9),
)
def test_slices_cover_the_elements_once_in_order(
    values: list[tuple[int, float]], parts: int
) -> None:
    micros = np.arange(len(values), dtype=np.int64) * 1000
    elements = Elements(values, micros)
    blobs = elements.blobs(parts)
    assert len(blobs) == parts
    back = [Elements(*Elements.unblob(b)) for b in blobs]
    sizes = [len(b) for b in back]
    assert max(sizes) - min(sizes) <= 1
    joined = Elements([], np.zeros(0, np.int64))
    for part in back:
        joined = joined + part
    assert joined == elements
    assert pickle.loads(pickle.dumps(elements.micros)).dtype == np.int64


def test_elements_refuse_columns_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="2 values but 1 timestamps"):
        Elements([1, 2], np.zeros(1, np.int64))


@pytest.mark.parametrize(
    ("master", "slots"),
    [("local", 1), ("local[2]", 2), ("local[3,2]", 3), ("local[4, 3]", 4), ("spark://h:7077", 7)],
)
def test_default_key_partitions_are_the_task_slots(master: str, slots: int) -> None:
    class Context:
        defaultParallelism = 7

    context = Context()
    context.master = master  # type: ignore[attr-defined]
    assert task_slots(context) == slots


def _streams(p: beam.Pipeline) -> list[BeamTestStream]:
    found: list[BeamTestStream] = []

    class Find(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node: Any) -> None:
            if isinstance(node.transform, BeamTestStream):
                found.append(node.transform)

    p.visit(Find())
    return found
