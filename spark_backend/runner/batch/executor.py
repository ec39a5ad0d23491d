"""Driver side: run a :class:`Plan`'s stages on Spark, one Spark job per fused stage;
stages that share no data run at the same time (:mod:`spark_backend.runner.batch.schedule`).

Each buffer is a list of RDDs of encoded chunks (a PCollection written by several
stages, as a flattened one is, has several). A stage's input RDD is the union of its
data inputs tagged by input transform: ``impulse`` is one record, a ``materialize``
buffer is used as it is, a ``group`` buffer is shuffled by encoded key and grouped
(:mod:`spark_backend.runner.grouping.group_by_key`). A stateful stage keeps each key in one task:
its input is partitioned by encoded key when that input feeds the stateful DoFn
directly, else the stage runs as one task (as FnApiRunner runs it: one bundle). The
split restrictions of a splittable DoFn (a bounded read) are spread over tasks, one
restriction per element record, before the stage that processes them. Side
inputs are collected on the driver and broadcast. The stage's output RDD is persisted
and one JVM-side action (a count) computes it in one Python pass per task; each task's
metrics, and its outputs when small, come back in a per-partition report
(:mod:`.reported`: an accumulator Spark merges once per result partition, keyed by
partition), so a retried or recomputed task's metrics are committed once. The same
reports give each buffer's size in bytes, and Beam's element
counts give each PCollection's size in elements; a shuffle gets the context's default
parallelism, but never more partitions than elements (an empty task is pure cost) nor
fewer than one per :data:`BYTES_PER_PARTITION` (fewer partitions for few elements was
tried and lost: one element may expand into millions, as a Create of shards does, and
its stage then ran as one task). A GroupByKey whose plan says :data:`THEORY_ENGINE` is
partitioned by key (no per-key lists) and grouped by theory's engine, a whole partition
at once; a ``columnar`` one shuffles one record of columns per (task, partition) and is
grouped by a numpy sort
(:func:`~spark_backend.runner.grouping.group_by_key.columns_partition`); otherwise by
Spark's ``groupByKey`` and Beam's batch trigger driver; a GroupByKey whose values go
by state-backed iterables (``GroupSpec.state_iterable_bytes``) is partitioned by key
(``groupByKey`` builds each key's list on the map side) and each partition's values
gathered by key into a scratch file (:mod:`~spark_backend.runner.grouping.key_runs`),
unsorted, so that a group streams from that file into the spill.

Small stages run in the driver process instead (:mod:`.driver_stages`): a stage whose
inputs the driver holds whole and small, as it holds the impulse and any buffer whose
Spark partitions all sent their outputs back with their reports (the partitions past
their share of :data:`~.driver_stages.LOCAL_BYTES` stay in the cache). A text source
is split into one byte range per task slot (:func:`~.driver_stages.task_slots`), so a
small file is read in one wave of tasks. A GroupByKey whose input the driver holds is
grouped there, and a Spark stage reads its groups without a shuffle. A driver stage
whose outputs pass ``driver_output_bytes`` is stopped and run as a Spark job instead
(``moved_stages``). The SparkContext is obtained when a stage first needs Spark
(:mod:`.lazy_context`): a run of driver stages only starts no JVM.
"""

from __future__ import annotations

import functools
import pickle
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any, Final

from apache_beam.metrics import monitoring_infos
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner.execution import ENCODED_IMPULSE_VALUE

from spark_backend.runner.batch.driver_stages import (
    DRIVER_OUTPUT_BYTES,
    LOCAL_BYTES,
    Held,
    group_locally,
    redistributes,
    run_on_driver,
    task_slots,
)
from spark_backend.runner.batch.lazy_context import LazyContext
from spark_backend.runner.batch.metric_merge import consolidate
from spark_backend.runner.batch.reported import PartitionReports, Report, reported_outputs
from spark_backend.runner.batch.schedule import run_stages
from spark_backend.runner.batch.spark_errors import python_error_message
from spark_backend.runner.batch.spill import SPILL_BYTES
from spark_backend.runner.errors import PipelineFailedError
from spark_backend.runner.grouping.group_by_key import (
    columns_partition,
    engine_partition,
    group_partition,
    key_hash,
    keyed_elements,
    split_columns,
    split_elements,
)
from spark_backend.runner.grouping.key_runs import by_key
from spark_backend.runner.plan.plan import IMPULSE, LEAN, THEORY_ENGINE, GroupSpec, Plan, StageSpec
from spark_backend.runner.stages.bundles import METRICS, run_partition
from spark_backend.runner.stages.lean.batch import decode
from spark_backend.runner.stages.lean.program import run_lean_partition
from spark_backend.runner.stages.task_context import coder, coder_impl
from spark_backend.runner.stages.text_source import TextRange, range_bytes, split_ranges
from spark_backend.runner.stages.worker_warnings import warn_again

__all__ = ["BYTES_PER_PARTITION", "StageExecutor"]

#: The encoded bytes a shuffle partition should hold (one task's share).
BYTES_PER_PARTITION: Final[int] = 4 << 20


class StageExecutor:
    """Runs a plan's stages on ``spark_context`` (a SparkContext, or a
    :class:`~.lazy_context.LazyContext` started when a stage first needs Spark), each
    once the stages it reads from are done, independent ones at the same time
    (:mod:`.schedule`; their Spark jobs carry the job group ``job_group``); collects
    their metrics. ``partitions``: the default parallelism (None: the context's)."""

    def __init__(
        self,
        spark_context: Any,
        plan: Plan,
        partitions: int | None = None,
        job_group: str | None = None,
        local_bytes: int | None = None,
        driver_output_bytes: int = DRIVER_OUTPUT_BYTES,
        spill_bytes: int = SPILL_BYTES,
    ) -> None:
        # a SparkContext, or a LazyContext started when a stage first needs Spark
        lazy = spark_context if isinstance(spark_context, LazyContext) else None
        self._context = lazy or LazyContext.of(spark_context)
        self._thread_state = threading.local()  # whether this thread set the job group
        self._plan = plan
        self._partitions_given = partitions
        self._partitions_known: int | None = None
        self._job_group = job_group or f"beam-{plan.job_id}"
        self._cancelled = threading.Event()
        self._lock = threading.Lock()  # guards the bookkeeping below across stage threads
        self._buffers: dict[bytes, list[Any]] = defaultdict(list)
        self._sizes: dict[bytes, int] = defaultdict(int)
        self._elements: dict[str, int] = defaultdict(int)
        self._persisted: list[Any] = []
        self._broadcasts: list[Any] = []
        self._components_handle: Any = None  # broadcast when a Spark task first needs it
        self._held: dict[bytes, list[bytes]] = defaultdict(list)  # buffers the driver holds
        self._ranges: dict[str, list[TextRange]] = {}  # text-reading stage -> byte ranges
        self._local_bytes = LOCAL_BYTES if local_bytes is None else local_bytes
        self._driver_output_bytes = driver_output_bytes
        self._spill_bytes = spill_bytes
        self._attempts = self._context.attempts()
        #: The names of the stages run on the driver, in the order they finished.
        self.driver_stages: list[str] = []
        #: The stages begun on the driver whose outputs passed ``driver_output_bytes``:
        #: stopped there and run on Spark, in the order they were moved.
        self.moved_stages: list[str] = []
        self.monitoring_infos: dict[str, list[Any]] = {}

    @property
    def spark_started(self) -> bool:
        """Whether this run has obtained a SparkContext (a run of driver stages only has not)."""
        return self._context.started

    @property
    def _sc(self) -> Any:
        return self._spark()

    def _spark(self) -> Any:
        """The SparkContext, started on first need; the calling thread's Spark jobs
        carry the run's job group; refused once the run is cancelled (a cancel while
        the context started cancelled no job of it)."""
        context = self._context.get()
        if self._cancelled.is_set():
            raise RuntimeError("the pipeline was cancelled")
        if not getattr(self._thread_state, "grouped", False):
            context.setJobGroup(self._job_group, "Beam pipeline on PySparkRunner", True)
            self._thread_state.grouped = True
        return context

    @property
    def _partitions(self) -> int:
        """The default parallelism (given, else the context's, known from the master
        without starting it except on a cluster)."""
        with self._lock:
            known = self._partitions_known
        if known is None:
            given = self._partitions_given
            known = max(1, given if given is not None else self._context.parallelism())
            with self._lock:
                self._partitions_known = known
        return known

    def run(self) -> None:
        """Run every stage; raise PipelineFailedError naming the stage that failed."""
        try:
            run_stages(self._plan.stages, self._run_stage, on_thread=self._in_job_group)
        finally:
            self._release()

    def cancel(self) -> None:
        """Cancel the running Spark jobs; no further stage starts."""
        self._cancelled.set()
        if self._context.started:
            self._context.get().cancelJobGroup(self._job_group)

    @property
    def _components(self) -> Any:
        """The pipeline's components as a Spark broadcast, made on first use (a run whose
        Spark stages are all lean never needs it)."""
        with self._lock:
            handle = self._components_handle
        if handle is None:
            handle = self._broadcast(self._plan.components)
            with self._lock:
                if self._components_handle is None:
                    self._components_handle = handle
                handle = self._components_handle
        return handle

    def _in_job_group(self) -> None:
        self._thread_state.grouped = False
        if self._context.started and not self._cancelled.is_set():
            self._spark()

    def _broadcast(self, value: Any) -> Any:
        handle = self._sc.broadcast(value)
        with self._lock:
            self._broadcasts.append(handle)
        return handle

    def _release(self) -> None:
        for rdd in self._persisted:
            rdd.unpersist(blocking=False)
        for handle in self._broadcasts:
            handle.destroy()
        self._persisted.clear()
        self._broadcasts.clear()

    def _run_stage(self, spec: StageSpec) -> None:
        if self._cancelled.is_set():
            raise PipelineFailedError(spec.label, "the pipeline was cancelled")
        if self._on_driver(spec) and self._run_on_driver(spec):
            return
        self._run_on_spark(spec)

    def _run_on_spark(self, spec: StageSpec) -> None:
        columnar = frozenset(
            tid
            for tid, buffer in spec.outputs.items()
            if buffer in self._plan.groups and self._plan.groups[buffer].columnar
        )
        task = functools.partial(
            stage_task,
            spec,
            self._plan.job_id,
            Held(None) if spec.path == LEAN else self._components,
            self._side_data(spec),
            columnar=columnar,
            spill_bytes=self._spill_bytes,
        )
        source = self._input_rdd(spec)
        partitions = source.getNumPartitions()
        limit = self._local_bytes // max(1, partitions)
        report = self._sc.accumulator({}, PartitionReports())
        run = functools.partial(reported_outputs, report, limit, task)
        output = source.mapPartitionsWithIndex(run).persist()
        with self._lock:
            self._persisted.append(output)
        try:
            output._jrdd.count()  # computes and caches it; no second Python pass
        except Exception as err:
            raise PipelineFailedError(spec.label, python_error_message(err)) from None
        reports: dict[int, Report] = dict(report.value)
        if len(reports) != partitions:  # (Spark merges every result task's)
            raise RuntimeError(f"{spec.label}: {len(reports)} partition reports")
        report.value = {}  # (a recomputed block may still report to it)
        held: dict[bytes, list[bytes]] = {b: [] for b in spec.outputs.values()}
        for _, chunks in reports.values():
            for buffer, chunk in chunks or ():
                held[buffer].append(chunk)
        outputs = {}  # (if every partition was small, the cache holds nothing)
        if any(chunks is None for _, chunks in reports.values()):
            outputs = {
                buffer: output.filter(functools.partial(is_buffer, buffer)).values()
                for buffer in set(spec.outputs.values())
            }
        self._record(spec, [s for s, _ in reports.values()], held, outputs)

    def _record(
        self,
        spec: StageSpec,
        metrics: list[bytes],
        held: dict[bytes, list[bytes]],
        rdds: dict[bytes, Any],
    ) -> None:
        """Keep a finished stage's metrics, sizes and outputs (``held`` by the driver,
        or ``rdds`` on Spark)."""
        summaries = [pickle.loads(m) for m in metrics]
        warn_again(w for s in summaries for w in s.warnings)
        responses = [beam_fn_api_pb2.ProcessBundleResponse.FromString(s.metrics) for s in summaries]
        infos = list(consolidate(i for r in responses for i in r.monitoring_infos))
        with self._lock:
            self.monitoring_infos[spec.name] = infos
            self._count_elements(infos)
            for summary in summaries:
                for buffer, size in summary.sizes.items():
                    self._sizes[buffer] += size
            for buffer, chunks in held.items():
                self._held[buffer].extend(chunks)
            for buffer, rdd in rdds.items():
                self._buffers[buffer].append(rdd)

    # --- small stages on the driver (spark_backend.runner.batch.driver_stages) ---------------

    def _held_whole(self, buffer: bytes) -> bool:
        """Whether the driver holds all of ``buffer`` (the impulse, or small outputs; a
        group buffer holds its GroupByKey's input)."""
        with self._lock:
            return buffer == IMPULSE or buffer not in self._buffers

    def _on_driver(self, spec: StageSpec) -> bool:
        """Whether ``spec`` runs on the driver: every input held and small in total, no
        Reshuffle to spread, no splittable restrictions, no text source above the size."""
        if self._local_bytes <= 0 or spec.residual_inputs:
            return False
        if spec.text_source is not None:
            return range_bytes(self._text_ranges(spec)) <= self._local_bytes
        for buffer in spec.inputs.values():
            if not self._held_whole(buffer):
                return False
            group = self._plan.groups.get(buffer)
            if group is not None and group.state_iterable_bytes:
                return False  # its values spill in the Spark task that reads them
            if group is not None and redistributes(group, self._plan.job_id, self._plan.components):
                return False
        with self._lock:
            size = sum(self._sizes.get(b, 0) for b in spec.inputs.values())
        return size <= self._local_bytes

    def _held_records(self, spec: StageSpec) -> list[tuple[str, bytes]]:
        records: list[tuple[str, bytes]] = []
        for transform_id, buffer in spec.inputs.items():
            records.extend((transform_id, c) for p in self._held_parts(buffer) for c in p)
        return records

    def _held_parts(self, buffer: bytes) -> list[list[bytes]]:
        """A held buffer's chunks, in the partitions a Spark stage would read them."""
        if buffer == IMPULSE:
            return [[ENCODED_IMPULSE_VALUE]]
        if buffer.startswith(b"group:"):
            group = self._plan.groups[buffer]
            with self._lock:
                chunks = list(self._held[buffer])
                elements = self._elements.get(group.input_pcollection)
            partitions = self._partitions_for([buffer], elements)
            job, components = self._plan.job_id, self._plan.components
            return group_locally(chunks, group, job, components, partitions)
        with self._lock:
            return [list(self._held[buffer])]

    def _run_on_driver(self, spec: StageSpec) -> bool:
        """Run ``spec`` here; False (nothing recorded) if its outputs passed the cap."""
        side = self._side_data(spec, on_driver=True)
        components = Held(self._plan.components)
        task = functools.partial(
            stage_task,
            spec,
            self._plan.job_id,
            components,
            side,
            self._held_records(spec),
            spill_bytes=self._spill_bytes,
        )
        ran = run_on_driver(spec, task, self._attempts, self._driver_output_bytes)
        if ran is None:
            with self._lock:
                self.moved_stages.append(spec.name)
            return False
        outputs, summary = ran
        self._record(spec, [summary], outputs, {})
        with self._lock:
            self.driver_stages.append(spec.name)
        return True

    def _count_elements(self, infos: Iterable[Any]) -> None:
        for info in infos:
            if info.urn == monitoring_infos.ELEMENT_COUNT_URN:
                pcoll = info.labels.get(monitoring_infos.PCOLLECTION_LABEL)
                if pcoll:
                    self._elements[pcoll] += monitoring_infos.extract_counter_value(info)

    def _side_data(self, spec: StageSpec, on_driver: bool = False) -> Any:
        if not spec.side_inputs:
            return None
        data = {s.buffer_id: self._side_chunks(s.buffer_id) for s in spec.side_inputs}
        return Held(data) if on_driver else self._broadcast(data)

    def _side_chunks(self, buffer: bytes) -> list[bytes]:
        if self._held_whole(buffer):
            with self._lock:
                return list(self._held[buffer])
        return self._chunks(buffer).collect()

    def _chunks(self, buffer: bytes) -> Any:
        """``buffer``'s chunks as one RDD: its Spark parts and the parts the driver holds."""
        with self._lock:
            rdds = list(self._buffers.get(buffer, []))
            held = list(self._held.get(buffer, []))
        if held:
            rdds.append(self._sc.parallelize(held, max(1, min(len(held), self._partitions))))
        if not rdds:
            return self._sc.emptyRDD()
        return rdds[0] if len(rdds) == 1 else self._sc.union(rdds)

    def _text_ranges(self, spec: StageSpec) -> list[TextRange]:
        """A text-reading stage's byte ranges (split once per run)."""
        partitions = self._partitions  # outside the lock: it takes the lock itself
        with self._lock:
            if spec.name not in self._ranges:
                try:
                    slots = task_slots(self._context.master, partitions)
                    self._ranges[spec.name] = split_ranges(spec.text_source, slots)
                except OSError as err:
                    raise PipelineFailedError(spec.label, str(err)) from None
            return self._ranges[spec.name]

    def _ranges_rdd(self, spec: StageSpec) -> Any:
        """A text-reading stage's input: one record per byte range, each a batch of one
        :class:`TextRange` carrying the impulse's timestamp, window and pane."""
        ((tid, coder_id),) = spec.input_coders.items()
        impl = coder_impl(self._plan.job_id, self._plan.components, coder_id)
        impulse = decode([ENCODED_IMPULSE_VALUE], impl)
        ranges = self._text_ranges(spec)
        records = [(tid, impulse.take([0], [r])) for r in ranges]
        return self._sc.parallelize(records, max(1, len(records)))

    def _input_rdd(self, spec: StageSpec) -> Any:
        if spec.text_source is not None:
            return self._ranges_rdd(spec)
        sdf_inputs = set(spec.residual_inputs.values())
        tagged = []
        for transform_id, buffer in spec.inputs.items():
            source = self._source(buffer)
            if transform_id in sdf_inputs:
                source = self._spread(spec.input_coders[transform_id], buffer, source)
            tagged.append(source.map(functools.partial(_tag, transform_id)))
        rdd = tagged[0] if len(tagged) == 1 else self._sc.union(tagged)
        if spec.keyed_input:
            rdd = self._by_key(spec, rdd)
        elif spec.stateful:
            rdd = rdd.coalesce(1)
        return rdd

    def _spread(self, coder_id: str, buffer: bytes, chunks: Any) -> Any:
        """The elements of ``chunks`` one per record, over as many partitions as there
        are elements (at most the default parallelism)."""
        _, pcoll = buffer.decode().split(":", 1)
        partitions = self._partitions  # outside the lock: it takes the lock itself
        with self._lock:
            elements = self._elements.get(pcoll, partitions)
        one_each = functools.partial(_each_element, coder_id, self._plan.job_id, self._components)
        return chunks.flatMap(one_each).repartition(max(1, min(partitions, elements)))

    def _source(self, buffer: bytes) -> Any:
        if buffer == IMPULSE:
            return self._sc.parallelize([ENCODED_IMPULSE_VALUE], 1)
        if buffer.startswith(b"group:"):
            spilled = self._plan.groups[buffer].state_iterable_bytes
            if self._held_whole(buffer) and not spilled:  # grouped here, no shuffle
                parts = self._held_parts(buffer)
                return self._sc.parallelize(parts, len(parts)).flatMap(_identity)
            return self._grouped(self._plan.groups[buffer], buffer)
        return self._chunks(buffer)

    def _partitions_for(self, buffers: Iterable[bytes], elements: int | None) -> int:
        """Default parallelism, at most ``elements`` (when known), at least one
        partition per BYTES_PER_PARTITION of the ``buffers``."""
        with self._lock:
            size = sum(self._sizes.get(b, 0) for b in buffers)
        wanted = self._partitions if elements is None else min(self._partitions, elements)
        return max(1, wanted, -(-size // BYTES_PER_PARTITION))

    def _grouped(self, group: GroupSpec, buffer: bytes) -> Any:
        job, components = self._plan.job_id, self._components
        with self._lock:
            elements = self._elements.get(group.input_pcollection)
        partitions = self._partitions_for([buffer], elements)
        if group.columnar:  # KeyedColumns, one record per (map task, partition)
            split = functools.partial(_split, group, job, components, partitions)
            by_part = self._chunks(buffer).flatMap(split).partitionBy(partitions, _partition)
            return by_part.mapPartitions(functools.partial(_columns, group, job, components))
        pairs = self._chunks(buffer).flatMap(functools.partial(keyed_chunk, group, job, components))
        if group.path == THEORY_ENGINE:  # the engine groups a whole partition by itself
            by_key = pairs.partitionBy(partitions, key_hash)
            return by_key.mapPartitions(functools.partial(_engine, group, job, components))
        if group.state_iterable_bytes:  # a group streams: no per-key list on either side
            by_key = pairs.partitionBy(partitions, key_hash)
            return by_key.mapPartitions(functools.partial(_group_gathered, group, job, components))
        grouped = pairs.groupByKey(partitions, key_hash)
        return grouped.mapPartitions(functools.partial(_group, group, job, components))

    def _by_key(self, spec: StageSpec, rdd: Any) -> Any:
        split = functools.partial(key_tagged, spec, self._plan.job_id, self._components)
        partitions = self._partitions_for(spec.inputs.values(), None)
        keyed = rdd.flatMap(split).partitionBy(partitions, key_hash)
        return keyed.values()


# Task functions: module level, so that Spark pickles them without the executor.


def _tag(transform_id: str, chunk: bytes) -> tuple[str, bytes]:
    return transform_id, chunk


def is_metrics(record: tuple[bytes, bytes]) -> bool:
    """Whether a stage's output record is its metrics record."""
    return record[0] == METRICS


def is_buffer(buffer: bytes, record: tuple[bytes, bytes]) -> bool:
    """Whether a stage's output record belongs to the output buffer ``buffer``."""
    return record[0] == buffer


def stage_task(
    spec: StageSpec,
    job_id: str,
    components: Any,
    side: Any,
    records: Iterable[Any],
    finalize: bool = True,
    *,
    columnar: frozenset[str] = frozenset(),
    spill_bytes: int = SPILL_BYTES,
) -> Iterator[tuple[bytes, Any]]:
    """A stage over one partition; ``finalize``: call bundle finalizers in the task
    (see :func:`~spark_backend.runner.stages.bundles.run_bundle`; a lean stage has none);
    ``columnar``: the transforms whose outputs a lean stage writes as columns;
    ``spill_bytes``: a lean sink's cap on held output (:mod:`.spill`)."""
    if spec.path == LEAN:
        return run_lean_partition(spec.descriptor, spec.outputs, records, columnar, spill_bytes)
    side_data = side.value if side is not None else {}
    return run_partition(spec, job_id, components.value, side_data, records, finalize)


def _identity(part: list[bytes]) -> list[bytes]:
    return part


def keyed_chunk(group: GroupSpec, job_id: str, components: Any, chunk: bytes) -> Any:
    """A GroupByKey's input chunk as (key bytes, element) pairs for the shuffle."""
    return keyed_elements(chunk, group, job_id, components.value)


def _group(group: GroupSpec, job_id: str, components: Any, groups: Any) -> Any:
    return group_partition(groups, group, job_id, components.value)


def _group_gathered(group: GroupSpec, job_id: str, components: Any, pairs: Any) -> Any:
    """Group a partition's ``(key, element)`` pairs, a group at a time, gathered by key
    in bounded memory (:func:`~spark_backend.runner.grouping.key_runs.by_key`)."""
    return group_partition(by_key(pairs), group, job_id, components.value)


def _engine(group: GroupSpec, job_id: str, components: Any, pairs: Any) -> Any:
    return engine_partition(pairs, group, job_id, components.value)


def _split(group: GroupSpec, job_id: str, components: Any, partitions: int, chunk: Any) -> Any:
    return split_columns(chunk, group, job_id, components.value, partitions)


def _partition(partition: int) -> int:
    return partition


def _columns(group: GroupSpec, job_id: str, components: Any, records: Any) -> Any:
    return columns_partition(records, group, job_id, components.value)


def _each_element(coder_id: str, job_id: str, components: Any, chunk: bytes) -> Iterator[bytes]:
    impl = coder(job_id, components.value, coder_id).get_impl()
    for _, encoded in split_elements(chunk, impl):
        yield encoded


def key_tagged(
    spec: StageSpec, job_id: str, components: Any, record: tuple[str, bytes]
) -> Iterator[tuple[bytes, tuple[str, bytes]]]:
    """A stateful stage's tagged input record as (key bytes, (transform id, element)) pairs."""
    transform_id, chunk = record
    element_coder = coder(job_id, components.value, spec.input_coders[transform_id])
    key_impl = element_coder.wrapped_value_coder.key_coder().get_impl()
    for element, encoded in split_elements(chunk, element_coder.get_impl()):
        yield key_impl.encode(element.value[0]), (transform_id, encoded)
