"""Driver side: every transform's input and output watermark and named holds, per batch.

The pipeline's leaf transforms (by label) form a :class:`theory.pipeline.graph.StageGraph`
(an edge from the producer of each PCollection a transform reads to the transform);
sources are the transforms that read nothing (TestStream, Impulse). A
:class:`~theory.pipeline.graph.WatermarkTracker` keeps the watermarks by docs/semantics.md's
definitions: input = min of upstream outputs, output = min(input, holds), both latched.
The holds are the GroupByKeys' ``state:pending-windows`` (their engines' smallest window
hold, minus 1 µs as Beam's runner holds); a stateless transform finishes its bundles
within the batch, so it holds nothing between batches.

:meth:`PipelineWatermarks.record` snapshots every transform after a batch at the batch's
processing time; :meth:`series` and :meth:`why` read the snapshots as theory series.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb

from theory.pipeline.graph import StageGraph, WatermarkTracker, hold_chain
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP

__all__ = ["INPUT", "OUTPUT", "PipelineWatermarks", "leaf_transforms"]

#: Names of the two watermark series of a transform in :meth:`PipelineWatermarks.series`.
INPUT = "input"
OUTPUT = "output"


def leaf_transforms(pipeline: pb.Pipeline) -> Iterator[pb.PTransform]:
    """The transforms that run (no subtransforms), in the pipeline's order, without those
    that pass their input through unchanged."""

    def walk(transform_id: str) -> Iterator[pb.PTransform]:
        transform = pipeline.components.transforms[transform_id]
        if transform.subtransforms:
            for sub in transform.subtransforms:
                yield from walk(sub)
        elif set(transform.outputs.values()) - set(transform.inputs.values()):
            yield transform

    for root in pipeline.root_transform_ids:
        yield from walk(root)


def _graph(pipeline: pb.Pipeline) -> StageGraph:
    """Edges from each main input's producer: a side input does not hold a ParDo's input
    watermark (as in Beam's runners); its main elements waiting for it hold the output
    (:data:`~spark_backend.runner.streaming.side_views.SIDE_HOLD`)."""
    leaves = list(leaf_transforms(pipeline))
    producer = {pc: t.unique_name for t in leaves for pc in t.outputs.values()}
    inputs: dict[str, tuple[str, ...]] = {}
    for t in leaves:
        mains = [pc for tag, pc in t.inputs.items() if tag not in _side_tags(t)]
        ups = dict.fromkeys(producer[pc] for pc in mains if pc in producer)
        inputs[t.unique_name] = tuple(ups)
    return StageGraph(inputs)


def _side_tags(transform: pb.PTransform) -> frozenset[str]:
    """The input tags of ``transform`` that are side inputs (a ParDo's)."""
    if transform.spec.urn != common_urns.primitives.PAR_DO.urn:
        return frozenset()
    return frozenset(pb.ParDoPayload.FromString(transform.spec.payload).side_inputs)


@dataclass(frozen=True)
class _Snapshot:
    """One transform after one batch (µs)."""

    input: int
    output: int
    holds: dict[str, int]


class PipelineWatermarks:
    """The tracker over a pipeline's leaf transforms, and its snapshots per batch."""

    def __init__(self, pipeline: pb.Pipeline) -> None:
        self.graph = _graph(pipeline)
        self.tracker = WatermarkTracker(self.graph)
        self._times: list[int] = []
        self._snapshots: list[dict[str, _Snapshot]] = []

    def record(self, processing_time: int) -> None:
        """Snapshot every transform at ``processing_time`` (µs; a later snapshot at the
        same time replaces an earlier one in the series)."""
        tracker = self.tracker
        self._times.append(processing_time)
        self._snapshots.append(
            {
                s: _Snapshot(
                    tracker.input_watermark(s), tracker.output_watermark(s), tracker.holds(s)
                )
                for s in self.graph.order
            }
        )

    @property
    def batches(self) -> int:
        """How many snapshots were recorded."""
        return len(self._times)

    def history(self, start: int = 0) -> list[tuple[int, dict[str, _Snapshot]]]:
        """The snapshots from number ``start`` on, each with its processing time (µs)."""
        return list(zip(self._times[start:], self._snapshots[start:], strict=True))

    def extend_history(self, rows: Iterable[tuple[int, dict[str, _Snapshot]]]) -> None:
        """Append snapshots as :meth:`history` gave them (a checkpoint's log)."""
        for time, snapshot in rows:
            self._times.append(time)
            self._snapshots.append(snapshot)

    def series(self, label: str, per_batch: bool = False) -> dict[str, StepSeries]:
        """``label``'s input and output watermark and each named hold it ever had, as
        step series over processing time (µs); a hold's value is ``MAX_TIMESTAMP`` while
        it is released. Batches at one processing time (a test clock that did not move)
        keep only the last one's values; ``per_batch`` keeps each: the series are then
        over the snapshot's number (0, 1, ...: the batch numbers of a run from the
        start) instead of processing time."""
        self.graph.check(label)
        times = np.arange(len(self._times)) if per_batch else np.asarray(self._times, np.int64)
        rows = [snap[label] for snap in self._snapshots]
        out = {
            INPUT: StepSeries.from_events(times, np.asarray([r.input for r in rows], np.int64)),
            OUTPUT: StepSeries.from_events(times, np.asarray([r.output for r in rows], np.int64)),
        }
        names = dict.fromkeys(name for r in rows for name in r.holds)
        for name in names:
            values = np.asarray([r.holds.get(name, MAX_TIMESTAMP) for r in rows], np.int64)
            out[name] = StepSeries.from_events(times, values, initial=MAX_TIMESTAMP)
        return out

    def why(self, label: str, at: int) -> list[tuple[str, str]]:
        """The (transform, component) chain holding ``label``'s output watermark at
        processing time ``at`` (µs), as :func:`theory.pipeline.graph.hold_chain` walks it."""
        self.graph.check(label)
        series = {s: self.series(s) for s in self.graph.order}

        def value(s: str, name: str) -> int:
            return int(series[s][name].at(np.asarray([at], np.int64))[0])

        def holds(s: str) -> Mapping[str, int]:
            found = {n: value(s, n) for n in series[s] if n not in (INPUT, OUTPUT)}
            return {n: v for n, v in found.items() if v != MAX_TIMESTAMP}

        return hold_chain(
            label,
            self.graph.inputs.__getitem__,
            lambda s: value(s, INPUT),
            holds,
            lambda s: value(s, OUTPUT),
        )
