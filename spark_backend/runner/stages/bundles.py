"""Task side: run one fused stage over one Spark partition with Beam's SDK worker.

A partition is one bundle, as a FnApiRunner worker sees it: the encoded elements of
each data input are written to an in-memory data channel, Beam's ``SdkWorker`` (the
``EmbeddedWorkerHandler`` FnApiRunner uses) processes the bundle, and the encoded
outputs are read back per output buffer. Event-time timers the bundle sets and
self-checkpointed SDF residuals run in further bundles in the same task until none
remain, as FnApiRunner resumes them (an unbounded read in batch runs until its
restriction is done; a round of residuals that all asked for a resume delay starts
once the shortest delay has passed). In batch the input watermark is already past
every timer, and the stage's input is partitioned by key when it holds state, so a
key's state and timers live in one task. Side inputs and user state live in the
task's own ``StateServicer``.

:func:`run_partition` yields ``(buffer_id, bytes)`` records: encoded element chunks,
and last one ``(METRICS, summary)``, a pickled :class:`PartitionSummary` (the
partition's metrics, bytes written per buffer, and in a Spark task the
InefficientExecutionWarnings Beam's worker raised, :mod:`.worker_warnings`).
"""

from __future__ import annotations

import itertools
import os
import pickle
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.portability.api import beam_fn_api_pb2, beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
from apache_beam.runners.portability.fn_api_runner.worker_handlers import (
    EmbeddedWorkerHandler,
    StateServicer,
)
from apache_beam.runners.worker.data_sampler import DataSampler
from apache_beam.utils.windowed_value import WindowedValue

from spark_backend.runner.batch.metric_merge import consolidate
from spark_backend.runner.batch.spark_errors import note_element, quiet_reraised_logs
from spark_backend.runner.batch.summary import METRICS, PartitionSummary
from spark_backend.runner.grouping.spilled_groups import TOKEN_PREFIX, read_page, remove_spill
from spark_backend.runner.plan.plan import StageSpec
from spark_backend.runner.stages.side_inputs import load_side_inputs
from spark_backend.runner.stages.task_context import coder_impl
from spark_backend.runner.stages.worker_warnings import kept_warnings

__all__ = [
    "METRICS",
    "BundleResult",
    "PartitionSummary",
    "Round",
    "SpilledGroupsServicer",
    "TimerKey",
    "bundle_worker",
    "metrics_record",
    "resume_delay",
    "run_bundle",
    "run_partition",
]

#: Bound on the timer and residual rounds of one partition (a DoFn that sets a timer
#: from every firing would otherwise loop for ever).
MAX_ROUNDS: Final[int] = 100_000

_PROVISION = ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(retrieval_token="unused"))

TimerKey = tuple[str, str]

#: Environment variable: ``0`` turns off the exception sampling of :func:`bundle_worker`
#: (a failing DoFn's line then names no element); ``bench/exception_sampling.py`` sets
#: it to measure what the sampling costs.
SAMPLING_ENV: Final = "WATERMARKS_EXCEPTION_SAMPLING"


class _Descriptors:
    """What EmbeddedWorkerHandler reads from a WorkerHandlerManager: the descriptors."""

    def __init__(self, descriptor: beam_fn_api_pb2.ProcessBundleDescriptor) -> None:
        self._process_bundle_descriptors = {descriptor.id: descriptor}


@dataclass
class Round:
    """One bundle's input: element chunks per data input, timers per timer family."""

    data: dict[str, list[bytes]] = field(default_factory=dict)
    timers: dict[TimerKey, bytes] = field(default_factory=dict)

    def empty(self) -> bool:
        return not any(self.data.values()) and not self.timers


@dataclass
class BundleResult:
    """What one bundle gave back: its response, output chunks ``(buffer, chunk)`` and the
    timers it wrote (encoded, per timer family, clears included, in writing order)."""

    response: beam_fn_api_pb2.ProcessBundleResponse
    outputs: list[tuple[bytes, bytes]]
    written: dict[TimerKey, list[bytes]]


class _ExceptionSampler(DataSampler):
    """Beam's exception sampling and nothing else: the DoFn that raises hands its element
    to the sampler, so the outputs keep no per-element sample (Beam stores one per
    element for its periodic sampling, which is off here)."""

    def __init__(self) -> None:
        super().__init__(sample_only_exceptions=True)

    def initialize_samplers(self, *args: Any, **kwargs: Any) -> list[Any]:
        samplers = super().initialize_samplers(*args, **kwargs)
        for sampler in samplers:
            # read by the operations as they are built: None, no per-element sample
            sampler.element_sampler = None  # type: ignore[assignment]
        return samplers


def bundle_worker(spec: StageSpec, state: StateServicer) -> tuple[EmbeddedWorkerHandler, str]:
    """An embedded SDK worker for ``spec``'s bundles over ``state`` (side inputs, user
    state), and the descriptor id; the caller stops it (``stop_worker``). Its bundles
    keep the element a DoFn raised on (Beam's exception sampling, nothing sampled
    otherwise), which :func:`run_bundle` notes on the error."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    manager: Any = _Descriptors(descriptor)  # the one attribute the handler reads
    quiet_reraised_logs()
    worker = EmbeddedWorkerHandler(None, state, _PROVISION, manager)
    if os.environ.get(SAMPLING_ENV) != "0":
        worker.bundle_processor_cache.data_sampler = _ExceptionSampler()
    return worker, descriptor.id


def metrics_record(
    infos: Iterable[Any], sizes: Mapping[bytes, int], warned: Iterable[str] = ()
) -> tuple[bytes, bytes]:
    """The ``(METRICS, pickled PartitionSummary)`` record of a partition; ``warned``:
    the messages of the InefficientExecutionWarnings its bundles raised."""
    metrics = beam_fn_api_pb2.ProcessBundleResponse(monitoring_infos=list(infos))
    summary = PartitionSummary(metrics.SerializeToString(), dict(sizes), tuple(sorted(warned)))
    return METRICS, pickle.dumps(summary)


def run_partition(
    spec: StageSpec,
    job_id: str,
    components: bytes,
    side_data: Mapping[bytes, list[bytes]],
    records: Iterable[tuple[str, bytes]],
    finalize: bool = True,
) -> Iterator[tuple[bytes, bytes]]:
    """Run ``spec`` over ``records`` (``(input transform id, chunk)``), one bundle
    then its timer and residual rounds; yield output chunks and the metrics record.
    ``finalize``: call each bundle's finalizers (:func:`run_bundle`)."""
    state = SpilledGroupsServicer()
    load_side_inputs(state, spec.side_inputs, side_data, job_id, components)
    worker, descriptor_id = bundle_worker(spec, state)
    infos: list[Any] = []
    sizes: dict[bytes, int] = defaultdict(int)
    warned: set[str] = set()
    try:
        pending = Round(data=by_input(spec, records))
        for number in itertools.count():
            if number >= MAX_ROUNDS:
                raise RuntimeError(f"more than {MAX_ROUNDS} timer rounds in one partition")
            with kept_warnings(warned):
                result = run_bundle(worker, spec, descriptor_id, pending, number, finalize)
            for buffer, chunk in result.outputs:
                sizes[buffer] += len(chunk)
                yield buffer, chunk
            infos = list(consolidate(itertools.chain(infos, result.response.monitoring_infos)))
            pending = Round(
                data=_residuals(spec, result.response),
                timers=_fired_timers(spec, result.written, job_id, components),
            )
            if pending.empty():
                break
            if not pending.timers:
                time.sleep(resume_delay(result.response) / 1e6)
    finally:
        worker.stop_worker()  # DoFn.teardown
        state.remove_read()
    yield metrics_record(infos, sizes, warned)


class SpilledGroupsServicer(StateServicer):
    """Beam's StateServicer that also serves the spilled groups of state-backed
    iterables (:mod:`~spark_backend.runner.grouping.spilled_groups`), a page per
    request; ``remove_read`` removes the spill files it read."""

    def __init__(self) -> None:
        super().__init__()
        self._read: set[str] = set()

    def get_raw(self, state_key: Any, continuation_token: bytes | None = None) -> Any:
        if state_key.WhichOneof("type") == "runner" and state_key.runner.key.startswith(
            TOKEN_PREFIX
        ):
            data, token, path = read_page(state_key.runner.key, continuation_token)
            self._read.add(path)
            return data, token
        return super().get_raw(state_key, continuation_token)

    def remove_read(self) -> None:
        for path in self._read:
            remove_spill(path)
        self._read.clear()


def by_input(spec: StageSpec, records: Iterable[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    """A partition's ``(input transform id, chunk)`` records, by data input."""
    data: dict[str, list[bytes]] = {t: [] for t in spec.inputs}
    for transform_id, chunk in records:
        data[transform_id].append(chunk)
    return data


def run_bundle(
    worker: EmbeddedWorkerHandler,
    spec: StageSpec,
    descriptor_id: str,
    bundle: Round,
    number: int,
    finalize: bool = True,
) -> BundleResult:
    """Process one bundle (instruction ``bundle_<number>``): its elements and timers;
    then, with ``finalize``, call the bundle's finalizers (Beam's
    ``BundleFinalizerParam``) in the task. The streaming runner passes False: a task's
    output is committed by the driver only after the task ends, so a finalizer run
    here could ack what a retried or replayed batch needs again."""
    instruction = f"bundle_{number}"
    _send(worker, spec, instruction, bundle)
    request = beam_fn_api_pb2.InstructionRequest(
        instruction_id=instruction,
        process_bundle=beam_fn_api_pb2.ProcessBundleRequest(
            process_bundle_descriptor_id=descriptor_id
        ),
    )
    try:
        response = worker.push(request).get()
    except Exception as exn:
        found = _failed_element(worker, instruction)
        if found:
            note_element(exn, found[0])
        raise
    if response.error:
        raise RuntimeError(response.error)
    outputs: list[tuple[bytes, bytes]] = []
    written: dict[TimerKey, list[bytes]] = defaultdict(list)
    expected: list[str | tuple[str, str]] = [*spec.outputs, *spec.timers]
    for item in worker.data_conn.input_elements(instruction, expected):
        if isinstance(item, beam_fn_api_pb2.Elements.Timers):
            written[item.transform_id, item.timer_family_id].append(item.timers)
        elif item.data:
            outputs.append((spec.outputs[item.transform_id], item.data))
    if finalize and response.process_bundle.requires_finalization:
        _finalize(worker, instruction)
    return BundleResult(response.process_bundle, outputs, dict(written))


def _failed_element(worker: EmbeddedWorkerHandler, instruction: str) -> tuple[Any] | None:
    """The element a DoFn of ``instruction`` raised on, as Beam's exception sampling
    kept it (a 1-tuple), or None."""
    sampler = worker.bundle_processor_cache.data_sampler
    for output in list(getattr(sampler, "_samplers", {}).values()):
        for element, meta in list(getattr(output, "_exceptions", ())):
            if getattr(meta, "instruction_id", None) == instruction:
                while isinstance(element, WindowedValue):
                    element = element.value
                return (element,)
    return None


def _send(worker: EmbeddedWorkerHandler, spec: StageSpec, instruction: str, bundle: Round) -> None:
    for key in spec.timers:
        out = worker.data_conn.output_timer_stream(instruction, *key)
        if key in bundle.timers:
            out.write(bundle.timers[key])
        out.close()
    for transform_id in spec.inputs:
        stream = worker.data_conn.output_stream(instruction, transform_id)
        for chunk in bundle.data.get(transform_id, ()):
            stream.write(chunk)
        stream.close()


def _finalize(worker: EmbeddedWorkerHandler, instruction: str) -> None:
    request = beam_fn_api_pb2.InstructionRequest(
        finalize_bundle=beam_fn_api_pb2.FinalizeBundleRequest(instruction_id=instruction)
    )
    response = worker.push(request).get()
    if response.error:
        raise RuntimeError(response.error)


def _residuals(
    spec: StageSpec, result: beam_fn_api_pb2.ProcessBundleResponse
) -> dict[str, list[bytes]]:
    """Self-checkpointed SDF residuals, as input of the stage's next bundle."""
    data: dict[str, list[bytes]] = defaultdict(list)
    for residual in result.residual_roots:
        app = residual.application
        data[spec.residual_inputs[app.transform_id, app.input_id]].append(app.element)
    return dict(data)


def resume_delay(result: beam_fn_api_pb2.ProcessBundleResponse) -> int:
    """The shortest resume delay (µs) the bundle's residuals asked for; 0 when one asked
    for none."""
    delays = []
    for residual in result.residual_roots:
        if not residual.HasField("requested_time_delay"):
            return 0
        delay = residual.requested_time_delay
        delays.append(max(0, delay.seconds * 1_000_000 + delay.nanos // 1_000))
    return min(delays, default=0)


def _fired_timers(
    spec: StageSpec,
    written: Mapping[TimerKey, list[bytes]],
    job_id: str,
    components: bytes,
) -> dict[TimerKey, bytes]:
    """The timers set in a bundle, the last setting per (key, tag, window) winning and
    cleared ones dropped, as FnApiRunner collects them; all fire in the next round."""
    fired: dict[TimerKey, bytes] = {}
    for key, chunks in written.items():
        impl = coder_impl(job_id, components, spec.timers[key])
        live: dict[Any, Any] = {}
        for chunk in chunks:
            for timer in impl.decode_all(chunk):
                slot = (timer.user_key, timer.dynamic_timer_tag, timer.windows[0])
                if not timer.clear_bit:
                    live[slot] = timer
                else:
                    live.pop(slot, None)
        if live:
            out = create_OutputStream()
            for timer in live.values():
                impl.encode_to_stream(timer, out, True)
            fired[key] = out.get()
    return fired
