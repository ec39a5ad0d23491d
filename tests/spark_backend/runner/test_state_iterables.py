"""State-backed iterables: a GroupByKey's values past ``state_iterable_bytes`` reach the
DoFn through the state API, page by page from the task's spill file
(:mod:`spark_backend.runner.grouping.spilled_groups`).

One hot key of about nine pages of values and a cold key under the threshold, with every
stage on Spark: the output equals a plain-Python oracle's (in the pipeline, on both
runners) and FnApiRunner's (the differential harness), and a counter shows that the
DoFn got the hot key's values as Beam's state-backed iterable, not a list.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.util import assert_that, equal_to

from spark_backend.runner import PySparkRunner
from spark_backend.runner.grouping.spilled_groups import MIN_PAGE_BYTES

pytestmark = pytest.mark.slow

VALUE_BYTES = 12  # "hot-0000000" and its length prefix
THRESHOLD = 1000  # bytes: pages of MIN_PAGE_BYTES
KEYS = {"hot": 9 * MIN_PAGE_BYTES // VALUE_BYTES, "cold": 3}
_BY_STATE = beam.metrics.Metrics.counter("test", "by_state")


def values(kv: tuple[str, int]) -> Any:
    key, n = kv
    return ((key, f"{key}-{i:07d}"[-11:]) for i in range(n))


def summarise(kv: tuple[str, Any]) -> tuple[str, int, int, str]:
    key, group = kv
    if not isinstance(group, list):
        _BY_STATE.inc()
    seen = sorted(group)  # read once whole, then again for the count
    return key, len(seen), sum(1 for _ in group), seen[-1]


def build(p: beam.Pipeline) -> Any:
    out = p | beam.Create(sorted(KEYS.items())) | beam.FlatMap(values) | beam.GroupByKey()
    out = out | beam.Map(summarise)
    oracle = [(k, n, n, f"{k}-{n - 1:07d}"[-11:]) for k, n in KEYS.items()]
    assert_that(out, equal_to(oracle), label="oracle")
    return out


def test_a_large_group_reaches_the_dofn_by_state_pages(spark: Any, differential: Any) -> None:
    runner = PySparkRunner(state_iterable_bytes=THRESHOLD, driver_stages=False)
    result = differential(build, on=runner)
    (counter,) = result.metrics().query(MetricsFilter().with_name("by_state"))["counters"]
    assert counter.committed == 1  # the hot key only: the cold one fits under 1000 bytes
