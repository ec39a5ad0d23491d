"""Task side: one micro-batch of a stateful stage, user state and timers kept per partition.

A stateful stage starts at its stateful DoFn (the plan's ``stateful_roots``), so its data
input is the DoFn's keyed main input; its elements are hash-partitioned by encoded key
(:func:`~spark_backend.runner.streaming.grouping.partition_of`) into the same number of
partitions for the whole run, and each partition keeps its keys' state and timers.

**The state contract** (every kind of per-partition state of the streaming runner, for
checkpoints): between batches a partition's whole state is one record
``(partition index, bytes)`` of a persisted RDD partitioned by ``partition_of``; the
bytes are ``pickle.dumps`` of one object: a :class:`PartitionState` here, a
:class:`theory.windowing.engine.GroupByWindowEngine` for a GroupByKey. Saving a step is
saving those records (a checkpoint writes each object as a :mod:`.codec` document, never
the pickle); restoring is ``parallelize(records).partitionBy(n, partition_of)`` with the
same ``n`` (``--key_partitions``). Nothing else of a step lives in a task.

:class:`PartitionState` holds the user state exactly as Beam's ``StateServicer`` stores
it (encoded ``StateKey`` to encoded values, and the ordered-list index), so every state
kind the SDK builds on it (Bag, CombiningValue, ReadModifyWrite, Set, OrderedList) is
saved alike, and the pending timers, each as the SDK wrote it with its fire and hold
timestamps (µs; Beam's timer coder keeps whole milliseconds).

A batch in a task (:func:`stateful_batch`): one bundle with the batch's elements, then
rounds of due timers until none is due: an event-time timer is due when its fire
timestamp <= the input watermark after the batch, a processing-time timer when it <= the
processing time after the batch. As Beam's direct runner does, the due timers of a round
fire sorted by fire timestamp (ties in the order their slot was first set), a timer
set or cleared in a round counts from the next, and setting a (key, window, family, tag)
again replaces its timer. The partition reports the smallest hold timestamp of its
pending timers (an event-time timer holds at its fire timestamp, a processing-time one
at the timestamp of the input that set it, as the SDK sets them): the driver makes the
minimum over partitions the transform's ``state:timers`` hold.

**Garbage collection** (Beam's rule): after a batch's timer rounds, the user state of a
window is dropped once the input watermark has passed the window's max timestamp plus
the allowed lateness (:meth:`PartitionState.collect_garbage`), so a long run keeps the
state of open windows only; a window with a pending timer keeps its state until the
timer fires (Beam Python lets a timer be set past its window's expiry; its firing then
reads the state, as on BundleBasedDirectRunner). BundleBasedDirectRunner
keeps all state for ever; outputs differ only for input that arrives after its window's
state was dropped.
"""

from __future__ import annotations

import functools
import pickle
from collections import defaultdict
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners import pipeline_context
from apache_beam.runners.portability.fn_api_runner.worker_handlers import StateServicer
from apache_beam.utils import proto_utils

from spark_backend.runner.batch.metric_merge import consolidate
from spark_backend.runner.plan.plan import StageSpec
from spark_backend.runner.stages.bundles import (
    Round,
    TimerKey,
    bundle_worker,
    by_input,
    metrics_record,
    run_bundle,
)
from spark_backend.runner.stages.task_context import coder_impl
from spark_backend.runner.streaming.grouping import SUMMARY, BatchTimes
from theory.time import MAX_TIMESTAMP

__all__ = [
    "TIMER_HOLD",
    "PartitionState",
    "PendingTimer",
    "StatefulSummary",
    "stateful_batch",
    "stateful_label",
    "timer_domains",
]

#: The named hold of a stateful transform: its pending timers' hold timestamps.
TIMER_HOLD: Final[str] = "state:timers"

#: Bound on the timer rounds of one partition in one batch (a timer that sets itself
#: due again would otherwise loop for ever).
MAX_TIMER_ROUNDS: Final[int] = 10_000

#: A pending timer's slot: (transform id, timer family, the timer's identity encoded).
Slot = tuple[str, str, bytes]


@dataclass(frozen=True)
class PendingTimer:
    """A timer set and not yet fired (µs)."""

    fire: int
    hold: int  # the output timestamp: holds the transform's output watermark
    event_time: bool
    encoded: bytes  # the Timer as the SDK wrote it, with the stage's timer coder
    order: int  # when its slot was first set: ties fire in this order


@dataclass
class PartitionState:
    """A stateful stage's state in one partition: picklable, one object (see the module
    docstring for the contract)."""

    user_state: dict[bytes, list[bytes]] = field(default_factory=dict)
    ordered_lists: dict[bytes, list[int]] = field(default_factory=dict)
    timers: dict[Slot, PendingTimer] = field(default_factory=dict)
    next_order: int = 0

    def load_into(self, servicer: StateServicer) -> None:
        """Put the user state into a fresh ``StateServicer``."""
        store: Any = servicer._state  # a defaultdict until a checkpoint, never taken here
        store.update((k, list(v)) for k, v in self.user_state.items())
        for key, starts in self.ordered_lists.items():
            servicer._ordered_list_keys[key].update(starts)

    def save_from(self, servicer: StateServicer) -> None:
        """Take the user state back from ``servicer`` (empty entries dropped)."""
        store: Any = servicer._state
        self.user_state = {k: list(v) for k, v in store.items() if v}
        self.ordered_lists = {k: list(v) for k, v in servicer._ordered_list_keys.items() if v}

    def hold(self) -> int | None:
        return min((t.hold for t in self.timers.values()), default=None)

    def collect_garbage(
        self, expires: Callable[[bytes], int], watermark: int, kept: Container[bytes] = ()
    ) -> int:
        """Drop the user state of every window that expired: its garbage-collection
        time (``expires(encoded window)``: the window's max timestamp + allowed
        lateness, µs) is below ``watermark`` (Beam's rule: state lives until the input
        watermark passes it), unless the window is in ``kept`` (encoded windows with
        a pending timer: Beam Python lets a timer be set past its window's expiry, and
        its firing reads the state). Returns how many state cells went."""
        dropped = 0
        for table in (self.user_state, self.ordered_lists):
            for raw in list(table):
                window = _window_of(raw)
                if expires(window) < watermark and window not in kept:
                    del table[raw]
                    dropped += 1
        return dropped

    def next_expiry(
        self, expires: Callable[[bytes], int], kept: Container[bytes] = ()
    ) -> int | None:
        """The earliest garbage-collection time of a window that holds state and is not
        ``kept`` (µs)."""
        windows = {_window_of(raw) for raw in self.user_state}
        return min((expires(w) for w in windows if w not in kept), default=None)

    def next_fire(self, event_time: bool) -> int | None:
        fires = (t.fire for t in self.timers.values() if t.event_time == event_time)
        return min(fires, default=None)


@dataclass(frozen=True)
class StatefulSummary:
    """What a partition of a stateful stage reports after a batch (µs)."""

    hold: int | None
    next_watermark_timer: int | None
    next_processing_timer: int | None
    timers: int
    fired: int
    #: The earliest garbage-collection time of a window holding state (µs): the step
    #: runs once the input watermark passes it, input or not.
    next_expiry: int | None = None


def stateful_label(spec: StageSpec) -> str:
    """The label of the stage's stateful DoFn (the plan makes it the stage's root)."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    for transform in descriptor.transforms.values():
        if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = proto_utils.parse_Bytes(transform.spec.payload, pb.ParDoPayload)
            if payload.state_specs or payload.timer_family_specs:
                return str(transform.unique_name)
    raise ValueError(f"stage {spec.label!r} has no stateful DoFn")


def timer_domains(spec: StageSpec) -> dict[TimerKey, bool]:
    """Per timer family of the stage, whether it is in event time (else processing)."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    out: dict[TimerKey, bool] = {}
    for transform_id, family in spec.timers:
        payload = proto_utils.parse_Bytes(
            descriptor.transforms[transform_id].spec.payload, pb.ParDoPayload
        )
        domain = payload.timer_family_specs[family].time_domain
        out[transform_id, family] = domain == pb.TimeDomain.EVENT_TIME
    return out


def _window_of(raw: bytes) -> bytes:
    """The encoded window of a user-state cell (its encoded ``StateKey``)."""
    key = beam_fn_api_pb2.StateKey.FromString(raw)
    return bytes(getattr(key, str(key.WhichOneof("type"))).window)


def window_expiry(spec: StageSpec) -> tuple[Callable[[bytes], int], Any]:
    """For the stage's stateful DoFn: a function from an encoded window of its main
    input (as a state key holds it) to its garbage-collection time, the window's max
    timestamp plus the windowing strategy's allowed lateness (µs, ``MAX_TIMESTAMP`` at
    most; the global window expires only when a run's watermark passes its end); and
    the window coder."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    label = stateful_label(spec)
    (transform,) = (t for t in descriptor.transforms.values() if t.unique_name == label)
    (main,) = transform.inputs.values()  # streaming refuses side inputs
    strategy = descriptor.windowing_strategies[descriptor.pcollections[main].windowing_strategy_id]
    window_coder = pipeline_context.PipelineContext(descriptor).coders[strategy.window_coder_id]
    lateness = strategy.allowed_lateness * 1000  # ms in the proto

    @functools.lru_cache(maxsize=4096)
    def expires(encoded: bytes) -> int:
        end = int(window_coder.decode(encoded).max_timestamp().micros)
        return min(end + lateness, MAX_TIMESTAMP)

    return expires, window_coder


def _timer_windows(
    spec: StageSpec, job_id: str, components: bytes, state: PartitionState, window_coder: Any
) -> set[bytes]:
    """The encoded windows of the partition's pending timers."""
    out: set[bytes] = set()
    for (transform_id, family, _), pending in state.timers.items():
        impl = coder_impl(job_id, components, spec.timers[transform_id, family])
        timer = impl.decode_from_stream(create_InputStream(pending.encoded), True)
        out.update(window_coder.encode(w) for w in timer.windows)
    return out


def stateful_batch(
    spec: StageSpec,
    job_id: str,
    components: bytes,
    times: BatchTimes,
    partition: int,
    records: Iterable[tuple[int | bytes, Any]],
) -> Iterator[tuple[Any, bytes]]:
    """One partition's batch: ``records`` are its keyed elements ``(encoded key, (input
    transform id, encoded element))`` and its last batch's output records: of those,
    the state record is taken and the others (whose value is not a tuple) are
    skipped. Yields output chunks ``(buffer, chunk)``, the new state record, the
    metrics record and last ``(SUMMARY, pickled StatefulSummary)``."""
    state = PartitionState()
    elements: list[tuple[str, bytes]] = []
    for key, value in records:
        if isinstance(key, int):
            state = pickle.loads(value)
        elif isinstance(value, tuple):
            elements.append(value)
    servicer = StateServicer()
    state.load_into(servicer)
    domains = timer_domains(spec)
    worker, descriptor_id = bundle_worker(spec, servicer)
    infos: list[Any] = []
    sizes: dict[bytes, int] = defaultdict(int)
    fired = [0]
    try:
        for number, bundle in enumerate(_rounds(spec, state, elements, times, fired)):
            if number > MAX_TIMER_ROUNDS:
                raise RuntimeError(
                    f"{stateful_label(spec)!r}: more than {MAX_TIMER_ROUNDS} timer rounds "
                    "in one batch (a timer that keeps setting itself due?)"
                )
            result = run_bundle(worker, spec, descriptor_id, bundle, number, finalize=False)
            for buffer, chunk in result.outputs:
                sizes[buffer] += len(chunk)
                yield buffer, chunk
            infos.extend(result.response.monitoring_infos)
            _record_timers(spec, job_id, components, state, result.written, domains)
    finally:
        worker.stop_worker()
    state.save_from(servicer)
    expires, window_coder = window_expiry(spec)
    kept = _timer_windows(spec, job_id, components, state, window_coder)
    state.collect_garbage(expires, times.input_after, kept)
    yield partition, pickle.dumps(state, pickle.HIGHEST_PROTOCOL)
    yield metrics_record(consolidate(infos), sizes)
    summary = StatefulSummary(
        state.hold(),
        state.next_fire(True),
        state.next_fire(False),
        len(state.timers),
        fired[0],
        state.next_expiry(expires, kept),
    )
    yield SUMMARY, pickle.dumps(summary)


def _rounds(
    spec: StageSpec,
    state: PartitionState,
    elements: list[tuple[str, bytes]],
    times: BatchTimes,
    fired: list[int],
) -> Iterator[Round]:
    """The bundles of a batch: the elements (if any), then rounds of due timers (each
    round read after the previous one's timers were recorded; ``fired[0]`` counts)."""
    if elements:
        yield Round(data=by_input(spec, elements))
    while True:
        due = sorted(
            (
                (slot, t)
                for slot, t in state.timers.items()
                if t.fire <= (times.input_after if t.event_time else times.clock_after)
            ),
            key=lambda item: (item[1].fire, item[1].order),
        )
        if not due:
            return
        for slot, _ in due:
            del state.timers[slot]
        fired[0] += len(due)
        # one bundle per run of one family in fire order: the SDK reads a bundle's
        # timer streams family by family, so a bundle mixing families would reorder them
        start = 0
        while start < len(due):
            family = due[start][0][:2]
            end = start
            while end < len(due) and due[end][0][:2] == family:
                end += 1
            yield Round(timers={family: b"".join(t.encoded for _, t in due[start:end])})
            start = end


def _record_timers(
    spec: StageSpec,
    job_id: str,
    components: bytes,
    state: PartitionState,
    written: dict[TimerKey, list[bytes]],
    domains: dict[TimerKey, bool],
) -> None:
    """Merge the timers a bundle wrote into the pending ones: a setting replaces its
    slot's timer, a clear removes it (in writing order)."""
    for family, chunks in written.items():
        impl = coder_impl(job_id, components, spec.timers[family])
        for chunk in chunks:
            for timer in impl.decode_all(chunk):
                identity = timer._replace(
                    clear_bit=True, fire_timestamp=None, hold_timestamp=None, paneinfo=None
                )
                slot = (family[0], family[1], impl.encode(identity))
                if timer.clear_bit:
                    state.timers.pop(slot, None)
                    continue
                previous = state.timers.get(slot)
                if previous is not None:
                    order = previous.order
                else:
                    order = state.next_order
                    state.next_order += 1
                out = create_OutputStream()
                impl.encode_to_stream(timer, out, True)
                state.timers[slot] = PendingTimer(
                    int(timer.fire_timestamp.micros),
                    int(timer.hold_timestamp.micros),
                    domains[family],
                    out.get(),
                    order,
                )
