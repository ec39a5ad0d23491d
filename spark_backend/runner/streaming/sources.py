"""Driver side: the streaming pipeline's sources, and the proto Beam's fusion plans.

A ``TestStream`` is read by the driver from the pipeline proto (its events, elements
still encoded with its coder) and replaced in the proto by an ``Impulse`` with the same
label and output, so that Beam's fusion makes it a data input of the stage that consumes
it; each micro-batch feeds that input the batch's elements. An ``Impulse`` (as under
``beam.Create``) emits once, in the first batch, and then its watermark is at infinity.

``Combine.PerKey`` composites are opened into their GroupByKey and combining ParDo
(:func:`streaming_proto`): combiner lifting would group partial accumulators per bundle,
which under triggers and holds is not what Beam's streaming runners group.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Final

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.utils import proto_utils

from spark_backend.runner.errors import UnsupportedTransformError
from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI, MIN_TIMESTAMP

__all__ = [
    "ELEMENTS",
    "PROCESSING_TIME",
    "WATERMARK",
    "TestStreamSource",
    "impulse_labels",
    "streaming_proto",
]

#: Event kinds of a :class:`TestStreamSource`.
ELEMENTS: Final[str] = "elements"
WATERMARK: Final[str] = "watermark"
PROCESSING_TIME: Final[str] = "processing_time"

#: One TestStream event: (kind, payload). Elements: ((encoded element, timestamp µs), ...);
#: watermark: µs; processing time: the advance in µs.
Event = tuple[str, object]


@dataclass(frozen=True)
class TestStreamSource:
    """A TestStream of the pipeline: its label, element coder and events (µs)."""

    __test__ = False  # not a pytest test class

    label: str
    coder_id: str
    events: tuple[Event, ...] = field(default_factory=tuple)


def streaming_proto(
    pipeline: pb.Pipeline,
) -> tuple[pb.Pipeline, dict[str, TestStreamSource]]:
    """A copy of ``pipeline`` ready for Beam's fusion in streaming (see the module
    docstring), and its TestStreams by label."""
    proto = copy.deepcopy(pipeline)
    sources: dict[str, TestStreamSource] = {}
    for transform in proto.components.transforms.values():
        urn = transform.spec.urn
        if urn == common_urns.primitives.TEST_STREAM.urn:
            sources[transform.unique_name] = _test_stream(transform)
            transform.spec.CopyFrom(pb.FunctionSpec(urn=common_urns.primitives.IMPULSE.urn))
        elif urn == common_urns.composites.COMBINE_PER_KEY.urn and transform.subtransforms:
            transform.spec.CopyFrom(pb.FunctionSpec())
    return proto, sources


def impulse_labels(pipeline: pb.Pipeline) -> set[str]:
    """The labels of the pipeline's Impulse transforms."""
    return {
        t.unique_name
        for t in pipeline.components.transforms.values()
        if t.spec.urn == common_urns.primitives.IMPULSE.urn
    }


def _test_stream(transform: pb.PTransform) -> TestStreamSource:
    label = transform.unique_name
    if len(transform.outputs) != 1:
        raise UnsupportedTransformError(
            label,
            common_urns.primitives.TEST_STREAM.urn,
            f"{len(transform.outputs)} output tags; PySparkRunner reads one per TestStream",
        )
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.TestStreamPayload)
    if payload.endpoint.url:
        raise UnsupportedTransformError(
            label, common_urns.primitives.TEST_STREAM.urn, "a TestStream service endpoint"
        )
    events: list[Event] = []
    for event in payload.events:
        kind = event.WhichOneof("event")
        if kind == "element_event":
            events.append(
                (
                    ELEMENTS,
                    tuple(
                        (e.encoded_element, e.timestamp * MICROS_PER_MILLI)
                        for e in event.element_event.elements
                    ),
                )
            )
        elif kind == "watermark_event":
            events.append((WATERMARK, _watermark(event.watermark_event.new_watermark)))
        else:
            advance = event.processing_time_event.advance_duration * MICROS_PER_MILLI
            events.append((PROCESSING_TIME, advance))
    return TestStreamSource(label, payload.coder_id, tuple(events))


def _watermark(millis: int) -> int:
    """A TestStream watermark (ms in the proto) in µs; the proto's truncation of
    ``MAX_TIMESTAMP`` to whole milliseconds is read back as ``MAX_TIMESTAMP``."""
    micros = millis * MICROS_PER_MILLI
    if micros > MAX_TIMESTAMP - MICROS_PER_MILLI:
        return MAX_TIMESTAMP
    return max(micros, MIN_TIMESTAMP)
