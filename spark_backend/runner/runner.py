"""PySparkRunner: a Beam PipelineRunner that runs batch pipelines on PySpark.

Select it with ``--runner=spark_backend.PySparkRunner`` or
``beam.Pipeline(runner=PySparkRunner())``. The whole pipeline is checked (options,
then every transform) before any Spark work; see the package docstring for the design.
"""

from __future__ import annotations

import functools
from typing import Any

from apache_beam.options import pipeline_options
from apache_beam.options.value_provider import RuntimeValueProvider
from apache_beam.runners.pipeline_utils import group_by_key_input_visitor
from apache_beam.runners.runner import PipelineRunner
from apache_beam.transforms import environments

from spark_backend.runner.batch.driver_stages import DRIVER_OUTPUT_BYTES
from spark_backend.runner.batch.executor import StageExecutor
from spark_backend.runner.batch.lazy_context import LazyContext
from spark_backend.runner.batch.result import PySparkPipelineResult
from spark_backend.runner.batch.spill import SPILL_BYTES
from spark_backend.runner.grouping.late_data import METRICS_KEY, grouping_steps, zero_counters
from spark_backend.runner.plan.batch_triggers import check_batch_triggers, frozen_processing_time
from spark_backend.runner.plan.options import SparkTarget, spark_target, streaming_options
from spark_backend.runner.plan.plan import Plan, plan_pipeline, reads_off_lean
from spark_backend.runner.plan.validate import check_pipeline
from spark_backend.runner.stages.text_source import lean_text_reads
from spark_backend.runner.streaming.elements import stripped_test_streams
from spark_backend.runner.streaming.run import prepare_streaming
from spark_backend.session.session import find_java, get_session

__all__ = ["PySparkRunner"]


class PySparkRunner(PipelineRunner):
    """Runs a Beam pipeline on Spark with Beam's own bundle processing; in micro-batches
    with ``--streaming`` (:mod:`spark_backend.runner.streaming`).

    ``fast_paths=False`` runs every batch GroupByKey on the generic path (Beam's trigger
    driver) and every stage on Beam's bundle processor (no lean stages): the reference
    the fast paths are tested against. ``driver_stages`` (by default as ``fast_paths``)
    runs small stages in the driver process instead of as Spark jobs
    (:mod:`spark_backend.runner.batch.driver_stages`); ``False`` runs every stage on Spark.

    Memory (batch): ``driver_output_bytes`` caps the output a driver stage may hold (past
    it the stage runs on Spark instead; default ``DRIVER_OUTPUT_BYTES``, 64 MiB), and
    ``spill_bytes`` the output one lean sink of a task holds before spilling it to a
    scratch file (:mod:`spark_backend.runner.batch.spill`; default ``SPILL_BYTES``, 32 MiB).
    ``state_iterable_bytes`` > 0 hands a GroupByKey's values (default windowing) past
    that many bytes of a group to the DoFn as Beam's state-backed iterable, read page by
    page from the task's disk (:mod:`spark_backend.runner.grouping.spilled_groups`;
    FnApiRunner's ``use_state_iterables``; 0, the default, as FnApiRunner's, is off):
    a group larger than memory. Bound the Python workers' memory with ``--spark_conf
    spark.executor.pyspark.memory=1g``."""

    def __init__(
        self,
        fast_paths: bool = True,
        driver_stages: bool | None = None,
        driver_output_bytes: int = DRIVER_OUTPUT_BYTES,
        spill_bytes: int = SPILL_BYTES,
        state_iterable_bytes: int = 0,
    ) -> None:
        super().__init__()
        for name, value in (
            ("driver_output_bytes", driver_output_bytes),
            ("spill_bytes", spill_bytes),
            ("state_iterable_bytes", state_iterable_bytes),
        ):
            if type(value) is not int or value < 0:
                raise ValueError(f"PySparkRunner({name}=...): expected bytes >= 0, got {value!r}")
        self.fast_paths = fast_paths
        self.driver_stages = fast_paths if driver_stages is None else driver_stages
        self.driver_output_bytes = driver_output_bytes
        self.spill_bytes = spill_bytes
        self.state_iterable_bytes = state_iterable_bytes

    def run_pipeline(
        self, pipeline: Any, options: pipeline_options.PipelineOptions
    ) -> PySparkPipelineResult:
        """Check ``pipeline`` and ``options``, then start it on Spark; the result's
        ``wait_until_finish`` blocks until it ends (``with Pipeline()`` calls it)."""
        target = spark_target(options)
        streaming = bool(options.view_as(pipeline_options.StandardOptions).streaming)
        stream_options = streaming_options(options)
        if not streaming:
            for name in stream_options.given():
                raise ValueError(f"--{name} needs --streaming (it is a streaming option)")
        RuntimeValueProvider.set_runtime_options({})
        _with_fn_api_experiment(options)
        type_options = options.view_as(pipeline_options.TypeOptions)
        pipeline.visit(
            group_by_key_input_visitor(not type_options.allow_non_deterministic_key_coders)
        )
        # in streaming the TestStreams' elements skip the proto (the driver takes them
        # from the transforms); a checkpoint's shape records the proto's TestStreams whole
        strip = streaming and stream_options.checkpoint_dir is None
        with stripped_test_streams(pipeline if strip else None) as stripped:
            proto = pipeline.to_runner_api(
                default_environment=environments.EmbeddedPythonEnvironment.default()
            )
        # every check and refusal comes before the SparkContext (and its JVM) starts
        check_pipeline(proto, streaming)
        if streaming:
            prepared = prepare_streaming(
                proto, stream_options, self.fast_paths, stripped, _master(target)
            )
            return prepared.start(_spark_context(target))
        check_batch_triggers(proto)
        plan = batch_plan(frozen_processing_time(proto), self.fast_paths, self.state_iterable_bytes)
        result = _start(plan, target, self, list(grouping_steps(proto).values()))
        result.paths = plan.paths
        result.columnar = plan.columnar
        result.stage_paths = plan.stage_paths
        return result


def batch_plan(proto: Any, fast_paths: bool, state_iterable_bytes: int = 0) -> Plan:
    """The batch plan of ``proto``; with ``fast_paths``, text reads by the lean text
    source, except those whose stage is not lean (they keep Beam's splittable read);
    ``state_iterable_bytes``: see :class:`PySparkRunner`."""
    plan_of = functools.partial(plan_pipeline, state_iterable_bytes=state_iterable_bytes)
    if not fast_paths:
        return plan_of(proto, fast_paths, lean=False)
    plan = plan_of(lean_text_reads(proto), fast_paths, lean=True)
    keep = reads_off_lean(plan)
    if keep:
        plan = plan_of(lean_text_reads(proto, keep), fast_paths, lean=True)
    return plan


def _with_fn_api_experiment(options: pipeline_options.PipelineOptions) -> None:
    debug = options.view_as(pipeline_options.DebugOptions)
    experiments = debug.experiments or []
    if "beam_fn_api" not in experiments:
        experiments.append("beam_fn_api")
    debug.experiments = experiments


def _check_running_conf(conf: dict[str, str]) -> None:
    """Refuse a ``--spark_conf`` a running SparkContext cannot take (only runtime
    ``spark.sql.*`` settings change on a running session); ignoring it silently would
    run the pipeline with other settings than asked."""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    if running is None or not conf:
        return
    current = running.getConf()
    for key, value in conf.items():
        if not key.startswith("spark.sql.") and current.get(key) != value:
            raise ValueError(
                f"spark_conf {key}={value!r} cannot apply: a SparkContext already runs in "
                f"this process with {key}={current.get(key)!r}; stop it first"
            )


def _running_context() -> Any:
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def _master(target: SparkTarget) -> str | None:
    """The master a run will use: the one asked for, else a running SparkContext's."""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    if target.master is None and running is not None:
        return str(running.master)
    return target.master


def _spark_context(target: SparkTarget) -> Any:
    _check_running_conf(target.conf)
    return get_session(target.master, target.conf, app_name="beam-pyspark-runner").sparkContext


def _start(
    plan: Plan, target: SparkTarget, runner: PySparkRunner, steps: list[str]
) -> PySparkPipelineResult:
    _check_running_conf(target.conf)  # (refusals come before any stage runs)
    if _running_context() is None:
        find_java()  # (its version is read when a stage first needs Spark)
    context = LazyContext(functools.partial(_spark_context, target), target.master, target.conf)
    executor = StageExecutor(
        context,
        plan,
        job_group=f"beam-{plan.job_id}",
        local_bytes=None if runner.driver_stages else 0,
        driver_output_bytes=runner.driver_output_bytes,
        spill_bytes=runner.spill_bytes,
    )

    def work() -> dict[str, list[Any]]:
        executor.run()
        # in batch nothing is late: each grouping step's droppedDueToLateness reads 0
        return {**executor.monitoring_infos, METRICS_KEY: zero_counters(steps)}

    result = PySparkPipelineResult(work, executor.cancel)
    result.driver_stages = executor.driver_stages
    result.moved_stages = executor.moved_stages
    result._spark_started = lambda: executor.spark_started
    return result
