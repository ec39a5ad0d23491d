"""Beam's runner-generic suite, FnApiRunnerTest, on PySparkRunner.

As Beam's portable Flink and Spark runners run it: a subclass with ``create_pipeline``
overridden (Beam's ``portable_runner_test.PortableRunnerTest``). The tests Beam's
portable runners leave out are in ``sickbay.toml`` with Beam's reason; the harness
(``conftest.py``) fails a test whose pipelines did not run on PySparkRunner.
``CONFORMANCE_CONFIG=spark-stages`` runs every stage on Spark
(:mod:`tests.conformance.runners`); ``make conformance`` runs both configurations and
Beam's own FnApiRunnerTest as the control.

A known failure would be marked strict ``xfail`` here, so that ``make test`` stays
green and a fix turns it into an error until the mark goes (``make conformance`` runs
with ``--runxfail`` and counts it as a failure); none is.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import fn_runner_test

from tests.conformance.runners import configured_runner


@pytest.mark.usefixtures("spark")
class PySparkRunnerTest(fn_runner_test.FnApiRunnerTest):
    def create_pipeline(self, is_drain: bool = False) -> Any:
        return beam.Pipeline(runner=configured_runner())
