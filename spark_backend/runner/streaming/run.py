"""Start a ``--streaming`` run: check, prepare the sources, plan, and drive batches."""

from __future__ import annotations

from typing import Any

from apache_beam.portability.api import beam_runner_api_pb2 as pb

from spark_backend.runner.plan import plan_pipeline
from spark_backend.runner.streaming.checks import check_streaming
from spark_backend.runner.streaming.driver import StreamingDriver
from spark_backend.runner.streaming.result import StreamingPipelineResult
from spark_backend.runner.streaming.sources import impulse_labels, streaming_proto
from spark_backend.runner.streaming.watermarks import PipelineWatermarks

__all__ = ["start_streaming"]


def start_streaming(
    pipeline: pb.Pipeline,
    spark_context: Any,
    max_batches: int | None,
    key_partitions: int | None = None,
    per_instant: bool = False,
) -> StreamingPipelineResult:
    """Check ``pipeline`` (a proto the batch checks passed with ``streaming``) for what
    streaming runs, then start it on ``spark_context`` in a driver thread; with
    ``per_instant`` a batch takes a TestStream's events of one processing time
    (:func:`~spark_backend.runner.streaming.driver.schedule`)."""
    check_streaming(pipeline)
    prepared, sources = streaming_proto(pipeline)
    plan = plan_pipeline(prepared)
    driver = StreamingDriver(
        spark_context,
        plan,
        PipelineWatermarks(prepared),
        sources,
        impulse_labels(prepared) - {o for s in sources.values() for o in s.outputs},
        key_partitions or spark_context.defaultParallelism,
        max_batches,
        per_instant,
    )
    return StreamingPipelineResult(driver, f"beam-{plan.job_id}")
