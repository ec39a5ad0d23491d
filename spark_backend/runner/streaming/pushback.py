"""Task side: one micro-batch of a ParDo with side inputs, its waiting main elements kept
per partition.

In streaming a ParDo with side inputs starts its stage (as a stateful DoFn does), so the
stage's data input feeding it is the ParDo's main input. Each main element is split into
its windows; a window ``W`` runs now when every side input is ready for
``window_mapping(W)`` (:class:`~spark_backend.runner.streaming.side_views.SideReadiness`),
else it is *pushed back*: kept in the partition's state (the state contract of
:mod:`.keyed_state`: one ``(partition, bytes)`` record a batch) and tried again in a later
batch. The released elements run in one bundle with the side views the driver sent (laid
out as :mod:`spark_backend.runner.stages.side_inputs` does in batch). The partition reports the
smallest timestamp among its waiting elements: the driver makes it the ParDo's
``side input`` hold on its output watermark.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.internal import pickler
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners.worker import bundle_processor
from apache_beam.utils import proto_utils
from apache_beam.utils.windowed_value import WindowedValue

from spark_backend.runner.grouping.group_by_key import split_elements
from spark_backend.runner.plan.plan import StageSpec
from spark_backend.runner.stages.bundles import METRICS, PartitionSummary, run_partition
from spark_backend.runner.stages.task_context import coder_impl
from spark_backend.runner.streaming.grouping import SUMMARY
from spark_backend.runner.streaming.side_views import SideReadiness

__all__ = ["PushbackSummary", "main_input", "pushback_batch", "pushback_label"]


@dataclass(frozen=True)
class PushbackSummary:
    """What a partition reports after a batch: the smallest timestamp of its waiting
    elements (µs; None when none waits) and how many wait."""

    hold: int | None
    waiting: int
    released: int
    next_watermark_timer: None = None  # a pushback step has no timers
    next_processing_timer: None = None


def pushback_label(spec: StageSpec) -> str:
    """The label of the ParDo with side inputs that starts ``spec``."""
    return spec.side_inputs[0].transform_id


def main_input(spec: StageSpec) -> str:
    """The stage's data input that feeds its side-input ParDo's main input (ValueError
    naming the ParDo when none does)."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    label = pushback_label(spec)
    pardo = descriptor.transforms[label]
    payload = proto_utils.parse_Bytes(pardo.spec.payload, pb.ParDoPayload)
    mains = [pc for tag, pc in pardo.inputs.items() if tag not in payload.side_inputs]
    for transform_id in spec.inputs:
        read = descriptor.transforms[transform_id]
        if (
            read.spec.urn == bundle_processor.DATA_INPUT_URN
            and list(read.outputs.values()) == mains
        ):
            return transform_id
    raise ValueError(f"{label}: its main input is not the data input of its stage")


def _mapping_fns(spec: StageSpec) -> dict[str, Any]:
    """Each side input's window mapping function, by tag."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    pardo = descriptor.transforms[pushback_label(spec)]
    payload = proto_utils.parse_Bytes(pardo.spec.payload, pb.ParDoPayload)
    return {
        tag: pickler.loads(side.window_mapping_fn.payload)
        for tag, side in payload.side_inputs.items()
    }


def pushback_batch(
    spec: StageSpec,
    job_id: str,
    components: bytes,
    main: str,
    readiness: Mapping[str, SideReadiness],
    side_data: Mapping[bytes, list[bytes]],
    partition: int,
    records: Iterable[tuple[Any, Any]],
) -> Iterator[tuple[Any, bytes]]:
    """One partition's batch. ``records``: its new input ``(int, (transform id, chunk))``,
    its state record ``(partition, bytes)`` and its last batch's other output records
    (skipped). Yields the bundle's output chunks and metrics, the new state record, and
    last ``(SUMMARY, pickled PushbackSummary)``."""
    waiting: list[bytes] = []
    inputs: list[tuple[str, bytes]] = []
    for key, value in records:
        if not isinstance(key, int) or isinstance(key, bool):
            continue
        if isinstance(value, bytes):
            waiting.extend(pickle.loads(value))
        else:
            inputs.append(value)
    impl = coder_impl(job_id, components, spec.input_coders[main])
    fns = _mapping_fns(spec)
    released = create_OutputStream()
    count = 0
    kept: list[bytes] = []
    hold: int | None = None
    new = (e for tid, chunk in inputs if tid == main for e, _ in split_elements(chunk, impl))
    old = (impl.decode_nested(e) for e in waiting)
    for element in itertools.chain(old, new):
        for window in element.windows:
            single = WindowedValue(element.value, element.timestamp, (window,), element.pane_info)
            if all(readiness[tag].ready(fn(window)) for tag, fn in fns.items()):
                impl.encode_to_stream(single, released, True)
                count += 1
            else:
                kept.append(impl.encode_nested(single))
                micros = int(element.timestamp.micros)
                hold = micros if hold is None else min(hold, micros)
    run = [(tid, chunk) for tid, chunk in inputs if tid != main]
    if count:
        run.append((main, released.get()))
    if run:
        yield from run_partition(spec, job_id, components, side_data, run, finalize=False)
    else:
        empty = beam_fn_api_pb2.ProcessBundleResponse().SerializeToString()
        yield METRICS, pickle.dumps(PartitionSummary(empty, {}))
    yield partition, pickle.dumps(kept, pickle.HIGHEST_PROTOCOL)
    yield SUMMARY, pickle.dumps(PushbackSummary(hold, len(kept), count))
