"""PySparkRunner: Beam pipelines on PySpark (batch), with Beam's exact semantics.

(Architecture: see below; written in full once measured.)
"""

from __future__ import annotations

from spark_backend.runner.errors import PipelineFailedError, UnsupportedTransformError
from spark_backend.runner.options import PySparkRunnerOptions
from spark_backend.runner.result import PySparkPipelineResult
from spark_backend.runner.runner import PySparkRunner

__all__ = [
    "PipelineFailedError",
    "PySparkPipelineResult",
    "PySparkRunner",
    "PySparkRunnerOptions",
    "UnsupportedTransformError",
]
