"""The streaming run's own checks, before any Spark work (after the batch checks).

What ``--streaming`` does not run is refused with
:class:`~spark_backend.runner.errors.UnsupportedTransformError` naming the transform:
side inputs on a stateful or splittable DoFn, ``Read`` (use a splittable DoFn), a state
kind other than Bag, CombiningValue, ReadModifyWrite, Set and OrderedList (map and
multimap state), a timer in a time domain other than event time and processing time, a
stateful splittable DoFn, a GroupByKey whose windowing theory's engine does not model (a
custom WindowFn or trigger), and Beam's batch file sink (``iobase.Write``, under
WriteToText and the like).
"""

from __future__ import annotations

from typing import Final

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners import pipeline_context
from apache_beam.utils import proto_utils

from beam_pipelines.convert import to_theory
from spark_backend.runner.errors import UnsupportedTransformError
from spark_backend.runner.plan.translation_table import TRANSLATIONS
from spark_backend.runner.streaming.watermarks import leaf_transforms

__all__ = ["check_streaming"]

_P = common_urns.primitives

#: The state kinds streaming keeps (``StateSpec`` oneof names).
SUPPORTED_STATE: Final[frozenset[str]] = frozenset(
    {"bag_spec", "combining_spec", "read_modify_write_spec", "set_spec", "ordered_list_spec"}
)

#: The timer domains streaming fires.
SUPPORTED_TIME_DOMAINS: Final[dict[int, str]] = {
    pb.TimeDomain.EVENT_TIME: "event time",
    pb.TimeDomain.PROCESSING_TIME: "processing time",
}


def check_streaming(pipeline: pb.Pipeline) -> None:
    """Raise :class:`UnsupportedTransformError` for the first transform ``--streaming``
    cannot run yet (see the module docstring)."""
    _check_batch_sinks(pipeline)
    context = pipeline_context.PipelineContext(pipeline.components)
    for transform in leaf_transforms(pipeline):
        urn = transform.spec.urn
        label = transform.unique_name
        refused = TRANSLATIONS.get(urn)
        if refused is not None and isinstance(refused.streaming, str):
            raise UnsupportedTransformError(label, urn, refused.streaming)
        if urn == _P.PAR_DO.urn:
            _check_par_do(transform)
        elif urn == _P.GROUP_BY_KEY.urn:
            (source,) = transform.inputs.values()
            strategy_id = pipeline.components.pcollections[source].windowing_strategy_id
            try:
                to_theory(context.windowing_strategies[strategy_id], allow_unsafe_triggers=True)
            except (TypeError, ValueError) as err:
                raise UnsupportedTransformError(label, urn, str(err)) from None


def _check_par_do(transform: pb.PTransform) -> None:
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.ParDoPayload)
    label = transform.unique_name

    def refuse(what: str) -> UnsupportedTransformError:
        return UnsupportedTransformError(label, _P.PAR_DO.urn, what)

    for name, state in sorted(payload.state_specs.items()):
        kind = state.WhichOneof("spec")
        if kind not in SUPPORTED_STATE:
            supported = ", ".join(sorted(SUPPORTED_STATE))
            raise refuse(f"state {name!r} is a {kind}; streaming keeps {supported}")
    for name, timer in sorted(payload.timer_family_specs.items()):
        if timer.time_domain not in SUPPORTED_TIME_DOMAINS:
            domain = pb.TimeDomain.Enum.Name(timer.time_domain)
            raise refuse(
                f"timer {name!r} is in time domain {domain}; streaming fires "
                "event-time and processing-time timers"
            )
    if payload.side_inputs and (
        payload.state_specs or payload.timer_family_specs or payload.restriction_coder_id
    ):
        raise refuse(
            "side inputs on a stateful or splittable DoFn are not supported in streaming "
            "(side inputs on a stateless ParDo are)"
        )
    if payload.restriction_coder_id and (payload.state_specs or payload.timer_family_specs):
        raise refuse("a splittable DoFn with state or timers is not supported in streaming")


def _check_batch_sinks(pipeline: pb.Pipeline) -> None:
    """Refuse Beam's file sink (``iobase.Write``: WriteToText, WriteToParquet, ...): its
    bounded form writes once, when its input ends (never, on an unbounded read), and its
    unbounded form needs side inputs."""
    for transform in pipeline.components.transforms.values():
        label = transform.unique_name
        if transform.subtransforms and (label == "WriteImpl" or label.endswith("/WriteImpl")):
            writer = label.removesuffix("WriteImpl").rstrip("/").removesuffix("/Write")
            raise UnsupportedTransformError(
                writer or label,
                "Beam's iobase.Write (a batch file sink)",
                "it writes its files once, when its input ends; in a streaming pipeline "
                "write with beam_pipelines.sinks.WriteBatchesToText (one directory per "
                "micro-batch)",
            )
