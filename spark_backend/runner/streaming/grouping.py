"""Task side: one micro-batch of a GroupByKey, decided by theory's engine, state kept per
partition.

A GroupByKey's keys are hash-partitioned (crc32 of the encoded key, as in batch) into a
fixed number of partitions for the whole run. Partition ``p`` keeps one
:class:`theory.windowing.engine.GroupByWindowEngine` for its keys; between batches it is a
pickled record ``(p, bytes)`` of a persisted RDD with the same partitioner, so the union
of that state and the batch's keyed input gives each task its engine and its keys'
elements without moving the state (:func:`group_batch`).

The driver hands every task the same :class:`BatchTimes`: the input watermark before and
after the batch, the output watermark at its start (computed from every partition's hold,
so a partition's engine decides holds and pane timing with the stage's watermark, not its
own), and processing time before and after. A task then, in this order: advances
processing time, adds the batch's elements (one engine batch), advances the input
watermark; the panes fired go out encoded as Beam's GroupByKey output
(``KV<K, Iterable<V>>`` with the pane's window, timestamp and PaneInfo). Keys and
values stay encoded inside the engine.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.transforms import window as bw
from apache_beam.utils import windowed_value
from apache_beam.utils.timestamp import Timestamp

from beam_pipelines.convert import to_theory
from spark_backend.runner.plan.plan import GroupSpec
from spark_backend.runner.stages.task_context import coder, coder_impl, windowing
from theory.time import END_OF_GLOBAL_WINDOW, MIN_TIMESTAMP
from theory.windowing.engine import GroupByWindowEngine, Pane, Timing
from theory.windowing.windows import GlobalWindow

__all__ = [
    "OUTPUT",
    "SUMMARY",
    "BatchTimes",
    "GroupSummary",
    "group_batch",
    "partition_of",
    "theory_strategy_of",
]

#: Record keys of a group task's output besides the state records ``(partition, bytes)``.
OUTPUT: Final[str] = "output"
SUMMARY: Final[str] = "summary"

_TIMING = {
    Timing.EARLY: windowed_value.PaneInfoTiming.EARLY,
    Timing.ON_TIME: windowed_value.PaneInfoTiming.ON_TIME,
    Timing.LATE: windowed_value.PaneInfoTiming.LATE,
    Timing.UNKNOWN: windowed_value.PaneInfoTiming.UNKNOWN,
}


def partition_of(key: int | bytes) -> int:
    """The partition hash of a record key: a state record's partition index as it is, an
    encoded key by crc32 (the same in every process)."""
    return key if isinstance(key, int) else zlib.crc32(key)


@dataclass(frozen=True)
class BatchTimes:
    """What the driver tells every task of a GroupByKey for one batch (µs)."""

    input_before: int
    input_after: int
    output_before: int  # min(input_before, every partition's hold): not latched (Beam's)
    clock_before: int
    clock_after: int


@dataclass(frozen=True)
class GroupSummary:
    """What a partition reports after a batch (µs): its hold, a lower bound of its next
    timer per domain, and counts."""

    hold: int | None
    next_watermark_timer: int | None
    next_processing_timer: int | None
    panes: int
    windows: int
    dropped: dict[str, int]
    late_elements: int
    #: (element, window) pairs dropped as expired in this batch (``droppedDueToLateness``)
    expired_in_batch: int = 0


def theory_strategy_of(group: GroupSpec, job_id: str, components: bytes) -> Any:
    """The theory windowing strategy of a GroupByKey (ValueError names what has none).
    Beam checked the strategy when the pipeline was built (unsafe triggers refused unless
    ``--allow_unsafe_triggers``), so theory does not check it again."""
    strategy = windowing(job_id, components, group.windowing_strategy_id)
    return to_theory(strategy, allow_unsafe_triggers=True)


def group_batch(
    group: GroupSpec,
    job_id: str,
    components: bytes,
    times: BatchTimes,
    partition: int,
    records: Iterable[tuple[int | bytes, bytes]],
) -> Iterator[tuple[int | str, bytes]]:
    """One partition's batch: ``records`` are its keyed elements ``(encoded key,
    encoded windowed KV)`` and its last batch's output records: of those, the state
    record is taken and the others (keyed by a str) are skipped. Yields the new state
    record, the output chunks ``(OUTPUT, chunk)`` and last ``(SUMMARY, pickled
    GroupSummary)``."""
    engine: GroupByWindowEngine | None = None
    keys: list[bytes] = []
    encoded: list[bytes] = []
    for key, value in records:
        if isinstance(key, int):
            engine = pickle.loads(value)
        elif isinstance(key, str):
            continue
        else:
            keys.append(key)
            encoded.append(value)
    if engine is None:
        engine = GroupByWindowEngine(theory_strategy_of(group, job_id, components))
        engine.processing_time = times.clock_before
    expired_before = engine.dropped["expired"]
    # A batch starts with its clock step (a TestStream's processing-time event comes
    # before the elements and watermarks of its instant), then its elements, then its
    # watermark: processing-time timers due by then fire before the elements are added.
    panes = _advance(engine, times.input_before, times.clock_after)
    if encoded:
        panes += _add(engine, group, job_id, components, keys, encoded, times.output_before)
    panes += _advance(engine, times.input_after, times.clock_after)
    if panes:
        yield from ((OUTPUT, chunk) for chunk in _encode(panes, group, job_id, components))
    yield partition, pickle.dumps(engine, pickle.HIGHEST_PROTOCOL)
    next_watermark, next_processing = engine.next_timers()
    summary = GroupSummary(
        engine.min_hold_value(),
        next_watermark,
        next_processing,
        len(panes),
        engine.pending_windows(),
        dict(engine.dropped),
        engine.late_elements,
        engine.dropped["expired"] - expired_before,
    )
    yield SUMMARY, pickle.dumps(summary)


def _advance(engine: GroupByWindowEngine, watermark: int, clock: int) -> list[Pane]:
    panes: list[Pane] = []
    if watermark > engine.input_watermark:
        panes += engine.advance_watermark_to(watermark)
    if clock > engine.processing_time:
        panes += engine.advance_processing_time(clock - engine.processing_time)
    return panes


def _add(
    engine: GroupByWindowEngine,
    group: GroupSpec,
    job_id: str,
    components: bytes,
    keys: list[bytes],
    encoded: list[bytes],
    output_watermark: int,
) -> list[Pane]:
    """Add the batch's elements as one engine batch, with the stage's output watermark.
    Each element goes into the windows it carries, as Beam's GroupByKey groups them
    (not windows assigned again from its timestamp: the coder rounded that to whole
    milliseconds toward zero, and a lifted accumulator is stamped at its window's
    ``max_timestamp``, which that rounding can move into the next window)."""
    input_coder = coder(job_id, components, group.input_coder_id)
    input_impl = input_coder.get_impl()
    value_impl = input_coder.wrapped_value_coder.value_coder().get_impl()
    values = []
    stamps = []
    element: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    for i, e in enumerate(encoded):
        decoded = input_impl.decode_nested(e)
        values.append(value_impl.encode(decoded.value[1]))
        stamps.append(int(decoded.timestamp.micros))
        for window in decoded.windows:
            element.append(i)
            if isinstance(window, bw.IntervalWindow):
                starts.append(int(window.start.micros))
                ends.append(int(window.end.micros))
            else:  # the global window
                starts.append(MIN_TIMESTAMP)
                ends.append(END_OF_GLOBAL_WINDOW)
    engine.output_watermark = output_watermark
    return engine.add_rows(keys, values, stamps, element, starts, ends, 0, len(element))


def _encode(panes: list[Pane], group: GroupSpec, job_id: str, components: bytes) -> Iterator[bytes]:
    """The panes as Beam's GroupByKey output chunks."""
    input_coder = coder(job_id, components, group.input_coder_id)
    key_impl = input_coder.wrapped_value_coder.key_coder().get_impl()
    value_impl = input_coder.wrapped_value_coder.value_coder().get_impl()
    output_impl = coder_impl(job_id, components, group.output_coder_id)
    out = create_OutputStream()
    for pane in panes:
        window: Any = pane.window
        if isinstance(window, GlobalWindow):
            beam_window: Any = bw.GlobalWindow()
        else:
            beam_window = bw.IntervalWindow(
                Timestamp(micros=window.start), Timestamp(micros=window.end)
            )
        info = windowed_value.PaneInfo(
            is_first=pane.is_first,
            is_last=pane.is_last,
            timing=_TIMING[pane.timing],
            index=pane.index,
            nonspeculative_index=pane.nonspeculative_index,
        )
        value = (key_impl.decode(pane.key), [value_impl.decode(v) for v in pane.values])
        element = windowed_value.WindowedValue(
            value, Timestamp(micros=pane.timestamp), (beam_window,), info
        )
        output_impl.encode_to_stream(element, out, True)
    yield out.get()
