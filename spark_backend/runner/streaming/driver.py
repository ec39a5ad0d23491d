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
the next watermarks; it never reads elements. Each batch shows one line (jobs, seconds):
logged at INFO, or, when logging would not show it, on stderr if that is a terminal.

**Bundle finalizers are never called** (Beam makes them best effort). A task's output is
committed only when the driver commits its batch, after the task has ended; a finalizer
run in the task (Pub/Sub acks) would outlive a retried task or a batch that failed, or a
driver that died, before the commit, and its messages would be lost. The project's Pub/Sub
reader instead sends the acks a committed state owed when that state resumes, in the next
batch (:mod:`beam_pipelines.pubsub_sdf`): acks follow the commit. So that the last
bundle's acks are sent too, a read that ends checkpoints once more and ends in the resume
of that committed state, and a drain's last batch resumes every committed residual once,
truncated by the DoFn's ``truncate`` as Beam's drain does (:mod:`.unbounded`): the
reader's truncated restriction sends what the state owes and reads nothing. A batch that
fails, or a driver that dies, before its commit acks nothing it read: its messages come
back to the subscription (at least once).
"""

from __future__ import annotations

import functools
import itertools
import logging
import pickle
import re
import sys
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from apache_beam.portability.api import beam_fn_api_pb2, metrics_pb2
from apache_beam.runners.portability.fn_api_runner.execution import ENCODED_IMPULSE_VALUE
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue

from spark_backend.runner.batch.executor import (
    is_buffer,
    is_metrics,
    key_tagged,
    keyed_chunk,
    stage_task,
)
from spark_backend.runner.batch.metric_merge import consolidate
from spark_backend.runner.batch.spark_errors import python_error_message
from spark_backend.runner.errors import CheckpointError, PipelineFailedError
from spark_backend.runner.grouping.late_data import (
    METRICS_KEY,
    dropped_counter,
    expired,
    zero_counters,
)
from spark_backend.runner.plan.plan import IMPULSE, LEAN, GroupSpec, Plan, StageSpec
from spark_backend.runner.stages.bundles import METRICS, PartitionSummary
from spark_backend.runner.stages.lean.batch import GLOBAL
from spark_backend.runner.stages.lean.batch import Batch as LeanBatch
from spark_backend.runner.stages.lean.encode import BatchEncoder
from spark_backend.runner.stages.task_context import coder
from spark_backend.runner.streaming.checkpoint import CheckpointStore
from spark_backend.runner.streaming.codec import CodecError, Restorable
from spark_backend.runner.streaming.elements import Elements
from spark_backend.runner.streaming.grouping import (
    OUTPUT,
    SUMMARY,
    BatchTimes,
    group_batch,
    partition_of,
    theory_strategy_of,
)
from spark_backend.runner.streaming.keyed_state import (
    TIMER_HOLD,
    PartitionState,
    stateful_batch,
    stateful_label,
)
from spark_backend.runner.streaming.positions import Position
from spark_backend.runner.streaming.pushback import main_input, pushback_batch, pushback_label
from spark_backend.runner.streaming.side_views import SIDE_HOLD, SideView
from spark_backend.runner.streaming.sinks import BatchSinks
from spark_backend.runner.streaming.sources import (
    ELEMENTS,
    PROCESSING_TIME,
    WATERMARK,
    TestStreamSource,
)
from spark_backend.runner.streaming.unbounded import (
    ESTIMATOR_HOLD,
    Residual,
    SourceSummary,
    sdf_batch,
    sdf_labels,
)
from spark_backend.runner.streaming.watermarks import PipelineWatermarks
from theory.time import MAX_TIMESTAMP
from theory.windowing.engine import STATE_HOLD, GroupByWindowEngine

__all__ = ["Batch", "StreamingDriver", "last_batch", "schedule", "show_progress"]

_LOG = logging.getLogger(__name__)

#: Elements of one source in one batch go to at most this many partitions, and each
#: partition gets at least ``_MIN_SOURCE_CHUNK`` of them: a partition is a Python task in
#: every stage the batch runs, so a small batch in many partitions costs far more tasks
#: than elements (a small chapter-3 batch in many partitions runs dozens of tasks).
_MAX_SOURCE_PARTITIONS: Final[int] = 8
_MIN_SOURCE_CHUNK: Final[int] = 20_000
#: The windows of a TestStream element that carries none of its own.
_GLOBAL_WINDOWS: Final = (GlobalWindow(),)

#: The hold of a stateful or splittable DoFn while its batch runs: its output watermark
#: stays where it was until its tasks report their timers' or residuals' holds.
IN_FLIGHT: Final[str] = "buffer:in-flight"

#: With a real clock, the longest wait for a residual's resume time (µs).
_MAX_WAIT: Final[int] = 1_000_000

#: A CheckpointError raised in a task, as Spark reports it: its one line.
_CHECKPOINT_ERROR: Final = re.compile(r"spark_backend\.runner\.errors\.CheckpointError: ([^\n]*)")


@dataclass
class Batch:
    """What the sources send in one micro-batch (µs)."""

    number: int
    source: str | None = None  # the TestStream whose event this batch is
    elements: dict[str, Elements] = field(default_factory=dict)
    impulses: tuple[str, ...] = ()
    watermarks: dict[str, int] = field(default_factory=dict)
    clock_advance: int = 0
    position: Position | None = None  # the sources after this batch (for checkpoints)
    drain: bool = False  # a drain's last batch: the unbounded reads end in it


def schedule(
    sources: dict[str, TestStreamSource],
    impulses: Sequence[str],
    start: Position | None = None,
    per_instant: bool = False,
) -> Iterator[Batch]:
    """The batches the sources send, numbered from 0 (or from ``start``, the position a
    checkpoint committed): the TestStreams take turns (in the order of ``sources``), one
    event each per batch; the Impulses emit in batch 0; a last batch puts every source's
    watermark at ``MAX_TIMESTAMP``. Each batch carries the position after it: each
    TestStream's next event and the turns it had.

    With ``per_instant``, a turn takes instead the longest run of a TestStream's events
    that one batch runs exactly as Beam runs them one by one (:func:`_instant`): a
    processing-time step first, then elements, then watermarks, all at one processing
    time. A TestStream replaying a trace (:func:`beam_pipelines.teststream.trace_events`)
    then sends one batch per distinct arrival time."""
    start = start or Position(0)
    if start.finished:
        return
    cursors: dict[str, int] = {}
    turns: dict[str, int] = {}
    for label in sources:
        cursors[label], turns[label] = start.sources.get(label, (0, 0))
    number = start.number
    first = number == 0 and (impulses or not sources)
    pending: Batch | None = Batch(0, impulses=tuple(impulses)) if first else None
    while True:
        live = [s for s in sources if cursors[s] < len(sources[s].events)]
        if not live:
            break
        # a turn goes round the live streams in order: the next is the first one that had
        # the fewest turns
        low = min(turns[s] for s in live)
        label = next(s for s in live if turns[s] == low)
        batch = pending or Batch(number)
        batch.source = label
        pending = None
        source = sources[label]
        cursor = cursors[label]
        cursors[label] = _instant(source, cursor) if per_instant else cursor + 1
        turns[label] += 1
        for index in range(cursor, cursors[label]):
            _add_event(batch, source, index)
        number += 1
        batch.position = Position(number, {s: (cursors[s], turns[s]) for s in sources})
        yield batch
    outputs = [out for source in sources.values() for out in source.outputs]
    yield last_batch(pending or Batch(number), outputs, impulses)


def last_batch(batch: Batch, sources: Iterable[str], impulses: Iterable[str]) -> Batch:
    """``batch`` made the run's last: every source's watermark at ``MAX_TIMESTAMP`` (as a
    TestStream ends, or as a drain stops the sources)."""
    batch.watermarks.update(dict.fromkeys(sources, MAX_TIMESTAMP))
    batch.watermarks.update(dict.fromkeys(impulses, MAX_TIMESTAMP))
    batch.position = Position(batch.number + 1, {}, finished=True)
    return batch


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
        sent = batch.elements.get(target)
        batch.elements[target] = payload if sent is None else sent + payload  # type: ignore[assignment, operator]
    elif kind == WATERMARK:
        batch.watermarks[target] = payload  # type: ignore[assignment]
    else:
        assert kind == PROCESSING_TIME
        batch.clock_advance += payload  # type: ignore[operator]


@dataclass
class _StepState:
    """A keyed step's state between batches (a GroupByKey's engines, a stateful stage's
    user state and timers, an unbounded SDF's residuals): the RDD of its last step
    (state, output and summary records; cached, lineage cut; None for an SDF, whose
    residuals the driver keeps) and its partitions' summaries (hold, next timers)."""

    labels: tuple[str, ...]
    hold_name: str
    step: Any = None
    summaries: list[Any] = field(default_factory=list)

    def hold(self) -> int | None:
        holds = [s.hold for s in self.summaries if s.hold is not None]
        return min(holds) if holds else None

    def due(self, watermark: int, clock: int) -> bool:
        """Whether a partition has a timer due, or (a stateful step) a window whose
        state expires, at ``watermark`` and ``clock``."""
        for s in self.summaries:
            expiry = getattr(s, "next_expiry", None)
            if expiry is not None and expiry < watermark:
                return True
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
        checkpoint: CheckpointStore | None = None,
        sinks: BatchSinks | None = None,
        drain: bool = False,
        per_instant: bool = False,
        views: dict[bytes, SideView] | None = None,
        grouping_steps: dict[str, str] | None = None,
    ) -> None:
        self._sc = spark_context
        self._plan = plan
        self.watermarks = watermarks
        self._sources = sources
        self._per_instant = per_instant
        #: the TestStream feeding each source transform (one per output tag)
        self._stream_of = {out: s for s in sources.values() for out in s.outputs}
        self._impulses = sorted(impulses)
        self._partitions = max(1, partitions)
        self._max_batches = max_batches
        self._test_clock = bool(sources)
        self.clock = 0 if self._test_clock else _now()
        self._steps: dict[bytes, _StepState] = {
            b: _StepState((g.label,), STATE_HOLD) for b, g in plan.groups.items()
        }
        #: each side input's contents, kept by the driver (:mod:`.side_views`)
        self._views = views or {}
        for spec in plan.stages:
            if spec.side_inputs:
                self._steps[_pushback_id(spec)] = _StepState((pushback_label(spec),), SIDE_HOLD)
            elif spec.stateful:
                self._steps[_stateful_id(spec)] = _StepState((stateful_label(spec),), TIMER_HOLD)
            elif spec.residual_inputs:
                self._steps[_sdf_id(spec)] = _StepState(tuple(sdf_labels(spec)), ESTIMATOR_HOLD)
        labels = {label for step in self._steps.values() for label in step.labels}
        self._upstream_steps = {label: _ancestors(watermarks, label) & labels for label in labels}
        held = (st for b, st in self._steps.items() if not b.startswith(b"group:"))
        self._held = sorted({label for st in held for label in st.labels})
        self._components = spark_context.broadcast(plan.components)
        self._infos: dict[str, list[Any]] = defaultdict(list)
        #: each GroupByKey's step name for its droppedDueToLateness counter
        #: (:mod:`~spark_backend.runner.grouping.late_data`)
        steps = grouping_steps or {}
        self._late_steps = {b: steps.get(g.label, g.label) for b, g in plan.groups.items()}
        self._infos[METRICS_KEY] = zero_counters(self._late_steps.values())
        self.batches_run = 0
        self._jobs = 0
        self._stop = threading.Event()
        self._checkpoint = checkpoint
        self._sinks = sinks or None
        self.drain = drain  # on a stop (max_batches, stop()), drain rather than halt
        self.drained = False  # whether the run ended by a drain

    # -- control ---------------------------------------------------------------------

    def stop(self, drain: bool = False) -> None:
        """Stop at the next batch boundary; with ``drain`` (or ``--drain``), first run a
        last batch with every source's watermark at ``MAX_TIMESTAMP`` (the sources read
        no more, the unbounded reads resume their residuals once, truncated, and end;
        every pending window fires)."""
        self.drain = self.drain or drain
        self._stop.set()

    @property
    def monitoring_infos(self) -> dict[str, list[Any]]:
        """The metrics of every stage, summed over the batches run."""
        return {stage: list(consolidate(infos)) for stage, infos in self._infos.items()}

    @property
    def stalled(self) -> bool:
        """Whether, after the sources ended, a GroupByKey's hold or a pending event-time
        timer keeps its output below infinity (Beam's runners report "pipeline stall").
        Processing-time timers pending at the end are dropped, as
        BundleBasedDirectRunner drops them: they stall nothing."""
        tracker = self.watermarks.tracker
        return any(
            tracker.output_watermark(label) < MAX_TIMESTAMP
            for step in self._steps.values()
            for label in step.labels
        )

    @property
    def residuals(self) -> list[Residual]:
        """The unbounded reads' pending residuals (their positions) after the last batch."""
        return [
            r
            for step in self._steps.values()
            for s in step.summaries
            if isinstance(s, SourceSummary)
            for r in s.residuals
        ]

    def run(self, job_group: str) -> None:
        """Run batches until the sources end (or ``max_batches``, or :meth:`stop`), the
        Spark jobs under ``job_group``."""
        self._sc.setJobGroup(job_group, "Beam pipeline on PySparkRunner (streaming)", True)
        try:
            start = self._restore()
            number = start.number if start is not None else 0
            for batch in schedule(self._sources, self._impulses, start, self._per_instant):
                if not self._run_one(batch):
                    return
                number = batch.number + 1
            while self.residuals:  # unbounded reads go on until they end or are stopped
                self._wait_for_residuals()
                if not self._run_one(Batch(number)):
                    return
                number += 1
        finally:
            self._release()

    def _run_one(self, batch: Batch) -> bool:
        """Run ``batch`` unless the run is stopped (``max_batches`` counts this process's
        batches, so a restart runs that many more); whether the run goes on. A stop with
        ``drain`` runs one last batch instead, every source at ``MAX_TIMESTAMP``."""
        stopping = self._stop.is_set() or (
            self._max_batches is not None and self.batches_run >= self._max_batches
        )
        if stopping:
            if self.drain:
                sources = [*self._stream_of, *self._impulses]
                self._run_batch(last_batch(Batch(batch.number, drain=True), sources, ()))
                self.batches_run += 1
                self.drained = True
            return False
        self._run_batch(batch)
        self.batches_run += 1
        return True

    def _restore(self) -> Position | None:
        """Take up the checkpoint's last commit (None without one): clock, watermarks,
        metrics, each keyed step's state and summaries (an unbounded read's residuals are
        its summaries); the sources' position to resume from."""
        commit = self._checkpoint.latest if self._checkpoint else None
        if commit is None:
            return None
        assert self._checkpoint is not None
        self.clock = commit.clock if self._test_clock else max(commit.clock, _now())
        self.watermarks = self._checkpoint.watermarks(self.watermarks)
        for stage, infos in commit.metrics.items():
            self._infos[stage] = [metrics_pb2.MonitoringInfo.FromString(i) for i in infos]
        for step_id, state in self._steps.items():
            if state.hold_name != ESTIMATOR_HOLD:  # an SDF's step keeps no state records
                state.step = self._checkpoint.restored(self._sc, step_id, self._loader(step_id))
            state.summaries = self._checkpoint.summaries(step_id) or []
        for buffer, fresh in self._views.items():
            committed = self._checkpoint.summaries(_view_id(buffer))
            try:
                (view,) = committed or []
                self._views[buffer] = fresh.resumed(view)
            except (ValueError, TypeError) as err:
                raise CheckpointError(
                    f"--checkpoint_dir {str(self._checkpoint.directory)!r}: the side view of "
                    f"{fresh.producer!r} in its last commit is damaged ({err})"
                ) from None
        _LOG.info("resuming after batch %d from %s", commit.batch, self._checkpoint.directory)
        return commit.position

    def _loader(self, step_id: bytes) -> Any:
        """How a task makes keyed step ``step_id``'s state from its checkpoint document."""
        if step_id in self._plan.groups:
            group = self._plan.groups[step_id]
            return functools.partial(_engine_from, group, self._plan.job_id, self._components)
        if step_id.startswith(b"pushback:"):
            return _waiting_from
        return _partition_state_from

    def _wait_for_residuals(self) -> None:
        """With a real clock, wait (at most ``_MAX_WAIT``) until a residual may resume."""
        if self._test_clock:
            self.clock = max(self.clock, min(r.resume_at for r in self.residuals))
            return
        wait = min(r.resume_at for r in self.residuals) - _now()
        if wait > 0:
            self._stop.wait(min(wait, _MAX_WAIT) / 1e6)

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
            {label: tracker.input_watermark(label) for label in self._upstream_steps},
        )
        watermarks = dict(batch.watermarks)
        if batch.number == 0:
            # an Impulse has sent its one element once the first batch ran
            watermarks.update(dict.fromkeys(self._impulses, MAX_TIMESTAMP))
        in_flight = {(label, IN_FLIGHT): tracker.output_watermark(label) for label in self._held}
        tracker.apply(source_watermarks=watermarks, holds=in_flight)
        started = time.perf_counter()
        jobs = self._jobs
        if self._sinks:
            self._sinks.begin(batch.number)
        try:
            for spec in self._plan.stages:
                self._run_stage(spec, run)
            self._sync(run)
        finally:
            for rdd in run.persisted:
                rdd.unpersist(blocking=False)
        tracker.apply(holds=dict.fromkeys(in_flight))  # steps that did not run
        if (batch.position is None or batch.position.finished) and not self.residuals:
            self._drop_processing_timers()  # the run's last batch
        self.watermarks.record(self.clock)
        if self._sinks:
            self._sinks.commit(batch.number)
        if self._checkpoint is not None:
            self._commit(batch)
        show_progress(
            "batch %d: %d Spark job(s) in %.2f s (processing time %d µs)",
            batch.number,
            self._jobs - jobs,
            time.perf_counter() - started,
            self.clock,
        )

    def _drop_processing_timers(self) -> None:
        """At the end of the run (every source done), release the ``state:timers`` hold
        of each stateful step whose input watermark is at ``MAX_TIMESTAMP`` and whose
        pending timers are all in processing time: they would never fire, and
        BundleBasedDirectRunner drops them too, ending DONE rather than stalled."""
        tracker = self.watermarks.tracker
        holds: dict[tuple[str, str], int | None] = {}
        for state in self._steps.values():
            if state.hold_name != TIMER_HOLD or any(
                s.next_watermark_timer is not None for s in state.summaries
            ):
                continue
            pending = sum(s.timers for s in state.summaries)
            for label in state.labels:
                if pending and tracker.input_watermark(label) == MAX_TIMESTAMP:
                    holds[label, TIMER_HOLD] = None
                    _LOG.info(
                        "%s: %d processing-time timer(s) pending at the end dropped",
                        label,
                        pending,
                    )
        if holds:
            tracker.apply(holds=holds)

    def _commit(self, batch: Batch) -> None:
        """Commit ``batch`` to the checkpoint: every keyed step's summaries (an unbounded
        read's residuals among them); a batch past the schedule (residuals only) keeps the
        finished position."""
        assert self._checkpoint is not None
        position = batch.position or Position(batch.number + 1, {}, finished=True)
        infos = self.monitoring_infos
        self._infos = defaultdict(list, infos)  # consolidated: a commit's size stays flat
        summaries: dict[bytes | str, list[Any]] = {
            step_id: state.summaries for step_id, state in self._steps.items()
        }
        for buffer, view in self._views.items():  # the side inputs' contents
            self._checkpoint.keeping(_view_id(buffer), batch.number)
            summaries[_view_id(buffer)] = [view]
        self._checkpoint.commit(
            batch.number, position, self.clock, self.watermarks, summaries, infos
        )

    def _run_stage(self, spec: StageSpec, run: _BatchRun) -> None:
        """Add the stage's RDD for this batch (none when all its inputs are empty and it
        has nothing due)."""
        tagged = []
        for transform_id, buffer in spec.inputs.items():
            rdd = self._input(spec, transform_id, buffer, run)
            if rdd is not None:
                tagged.append(rdd.map(functools.partial(_tag, transform_id)))
        if spec.side_inputs:
            self._pushback_stage(spec, tagged, run)
            return
        if spec.stateful:
            self._stateful_stage(spec, tagged, run)
            return
        if spec.residual_inputs:
            self._sdf_stage(spec, tagged, run)
            return
        if not tagged:
            return
        rdd = tagged[0] if len(tagged) == 1 else self._sc.union(tagged)
        task = functools.partial(_nonempty_stage_task, spec, self._plan.job_id, self._components)
        if self._sinks:
            out = rdd.mapPartitionsWithIndex(self._sinks.task(run.batch.number, spec.name, task))
        else:
            out = rdd.mapPartitions(task)
        # a stage that writes no buffer (a sink) is read once, by the metrics: its task
        # then runs in the same Python worker as that read, not cached between them
        self._outputs(spec, out.persist() if spec.outputs else out, run)

    def _outputs(self, spec: StageSpec, output: Any, run: _BatchRun, kept: bool = False) -> None:
        """Register a stage's output RDD: its metrics pending, its buffers; released after
        the batch unless ``kept`` (a stateful step's, holding its state for the next)."""
        if not kept and output.is_cached:
            run.persisted.append(output)
        run.pending.append(output.filter(is_metrics).map(functools.partial(_named, spec.name)))
        for buffer in set(spec.outputs.values()):
            run.buffers[buffer].append(output.filter(functools.partial(is_buffer, buffer)).values())

    def _times(self, step: _StepState, run: _BatchRun) -> BatchTimes:
        """The times of a keyed step for this batch, once its upstream steps synced."""
        (label,) = step.labels
        if run.unsynced & self._upstream_steps[label]:
            self._sync(run)  # its input watermark depends on their holds
        tracker = self.watermarks.tracker
        before = run.inputs_before.get(label, tracker.input_watermark(label))
        after = tracker.input_watermark(label)
        hold = step.hold()
        output_before = before if hold is None else min(before, hold)
        return BatchTimes(before, after, output_before, run.clock_before, self.clock)

    def _with_state(self, step: _StepState, keyed: Any) -> Any:
        """The step's last output (its state records among them; the task skips the
        others: a filter here would be one more Python worker per partition) and its
        keyed input (if any), partitioned alike: each task gets its partition's state
        and keys."""
        parts = [] if step.step is None else [step.step]
        if keyed is not None:
            parts.append(keyed.partitionBy(self._partitions, partition_of))
        # RDD.union of two RDDs with one partitioner keeps it: the state is not moved
        rdd = parts[0] if len(parts) == 1 else parts[0].union(parts[1])
        return rdd.partitionBy(self._partitions, partition_of)

    def _idle(self, step: _StepState) -> None:
        """A held step that does not run in this batch: its output may move at once."""
        self.watermarks.tracker.apply(holds={(label, IN_FLIGHT): None for label in step.labels})

    def _stateful_stage(self, spec: StageSpec, tagged: list[Any], run: _BatchRun) -> None:
        """A stateful stage's batch (:mod:`.keyed_state`): its keyed input and its
        partitions' state records, partitioned alike, one task per partition."""
        step_id = _stateful_id(spec)
        step = self._steps[step_id]
        times = self._times(step, run)
        if not tagged and not step.due(times.input_after, self.clock):
            self._idle(step)
            return
        job, components = self._plan.job_id, self._components
        keyed = None
        if tagged:
            rdd = tagged[0] if len(tagged) == 1 else self._sc.union(tagged)
            keyed = rdd.flatMap(functools.partial(key_tagged, spec, job, components))
        rdd = self._with_state(step, keyed)
        task = functools.partial(_keyed_task, stateful_batch, spec, job, components, times)
        if self._sinks:  # a sink fused after the stateful DoFn writes in this stage
            task = self._sinks.keyed_task(run.batch.number, spec.name, task)
        out = self._keyed_run(step_id, rdd, task, run)
        run.unsynced.update(step.labels)
        run.pending.append(out.filter(_is_summary).map(functools.partial(_named, step_id)))
        self._outputs(spec, out, run, kept=True)

    def _pushback_stage(self, spec: StageSpec, tagged: list[Any], run: _BatchRun) -> None:
        """A ParDo with side inputs (:mod:`.pushback`): its new main elements and those
        still waiting, partitioned alike, run against the side views the driver holds;
        the ones whose side windows are not ready wait in the partitions' state."""
        step_id = _pushback_id(spec)
        step = self._steps[step_id]
        waiting = any(s.waiting for s in step.summaries)
        if tagged or waiting or any(run.buffers.get(s.buffer_id) for s in spec.side_inputs):
            readiness = self._side_readiness(spec, run)  # side data is taken in any case
        if not tagged and not waiting:
            self._idle(step)
            return
        side = {s.buffer_id: [self._views[s.buffer_id].chunk()] for s in spec.side_inputs}
        job, components = self._plan.job_id, self._components
        keyed = None
        if tagged:
            rdd = tagged[0] if len(tagged) == 1 else self._sc.union(tagged)
            keyed = rdd.map(_spread_chunk)
        rdd = self._with_state(step, keyed)
        task = functools.partial(
            _pushback_task,
            spec,
            job,
            components,
            main_input(spec),
            readiness,
            self._sc.broadcast(side),
        )
        if self._sinks:  # a sink fused after the ParDo writes in this stage
            task = self._sinks.keyed_task(run.batch.number, spec.name, task)
        out = self._keyed_run(step_id, rdd, task, run)
        run.unsynced.update(step.labels)
        run.pending.append(out.filter(_is_summary).map(functools.partial(_named, step_id)))
        self._outputs(spec, out, run, kept=True)

    def _side_readiness(self, spec: StageSpec, run: _BatchRun) -> dict[str, Any]:
        """Each side input's readiness for this batch, by tag: first the side
        PCollections' chunks of this batch are collected into their views (one Spark job,
        after the holds upstream of them synced)."""
        self._sync(run)
        tracker = self.watermarks.tracker
        readiness = {}
        for side in spec.side_inputs:
            view = self._views[side.buffer_id]
            if side.buffer_id not in run.viewed:
                run.viewed.add(side.buffer_id)
                chunks = []
                rdds = run.buffers.get(side.buffer_id)
                if rdds:
                    rdd = rdds[0] if len(rdds) == 1 else self._sc.union(rdds)
                    self._jobs += 1
                    chunks = rdd.collect()
                watermark = tracker.output_watermark(view.producer)
                job, components = self._plan.job_id, self._plan.components
                view.update(chunks, watermark, self.clock, job, components)
            readiness[side.tag] = view.readiness(tracker.output_watermark(view.producer))
        return readiness

    def _sdf_stage(self, spec: StageSpec, tagged: list[Any], run: _BatchRun) -> None:
        """An unbounded SDF stage's batch (:mod:`.unbounded`): new restrictions and the
        residuals due by now, one bundle per partition; the rest wait on the driver. In
        a drain's last batch every residual runs, truncated, and none is kept."""
        step_id = _sdf_id(spec)
        step = self._steps[step_id]
        residuals = [r for s in step.summaries for r in s.residuals]
        drain = run.batch.drain
        due = [r for r in residuals if drain or r.resume_at <= self.clock]
        waiting = tuple(r for r in residuals if not drain and r.resume_at > self.clock)
        if due:
            parts = max(1, min(self._partitions, len(due)))
            records = [(r.input_id, r.element) for r in due]
            tagged = [*tagged, self._sc.parallelize(records, parts)]
        if not tagged:
            self._idle(step)
            return
        rdd = tagged[0] if len(tagged) == 1 else self._sc.union(tagged)
        task = functools.partial(
            _sdf_task, spec, self._plan.job_id, self._components, self.clock, drain
        )
        if self._checkpoint is not None:
            self._checkpoint.keeping(step_id, run.batch.number)
        if self._sinks:  # a sink fused after the read writes in this stage
            out = rdd.mapPartitionsWithIndex(
                self._sinks.task(run.batch.number, spec.name, task)
            ).persist()
        else:
            out = rdd.mapPartitions(task).persist()
        run.steps[step_id] = None
        run.carried[step_id] = SourceSummary(waiting)
        run.unsynced.update(step.labels)
        run.pending.append(out.filter(_is_summary).map(functools.partial(_named, step_id)))
        self._outputs(spec, out, run)

    def _input(self, spec: StageSpec, transform_id: str, buffer: bytes, run: _BatchRun) -> Any:
        """This batch's RDD of chunks for one data input of a stage, None when empty."""
        if buffer == IMPULSE:
            if transform_id in self._stream_of:
                elements = run.batch.elements.get(transform_id)
                if not elements:
                    return None
                # a lean stage with this one input takes the batch as it is, in-task
                columnar = spec.path == LEAN and len(spec.inputs) == 1
                own = self._stream_of[transform_id].own_windows
                return self._source_rdd(spec.input_coders[transform_id], elements, columnar, own)
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
        self, coder_id: str, elements: Elements, columnar: bool, own_windows: bool = False
    ) -> Any:
        """A TestStream's elements of this batch, one pickled slice per partition, as
        windowed chunks encoded with ``coder_id`` or (``columnar``) lean batches, made in
        tasks; ``own_windows``: some of its values are ``WindowedValue``\\ s that keep
        their windows and panes."""
        wanted = -(-len(elements) // _MIN_SOURCE_CHUNK)
        parts = max(1, min(self._partitions, wanted, _MAX_SOURCE_PARTITIONS))
        encode = functools.partial(
            _source_elements, coder_id, self._plan.job_id, self._components, columnar, own_windows
        )
        return self._sc.parallelize(elements.blobs(parts), parts).mapPartitions(encode)

    def _keyed_run(self, step_id: bytes, rdd: Any, task: Any, run: _BatchRun) -> Any:
        """The keyed step's output RDD for this batch: ``task`` over the partitions of its
        input and state (``rdd``), saved by the checkpoint when there is one, persisted
        with its lineage cut, and kept as the step's last output."""
        if self._checkpoint is not None:
            task = self._checkpoint.saving(step_id, run.batch.number, task)
        out = rdd.mapPartitionsWithIndex(task, preservesPartitioning=True).persist()
        out.localCheckpoint()  # cut the lineage to the previous batches once computed
        run.steps[step_id] = out
        return out

    def _group_step(self, buffer: bytes, run: _BatchRun) -> Any:
        """The RDD of the GroupByKey of ``buffer`` for this batch (its output chunks), or
        None when it has no input and nothing due."""
        group: GroupSpec = self._plan.groups[buffer]
        state = self._steps[buffer]
        label = group.label
        times = self._times(state, run)
        chunks = run.buffers.get(buffer)
        if not chunks and not state.due(times.input_after, self.clock):
            return None
        job, components = self._plan.job_id, self._components
        keyed = None
        if chunks:
            raw = chunks[0] if len(chunks) == 1 else self._sc.union(chunks)
            keyed = raw.flatMap(functools.partial(keyed_chunk, group, job, components))
        rdd = self._with_state(state, keyed)
        task = functools.partial(_keyed_task, group_batch, group, job, components, times)
        out = self._keyed_run(buffer, rdd, task, run)
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
            damaged = _CHECKPOINT_ERROR.search(str(err))
            if damaged:  # a task read a damaged part of the checkpoint
                raise CheckpointError(damaged.group(1)) from None
            label = f"(batch {run.batch.number})"
            raise PipelineFailedError(label, python_error_message(err)) from None
        run.pending = []
        summaries: dict[bytes, list[Any]] = defaultdict(list)
        for name, blob in records:
            if isinstance(name, bytes):
                summaries[name].append(pickle.loads(blob))
            else:
                summary = pickle.loads(blob)
                response = beam_fn_api_pb2.ProcessBundleResponse.FromString(summary.metrics)
                self._infos[name].extend(response.monitoring_infos)
        holds: dict[tuple[str, str], int | None] = {}
        for step_id, step in run.steps.items():
            state = self._steps[step_id]
            if state.step is not None:
                state.step.unpersist(blocking=False)
            state.step = step
            if step_id in self._late_steps:
                late = expired(summaries[step_id])
                if late > 0:
                    counter = dropped_counter(self._late_steps[step_id], late)
                    self._infos[METRICS_KEY].append(counter)
            state.summaries = summaries[step_id]
            if step_id in run.carried:
                state.summaries.append(run.carried.pop(step_id))
            for label in state.labels:
                holds[label, state.hold_name] = state.hold()
                if label in self._held:
                    holds[label, IN_FLIGHT] = None
        run.steps = {}
        run.unsynced = set()
        if holds:
            self.watermarks.tracker.apply(holds=holds)

    def _release(self) -> None:
        for state in self._steps.values():
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
    steps: dict[bytes, Any] = field(default_factory=dict)  # keyed steps not yet computed
    unsynced: set[str] = field(default_factory=set)
    carried: dict[bytes, SourceSummary] = field(default_factory=dict)  # waiting residuals
    viewed: set[bytes] = field(default_factory=set)  # side buffers added to their views


def show_progress(message: str, *args: Any) -> None:
    """One micro-batch's progress line (``message % args``, kept apart in the log record
    for whoever parses it): logged at INFO when logging shows it, else on stderr when
    stderr is a terminal (a run shows its progress by default), else nowhere."""
    if _LOG.isEnabledFor(logging.INFO):
        _LOG.info(message, *args)
        return
    line = message % args
    stream = sys.stderr
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        print(f"PySparkRunner {line}", file=stream, flush=True)


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


def _stateful_id(spec: StageSpec) -> bytes:
    return b"stateful:" + spec.name.encode()


def _sdf_id(spec: StageSpec) -> bytes:
    return b"sdf:" + spec.name.encode()


def _pushback_id(spec: StageSpec) -> bytes:
    return b"pushback:" + spec.name.encode()


def _view_id(buffer: bytes) -> bytes:
    return b"view:" + buffer


# Task functions: module level, so that Spark pickles them without the driver.


def _engine_from(group: GroupSpec, job_id: str, components: Any, document: Any) -> Any:
    """A GroupByKey partition's engine: its windowing strategy from the pipeline, its
    state from the checkpoint's ``document``."""
    if not isinstance(document, Restorable):
        raise CodecError(f"holds a {type(document).__name__} where an engine's state belongs")
    strategy = theory_strategy_of(group, job_id, components.value)
    return document.into(GroupByWindowEngine(strategy))


def _partition_state_from(document: Any) -> Any:
    if not isinstance(document, PartitionState):
        raise CodecError(f"holds a {type(document).__name__} where user state belongs")
    return document


def _waiting_from(document: Any) -> Any:
    if not isinstance(document, list) or not all(type(e) is bytes for e in document):
        raise CodecError("holds no list of waiting elements")
    return document


def _tag(transform_id: str, chunk: bytes) -> tuple[str, bytes]:
    return transform_id, chunk


def _named(name: str | bytes, record: tuple[Any, bytes]) -> tuple[str | bytes, bytes]:
    """A summary record named by its stage (str) or GroupByKey buffer (bytes)."""
    return name, record[1]


def _nonempty_stage_task(
    spec: StageSpec, job_id: str, components: Any, records: Iterable[Any]
) -> Iterator[tuple[bytes, bytes]]:
    """The stage over one partition, or only an empty metrics record for an empty one
    (no bundle: Beam's runners run none without input). Bundle finalizers are not
    called (see the module docstring)."""
    iterator = iter(records)
    first = next(iterator, None)
    if first is None:
        empty = beam_fn_api_pb2.ProcessBundleResponse().SerializeToString()
        return iter([(METRICS, pickle.dumps(PartitionSummary(empty, {})))])
    records = itertools.chain([first], iterator)
    return stage_task(spec, job_id, components, None, records, finalize=False)


def _is_summary(record: tuple[Any, bytes]) -> bool:
    return record[0] == SUMMARY


def _is_output(record: tuple[Any, bytes]) -> bool:
    return record[0] == OUTPUT


def _keyed_task(
    batch: Any,
    spec: GroupSpec | StageSpec,
    job_id: str,
    components: Any,
    times: BatchTimes,
    index: int,
    records: Iterable[Any],
) -> Iterator[Any]:
    """A keyed step's partition: ``batch`` is :func:`group_batch` or
    :func:`stateful_batch`."""
    return batch(spec, job_id, components.value, times, index, records)


def _spread_chunk(record: tuple[str, bytes]) -> tuple[int, tuple[str, bytes]]:
    """A main-input chunk keyed to spread chunks over the partitions."""
    return zlib.crc32(record[1]), record


def _pushback_task(
    spec: StageSpec,
    job_id: str,
    components: Any,
    main: str,
    readiness: dict[str, Any],
    side: Any,
    index: int,
    records: Iterable[Any],
) -> Iterator[Any]:
    return pushback_batch(
        spec, job_id, components.value, main, readiness, side.value, index, records
    )


def _sdf_task(
    spec: StageSpec,
    job_id: str,
    components: Any,
    clock: int,
    drain: bool,
    records: Iterable[Any],
) -> Iterator[Any]:
    return sdf_batch(spec, job_id, components.value, clock, records, drain)


def _source_elements(
    windowed_coder_id: str,
    job_id: str,
    components: Any,
    columnar: bool,
    own_windows: bool,
    blobs: Iterable[bytes],
) -> Iterator[Any]:
    """A partition of a TestStream's elements (:meth:`Elements.blobs`) as global-window
    values (``own_windows``: a ``WindowedValue`` keeps its windows and pane): one lean
    :class:`~spark_backend.runner.stages.lean.batch.Batch` for a lean stage reading them
    in the same task (``columnar``), else one chunk encoded with the stage's windowed
    coder."""
    for blob in blobs:
        values, micros = Elements.unblob(blob)
        if not values:
            continue
        if own_windows:
            batch = _own_windows_batch(values, micros)
        else:
            batch = LeanBatch(values, micros, GLOBAL, PANE_INFO_UNKNOWN)
        if columnar:
            yield batch
        else:
            yield BatchEncoder(coder(job_id, components.value, windowed_coder_id)).encode(batch)


def _own_windows_batch(values: list[Any], micros: Any) -> LeanBatch:
    """Values of which the ``WindowedValue``\\ s keep their windows and panes (their
    timestamps are ``micros``'), the others in the global window."""
    windows = [v.windows if type(v) is WindowedValue else _GLOBAL_WINDOWS for v in values]
    panes = [v.pane_info if type(v) is WindowedValue else PANE_INFO_UNKNOWN for v in values]
    plain = [v.value if type(v) is WindowedValue else v for v in values]
    return LeanBatch(plain, micros, windows, panes)
