"""Start a ``--streaming`` run: check, prepare the sources, plan, and drive batches."""

from __future__ import annotations

import os
import re
from typing import Any

from apache_beam.portability.api import beam_runner_api_pb2 as pb

from spark_backend.runner.plan.options import StreamingOptions
from spark_backend.runner.plan.plan import plan_pipeline
from spark_backend.runner.streaming.checkpoint import open_checkpoint
from spark_backend.runner.streaming.checks import check_streaming
from spark_backend.runner.streaming.driver import StreamingDriver
from spark_backend.runner.streaming.elements import Stripped
from spark_backend.runner.streaming.lifting import relabel_lifted_groups
from spark_backend.runner.streaming.result import StreamingPipelineResult
from spark_backend.runner.streaming.shape import pipeline_shape
from spark_backend.runner.streaming.side_views import side_views
from spark_backend.runner.streaming.sinks import BatchSinks
from spark_backend.runner.streaming.sources import impulse_labels, streaming_proto
from spark_backend.runner.streaming.watermarks import PipelineWatermarks

__all__ = ["start_streaming", "task_slots"]

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


def start_streaming(
    pipeline: pb.Pipeline,
    spark_context: Any,
    options: StreamingOptions | None = None,
    fast_paths: bool = True,
    stripped: Stripped | None = None,
) -> StreamingPipelineResult:
    """Check ``pipeline`` (a proto the batch checks passed with ``streaming``) for what
    streaming runs, and its checkpoint directory if any, then start it on
    ``spark_context`` in a driver thread; with ``--test_stream_batches instant`` a batch
    takes a TestStream's events of one processing time
    (:func:`~spark_backend.runner.streaming.driver.schedule`). With ``fast_paths`` the
    stages made of known transforms run lean and the combines that keep their panes are
    lifted (:mod:`.lifting`); without, every stage runs on Beam's bundle processor and
    every ``Combine.PerKey`` is opened (the reference). ``stripped``: the TestStream
    elements the runner kept out of ``pipeline`` (:mod:`.elements`)."""
    options = options or StreamingOptions()
    check_streaming(pipeline)
    partitions = options.key_partitions or task_slots(spark_context)
    checkpoint = None
    if options.checkpoint_dir is not None:
        checkpoint = open_checkpoint(options.checkpoint_dir, pipeline_shape(pipeline), partitions)
    prepared, sources = streaming_proto(pipeline, lift=fast_paths, stripped=stripped)
    plan = plan_pipeline(
        prepared, stateful_roots=True, lean=fast_paths, unbounded_sdf=True, pack_combiners=False
    )
    plan = relabel_lifted_groups(plan, prepared)
    views = side_views(plan, prepared)
    driver = StreamingDriver(
        spark_context,
        plan,
        PipelineWatermarks(prepared),
        sources,
        impulse_labels(prepared) - {o for s in sources.values() for o in s.outputs},
        partitions,
        options.max_batches,
        checkpoint=checkpoint,
        sinks=BatchSinks(pipeline),
        drain=options.drain,
        per_instant=options.test_stream_batches == "instant",
        views=views,
    )
    result = StreamingPipelineResult(driver, f"beam-{plan.job_id}")
    result.stage_paths = plan.stage_paths
    return result
