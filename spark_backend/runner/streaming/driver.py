"""Driver side: run a streaming plan as micro-batches on Spark.

Each batch (:class:`Batch`) is what the sources send: under TestStream, one event of one
TestStream (the streams take turns), and the test clock moves only by the
TestStream's processing-time events; a source that sends nothing in a batch keeps its
watermark. Impulses (``beam.Create``) emit in the first batch and then stand at
infinity. When every TestStream has run out, a last batch puts their watermarks at
``MAX_TIMESTAMP``, as a TestStream ends.

In a batch the fused stages' RDDs are built in Beam's order (a stage whose inputs are all
empty is left out) and computed together: one Spark job per batch, or one per level of
GroupByKeys that read each other's output in the batch (the downstream one's input
watermark needs the upstream one's hold first). A GroupByKey's step (:mod:`.grouping`)
runs when it has input or when one of its partitions has a timer the batch's watermark
or clock makes due; its engine state stays in a persisted, key-partitioned RDD between
batches (lineage cut by ``localCheckpoint``). The driver reads back only each stage's
metrics and each partition's summary (hold, next timers, counts), sets the GroupByKey's
``state:pending-windows`` hold in the tracker (:mod:`.watermarks`) and hands the tasks
the next watermarks; it never reads elements. Each batch logs one line (jobs, seconds).
"""

from __future__ import annotations

import functools
import itertools
import logging
import pickle
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.metrics.monitoring_infos import consolidate
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner.execution import ENCODED_IMPULSE_VALUE
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from spark_backend.runner.bundles import METRICS, PartitionSummary
from spark_backend.runner.errors import PipelineFailedError
from spark_backend.runner.executor import _is_buffer, _is_metrics, _keyed, _stage_task
from spark_backend.runner.plan import IMPULSE, GroupSpec, Plan, StageSpec
from spark_backend.runner.spark_errors import python_error_message
from spark_backend.runner.streaming.grouping import (
    OUTPUT,
    SUMMARY,
    BatchTimes,
    GroupSummary,
    group_batch,
    partition_of,
)
from spark_backend.runner.streaming.sources import (
    ELEMENTS,
    PROCESSING_TIME,
    WATERMARK,
    TestStreamSource,
)
from spark_backend.runner.streaming.watermarks import PipelineWatermarks
from spark_backend.runner.task_context import coder
from theory.time import MAX_TIMESTAMP
from theory.windowing.engine import STATE_HOLD

__all__ = ["Batch", "StreamingDriver", "schedule"]

_LOG = logging.getLogger(__name__)

#: Elements of one source in one batch go to at most this many partitions, and each
#: partition gets at least ``_MIN_SOURCE_CHUNK`` of them: a partition is a Python task in
#: every stage the batch runs, so a small batch in many partitions costs far more tasks
#: than elements (measured: a 600-event chapter-3 batch ran 40+ tasks).
_MAX_SOURCE_PARTITIONS: Final[int] = 8
_MIN_SOURCE_CHUNK: Final[int] = 20_000


@dataclass
class Batch:
    """What the sources send in one micro-batch (µs)."""

    number: int
    source: str | None = None  # the TestStream whose event this batch is
    elements: dict[str, tuple[tuple[bytes, int], ...]] = field(default_factory=dict)
    impulses: tuple[str, ...] = ()
    watermarks: dict[str, int] = field(default_factory=dict)
    clock_advance: int = 0


def schedule(
    sources: dict[str, TestStreamSource], impulses: Sequence[str], per_instant: bool = False
) -> Iterator[Batch]:
    """The batches the sources send, numbered from 0: the TestStreams take turns (in the
    order of ``sources``), one event each per batch; the Impulses emit in batch 0; a last
    batch puts every source's watermark at ``MAX_TIMESTAMP``.

    With ``per_instant``, a turn takes instead the longest run of a TestStream's events
    that one batch runs exactly as Beam runs them one by one (:func:`_instant`): a
    processing-time step first, then elements, then watermarks, all at one processing
    time. A TestStream replaying a trace (:func:`beam_pipelines.teststream.trace_events`)
    then sends one batch per distinct arrival time."""
    cursors = {label: 0 for label in sources}
    number = 0
    pending: Batch | None = Batch(0, impulses=tuple(impulses)) if impulses or not sources else None
    while True:
        live = [s for s in sources if cursors[s] < len(sources[s].events)]
        if not live:
            break
        for label in live:
            batch = pending or Batch(number)
            batch.source = label
            pending = None
            source = sources[label]
            cursor = cursors[label]
            cursors[label] = _instant(source, cursor) if per_instant else cursor + 1
            for index in range(cursor, cursors[label]):
                _add_event(batch, source, index)
            yield batch
            number += 1
    last = pending or Batch(number)
    for source in sources.values():
        last.watermarks.update(dict.fromkeys(source.outputs, MAX_TIMESTAMP))
    last.watermarks.update(dict.fromkeys(impulses, MAX_TIMESTAMP))
    yield last


def _instant(source: TestStreamSource, start: int) -> int:
    """The end of the run of events from ``start`` that one batch takes: at most one
    processing-time step, first; then elements; then watermarks (elements after a
    watermark at the same processing time would not be late in one batch, as they are
    in Beam, so they start the next)."""
    end = start + 1
    kinds = [source.events[start][0]]
    while end < len(source.events):
        kind = source.events[end][0]
        if kind == PROCESSING_TIME or (kind == ELEMENTS and WATERMARK in kinds):
            break
        kinds.append(kind)
        end += 1
    return end


def _add_event(batch: Batch, source: TestStreamSource, index: int) -> None:
    kind, payload = source.events[index]
    target = source.target(index)
    if kind == ELEMENTS:
        sent = batch.elements.get(target, ())
        batch.elements[target] = sent + payload  # type: ignore[operator]
    elif kind == WATERMARK:
        batch.watermarks[target] = payload  # type: ignore[assignment]
    else:
        assert kind == PROCESSING_TIME
        batch.clock_advance += payload  # type: ignore[operator]


@dataclass
class _GroupState:
    """A GroupByKey's engine state between batches: the RDD of its last step (state,
    output and summary records; cached, lineage cut) and its partitions' summaries."""

    step: Any = None
    summaries: list[GroupSummary] = field(default_factory=list)

    def hold(self) -> int | None:
        holds = [s.hold for s in self.summaries if s.hold is not None]
        return min(holds) if holds else None

    def due(self, watermark: int, clock: int) -> bool:
        for s in self.summaries:
            if s.next_watermark_timer is not None and s.next_watermark_timer <= watermark:
                return True
            if s.next_processing_timer is not None and s.next_processing_timer <= clock:
                return True
        return False


class StreamingDriver:
    """Runs ``plan`` in micro-batches on ``spark_context`` (see the module docstring)."""

    def __init__(
        self,
        spark_context: Any,
        plan: Plan,
        watermarks: PipelineWatermarks,
        sources: dict[str, TestStreamSource],
        impulses: set[str],
        partitions: int,
        max_batches: int | None = None,
        per_instant: bool = False,
    ) -> None:
        self._sc = spark_context
        self._plan = plan
        self.watermarks = watermarks
        self._sources = sources
        self._per_instant = per_instant
        #: the TestStream feeding each source transform (one per output tag)
        self._outputs = {out: s for s in sources.values() for out in s.outputs}
        self._impulses = sorted(impulses)
        self._partitions = max(1, partitions)
        self._max_batches = max_batches
        self._test_clock = bool(sources)
        self.clock = 0 if self._test_clock else _now()
        self._groups: dict[bytes, _GroupState] = {b: _GroupState() for b in plan.groups}
        labels = {g.label for g in plan.groups.values()}
        self._upstream_groups = {
            g.label: _ancestors(watermarks, g.label) & labels for g in plan.groups.values()
        }
        self._components = spark_context.broadcast(plan.components)
        self._infos: dict[str, list[Any]] = defaultdict(list)
        self.batches_run = 0
        self._jobs = 0
        self._stop = threading.Event()

    # -- control ---------------------------------------------------------------------

    def stop(self) -> None:
        """Stop at the next batch boundary."""
        self._stop.set()

    @property
    def monitoring_infos(self) -> dict[str, list[Any]]:
        """The metrics of every stage, summed over the batches run."""
        return {stage: list(consolidate(infos)) for stage, infos in self._infos.items()}

    @property
    def stalled(self) -> bool:
        """Whether, after the sources ended, a GroupByKey's hold keeps its output below
        infinity (Beam's runners report "pipeline stall")."""
        tracker = self.watermarks.tracker
        return any(
            tracker.output_watermark(g.label) < MAX_TIMESTAMP for g in self._plan.groups.values()
        )

    def run(self, job_group: str) -> None:
        """Run batches until the sources end (or ``max_batches``, or :meth:`stop`), the
        Spark jobs under ``job_group``."""
        self._sc.setJobGroup(job_group, "Beam pipeline on PySparkRunner (streaming)", True)
        try:
            for batch in schedule(self._sources, self._impulses, self._per_instant):
                if self._stop.is_set():
                    return
                if self._max_batches is not None and batch.number >= self._max_batches:
                    return
                self._run_batch(batch)
                self.batches_run += 1
        finally:
            self._release()

    # -- one batch -----------------------------------------------------------------------

    def _run_batch(self, batch: Batch) -> None:
        """Run one batch: build its stages' RDDs lazily, in Beam's order, and collect
        what the driver needs (stage metrics, group summaries) in as few Spark jobs as
        the GroupByKeys' dependencies allow: one, unless a GroupByKey reads another's
        output in the same batch (its input watermark then needs that one's hold)."""
        clock_before = self.clock
        if self._test_clock:
            self.clock += batch.clock_advance
        else:
            self.clock = max(self.clock, _now())
        tracker = self.watermarks.tracker
        run = _BatchRun(
            batch,
            clock_before,
            {g.label: tracker.input_watermark(g.label) for g in self._plan.groups.values()},
        )
        watermarks = dict(batch.watermarks)
        if batch.number == 0:
            # an Impulse has sent its one element once the first batch ran
            watermarks.update(dict.fromkeys(self._impulses, MAX_TIMESTAMP))
        if watermarks:
            tracker.apply(source_watermarks=watermarks)
        started = time.perf_counter()
        jobs = self._jobs
        try:
            for spec in self._plan.stages:
                self._run_stage(spec, run)
            self._sync(run)
        finally:
            for rdd in run.persisted:
                rdd.unpersist(blocking=False)
        self.watermarks.record(self.clock)
        _LOG.info(
            "batch %d: %d Spark job(s) in %.2f s (processing time %d µs)",
            batch.number,
            self._jobs - jobs,
            time.perf_counter() - started,
            self.clock,
        )

    def _run_stage(self, spec: StageSpec, run: _BatchRun) -> None:
        """Add the stage's RDD for this batch (none when all its inputs are empty)."""
        tagged = []
        for transform_id, buffer in spec.inputs.items():
            rdd = self._input(spec, transform_id, buffer, run)
            if rdd is not None:
                tagged.append(rdd.map(functools.partial(_tag, transform_id)))
        if not tagged:
            return
        rdd = tagged[0] if len(tagged) == 1 else self._sc.union(tagged)
        task = functools.partial(_nonempty_stage_task, spec, self._plan.job_id, self._components)
        output = rdd.mapPartitions(task).persist()
        run.persisted.append(output)
        run.pending.append(output.filter(_is_metrics).map(functools.partial(_named, spec.name)))
        for buffer in set(spec.outputs.values()):
            run.buffers[buffer].append(
                output.filter(functools.partial(_is_buffer, buffer)).values()
            )

    def _input(self, spec: StageSpec, transform_id: str, buffer: bytes, run: _BatchRun) -> Any:
        """This batch's RDD of chunks for one data input of a stage, None when empty."""
        if buffer == IMPULSE:
            if transform_id in self._outputs:
                elements = run.batch.elements.get(transform_id)
                if not elements:
                    return None
                return self._source_rdd(spec.input_coders[transform_id], transform_id, elements)
            if transform_id in run.batch.impulses:
                return self._sc.parallelize([ENCODED_IMPULSE_VALUE], 1)
            return None
        if buffer.startswith(b"group:"):
            return self._group_step(buffer, run)
        rdds = run.buffers.get(buffer)
        if not rdds:
            return None
        return rdds[0] if len(rdds) == 1 else self._sc.union(rdds)

    def _source_rdd(
        self, coder_id: str, label: str, elements: tuple[tuple[bytes, int], ...]
    ) -> Any:
        """A TestStream's elements of this batch, as windowed chunks (encoded in tasks)."""
        source = self._outputs[label]
        wanted = -(-len(elements) // _MIN_SOURCE_CHUNK)
        parts = max(1, min(self._partitions, wanted, _MAX_SOURCE_PARTITIONS))
        encode = functools.partial(
            _window_elements, source.coder_id, coder_id, self._plan.job_id, self._components
        )
        return self._sc.parallelize(list(elements), parts).mapPartitions(encode)

    def _group_step(self, buffer: bytes, run: _BatchRun) -> Any:
        """The RDD of the GroupByKey of ``buffer`` for this batch (its output chunks), or
        None when it has no input and nothing due."""
        group: GroupSpec = self._plan.groups[buffer]
        state = self._groups[buffer]
        label = group.label
        if run.unsynced & self._upstream_groups[label]:
            self._sync(run)  # its input watermark depends on their holds
        tracker = self.watermarks.tracker
        before = run.inputs_before.get(label, tracker.input_watermark(label))
        after = tracker.input_watermark(label)
        chunks = run.buffers.get(buffer)
        if not chunks and not state.due(after, self.clock):
            return None
        hold = state.hold()
        times = BatchTimes(
            before,
            after,
            before if hold is None else min(before, hold),
            run.clock_before,
            self.clock,
        )
        job, components = self._plan.job_id, self._components
        parts = []
        if state.step is not None:
            parts.append(state.step.filter(_is_state))
        if chunks:
            raw = chunks[0] if len(chunks) == 1 else self._sc.union(chunks)
            keyed = raw.flatMap(functools.partial(_keyed, group, job, components))
            parts.append(keyed.partitionBy(self._partitions, partition_of))
        rdd = parts[0] if len(parts) == 1 else parts[0].union(parts[1])
        rdd = rdd.partitionBy(self._partitions, partition_of)
        task = functools.partial(_group_task, group, job, components, times)
        out = rdd.mapPartitionsWithIndex(task, preservesPartitioning=True).persist()
        out.localCheckpoint()  # cut the lineage to the previous batches once computed
        run.steps[buffer] = out
        run.unsynced.add(label)
        run.pending.append(out.filter(_is_summary).map(functools.partial(_named, buffer)))
        return out.filter(_is_output).values()

    def _sync(self, run: _BatchRun) -> None:
        """One Spark job computing everything pending; read the stage metrics and the
        group summaries, set the groups' holds."""
        if not run.pending:
            return
        pending = run.pending[0] if len(run.pending) == 1 else self._sc.union(run.pending)
        self._jobs += 1
        try:
            records = pending.collect()
        except Exception as err:
            label = f"(batch {run.batch.number})"
            raise PipelineFailedError(label, python_error_message(err)) from None
        run.pending = []
        summaries: dict[bytes, list[GroupSummary]] = defaultdict(list)
        for name, blob in records:
            if isinstance(name, bytes):
                summaries[name].append(pickle.loads(blob))
            else:
                summary = pickle.loads(blob)
                response = beam_fn_api_pb2.ProcessBundleResponse.FromString(summary.metrics)
                self._infos[name].extend(response.monitoring_infos)
        holds: dict[tuple[str, str], int | None] = {}
        for buffer, step in run.steps.items():
            state = self._groups[buffer]
            if state.step is not None:
                state.step.unpersist(blocking=False)
            state.step = step
            state.summaries = summaries[buffer]
            holds[self._plan.groups[buffer].label, STATE_HOLD] = state.hold()
        run.steps = {}
        run.unsynced = set()
        if holds:
            self.watermarks.tracker.apply(holds=holds)

    def _release(self) -> None:
        for state in self._groups.values():
            if state.step is not None:
                state.step.unpersist(blocking=False)
        self._components.destroy()


@dataclass
class _BatchRun:
    """One batch in progress: its sources' data, the RDDs built and not yet computed."""

    batch: Batch
    clock_before: int
    inputs_before: dict[str, int]  # each GroupByKey's input watermark before the batch
    buffers: dict[bytes, list[Any]] = field(default_factory=lambda: defaultdict(list))
    pending: list[Any] = field(default_factory=list)  # RDDs of (name, summary) records
    persisted: list[Any] = field(default_factory=list)
    steps: dict[bytes, Any] = field(default_factory=dict)  # group steps not yet computed
    unsynced: set[str] = field(default_factory=set)


def _ancestors(watermarks: PipelineWatermarks, label: str) -> set[str]:
    graph = watermarks.graph
    seen: set[str] = set()
    todo = list(graph.upstream(label))
    while todo:
        up = todo.pop()
        if up not in seen:
            seen.add(up)
            todo.extend(graph.upstream(up))
    return seen


def _now() -> int:
    return time.time_ns() // 1000


# Task functions: module level, so that Spark pickles them without the driver.


def _tag(transform_id: str, chunk: bytes) -> tuple[str, bytes]:
    return transform_id, chunk


def _named(name: str | bytes, record: tuple[Any, bytes]) -> tuple[str | bytes, bytes]:
    """A summary record named by its stage (str) or GroupByKey buffer (bytes)."""
    return name, record[1]


def _nonempty_stage_task(
    spec: StageSpec, job_id: str, components: Any, records: Iterable[Any]
) -> Iterator[tuple[bytes, bytes]]:
    """The stage over one partition, or only an empty metrics record for an empty one
    (no bundle: Beam's runners run none without input)."""
    iterator = iter(records)
    first = next(iterator, None)
    if first is None:
        empty = beam_fn_api_pb2.ProcessBundleResponse().SerializeToString()
        return iter([(METRICS, pickle.dumps(PartitionSummary(empty, {})))])
    return _stage_task(spec, job_id, components, None, itertools.chain([first], iterator))


def _is_summary(record: tuple[Any, bytes]) -> bool:
    return record[0] == SUMMARY


def _is_state(record: tuple[Any, bytes]) -> bool:
    return isinstance(record[0], int)


def _is_output(record: tuple[Any, bytes]) -> bool:
    return record[0] == OUTPUT


def _group_task(
    group: GroupSpec,
    job_id: str,
    components: Any,
    times: BatchTimes,
    index: int,
    records: Iterable[Any],
) -> Iterator[Any]:
    return group_batch(group, job_id, components.value, times, index, records)


def _window_elements(
    element_coder_id: str,
    windowed_coder_id: str,
    job_id: str,
    components: Any,
    elements: Iterable[tuple[bytes, int]],
) -> Iterator[bytes]:
    """TestStream elements (encoded, µs) as one chunk of global-window values."""
    element_impl = coder(job_id, components.value, element_coder_id).get_impl()
    windowed_impl = coder(job_id, components.value, windowed_coder_id).get_impl()
    out = create_OutputStream()
    for encoded, micros in elements:
        value: WindowedValue = GlobalWindows.windowed_value(
            element_impl.decode(encoded), timestamp=Timestamp(micros=micros)
        )
        windowed_impl.encode_to_stream(value, out, True)
    yield out.get()
