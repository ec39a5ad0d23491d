"""Start a ``--streaming`` run: check, prepare the sources and plan (before any Spark
work), then drive batches on a SparkContext."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any

from apache_beam.portability.api import beam_runner_api_pb2 as pb

from spark_backend.runner.grouping.late_data import grouping_steps
from spark_backend.runner.plan.options import StreamingOptions
from spark_backend.runner.plan.plan import Plan, plan_pipeline
from spark_backend.runner.streaming.checkpoint import CheckpointStore, open_checkpoint
from spark_backend.runner.streaming.checks import check_streaming
from spark_backend.runner.streaming.driver import StreamingDriver
from spark_backend.runner.streaming.elements import Stripped
from spark_backend.runner.streaming.lifting import relabel_lifted_groups
from spark_backend.runner.streaming.observe import composite_leaves
from spark_backend.runner.streaming.result import StreamingPipelineResult
from spark_backend.runner.streaming.shape import pipeline_shape
from spark_backend.runner.streaming.side_views import side_views
from spark_backend.runner.streaming.sinks import BatchSinks
from spark_backend.runner.streaming.sources import impulse_labels, streaming_proto
from spark_backend.runner.streaming.watermarks import PipelineWatermarks

__all__ = ["PreparedStream", "master_slots", "prepare_streaming", "start_streaming", "task_slots"]

_LOCAL = re.compile(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?")


def task_slots(spark_context: Any) -> int:
    """How many tasks ``spark_context`` runs at once: N on ``local[N]``/``local[N,F]``,
    the CPUs on ``local[*]``, 1 on ``local``; elsewhere its default parallelism. The
    default ``--key_partitions``: a micro-batch's keyed step is then one task per slot
    (more partitions add a Python task's fixed cost each, not parallelism)."""
    match = _LOCAL.fullmatch(str(spark_context.master))
    if match is None:
        return max(1, int(spark_context.defaultParallelism))
    slots = match.group(1)
    if slots is None:
        return 1
    if slots == "*":
        return os.cpu_count() or 1
    return max(1, int(slots))


def master_slots(master: str | None) -> int | None:
    """The task slots of a master URL known without a SparkContext: ``local[N]`` N,
    ``local[*]`` (and no master: a new session's ``local[*]``) the CPUs, ``local`` 1;
    None for a cluster (its default parallelism needs the context)."""
    match = _LOCAL.fullmatch((master or "local[*]").strip())
    if match is None:
        return None
    slots = match.group(1)
    if slots is None:
        return 1
    if slots == "*":
        return os.cpu_count() or 1
    return max(1, int(slots))


@dataclass
class PreparedStream:
    """A streaming run checked and planned, before any Spark work (:func:`prepare_streaming`);
    :meth:`start` starts it on a SparkContext."""

    pipeline: pb.Pipeline
    options: StreamingOptions
    fast_paths: bool
    partitions: int | None
    checkpoint: CheckpointStore | None
    prepared: pb.Pipeline
    sources: dict[str, Any]
    plan: Plan

    def start(self, spark_context: Any) -> StreamingPipelineResult:
        """Start the run on ``spark_context`` in a driver thread."""
        partitions = self.partitions or task_slots(spark_context)
        checkpoint = self.checkpoint
        if checkpoint is None and self.options.checkpoint_dir is not None:
            checkpoint = _open_checkpoint(self.pipeline, self.options, partitions)
        plan, prepared, sources = self.plan, self.prepared, self.sources
        steps = grouping_steps(self.pipeline)
        driver = StreamingDriver(
            spark_context,
            plan,
            PipelineWatermarks(prepared),
            sources,
            impulse_labels(prepared) - {o for s in sources.values() for o in s.outputs},
            partitions,
            self.options.max_batches,
            checkpoint=checkpoint,
            sinks=BatchSinks(self.pipeline),
            drain=self.options.drain,
            per_instant=self.options.test_stream_batches == "instant",
            views=side_views(plan, prepared),
            grouping_steps=steps,
        )
        composites = composite_leaves(prepared)
        result = StreamingPipelineResult(driver, f"beam-{plan.job_id}", composites, steps)
        result.stage_paths = plan.stage_paths
        return result


def _open_checkpoint(
    pipeline: pb.Pipeline, options: StreamingOptions, partitions: int
) -> CheckpointStore:
    assert options.checkpoint_dir is not None
    return open_checkpoint(options.checkpoint_dir, pipeline_shape(pipeline), partitions)


def prepare_streaming(
    pipeline: pb.Pipeline,
    options: StreamingOptions | None = None,
    fast_paths: bool = True,
    stripped: Stripped | None = None,
    master: str | None = None,
) -> PreparedStream:
    """Check ``pipeline`` (a proto the batch checks passed with ``streaming``) for what
    streaming runs, open its checkpoint directory if any (refusing another pipeline's),
    read its sources and plan it: every refusal before a SparkContext is needed (the
    checkpoint opens at :meth:`PreparedStream.start` only on a cluster ``master``
    without ``--key_partitions``, whose slots need the context). With
    ``--test_stream_batches instant`` a batch takes a TestStream's events of one
    processing time (:func:`~spark_backend.runner.streaming.driver.schedule`). With
    ``fast_paths`` the stages made of known transforms run lean and the combines that
    keep their panes are lifted (:mod:`.lifting`); without, every stage runs on Beam's
    bundle processor and every ``Combine.PerKey`` is opened (the reference).
    ``stripped``: the TestStream elements the runner kept out of ``pipeline``
    (:mod:`.elements`); ``master``: the Spark master URL (None: a running session's,
    else ``local[*]``)."""
    options = options or StreamingOptions()
    check_streaming(pipeline)
    partitions = options.key_partitions or master_slots(master)
    checkpoint = None
    if options.checkpoint_dir is not None and partitions is not None:
        checkpoint = _open_checkpoint(pipeline, options, partitions)
    prepared, sources = streaming_proto(pipeline, lift=fast_paths, stripped=stripped)
    plan = plan_pipeline(
        prepared, stateful_roots=True, lean=fast_paths, unbounded_sdf=True, pack_combiners=False
    )
    plan = relabel_lifted_groups(plan, prepared)
    return PreparedStream(
        pipeline, options, fast_paths, partitions, checkpoint, prepared, sources, plan
    )


def start_streaming(
    pipeline: pb.Pipeline,
    spark_context: Any,
    options: StreamingOptions | None = None,
    fast_paths: bool = True,
    stripped: Stripped | None = None,
) -> StreamingPipelineResult:
    """:func:`prepare_streaming` then :meth:`PreparedStream.start` on ``spark_context``
    (its master decides the default key partitions)."""
    options = options or StreamingOptions()
    if options.key_partitions is None:
        options = dataclasses.replace(options, key_partitions=task_slots(spark_context))
    return prepare_streaming(pipeline, options, fast_paths, stripped).start(spark_context)
