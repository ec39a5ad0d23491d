"""PySparkRunner: a Beam PipelineRunner that runs batch pipelines on PySpark.

Select it with ``--runner=spark_backend.PySparkRunner`` or
``beam.Pipeline(runner=PySparkRunner())``. The whole pipeline is checked (options,
then every transform) before any Spark work; see the package docstring for the design.
"""

from __future__ import annotations

from typing import Any

from apache_beam.options import pipeline_options
from apache_beam.options.value_provider import RuntimeValueProvider
from apache_beam.runners.pipeline_utils import group_by_key_input_visitor
from apache_beam.runners.runner import PipelineRunner
from apache_beam.transforms import environments

from spark_backend.runner.executor import StageExecutor
from spark_backend.runner.options import SparkTarget, spark_target
from spark_backend.runner.plan import Plan, plan_pipeline
from spark_backend.runner.result import PySparkPipelineResult
from spark_backend.runner.validate import check_pipeline
from spark_backend.session import get_session

__all__ = ["PySparkRunner"]


class PySparkRunner(PipelineRunner):
    """Runs a Beam pipeline on Spark with Beam's own bundle processing (batch only).

    ``fast_paths=False`` runs everything on the generic path (Beam's trigger driver
    for every GroupByKey), the reference the fast paths are tested against."""

    def __init__(self, fast_paths: bool = True) -> None:
        super().__init__()
        self.fast_paths = fast_paths

    def run_pipeline(
        self, pipeline: Any, options: pipeline_options.PipelineOptions
    ) -> PySparkPipelineResult:
        """Check ``pipeline`` and ``options``, then start it on Spark; the result's
        ``wait_until_finish`` blocks until it ends (``with Pipeline()`` calls it)."""
        target = spark_target(options)
        RuntimeValueProvider.set_runtime_options({})
        _with_fn_api_experiment(options)
        type_options = options.view_as(pipeline_options.TypeOptions)
        pipeline.visit(
            group_by_key_input_visitor(not type_options.allow_non_deterministic_key_coders)
        )
        proto = pipeline.to_runner_api(
            default_environment=environments.EmbeddedPythonEnvironment.default()
        )
        check_pipeline(proto)
        plan = plan_pipeline(proto, self.fast_paths)
        result = _start(plan, target)
        result.paths = plan.paths
        return result


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
    if running is None:
        return
    current = running.getConf()
    for key, value in conf.items():
        if not key.startswith("spark.sql.") and current.get(key) != value:
            raise ValueError(
                f"spark_conf {key}={value!r} cannot apply: a SparkContext already runs in "
                f"this process with {key}={current.get(key)!r}; stop it first"
            )


def _start(plan: Plan, target: SparkTarget) -> PySparkPipelineResult:
    _check_running_conf(target.conf)
    session = get_session(target.master, target.conf, app_name="beam-pyspark-runner")
    spark_context = session.sparkContext
    parallelism = spark_context.defaultParallelism
    executor = StageExecutor(spark_context, plan, parallelism, job_group=f"beam-{plan.job_id}")

    def work() -> dict[str, list[Any]]:
        executor.run()
        return executor.monitoring_infos

    return PySparkPipelineResult(work, executor.cancel)
