"""Beam's RecursionError past about a thousand bundles of a stage (FnApiRunner chains one
monitoring-info generator per bundle) and beam_pipelines.metrics.query_metrics, which
reads the same metrics past 5,000 checkpoints. The first assertion documents Beam's bug
(the evidence for an upstream report): when Beam fixes it, it fails, and the workaround
can go."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.core import RestrictionProvider

from beam_pipelines.metrics import query_metrics

pytestmark = pytest.mark.slow

CHECKPOINTS = 5_100


class _Positions(RestrictionProvider):
    def initial_restriction(self, n: int) -> OffsetRange:
        return OffsetRange(0, n)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, n: int, restriction: OffsetRange) -> int:
        return int(restriction.size())


_RESTRICTION = beam.DoFn.RestrictionParam(_Positions())


class _OnePerBundle(beam.DoFn):
    """Claims one position per bundle, counts it, and checkpoints."""

    def process(self, n: int, tracker: Any = _RESTRICTION) -> Iterator[int]:
        pos = tracker.current_restriction().start
        if tracker.try_claim(pos):
            Metrics.counter("probe", "checkpoints").inc()
            yield pos
            tracker.defer_remainder()


def test_metrics_past_five_thousand_checkpoints() -> None:
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | beam.Create([CHECKPOINTS]) | beam.ParDo(_OnePerBundle())
    result = pipeline.run()
    result.wait_until_finish()
    with pytest.raises(RecursionError):
        result.metrics().query()  # Beam 2.77's fn_runner: one nested generator per bundle
    got = query_metrics(result, MetricsFilter().with_namespace("probe"))
    assert [c.committed for c in got["counters"]] == [CHECKPOINTS]
