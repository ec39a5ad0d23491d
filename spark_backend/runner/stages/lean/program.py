"""The lean path: a fused stage made only of known transforms, run without Beam's
bundle processor.

:func:`lean_program` reads a stage's ``ProcessBundleDescriptor`` and builds one op per
transform when every transform is known: data inputs and outputs (decoded and encoded
with the stage's own Beam coders, so timestamps and windows are rounded to
milliseconds exactly where Beam's coders round them), plain ParDos
(:mod:`.pardo`), WindowInto (:mod:`.windows`), a lifted combine's
Precombine (:mod:`.combine`) and Flatten. Otherwise it returns why not, and the
stage runs on Beam's bundle processor (:mod:`~spark_backend.runner.stages.bundles`);
``StageSpec.path`` records which.

:func:`run_lean_partition` is :func:`~spark_backend.runner.stages.bundles.run_partition`'s
twin: it yields the same ``(buffer, chunk)`` records and last the same metrics record
(element counts per PCollection, each op's user metrics). Batches flow op to op,
pushed from each decoded input chunk (at most about ``CHUNK`` elements per batch, so a
partition is never held whole), and the ops with state (the partial combine) emit at
the end. The ops run a transform at a time over a batch instead of an element at a
time through the whole stage; Beam's model forbids DoFns from mutating their input, and
outputs are the same (the differential tests compare them with Beam's).
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from apache_beam.metrics import monitoring_infos
from apache_beam.metrics.execution import MetricsContainer
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners import common, pipeline_context
from apache_beam.runners.worker import bundle_processor, statesampler
from apache_beam.utils.counters import CounterFactory

from spark_backend.runner.batch.spill import SPILL_BYTES, SpillBuffer, chunk_bytes
from spark_backend.runner.batch.summary import METRICS, PartitionSummary
from spark_backend.runner.grouping.keyed_columns import ColumnsWriter
from spark_backend.runner.stages.lean.batch import Batch, decode
from spark_backend.runner.stages.lean.combine import combine_phase_op, precombine_op
from spark_backend.runner.stages.lean.count import fuse_count_per_element
from spark_backend.runner.stages.lean.encode import BatchEncoder
from spark_backend.runner.stages.lean.pardo import Emit, pardo_op
from spark_backend.runner.stages.lean.sdf import sdf_process_op
from spark_backend.runner.stages.lean.windows import window_into_op
from spark_backend.runner.stages.text_source import TEXT_READ_URN, text_read_op

__all__ = ["Program", "lean_program", "run_lean_partition"]


class _Flatten:
    def __init__(self, label: str, transform_id: str) -> None:
        self.label, self.transform_id = label, transform_id

    def setup(self) -> None:
        return None

    def teardown(self) -> None:
        return None

    def process(self, batch: Batch, emit: Emit) -> None:
        emit(batch)

    def finish(self, emit: Emit) -> None:
        return None


@dataclass
class _Sink:
    """A data output: each batch encoded with the output's coder, or (``columns``, a
    columnar GroupByKey's input) turned into KeyedColumns; the chunks are held until
    the task hands them on, spilled to disk past a byte cap
    (:mod:`~spark_backend.runner.batch.spill`)."""

    label: str
    transform_id: str
    encoder: BatchEncoder
    coder: Any
    chunks: SpillBuffer = field(default_factory=SpillBuffer)
    columns: ColumnsWriter | None = None

    def setup(self) -> None:
        return None

    def teardown(self) -> None:
        return None

    def process(self, batch: Batch, emit: Emit) -> None:
        if len(batch):
            if self.columns is not None:
                self.chunks.append(self.columns.columns(batch))
            else:
                self.chunks.append(self.encoder.encode(batch))

    def finish(self, emit: Emit) -> None:
        return None


_BUILDERS: dict[str, Callable[[Any, str, Any], Any]] = {
    common_urns.primitives.PAR_DO.urn: pardo_op,
    common_urns.primitives.ASSIGN_WINDOWS.urn: window_into_op,
    common_urns.combine_components.COMBINE_PER_KEY_PRECOMBINE.urn: precombine_op,
    common_urns.combine_components.COMBINE_PER_KEY_MERGE_ACCUMULATORS.urn: combine_phase_op,
    common_urns.combine_components.COMBINE_PER_KEY_EXTRACT_OUTPUTS.urn: combine_phase_op,
    common_urns.combine_components.COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS.urn: combine_phase_op,
    common_urns.primitives.FLATTEN.urn: lambda t, tid, stage: _Flatten(t.unique_name, tid),
    TEXT_READ_URN: text_read_op,
}


_SDF_PROCESS = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn


@dataclass(frozen=True)
class Stage:
    """What an op builder reads besides its transform: the stage's Beam context and
    the windowing of its PCollections."""

    context: Any  # Beam's PipelineContext of the descriptor
    descriptor: beam_fn_api_pb2.ProcessBundleDescriptor

    def windowing_of(self, pcoll: str) -> Any:
        """The ``core.Windowing`` of PCollection ``pcoll``."""
        strategy = self.descriptor.pcollections[pcoll].windowing_strategy_id
        return self.context.windowing_strategies[strategy]


@dataclass
class Program:
    """A stage's ops in run order, who consumes each PCollection, and the data inputs."""

    ops: dict[str, Any]  # transform id -> op, in topological order
    consumers: dict[str, list[str]]  # pcollection -> consuming transform ids
    produces: dict[str, str]  # transform id -> its one output pcollection ('' for sinks)
    inputs: dict[str, tuple[str, Any]]  # data-input transform id -> (pcollection, coder impl)
    sinks: dict[str, _Sink]  # data-output transform id -> sink


def lean_program(
    descriptor: beam_fn_api_pb2.ProcessBundleDescriptor, unbounded_sdf: bool = False
) -> Program | str:
    """The lean program of a stage, or a sentence saying why the stage is not lean;
    ``unbounded_sdf`` (streaming) runs a splittable DoFn as
    :class:`~.sdf.SdfProcessOp`, its residuals collected on the op."""
    context = pipeline_context.PipelineContext(descriptor)
    ops: dict[str, Any] = {}
    inputs: dict[str, tuple[str, Any]] = {}
    sinks: dict[str, _Sink] = {}
    for tid, t in descriptor.transforms.items():
        urn = t.spec.urn
        if urn in (bundle_processor.DATA_INPUT_URN, bundle_processor.DATA_OUTPUT_URN):
            port = beam_fn_api_pb2.RemoteGrpcPort.FromString(t.spec.payload)
            coder = context.coders[port.coder_id]
            if urn == bundle_processor.DATA_INPUT_URN:
                (pcoll,) = t.outputs.values()
                inputs[tid] = (pcoll, coder.get_impl())
            else:
                sinks[tid] = _Sink(t.unique_name, tid, BatchEncoder(coder), coder)
            continue
        builder = _BUILDERS.get(urn)
        if unbounded_sdf and urn == _SDF_PROCESS:
            builder = sdf_process_op
        if builder is None:
            return f"{t.unique_name}: {urn} has no lean op"
        if len(t.outputs) != 1:
            return f"{t.unique_name}: not one output"
        op = builder(t, tid, Stage(context, descriptor))
        if isinstance(op, str):
            return f"{t.unique_name}: {op}"
        ops[tid] = op
    ops.update(sinks)
    consumers: dict[str, list[str]] = defaultdict(list)
    for tid in ops:
        for pcoll in descriptor.transforms[tid].inputs.values():
            consumers[pcoll].append(tid)
    produces = {tid: next(iter(descriptor.transforms[tid].outputs.values()), "") for tid in ops}
    fuse_count_per_element(ops, consumers, produces)
    return Program(ops, dict(consumers), produces, inputs, sinks)


def run_lean_partition(
    descriptor: bytes,
    outputs: dict[str, bytes],
    records: Iterable[tuple[str, bytes]],
    columnar: frozenset[str] = frozenset(),
    spill_bytes: int = SPILL_BYTES,
    program: Program | None = None,
) -> Iterator[tuple[bytes, Any]]:
    """Run a lean stage over one partition's ``records`` (``(input transform, chunk)``,
    a chunk encoded with the input's coder or a :class:`Batch` made in the same task);
    yield ``(buffer, chunk)`` for each output buffer (``outputs``: sink transform id ->
    buffer), then the metrics record (as
    :func:`~spark_backend.runner.stages.bundles.run_partition` does). The sinks in
    ``columnar`` (a columnar GroupByKey's input) yield
    :class:`~spark_backend.runner.grouping.keyed_columns.KeyedColumns` instead of bytes. Each
    sink holds at most ``spill_bytes`` of output in memory between hand-overs (more
    goes to a scratch file, :class:`~spark_backend.runner.batch.spill.SpillBuffer`).
    ``program``: the stage's program when the caller built it (to read its ops after)."""
    if program is None:
        built = lean_program(beam_fn_api_pb2.ProcessBundleDescriptor.FromString(descriptor))
        if isinstance(built, str):  # the plan chose this path: it cannot happen
            raise RuntimeError(f"the stage cannot run lean: {built}")
        program = built
    for tid in columnar:
        sink = program.sinks[tid]
        sink.columns = ColumnsWriter(sink.coder)
    for sink in program.sinks.values():
        sink.chunks = SpillBuffer(spill_bytes)
    runner = _Runner(program)
    sizes: dict[bytes, int] = defaultdict(int)
    try:
        with runner:
            for transform_id, chunk in records:
                pcoll, impl = program.inputs[transform_id]
                runner.feed(pcoll, chunk if isinstance(chunk, Batch) else decode([chunk], impl))
                yield from _drain(program, outputs, sizes)
            runner.finish()
            yield from _drain(program, outputs, sizes)
    finally:
        for sink in program.sinks.values():
            sink.chunks.close()
    response = beam_fn_api_pb2.ProcessBundleResponse(monitoring_infos=runner.monitoring_infos())
    yield METRICS, pickle.dumps(PartitionSummary(response.SerializeToString(), dict(sizes)))


def _drain(
    program: Program, outputs: dict[str, bytes], sizes: dict[bytes, int]
) -> Iterator[tuple[bytes, Any]]:
    for tid, sink in program.sinks.items():
        buffer = outputs[tid]
        for chunk in sink.chunks.drain():
            sizes[buffer] += chunk_bytes(chunk)
            yield buffer, chunk


class _Runner:
    """Pushes batches through a program's ops, each under its own metrics scope."""

    def __init__(self, program: Program) -> None:
        self._program = program
        self._sampler = statesampler.StateSampler("lean", CounterFactory(), 0)
        self._containers = {tid: MetricsContainer(op.label) for tid, op in program.ops.items()}
        self._scopes = {
            tid: self._sampler.scoped_state(
                common.NameContext(op.label, tid),
                "process",
                metrics_container=self._containers[tid],
            )
            for tid, op in program.ops.items()
        }
        self._counts: dict[str, int] = defaultdict(int)
        self._emits = {tid: self._emitter(tid) for tid in program.ops}
        self._previous: Any = None

    def __enter__(self) -> _Runner:
        self._previous = statesampler.get_current_tracker()
        statesampler.set_current_tracker(self._sampler)
        for tid, op in self._program.ops.items():
            with self._scopes[tid]:
                op.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for tid, op in self._program.ops.items():
                with self._scopes[tid]:
                    op.teardown()
        finally:
            statesampler.set_current_tracker(self._previous)

    def _emitter(self, tid: str) -> Emit:
        out = self._program.produces[tid]
        return lambda batch: self.feed(out, batch)

    def feed(self, pcoll: str, batch: Batch) -> None:
        """Hand ``batch`` (elements of ``pcoll``) to every consumer of ``pcoll``."""
        if not len(batch):
            return
        self._counts[pcoll] += len(batch)
        for tid in self._program.consumers.get(pcoll, ()):
            with self._scopes[tid]:
                self._program.ops[tid].process(batch, self._emits[tid])

    def finish(self) -> None:
        """End of the partition: every op in topological order flushes its state."""
        for tid in _topological(self._program):
            with self._scopes[tid]:
                self._program.ops[tid].finish(self._emits[tid])

    def monitoring_infos(self) -> list[Any]:
        infos = [
            monitoring_infos.int64_counter(
                monitoring_infos.ELEMENT_COUNT_URN, count, pcollection=pcoll
            )
            for pcoll, count in self._counts.items()
        ]
        for tid, container in self._containers.items():
            infos.extend(container.to_runner_api_monitoring_infos(tid).values())
        return infos


def _topological(program: Program) -> list[str]:
    """The ops in an order where every op comes after the ops that feed it."""
    feeders: dict[str, set[str]] = {tid: set() for tid in program.ops}
    for tid, out in program.produces.items():
        for consumer in program.consumers.get(out, ()):
            feeders[consumer].add(tid)
    order: list[str] = []
    ready = [tid for tid, f in feeders.items() if not f]
    while ready:
        tid = ready.pop()
        order.append(tid)
        out = program.produces[tid]
        for consumer in program.consumers.get(out, ()):
            feeders[consumer].discard(tid)
            if not feeders[consumer]:
                ready.append(consumer)
    return order
