"""Driver side: the streaming pipeline's sources, and the proto Beam's fusion plans.

A ``TestStream`` is read by the driver from the pipeline proto (its events; their
elements as :class:`~.elements.Elements`, taken from the pipeline object when the runner
stripped them from the proto, else decoded with its coder), or from the TestStreamService
its endpoint names (:mod:`.event_service`, read whole before the first batch), and
replaced in the proto by an ``Impulse`` with the same label and output, so that Beam's
fusion makes it a data input of the stage that consumes it; each micro-batch feeds that
input the batch's elements. An ``Impulse`` (as under ``beam.Create``) emits once, in
the first batch, and then its watermark is at infinity.

A ``Combine.PerKey`` composite is lifted by Beam's fusion phases when
:func:`~spark_backend.runner.streaming.lifting.liftable` says its panes stay the same;
any other is opened into its GroupByKey and combining ParDo (:func:`streaming_proto`):
lifting it would group partial accumulators per bundle, which under other triggers and
timestamp combiners is not what Beam's streaming runners group.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Final

import apache_beam as beam
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners.pipeline_context import PipelineContext
from apache_beam.testing.test_stream import WindowedValueHolder
from apache_beam.utils import proto_utils

from spark_backend.runner.errors import UnsupportedTransformError
from spark_backend.runner.streaming.elements import Elements, Stripped, decoded
from spark_backend.runner.streaming.event_service import EventServiceError, service_events
from spark_backend.runner.streaming.lifting import liftable
from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI, MIN_TIMESTAMP

__all__ = [
    "ELEMENTS",
    "PROCESSING_TIME",
    "SERVICE_UNIT",
    "WATERMARK",
    "TestStreamSource",
    "impulse_labels",
    "output_label",
    "streaming_proto",
]

#: Event kinds of a :class:`TestStreamSource`.
ELEMENTS: Final[str] = "elements"
WATERMARK: Final[str] = "watermark"
PROCESSING_TIME: Final[str] = "processing_time"

#: µs per unit of the times in a TestStreamService's events: Beam's direct runner reads
#: them (element timestamps, watermarks, processing-time steps; milliseconds in the
#: proto) as microseconds, and Beam's TestStreamTest expects that of a runner.
SERVICE_UNIT: Final[int] = 1

#: One TestStream event: (kind, payload). Elements: :class:`~.elements.Elements`;
#: watermark: µs; processing time: the advance in µs.
Event = tuple[str, object]


@dataclass(frozen=True)
class TestStreamSource:
    """A TestStream of the pipeline: its label, element coder and events (µs).

    For a TestStream of several output tags, ``split`` lists the labels of the source
    transforms standing for its outputs and ``targets`` gives each event's (see
    :func:`streaming_proto`); both are empty for one output, whose events all go to
    ``label``.
    """

    __test__ = False  # not a pytest test class

    label: str
    coder_id: str
    events: tuple[Event, ...] = field(default_factory=tuple)
    targets: tuple[str, ...] = ()
    split: tuple[str, ...] = ()  # the source transforms of its outputs, when several

    def target(self, index: int) -> str:
        """The label of the source transform that event ``index`` feeds."""
        return self.targets[index] if self.targets else self.label

    @property
    def outputs(self) -> tuple[str, ...]:
        """The labels of the source transforms this TestStream feeds."""
        return self.split or (self.label,)


def streaming_proto(
    pipeline: pb.Pipeline, lift: bool = True, stripped: Stripped | None = None
) -> tuple[pb.Pipeline, dict[str, TestStreamSource]]:
    """A copy of ``pipeline`` ready for Beam's fusion in streaming (see the module
    docstring), and its TestStreams by label; ``lift=False`` opens every
    ``Combine.PerKey`` (the reference). ``stripped``: the elements the runner took out
    of the proto's TestStreams (:func:`~.elements.stripped_test_streams`)."""
    proto = copy.deepcopy(pipeline)
    sources: dict[str, TestStreamSource] = {}
    context: list[PipelineContext] = []  # built once, when a proto's elements need a coder
    for transform in proto.components.transforms.values():
        urn = transform.spec.urn
        if urn == common_urns.primitives.TEST_STREAM.urn:
            taken = (stripped or {}).get(transform.unique_name)
            if (taken is None or _endpoint(transform)) and not context:
                context.append(PipelineContext(proto.components))
            sources[transform.unique_name] = _test_stream(transform, taken, context)
            transform.spec.CopyFrom(pb.FunctionSpec(urn=common_urns.primitives.IMPULSE.urn))
        elif (
            urn == common_urns.composites.COMBINE_PER_KEY.urn
            and transform.subtransforms
            and not (lift and liftable(proto, transform))
        ):
            transform.spec.CopyFrom(pb.FunctionSpec())
    for label, source in sources.items():
        if source.split:
            _split_outputs(proto, label)
    return proto, sources


def impulse_labels(pipeline: pb.Pipeline) -> set[str]:
    """The labels of the pipeline's Impulse transforms."""
    return {
        t.unique_name
        for t in pipeline.components.transforms.values()
        if t.spec.urn == common_urns.primitives.IMPULSE.urn
    }


def output_label(label: str, tag: str) -> str:
    """The label of the source transform standing for output ``tag`` of the TestStream
    ``label`` when it has several outputs."""
    return f"{label}[{tag}]"


def _split_outputs(proto: pb.Pipeline, label: str) -> None:
    """Make the TestStream ``label`` (already an Impulse) a composite of one Impulse per
    output tag, each labelled :func:`output_label`."""
    transforms = proto.components.transforms
    (transform_id,) = (i for i, t in transforms.items() if t.unique_name == label)
    transform = transforms[transform_id]
    transform.spec.CopyFrom(pb.FunctionSpec())
    for tag, pcollection in sorted(transform.outputs.items()):
        sub_id = f"{transform_id}[{tag}]"
        transforms[sub_id].CopyFrom(
            pb.PTransform(
                unique_name=output_label(label, tag),
                spec=pb.FunctionSpec(urn=common_urns.primitives.IMPULSE.urn),
                outputs={tag: pcollection},
                environment_id=transform.environment_id,
            )
        )
        transform.subtransforms.append(sub_id)


def _endpoint(transform: pb.PTransform) -> str:
    """The TestStreamService endpoint the TestStream ``transform`` reads, or ``""``."""
    return proto_utils.parse_Bytes(transform.spec.payload, pb.TestStreamPayload).endpoint.url


def _test_stream(
    transform: pb.PTransform, taken: dict[int, Elements] | None, context: list[PipelineContext]
) -> TestStreamSource:
    """The TestStream ``transform``'s events, from the proto or, when it names an
    endpoint, from that TestStreamService (:mod:`.event_service`); element events from
    ``taken`` (by event index) when given, else decoded with ``context``'s coder."""
    label = transform.unique_name
    tags = set(transform.outputs)
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.TestStreamPayload)
    proto_events = list(payload.events)
    unit = MICROS_PER_MILLI  # µs per unit of the events' times
    if payload.endpoint.url:
        unit = SERVICE_UNIT
        try:
            proto_events = service_events(payload.endpoint.url, sorted(tags))
        except EventServiceError as err:
            raise EventServiceError(f"TestStream {label!r}: {err}") from None
        taken = None  # the service sends encoded elements
    events: list[Event] = []
    targets: list[str] = []
    for index, event in enumerate(proto_events):
        kind = event.WhichOneof("event")
        if kind in ("element_event", "watermark_event"):
            tag = getattr(event, kind).tag
            if tag not in tags:
                raise UnsupportedTransformError(
                    label,
                    common_urns.primitives.TEST_STREAM.urn,
                    f"an event for tag {tag!r}, which is not an output (outputs: {sorted(tags)})",
                )
            targets.append(output_label(label, tag))
        else:
            targets.append(label)
        if kind == "element_event":
            if taken is not None:
                elements = taken[index]
            else:
                coder = context[0].coders.get_by_id(payload.coder_id)
                elements = decoded(event.element_event.elements, coder, unit)
            _refuse_own_windows(label, elements.values)
            events.append((ELEMENTS, elements))
        elif kind == "watermark_event":
            events.append((WATERMARK, _watermark(event.watermark_event.new_watermark, unit)))
        else:
            advance = event.processing_time_event.advance_duration * unit
            events.append((PROCESSING_TIME, advance))
    if len(tags) == 1:
        return TestStreamSource(label, payload.coder_id, tuple(events))
    split = tuple(output_label(label, tag) for tag in sorted(tags))
    return TestStreamSource(label, payload.coder_id, tuple(events), tuple(targets), split)


def _refuse_own_windows(label: str, values: list[Any]) -> None:
    """Refuse a TestStream element that carries its own window (Beam's
    ``WindowedValueHolder``, a Row once coded): the runner puts TestStream elements in
    the global window at their timestamp, so running it would silently re-window it.
    Only Row-typed values are looked at (a set of types, then those values)."""
    rows = {t for t in set(map(type, values)) if issubclass(t, beam.Row)}
    if rows and any(isinstance(v, WindowedValueHolder) for v in values if type(v) in rows):
        raise UnsupportedTransformError(
            label,
            common_urns.primitives.TEST_STREAM.urn,
            "an element that carries its own window (WindowedValueHolder): TestStream "
            "elements go to the global window at their timestamp; window them with "
            "WindowInto",
        )


def _watermark(value: int, unit: int = MICROS_PER_MILLI) -> int:
    """A TestStream watermark (``unit`` µs per unit of ``value``) in µs; the proto's
    truncation of ``MAX_TIMESTAMP`` to whole milliseconds is read back as
    ``MAX_TIMESTAMP``."""
    micros = value * unit
    if micros > MAX_TIMESTAMP - MICROS_PER_MILLI:
        return MAX_TIMESTAMP
    return max(micros, MIN_TIMESTAMP)
