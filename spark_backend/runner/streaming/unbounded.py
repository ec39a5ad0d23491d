"""Task side: one micro-batch of an unbounded splittable DoFn's stage.

The stage's input in a batch is the new restrictions from upstream (an Impulse's, in the
first batch) and the residuals of earlier batches whose resume time has come. A task runs
them in **one** bundle: a restriction the DoFn checkpoints (``defer_remainder``, with or
without a delay) comes back as a :class:`Residual` for a later batch, with the output
watermark the SDK reported for it (its ``WatermarkEstimator``'s ``current_watermark()``
at the checkpoint, the estimator state being inside the residual element) and its resume
time (processing time after the batch + the requested delay). The batch runner instead
loops residuals within the task until the restriction ends, as a bounded read needs.

The driver keeps the residuals between batches: they are the source's position (a
restriction and its estimator state), not elements. The minimum of their watermarks is
the transform's ``source:watermark-estimator`` hold (``MIN_TIMESTAMP`` for a residual
whose estimator had no watermark yet: the output watermark then stays where it was); when
no residual is left the restriction is done and the hold is released.

A drain's last batch resumes every residual once more, truncated as Beam's drain
truncates restrictions (the DoFn's ``truncate``, :mod:`.truncate`): a reader that
settles its acks when it resumes (the project's Pub/Sub reader) sends them for the
committed state then. What that last bundle defers again is dropped, where Beam would
keep resuming a truncated restriction until it is done: the drain ends in one batch.

The DoFn must checkpoint itself: the runner does not split a running bundle, so a
``process`` that never returns blocks its batch.

A stage the planner made lean (``StageSpec.path``, :mod:`spark_backend.runner.stages.lean.sdf`)
runs without the bundle processor: the DoFn is called with Beam's own tracker and
estimator, and its outputs go on as columns through the lean ops fused after it
(WindowInto, the lifted combine's Precombine); its residuals are the same bytes, delay
and watermark as the bundle processor's.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner.worker_handlers import StateServicer
from apache_beam.utils.timestamp import Timestamp

from spark_backend.runner.batch.metric_merge import consolidate
from spark_backend.runner.plan.plan import LEAN, StageSpec
from spark_backend.runner.stages.bundles import (
    Round,
    bundle_worker,
    by_input,
    metrics_record,
    run_bundle,
)
from spark_backend.runner.stages.lean.program import lean_program, run_lean_partition
from spark_backend.runner.stages.lean.sdf import SdfProcessOp
from spark_backend.runner.streaming.grouping import SUMMARY
from spark_backend.runner.streaming.truncate import truncated
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["ESTIMATOR_HOLD", "Residual", "SourceSummary", "sdf_batch", "sdf_labels"]

#: The named hold of an unbounded splittable DoFn: its residuals' watermarks.
ESTIMATOR_HOLD: Final[str] = "source:watermark-estimator"

_PROCESS = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn


@dataclass(frozen=True)
class Residual:
    """A checkpointed restriction (µs): where it re-enters the stage, the encoded
    element-and-restriction, when it may resume, and its estimator's watermark."""

    input_id: str
    element: bytes
    resume_at: int
    watermark: int


@dataclass(frozen=True)
class SourceSummary:
    """What a partition of an SDF stage reports after a batch: its residuals."""

    residuals: tuple[Residual, ...]

    @property
    def hold(self) -> int | None:
        return min((r.watermark for r in self.residuals), default=None)

    next_watermark_timer = None

    @property
    def next_processing_timer(self) -> int | None:
        return min((r.resume_at for r in self.residuals), default=None)


def sdf_labels(spec: StageSpec) -> list[str]:
    """The labels of the splittable DoFns the stage processes (as the pipeline names
    them, before Beam's expansion added ``/Process``)."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    return sorted(
        t.unique_name.removesuffix("/Process")
        for t in descriptor.transforms.values()
        if t.spec.urn == _PROCESS
    )


def sdf_batch(
    spec: StageSpec,
    job_id: str,
    components: bytes,
    clock_after: int,
    records: Iterable[tuple[str, bytes]],
    drain: bool = False,
) -> Iterator[tuple[Any, bytes]]:
    """Run one bundle over ``records`` (``(input transform id, chunk)``); yield output
    chunks, the metrics record and ``(SUMMARY, pickled SourceSummary)``. With ``drain``
    (the drain's last batch) the residuals are first truncated (:func:`.truncated`) and
    whatever the bundle defers again is dropped: the read ends in this batch."""
    if drain:
        records = truncated(spec, records)
    out = _sdf_batch(spec, clock_after, records)
    if not drain:
        yield from out
        return
    for name, blob in out:
        yield (name, pickle.dumps(SourceSummary(()))) if name == SUMMARY else (name, blob)


def _sdf_batch(
    spec: StageSpec, clock_after: int, records: Iterable[tuple[str, bytes]]
) -> Iterator[tuple[Any, bytes]]:
    if spec.path == LEAN:
        yield from _lean_batch(spec, clock_after, records)
        return
    data = by_input(spec, records)
    if not any(data.values()):
        yield metrics_record([], {})
        yield SUMMARY, pickle.dumps(SourceSummary(()))
        return
    worker, descriptor_id = bundle_worker(spec, StateServicer())
    sizes: dict[bytes, int] = defaultdict(int)
    try:
        result = run_bundle(worker, spec, descriptor_id, Round(data=data), 0, finalize=False)
    finally:
        worker.stop_worker()
    for buffer, chunk in result.outputs:
        sizes[buffer] += len(chunk)
        yield buffer, chunk
    yield metrics_record(consolidate(result.response.monitoring_infos), sizes)
    residuals = tuple(_residual(spec, r, clock_after) for r in result.response.residual_roots)
    yield SUMMARY, pickle.dumps(SourceSummary(residuals))


def _lean_batch(
    spec: StageSpec, clock_after: int, records: Iterable[tuple[str, bytes]]
) -> Iterator[tuple[Any, bytes]]:
    """:func:`sdf_batch` on the lean path: the stage's program over ``records``, then
    the residuals its SDF ops deferred."""
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
    program = lean_program(descriptor, unbounded_sdf=True)
    if isinstance(program, str):  # the plan chose this path: it cannot happen
        raise RuntimeError(f"the stage cannot run lean: {program}")
    yield from run_lean_partition(spec.descriptor, spec.outputs, records, program=program)
    residuals = tuple(
        Residual(
            spec.residual_inputs[r.transform_id, r.input_tag],
            r.element,
            clock_after + r.delay,
            r.watermark,
        )
        for op in program.ops.values()
        if isinstance(op, SdfProcessOp)
        for r in op.residuals
    )
    yield SUMMARY, pickle.dumps(SourceSummary(residuals))


def _residual(
    spec: StageSpec, delayed: beam_fn_api_pb2.DelayedBundleApplication, clock_after: int
) -> Residual:
    app = delayed.application
    marks = [Timestamp.from_proto(w).micros for w in app.output_watermarks.values()]
    watermark = max(MIN_TIMESTAMP, min(min(marks, default=MIN_TIMESTAMP), MAX_TIMESTAMP))
    delay = 0
    if delayed.HasField("requested_time_delay"):
        d = delayed.requested_time_delay
        delay = d.seconds * 1_000_000 + d.nanos // 1_000
    return Residual(
        spec.residual_inputs[app.transform_id, app.input_id],
        app.element,
        clock_after + delay,
        int(watermark),
    )
