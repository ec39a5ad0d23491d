"""The driver's plan: Beam's fused stages, as picklable specs for Spark tasks.

:func:`plan_pipeline` runs Beam's own optimisation phases (exactly FnApiRunner's) and
Beam's own execution context, which builds each stage's ``ProcessBundleDescriptor``.
Fusion is FnApiRunner's on purpose: every stage boundary is a coder crossing, which
rounds timestamps to milliseconds, so an extra boundary (say, before a stateful DoFn,
as ``annotate_stateful_dofns_as_roots`` would add) changes the output. What a task
needs is copied into frozen dataclasses of bytes and strings, so that it pickles small
and carries no driver-side objects.

Buffers are named as Beam names them: ``b"impulse"``, ``b"materialize:<pcoll>"`` for
a PCollection crossing stages, ``b"group:<gbk>"`` for a GroupByKey's input.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2, beam_provision_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners.pipeline_utils import (
    merge_common_environments,
    merge_superset_dep_environments,
    validate_pipeline_graph,
)
from apache_beam.runners.portability.fn_api_runner import execution, translations
from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
from apache_beam.runners.portability.fn_api_runner.worker_handlers import (
    WorkerHandlerManager,
)
from apache_beam.runners.worker import bundle_processor
from apache_beam.utils import proto_utils

from spark_backend.runner.grouping.engine import engine_strategy
from spark_backend.runner.grouping.keyed_columns import columnar_coders
from spark_backend.runner.stages.lean.program import Program, lean_program
from spark_backend.runner.stages.task_context import coder, windowing
from spark_backend.runner.stages.text_source import TEXT_READ_URN, TextReadOp

__all__ = [
    "BUNDLE_PROCESSOR",
    "GLOBAL_PANE",
    "IMPULSE",
    "LEAN",
    "THEORY_ENGINE",
    "TRIGGER_DRIVER",
    "GroupSpec",
    "Plan",
    "SideInputSpec",
    "StageSpec",
    "plan_pipeline",
    "reads_off_lean",
]

IMPULSE = translations.IMPULSE_BUFFER
_LOG = logging.getLogger(__name__)

_PHASES = (
    translations.annotate_downstream_side_inputs,
    translations.fix_side_input_pcoll_coders,
    translations.pack_combiners,
    translations.lift_combiners,
    translations.expand_sdf,
    translations.expand_gbk,
    translations.sink_flattens,
    translations.greedily_fuse,
    translations.read_to_impulse,
    translations.impulse_to_input,
    translations.sort_stages,
    translations.add_impulse_to_dangling_transforms,
    translations.setup_timer_mapping,
    translations.populate_data_channel_coders,
)


@dataclass(frozen=True)
class SideInputSpec:
    """A side input a stage reads: its consumer, tag, buffer and access pattern."""

    transform_id: str
    tag: str
    buffer_id: bytes
    access_pattern: bytes  # a serialised FunctionSpec (iterable or multimap)
    coder_id: str  # the runner-safe windowed coder of the side PCollection


@dataclass(frozen=True)
class StageSpec:
    """One fused stage: its bundle descriptor and the buffers it reads and writes."""

    name: str
    descriptor: bytes  # a serialised ProcessBundleDescriptor
    inputs: dict[str, bytes]  # data-input transform id -> buffer id
    input_coders: dict[str, str]  # data-input transform id -> windowed coder id
    outputs: dict[str, bytes]  # data-output transform id -> buffer id
    timers: dict[tuple[str, str], str]  # (transform id, timer family) -> timer coder id
    residual_inputs: dict[tuple[str, str], str]  # (SDF transform, input) -> data input
    side_inputs: tuple[SideInputSpec, ...]
    stateful: bool  # holds user state or timers: a key must stay in one task
    keyed_input: bool  # stateful, and its one data input feeds the stateful DoFn
    path: str = ""  # LEAN or BUNDLE_PROCESSOR (set by plan_pipeline)
    reason: str = ""  # why the stage is not lean
    text_source: Any = None  # a lean stage reading a text source from its impulse input

    @property
    def label(self) -> str:
        """The stage's name as Beam's fusion writes it, ``(A)+(B)``, shortened."""
        return self.name if len(self.name) <= 200 else self.name[:197] + "..."


#: How a stage's transforms run in a task.
LEAN = "lean"  # known transforms only, run by spark_backend.runner.stages.lean.program
BUNDLE_PROCESSOR = "beam-bundle-processor"  # Beam's SdkWorker (the reference)

#: How a GroupByKey assigns windows, timestamps and panes after its shuffle.
GLOBAL_PANE = "global-pane"  # default windowing: one pane in the global window
THEORY_ENGINE = "theory-engine"  # theory's GroupByWindowEngine (the fast path)
TRIGGER_DRIVER = "beam-trigger-driver"  # Beam's batch trigger driver (the reference)


@dataclass(frozen=True)
class GroupSpec:
    """A GroupByKey the runner executes: coders on each side, the windowing, and the
    path that groups it (:data:`GLOBAL_PANE`, :data:`THEORY_ENGINE` or
    :data:`TRIGGER_DRIVER`, with the reason when the engine was not chosen); on the
    engine's path, ``columnar`` when its shuffle carries
    :class:`~spark_backend.runner.grouping.keyed_columns.KeyedColumns` (else ``reason`` says
    why not)."""

    label: str
    input_pcollection: str  # the PCollection grouped (for its element count)
    input_coder_id: str  # windowed KV<K, V>
    output_coder_id: str  # windowed KV<K, Iterable<V>>
    windowing_strategy_id: str
    path: str = TRIGGER_DRIVER
    reason: str = ""
    columnar: bool = False  # THEORY_ENGINE, batch: shuffles KeyedColumns, sorts with numpy
    state_iterable_bytes: int = 0  # GLOBAL_PANE: values past this many bytes go by state


@dataclass(frozen=True)
class Plan:
    """Everything the executor needs; ``components`` is a serialised Components."""

    job_id: str
    components: bytes
    stages: tuple[StageSpec, ...]
    groups: dict[bytes, GroupSpec]

    @property
    def paths(self) -> dict[str, str]:
        """Which path runs each GroupByKey, by its label (tests assert fast paths ran)."""
        return {g.label: g.path for g in self.groups.values()}

    @property
    def columnar(self) -> frozenset[str]:
        """The GroupByKeys whose batch shuffle carries columns (``GroupSpec.columnar``)."""
        return frozenset(g.label for g in self.groups.values() if g.columnar)

    @property
    def stage_paths(self) -> dict[str, str]:
        """Which path runs each fused stage (:data:`LEAN` or :data:`BUNDLE_PROCESSOR`),
        by the stage's name; ``reasons`` says why a stage is not lean."""
        return {s.name: s.path for s in self.stages}

    @property
    def reasons(self) -> dict[str, str]:
        """Why each stage on Beam's bundle processor is not lean, by stage name."""
        return {s.name: s.reason for s in self.stages if s.path != LEAN}


def plan_pipeline(
    pipeline: pb.Pipeline,
    fast_paths: bool = True,
    lean: bool = False,
    stateful_roots: bool = False,
    unbounded_sdf: bool = False,
    pack_combiners: bool = True,
    state_iterable_bytes: int = 0,
) -> Plan:
    """Beam's fused stages of ``pipeline`` (a proto already checked), in run order;
    ``fast_paths=False`` keeps every GroupByKey on Beam's trigger driver (the reference);
    ``lean=True`` runs the stages made of known transforms on the lean path
    (:mod:`spark_backend.runner.stages.lean.program`), the others on Beam's bundle processor.
    ``stateful_roots`` starts a stage at every stateful DoFn (Beam's
    ``annotate_stateful_dofns_as_roots``), so that its one data input is its keyed main
    input: streaming keeps state per key partition between batches; a ParDo with side
    inputs starts a stage too, so that its main elements can wait for their side windows
    (:mod:`spark_backend.runner.streaming.pushback`). ``unbounded_sdf`` (streaming) lets
    a splittable DoFn's stage run lean (:mod:`~spark_backend.runner.stages.lean.sdf`).
    ``pack_combiners=False`` leaves out Beam's combiner packing, as Beam's runners do in
    streaming (Dataflow packs only in batch, and FnApiRunnerTest expects no packed step
    in a streaming run). ``pipeline`` itself is left unchanged: Beam's phases rewrite the
    proto they are given (a Flatten's inputs of another coder are re-pointed to new
    transcoding steps), and streaming builds its watermark graph from ``pipeline``.
    ``state_iterable_bytes`` > 0: a GroupByKey in default windowing hands its consumer
    the values past that many bytes of a group as Beam's state-backed iterable
    (:func:`_with_state_iterables`), as FnApiRunner's ``use_state_iterables`` does."""
    validate_pipeline_graph(pipeline)
    pipeline = copy.deepcopy(pipeline)  # as FnApiRunner's create_stages copies it
    pipeline = merge_common_environments(merge_superset_dep_environments(pipeline))
    phases = [p for p in _PHASES if pack_combiners or p is not translations.pack_combiners]
    if stateful_roots:
        phases.insert(1, translations.annotate_stateful_dofns_as_roots)
        phases.insert(2, _side_input_dofns_as_roots)
    context, stages = translations.create_and_optimize_stages(
        pipeline,
        phases=phases,
        known_runner_urns=frozenset(
            [common_urns.primitives.FLATTEN.urn, common_urns.primitives.GROUP_BY_KEY.urn]
        ),
    )
    manager = WorkerHandlerManager(
        context.components.environments,
        ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(retrieval_token="unused")),
    )
    try:
        buffers = {s.name: _stage_buffers(s) for s in stages}
        runner_context = execution.FnApiRunnerExecutionContext(
            stages,
            manager,
            context.components,
            context.safe_coders,
            context.data_channel_coders,
            num_workers=1,
        )
        runner_context.setup()
        specs = tuple(_stage_spec(runner_context, s, *buffers[s.name], context) for s in stages)
    finally:
        manager.close_all()
    specs = tuple(_choose_stage_path(spec, lean, unbounded_sdf) for spec in specs)
    job_id = uuid.uuid4().hex
    components = context.components.SerializeToString()
    groups = {
        b: _choose_path(_group_spec(context, b), job_id, components, fast_paths)
        for b in _group_buffers(specs)
    }
    if state_iterable_bytes:
        specs, groups = _with_state_iterables(context, specs, groups, state_iterable_bytes)
        job_id = uuid.uuid4().hex  # (tasks cache a job's coders by its id)
        components = context.components.SerializeToString()
    return Plan(job_id, components, specs, groups)


def _with_state_iterables(
    context: translations.TransformContext,
    specs: tuple[StageSpec, ...],
    groups: dict[bytes, GroupSpec],
    threshold: int,
) -> tuple[tuple[StageSpec, ...], dict[bytes, GroupSpec]]:
    """Each GroupByKey in default windowing (:data:`GLOBAL_PANE`) and the stages reading
    it switched to Beam's state-backed iterable coder with ``threshold`` bytes (Beam's
    ``TransformContext.with_state_iterables``, the coders added to ``context``)."""
    changed: dict[bytes, str] = {}
    for buffer, group in list(groups.items()):
        if group.path != GLOBAL_PANE:
            continue
        coder_id = context.with_state_iterables(group.output_coder_id)
        if coder_id == group.output_coder_id:
            continue
        _set_threshold(context.components, coder_id, threshold)
        changed[buffer] = coder_id
        groups[buffer] = dataclasses.replace(
            group, output_coder_id=coder_id, state_iterable_bytes=threshold
        )
    if not changed:
        return specs, groups
    return tuple(_reading_state_iterables(s, changed, context.components) for s in specs), groups


def _set_threshold(components: pb.Components, coder_id: str, threshold: int) -> None:
    coder_proto = components.coders[coder_id]
    if coder_proto.spec.urn == common_urns.coders.STATE_BACKED_ITERABLE.urn:
        coder_proto.spec.payload = str(threshold).encode("ascii")
    for component in coder_proto.component_coder_ids:
        _set_threshold(components, component, threshold)


def _reading_state_iterables(
    spec: StageSpec, changed: dict[bytes, str], components: pb.Components
) -> StageSpec:
    """``spec`` with its inputs of the ``changed`` group buffers decoded with their new
    coders (added to its descriptor with their components)."""
    readers = {t: changed[b] for t, b in spec.inputs.items() if b in changed}
    if not readers:
        return spec
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    for transform_id, coder_id in readers.items():
        port = beam_fn_api_pb2.RemoteGrpcPort.FromString(
            descriptor.transforms[transform_id].spec.payload
        )
        port.coder_id = coder_id
        descriptor.transforms[transform_id].spec.payload = port.SerializeToString()
        _copy_coder(components, descriptor, coder_id)
    return dataclasses.replace(
        spec,
        descriptor=descriptor.SerializeToString(),
        input_coders={**spec.input_coders, **readers},
        path=BUNDLE_PROCESSOR,
        reason=spec.reason or "it reads a group by state-backed iterables",
        text_source=None,
    )


def _copy_coder(
    components: pb.Components, descriptor: beam_fn_api_pb2.ProcessBundleDescriptor, coder_id: str
) -> None:
    descriptor.coders[coder_id].CopyFrom(components.coders[coder_id])
    for component in components.coders[coder_id].component_coder_ids:
        _copy_coder(components, descriptor, component)


def _side_input_dofns_as_roots(
    stages: Iterable[translations.Stage], context: translations.TransformContext
) -> Iterator[translations.Stage]:
    """Start a stage at every ParDo with side inputs (as Beam's
    ``annotate_stateful_dofns_as_roots`` does for stateful DoFns)."""
    for stage in stages:
        for transform in stage.transforms:
            if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
                payload = proto_utils.parse_Bytes(transform.spec.payload, pb.ParDoPayload)
                if payload.side_inputs:
                    stage.forced_root = True
        yield stage


def _stage_buffers(stage: translations.Stage) -> tuple[dict[str, bytes], dict[str, bytes]]:
    inputs, outputs = {}, {}
    for t in stage.transforms:
        if t.spec.urn == bundle_processor.DATA_INPUT_URN:
            inputs[t.unique_name] = t.spec.payload
        elif t.spec.urn == bundle_processor.DATA_OUTPUT_URN:
            outputs[t.unique_name] = t.spec.payload
    return inputs, outputs


def _stage_spec(
    runner_context: execution.FnApiRunnerExecutionContext,
    stage: translations.Stage,
    inputs: dict[str, bytes],
    outputs: dict[str, bytes],
    context: translations.TransformContext,
) -> StageSpec:
    manager = runner_context.bundle_manager_for(stage)
    descriptor = manager.process_bundle_descriptor
    input_coders = {
        t: beam_fn_api_pb2.RemoteGrpcPort.FromString(descriptor.transforms[t].spec.payload).coder_id
        for t in inputs
    }
    coder_ids = manager._timer_coder_ids or {}
    timers = {
        key: context.safe_coders.get(coder_ids[key], coder_ids[key])
        for key in manager.stage_timer_outputs
    }
    return StageSpec(
        name=stage.name,
        descriptor=descriptor.SerializeToString(),
        inputs=inputs,
        input_coders=input_coders,
        outputs=outputs,
        timers=timers,
        residual_inputs=dict(_residual_inputs(manager, stage)),
        side_inputs=tuple(_side_inputs(stage, context)),
        stateful=stage.is_stateful(),
        keyed_input=stage.is_stateful() and _keyed_input(stage),
    )


def _choose_stage_path(spec: StageSpec, lean: bool, unbounded_sdf: bool = False) -> StageSpec:
    if not lean:
        return dataclasses.replace(spec, path=BUNDLE_PROCESSOR, reason="lean stages are off")
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    program = lean_program(descriptor, unbounded_sdf and bool(spec.residual_inputs))
    if isinstance(program, str):
        _LOG.info("stage %s on Beam's bundle processor: %s", spec.label, program)
        return dataclasses.replace(spec, path=BUNDLE_PROCESSOR, reason=program)
    _LOG.info("stage %s lean", spec.label)
    return dataclasses.replace(spec, path=LEAN, text_source=_impulse_text_source(spec, program))


def reads_off_lean(plan: Plan) -> frozenset[str]:
    """The labels of the text reads (:mod:`~spark_backend.runner.stages.text_source`)
    fused into a stage that is not lean: Beam's bundle processor would read each in one
    task, unsplit."""
    names: set[str] = set()
    for spec in plan.stages:
        if spec.path == LEAN:
            continue
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
        names.update(
            t.unique_name for t in descriptor.transforms.values() if t.spec.urn == TEXT_READ_URN
        )
    return frozenset(names)


def _impulse_text_source(spec: StageSpec, program: Program) -> Any:
    """The text source a lean stage reads from its one input, the impulse (the executor
    then splits it into byte ranges, :mod:`~spark_backend.runner.stages.text_source`), else None."""
    if list(spec.inputs.values()) != [IMPULSE]:
        return None
    (impulse_pcoll, _) = next(iter(program.inputs.values()))
    readers = [program.ops[tid] for tid in program.consumers.get(impulse_pcoll, ())]
    if len(readers) == 1 and isinstance(readers[0], TextReadOp):
        return readers[0].source
    return None


def _keyed_input(stage: translations.Stage) -> bool:
    """Whether the stage's only data input is the main input of its stateful DoFns, so
    that partitioning that input by key keeps each key in one task."""
    reads = [t for t in stage.transforms if t.spec.urn == bundle_processor.DATA_INPUT_URN]
    if len(reads) != 1:
        return False
    (read_pcoll,) = reads[0].outputs.values()
    for t in stage.transforms:
        if t.spec.urn not in translations.PAR_DO_URNS:
            continue
        payload = proto_utils.parse_Bytes(t.spec.payload, pb.ParDoPayload)
        if payload.state_specs or payload.timer_family_specs:
            main = [pc for tag, pc in t.inputs.items() if tag not in payload.side_inputs]
            if main != [read_pcoll]:
                return False
    return True


def _residual_inputs(
    manager: execution.BundleContextManager, stage: translations.Stage
) -> Iterator[tuple[tuple[str, str], str]]:
    """Where an SDF's self-checkpointed residual re-enters the stage."""
    sdf = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn
    for t in stage.transforms:
        if t.spec.urn == sdf:
            for input_id in t.inputs:
                try:
                    source = manager.input_for(t.unique_name, input_id)
                except RuntimeError:  # a side input: no data input feeds it
                    continue
                yield (t.unique_name, input_id), source


def _side_inputs(
    stage: translations.Stage, context: translations.TransformContext
) -> Iterator[SideInputSpec]:
    for t in stage.transforms:
        if t.spec.urn not in translations.PAR_DO_URNS:
            continue
        payload = proto_utils.parse_Bytes(t.spec.payload, pb.ParDoPayload)
        for tag, side in payload.side_inputs.items():
            pcoll = t.inputs[tag]
            channel = context.data_channel_coders[pcoll]
            yield SideInputSpec(
                transform_id=t.unique_name,
                tag=tag,
                buffer_id=translations.create_buffer_id(pcoll),
                access_pattern=side.access_pattern.SerializeToString(),
                coder_id=context.safe_coders.get(channel, channel),
            )


def _group_buffers(specs: tuple[StageSpec, ...]) -> set[bytes]:
    return {
        buffer
        for spec in specs
        for buffer in (*spec.inputs.values(), *spec.outputs.values())
        if buffer.startswith(b"group:")
    }


def _group_spec(context: translations.TransformContext, buffer: bytes) -> GroupSpec:
    _, transform_id = translations.split_buffer_id(buffer)
    components = context.components
    t = components.transforms[transform_id]
    (source,) = t.inputs.values()
    (target,) = t.outputs.values()
    return GroupSpec(
        label=t.unique_name,
        input_pcollection=source,
        input_coder_id=context.data_channel_coders[source],
        output_coder_id=context.data_channel_coders[target],
        windowing_strategy_id=components.pcollections[source].windowing_strategy_id,
    )


def _choose_path(group: GroupSpec, job_id: str, components: bytes, fast: bool) -> GroupSpec:
    strategy = windowing(job_id, components, group.windowing_strategy_id)
    if strategy.is_default():
        return dataclasses.replace(group, path=GLOBAL_PANE)
    if not fast:
        return dataclasses.replace(group, reason="fast paths are off")
    chosen = engine_strategy(strategy)
    if isinstance(chosen, str):
        return dataclasses.replace(group, reason=chosen)
    refusal = columnar_coders(
        coder(job_id, components, group.input_coder_id),
        coder(job_id, components, group.output_coder_id),
    )
    return dataclasses.replace(group, path=THEORY_ENGINE, columnar=not refusal, reason=refusal)
