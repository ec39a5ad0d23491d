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
from typing import Final

import apache_beam as beam
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners.pipeline_context import PipelineContext
from apache_beam.testing.test_stream import WindowedValueHolder
from apache_beam.transforms.window import GlobalWindow, IntervalWindow
from apache_beam.utils import proto_utils
from apache_beam.utils.windowed_value import WindowedValue

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
    #: its element events' values are Beam ``WindowedValue``\ s (:func:`own_windows`)
    own_windows: bool = False

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
    own: dict[str, str] = {}  # TestStreams whose elements carry their own windows
    for transform in proto.components.transforms.values():
        urn = transform.spec.urn
        if urn == common_urns.primitives.TEST_STREAM.urn:
            taken = (stripped or {}).get(transform.unique_name)
            if (taken is None or _endpoint(transform)) and not context:
                context.append(PipelineContext(proto.components))
            source, window_coder = _test_stream(transform, taken, context)
            sources[transform.unique_name] = source
            if window_coder is not None:
                own[source.label] = window_coder
            transform.spec.CopyFrom(pb.FunctionSpec(urn=common_urns.primitives.IMPULSE.urn))
        elif (
            urn == common_urns.composites.COMBINE_PER_KEY.urn
            and transform.subtransforms
            and not (lift and liftable(proto, transform))
        ):
            transform.spec.CopyFrom(pb.FunctionSpec())
    for label, urn in sorted(own.items()):
        if urn:
            _carry_own_windows(proto, label, urn)
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
) -> tuple[TestStreamSource, str | None]:
    """The TestStream ``transform``'s events, from the proto or, when it names an
    endpoint, from that TestStreamService (:mod:`.event_service`); element events from
    ``taken`` (by event index) when given, else decoded with ``context``'s coder. And,
    when its elements carry their own windows, the window coder URN they need
    (:meth:`_Held.window_coder`)."""
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
    held = _Held()
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
            events.append((ELEMENTS, held.unheld(elements)))
        elif kind == "watermark_event":
            events.append((WATERMARK, _watermark(event.watermark_event.new_watermark, unit)))
        else:
            advance = event.processing_time_event.advance_duration * unit
            events.append((PROCESSING_TIME, advance))
    own = held.window_coder(label)
    split = tuple(output_label(label, tag) for tag in sorted(tags)) if len(tags) > 1 else ()
    source = TestStreamSource(
        label,
        payload.coder_id,
        tuple(events),
        tuple(targets) if split else (),
        split,
        own is not None,
    )
    return source, own


class _Held:
    """What a TestStream's elements that carry their own window (Beam's
    ``WindowedValueHolder``, a Row once coded) need: the window types they carry, and
    whether plain elements (the global window) come with them."""

    def __init__(self) -> None:
        self.kinds: set[type] = set()
        self.plain = False

    def unheld(self, elements: Elements) -> Elements:
        """``elements`` with each held element replaced by its ``WindowedValue`` and
        stamped with its timestamp (whole ms); the others as they are. Only Row-typed
        values are looked at (a set of types, then those values)."""
        values = elements.values
        rows = {t for t in set(map(type, values)) if issubclass(t, beam.Row)}
        if not rows:
            self.plain = self.plain or bool(values)
            return elements
        out = list(values)
        micros = elements.micros.copy()
        for i, v in enumerate(values):
            if type(v) in rows and isinstance(v, WindowedValueHolder):
                held: WindowedValue = v.windowed_value  # type: ignore[attr-defined]
                out[i] = held
                micros[i] = held.timestamp.micros - held.timestamp.micros % MICROS_PER_MILLI
                self.kinds.update(map(type, held.windows))
            else:
                self.plain = True
        if not self.kinds:
            return elements
        return Elements(out, micros)

    def window_coder(self, label: str) -> str | None:
        """The window coder URN the TestStream's output needs for its elements' own
        windows: None when none carries one, ``""`` when all are in the global window
        (its coder stays), Beam's interval-window coder when all are in
        IntervalWindows; any other mix is refused (one window coder per
        PCollection carries them)."""
        if not self.kinds:
            return None
        kinds = self.kinds | ({GlobalWindow} if self.plain else set())
        if kinds == {GlobalWindow}:
            return ""
        if kinds == {IntervalWindow}:
            return common_urns.coders.INTERVAL_WINDOW.urn
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise UnsupportedTransformError(
            label,
            common_urns.primitives.TEST_STREAM.urn,
            f"elements in windows of types {names} (WindowedValueHolder): the runner "
            "carries a TestStream's own windows when all are IntervalWindows or all the "
            "global window",
        )


def _carry_own_windows(proto: pb.Pipeline, label: str, urn: str) -> None:
    """Let the outputs of the TestStream ``label``, whose elements carry their own windows
    (``urn``: the window coder they need), carry them: every PCollection that inherits its
    windowing (through any transform but a ``WindowInto``, and a ParDo's main input only)
    gets a copy of its windowing strategy with that window coder. A Flatten of them with
    another input is refused: that input's global windows would be coded as intervals.
    The held values are coded with the output's own coder, as the pipeline declares
    them."""
    components = proto.components
    (source,) = (t for t in components.transforms.values() if t.unique_name == label)
    window_coder = f"{label}/own_windows"
    components.coders[window_coder].CopyFrom(pb.Coder(spec=pb.FunctionSpec(urn=urn)))
    reached = _inheriting(components, set(source.outputs.values()), label)
    strategies: dict[str, str] = {}
    for pcollection in sorted(reached):
        old = components.pcollections[pcollection].windowing_strategy_id
        if old not in strategies:
            strategies[old] = new = f"{old}/{window_coder}"
            components.windowing_strategies[new].CopyFrom(components.windowing_strategies[old])
            components.windowing_strategies[new].window_coder_id = window_coder
        components.pcollections[pcollection].windowing_strategy_id = strategies[old]


def _inheriting(components: pb.Components, roots: set[str], label: str) -> set[str]:
    """The PCollections whose windows are those of ``roots``' elements (see
    :func:`_carry_own_windows`)."""
    consumers: dict[str, list[pb.PTransform]] = {}
    for transform in components.transforms.values():
        if transform.subtransforms:
            continue
        main = dict(transform.inputs)
        if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = proto_utils.parse_Bytes(transform.spec.payload, pb.ParDoPayload)
            main = {t: pc for t, pc in main.items() if t not in payload.side_inputs}
        for pcollection in main.values():
            consumers.setdefault(pcollection, []).append(transform)
    reached, pending = set(roots), list(roots)
    while pending:
        for transform in consumers.get(pending.pop(), []):
            if transform.spec.urn == common_urns.primitives.ASSIGN_WINDOWS.urn:
                continue
            for pcollection in transform.outputs.values():
                if pcollection not in reached:
                    reached.add(pcollection)
                    pending.append(pcollection)
    for transform in components.transforms.values():
        inputs = set(transform.inputs.values())
        flatten = transform.spec.urn == common_urns.primitives.FLATTEN.urn
        if flatten and inputs & reached and not inputs <= reached:
            raise UnsupportedTransformError(
                transform.unique_name,
                transform.spec.urn,
                f"a Flatten of the TestStream {label!r}, whose elements carry their own "
                "IntervalWindows (WindowedValueHolder), with another input",
            )
    return reached


def _watermark(value: int, unit: int = MICROS_PER_MILLI) -> int:
    """A TestStream watermark (``unit`` µs per unit of ``value``) in µs; the proto's
    truncation of ``MAX_TIMESTAMP`` to whole milliseconds is read back as
    ``MAX_TIMESTAMP``."""
    micros = value * unit
    if micros > MAX_TIMESTAMP - MICROS_PER_MILLI:
        return MAX_TIMESTAMP
    return max(micros, MIN_TIMESTAMP)
