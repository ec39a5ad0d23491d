"""The streaming run's own checks, before any Spark work (after the batch checks).

What ``--streaming`` does not run yet is refused with
:class:`~spark_backend.runner.errors.UnsupportedTransformError` naming the transform:
stateful DoFns and timers, side inputs, splittable DoFns and ``Read`` (unbounded reads),
a GroupByKey whose windowing theory's engine does not model (a custom WindowFn or
trigger), and Beam's batch file sink (``iobase.Write``, under WriteToText and the like).
"""

from __future__ import annotations

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners import pipeline_context
from apache_beam.utils import proto_utils

from beam_pipelines.convert import to_theory
from spark_backend.runner.errors import UnsupportedTransformError
from spark_backend.runner.streaming.watermarks import leaf_transforms

__all__ = ["check_streaming"]

_P = common_urns.primitives


def check_streaming(pipeline: pb.Pipeline) -> None:
    """Raise :class:`UnsupportedTransformError` for the first transform ``--streaming``
    cannot run yet (see the module docstring)."""
    _check_batch_sinks(pipeline)
    context = pipeline_context.PipelineContext(pipeline.components)
    for transform in leaf_transforms(pipeline):
        urn = transform.spec.urn
        label = transform.unique_name
        if urn == common_urns.deprecated_primitives.READ.urn:
            raise UnsupportedTransformError(label, urn, "reads are not supported in streaming yet")
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
    if payload.state_specs or payload.timer_family_specs:
        raise UnsupportedTransformError(
            label, _P.PAR_DO.urn, "stateful DoFns and timers are not supported in streaming yet"
        )
    if payload.side_inputs:
        raise UnsupportedTransformError(
            label, _P.PAR_DO.urn, "side inputs are not supported in streaming yet"
        )
    if payload.restriction_coder_id:
        raise UnsupportedTransformError(
            label, _P.PAR_DO.urn, "splittable DoFns are not supported in streaming yet"
        )


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
