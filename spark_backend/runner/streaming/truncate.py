"""Task side: a drain's truncation of an unbounded read's residuals (Beam's ``truncate``).

When a pipeline drains, Beam passes every restriction of a splittable DoFn through its
restriction provider's ``truncate(element, restriction)`` before ``process`` (the
``TruncateSizedRestrictions`` step of Beam's SDF expansion in drain mode): None drops the
restriction; a restriction comes back re-sized, with the same watermark-estimator state.
:func:`truncated` does that step to a stage's residual records, decoded and encoded with
their data input's windowed coder (the bytes the bundle processor reads), so that both the
bundle processor and the lean path then run ``process`` on them unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.internal import pickler
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners import pipeline_context
from apache_beam.runners.common import DoFnSignature
from apache_beam.runners.worker import bundle_processor
from apache_beam.transforms import core
from apache_beam.utils import proto_utils

from spark_backend.runner.plan.plan import StageSpec

__all__ = ["truncated"]

_PROCESS = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn


def truncated(spec: StageSpec, records: Iterable[tuple[str, bytes]]) -> Iterator[tuple[str, bytes]]:
    """``records`` (``(data input id, chunk)``) with each residual element's restriction
    truncated by its DoFn's restriction provider, as Beam's drain does; a residual whose
    ``truncate`` gives nothing is dropped. Records of other inputs pass unchanged."""
    residual_inputs = set(spec.residual_inputs.values())
    steps: dict[str, tuple[Any, Any, str]] = {}
    for input_id, chunk in records:
        if input_id not in residual_inputs:
            yield input_id, chunk
            continue
        if input_id not in steps:
            steps[input_id] = _provider_and_coder(spec, input_id)
        provider, impl, label = steps[input_id]
        stream = create_InputStream(chunk)
        out = create_OutputStream()
        while stream.size() > 0:
            windowed = impl.decode_from_stream(stream, True)
            (element, (restriction, state)), _ = windowed.value
            cut = provider.truncate(element, restriction)
            if cut:  # Beam's TruncateAndSizeRestriction keeps a truthy restriction
                size = provider.restriction_size(element, cut)
                if size < 0:  # Beam: "Expected size >= 0"
                    raise ValueError(
                        f"{label}: {type(provider).__name__}.restriction_size gave {size} "
                        f"for the truncated restriction {cut!r}; a size must be >= 0"
                    )
                value = ((element, (cut, state)), size)
                impl.encode_to_stream(windowed.with_value(value), out, True)
        if out.size():
            yield input_id, out.get()


def _provider_and_coder(spec: StageSpec, input_id: str) -> tuple[Any, Any, str]:
    """The restriction provider of the splittable DoFn that the data input ``input_id``
    feeds, the input's windowed coder (its implementation) and the DoFn's label."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    context = pipeline_context.PipelineContext(descriptor)
    data_input = descriptor.transforms[input_id]
    port = beam_fn_api_pb2.RemoteGrpcPort.FromString(data_input.spec.payload)
    assert data_input.spec.urn == bundle_processor.DATA_INPUT_URN, input_id
    (pcoll,) = data_input.outputs.values()
    (process,) = (
        t
        for t in descriptor.transforms.values()
        if t.spec.urn == _PROCESS and pcoll in t.inputs.values()
    )
    payload = proto_utils.parse_Bytes(process.spec.payload, pb.ParDoPayload)
    info = core.DoFnInfo.from_runner_api(payload.do_fn, context)
    dofn = pickler.loads(info.serialized_dofn_data())[0]
    provider = DoFnSignature(dofn).get_restriction_provider()
    return provider, context.coders[port.coder_id].get_impl(), process.unique_name
