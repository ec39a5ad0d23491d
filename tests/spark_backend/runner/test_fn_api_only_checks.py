"""The checks Beam's FnApiRunnerTest makes only ``if isinstance(p.runner, FnApiRunner)``,
made on PySparkRunner too, against FnApiRunner.

A subclass of FnApiRunnerTest on another runner (``tests/conformance``) passes those
tests having checked less; here the same pipelines run on both runners and the checked
values are compared. In Beam 2.77 there is one: after
``run_sdf_initiated_checkpointing`` (a splittable DoFn that defers its remainder after
every odd position), the counter the DoFn increments once per claimed position is
committed as exactly the number of positions, once each across all the resumed
residuals.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.fn_api_runner.fn_runner_test import ExpandStringsProvider
from apache_beam.testing.util import assert_that, equal_to

from spark_backend.runner import PySparkRunner

pytestmark = pytest.mark.slow

DATA = ["abc", "defghijklmno", "pqrstuv", "wxyz"]


def checkpointing_counter(runner: Any) -> list[tuple[int, int]]:
    """Beam's ``run_sdf_initiated_checkpointing`` on ``runner``: the ``my_counter``
    results as (committed, attempted)."""
    counter = beam.metrics.Metrics.counter("ns", "my_counter")

    class ExpandStringsDoFn(beam.DoFn):
        def process(
            self,
            element: str,
            tracker: Any = beam.DoFn.RestrictionParam(ExpandStringsProvider()),  # noqa: B008
        ) -> Any:
            cur = tracker.current_restriction().start
            while tracker.try_claim(cur):
                counter.inc()
                yield element[cur]
                if cur % 2 == 1:
                    tracker.defer_remainder()
                    return
                cur += 1

    p = beam.Pipeline(runner=runner)
    actual = p | beam.Create(DATA) | beam.ParDo(ExpandStringsDoFn())
    assert_that(actual, equal_to(list("".join(DATA))))
    result = p.run()
    result.wait_until_finish()
    found = result.metrics().query(MetricsFilter().with_name("my_counter"))["counters"]
    return [(c.committed, c.attempted) for c in found]


@pytest.mark.parametrize(
    "make",
    [PySparkRunner, lambda: PySparkRunner(driver_stages=False)],
    ids=["default", "spark-stages"],
)
def test_sdf_initiated_checkpointing_counter(spark: Any, make: Any) -> None:
    expected = checkpointing_counter(FnApiRunner())
    total = len("".join(DATA))
    assert expected == [(total, total)]  # FnApiRunnerTest's check, on FnApiRunner
    assert checkpointing_counter(make()) == expected
