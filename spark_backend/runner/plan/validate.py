"""The check of a whole pipeline before any Spark work.

Every leaf transform (a transform without subtransforms, or a composite the runner
executes whole) must be of a kind the runner runs with Beam's exact semantics. The
first that is not raises :class:`UnsupportedTransformError` naming its label and kind:
a runner that skipped it or ran it elsewhere would return a different pipeline's output.
"""

from __future__ import annotations

from typing import Final

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.utils import proto_utils

from spark_backend.runner.errors import UnsupportedTransformError

__all__ = [
    "STREAMING_ONLY_URNS",
    "SUPPORTED_LEAF_URNS",
    "SUPPORTED_REQUIREMENTS",
    "check_pipeline",
]

_P = common_urns.primitives

#: Leaf kinds the runner executes (Combine per key is run whole, after lifting).
SUPPORTED_LEAF_URNS: Final[frozenset[str]] = frozenset(
    {
        _P.IMPULSE.urn,
        _P.PAR_DO.urn,
        _P.FLATTEN.urn,
        _P.GROUP_BY_KEY.urn,
        _P.ASSIGN_WINDOWS.urn,
        common_urns.deprecated_primitives.READ.urn,
        common_urns.composites.COMBINE_PER_KEY.urn,
        *translations.PAR_DO_URNS,
    }
)

#: Leaf kinds only a ``--streaming`` run executes.
STREAMING_ONLY_URNS: Final[frozenset[str]] = frozenset({_P.TEST_STREAM.urn})

#: Pipeline requirements the runner honours.
SUPPORTED_REQUIREMENTS: Final[frozenset[str]] = frozenset(
    {
        common_urns.requirements.REQUIRES_STATEFUL_PROCESSING.urn,
        common_urns.requirements.REQUIRES_BUNDLE_FINALIZATION.urn,
        common_urns.requirements.REQUIRES_SPLITTABLE_DOFN.urn,
    }
)

_COMPOSITES_RUN_WHOLE: Final[frozenset[str]] = frozenset(
    {common_urns.composites.COMBINE_PER_KEY.urn}
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
    if transform.subtransforms and urn not in _COMPOSITES_RUN_WHOLE:
        for sub in transform.subtransforms:
            _check_transform(components, sub, streaming)
        return
    if not set(transform.outputs.values()) - set(transform.inputs.values()):
        return  # passes its input through: nothing to run (as Beam's fusion skips it)
    if urn in STREAMING_ONLY_URNS:
        if streaming:
            return
        raise UnsupportedTransformError(
            transform.unique_name, urn, "it is streaming-only: run the pipeline with --streaming"
        )
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
