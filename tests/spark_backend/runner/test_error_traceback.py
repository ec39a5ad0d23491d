"""A user error on a Spark task reads as FnApiRunner's: the worker's traceback, with the
user's own frames, then the exception (Beam's FnApiRunnerTest
``test_error_traceback_includes_user_code``, on every stage's path: in the driver and
as a Spark job)."""

from __future__ import annotations

import traceback
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from spark_backend.runner import PySparkRunner

pytestmark = pytest.mark.slow


def first_user_frame(x: int) -> int:
    return second_user_frame(x)


def second_user_frame(x: int) -> int:
    return third_user_frame(x)


def third_user_frame(x: int) -> int:
    raise ValueError("expected by the test, not a failure")


def failure(runner: Any) -> str:
    try:
        with beam.Pipeline(runner=runner) as p:
            _ = p | beam.Create([0, 1]) | "StageC" >> beam.Map(first_user_frame)
    except Exception:
        return traceback.format_exc()
    raise AssertionError("the pipeline did not fail")


@pytest.mark.parametrize(
    "make",
    [PySparkRunner, lambda: PySparkRunner(driver_stages=False)],
    ids=["default", "spark-stages"],
)
def test_user_frames_in_the_error(spark: Any, make: Any) -> None:
    names = ["first_user_frame", "second_user_frame", "third_user_frame", "StageC"]
    reference = failure(FnApiRunner())
    assert all(n in reference for n in names)
    message = failure(make())
    assert all(n in message for n in names), message
    assert "expected by the test, not a failure" in message
    assert "\n\tat org.apache" not in message  # no JVM stack
