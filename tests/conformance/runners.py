"""The runner configurations the conformance suites run on.

``--runner`` takes a class by its dotted path, so each configuration is a class:
:class:`spark_backend.PySparkRunner` as configured by default, and
:class:`SparkStagesRunner`, every stage on Spark (``driver_stages=False``: no stage runs
in the driver process, so the Spark path stays exercised).
"""

from __future__ import annotations

import os
from typing import Any

from spark_backend.runner import PySparkRunner

#: Configuration name -> the ``--runner`` value that selects it.
CONFIGS = {
    "default": "spark_backend.PySparkRunner",
    "spark-stages": "tests.conformance.runners.SparkStagesRunner",
}


class SparkStagesRunner(PySparkRunner):
    """PySparkRunner with every stage run as a Spark job (``driver_stages=False``)."""

    def __init__(self) -> None:
        super().__init__(driver_stages=False)


def configured_runner() -> Any:
    """The PySparkRunner of the configuration ``CONFORMANCE_CONFIG`` names (default:
    ``default``)."""
    name = os.environ.get("CONFORMANCE_CONFIG", "default")
    if name not in CONFIGS:
        raise ValueError(f"CONFORMANCE_CONFIG={name!r}: expected one of {', '.join(CONFIGS)}")
    return SparkStagesRunner() if name == "spark-stages" else PySparkRunner()
