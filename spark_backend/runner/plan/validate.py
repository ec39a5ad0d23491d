"""The check of a whole pipeline before any Spark work.

Every leaf transform (a transform without subtransforms, or a composite the runner
executes whole) must be of a kind the runner runs with Beam's exact semantics (the kinds
and the reasons for refusing the others are :mod:`.translation_table`'s). The first that
is not raises :class:`UnsupportedTransformError` naming its label and kind:
a runner that skipped it or ran it elsewhere would return a different pipeline's output.
"""

from __future__ import annotations

from typing import Final

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.utils import proto_utils

from spark_backend.runner.errors import UnsupportedTransformError
from spark_backend.runner.plan.translation_table import (
    COMPOSITES_RUN_WHOLE,
    STREAMING_ONLY_URNS,
    SUPPORTED_LEAF_URNS,
    TRANSLATIONS,
)

__all__ = [
    "STREAMING_ONLY_URNS",
    "SUPPORTED_LEAF_URNS",
    "SUPPORTED_REQUIREMENTS",
    "check_pipeline",
]

_P = common_urns.primitives

#: Pipeline requirements the runner honours.
SUPPORTED_REQUIREMENTS: Final[frozenset[str]] = frozenset(
    {
        common_urns.requirements.REQUIRES_STATEFUL_PROCESSING.urn,
        common_urns.requirements.REQUIRES_BUNDLE_FINALIZATION.urn,
        common_urns.requirements.REQUIRES_SPLITTABLE_DOFN.urn,
    }
)


def check_pipeline(pipeline: beam_runner_api_pb2.Pipeline, streaming: bool = False) -> None:
    """Raise :class:`UnsupportedTransformError` for the first transform the runner
    cannot run (a streaming-only one, such as TestStream, unless ``streaming``), or
    ValueError for a requirement it cannot honour; else return. An unbounded read
    runs in batch as FnApiRunner runs it: its residuals resume until the restriction
    is done."""
    for requirement in pipeline.requirements:
        if requirement not in SUPPORTED_REQUIREMENTS:
            raise ValueError(f"PySparkRunner cannot honour pipeline requirement {requirement!r}")
    for root in pipeline.root_transform_ids:
        _check_transform(pipeline.components, root, streaming)


def _check_transform(
    components: beam_runner_api_pb2.Components, transform_id: str, streaming: bool
) -> None:
    transform = components.transforms[transform_id]
    urn = transform.spec.urn
    if transform.subtransforms and urn not in COMPOSITES_RUN_WHOLE:
        for sub in transform.subtransforms:
            _check_transform(components, sub, streaming)
        return
    if not set(transform.outputs.values()) - set(transform.inputs.values()):
        return  # passes its input through: nothing to run (as Beam's fusion skips it)
    if urn in STREAMING_ONLY_URNS:
        if streaming:
            return
        raise UnsupportedTransformError(transform.unique_name, urn, str(TRANSLATIONS[urn].batch))
    if urn not in SUPPORTED_LEAF_URNS:
        raise UnsupportedTransformError(transform.unique_name, urn or "(no URN)")
    if urn == _P.PAR_DO.urn:
        _check_par_do(transform, streaming)


def _check_par_do(transform: beam_runner_api_pb2.PTransform, streaming: bool) -> None:
    payload = proto_utils.parse_Bytes(transform.spec.payload, beam_runner_api_pb2.ParDoPayload)
    label = transform.unique_name
    if payload.requires_time_sorted_input:
        raise UnsupportedTransformError(label, _P.PAR_DO.urn, "time-sorted input")
    for name, spec in payload.timer_family_specs.items():
        if streaming:
            continue  # the streaming checks name the time domains they run
        if spec.time_domain != beam_runner_api_pb2.TimeDomain.EVENT_TIME:
            raise UnsupportedTransformError(
                label, _P.PAR_DO.urn, f"timer {name!r} is not in event time"
            )
