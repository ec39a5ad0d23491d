"""Beam's InefficientExecutionWarning, raised by the SDK worker in a Spark task, is
warned again in the driver (:mod:`spark_backend.runner.stages.worker_warnings`), as
FnApiRunnerTest's ``test_batch_rebatch_pardos`` expects of FnApiRunner. The conformance
suite runs that test with the default configuration; here every stage runs on Spark."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner.fn_runner_test import (
    ArrayMultiplyDoFn,
    ListPlusOneDoFn,
)
from apache_beam.runners.worker.operations import InefficientExecutionWarning
from apache_beam.testing.util import assert_that, equal_to

from spark_backend.runner import PySparkRunner

pytestmark = pytest.mark.slow


def test_a_rebatching_warning_in_a_spark_task_is_warned_in_the_driver(spark: Any) -> None:
    p = beam.Pipeline(runner=PySparkRunner(driver_stages=False))
    res = (
        p
        | beam.Create(np.array([1, 2, 3], dtype=np.int64)).with_output_types(np.int64)
        | beam.ParDo(ArrayMultiplyDoFn())
        | beam.ParDo(ListPlusOneDoFn())
        | beam.Map(lambda x: x * 3)
    )
    assert_that(res, equal_to([9, 15, 21]))
    with pytest.warns(InefficientExecutionWarning, match=r"ListPlusOneDoFn.*NumpyArray.*List\["):
        p.run().wait_until_finish()
