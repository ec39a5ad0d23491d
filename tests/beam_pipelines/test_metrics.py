"""Beam's RecursionError past about a thousand bundles of a stage (FnApiRunner chains one
monitoring-info generator per bundle) and beam_pipelines.metrics.query_metrics, which
reads the same metrics at twice that many checkpoints. The first assertion documents Beam's bug
(the evidence for an upstream report, reproduced by tests/evidence/beam_metrics_recursion.py):
when Beam fixes it, it fails, and the workaround can go."""

from __future__ import annotations

import pytest
from apache_beam.metrics.metric import MetricsFilter

from beam_pipelines.metrics import query_metrics
from tests.evidence.beam_metrics_recursion import run

pytestmark = pytest.mark.slow

CHECKPOINTS = 2_000


def test_metrics_past_twice_the_recursion_limit() -> None:
    result = run(CHECKPOINTS)  # a stage of 2,000 bundles, one checkpoint each
    with pytest.raises(RecursionError):
        result.metrics().query()  # Beam 2.77's fn_runner: one nested generator per bundle
    got = query_metrics(result, MetricsFilter().with_namespace("probe"))
    assert [c.committed for c in got["counters"]] == [CHECKPOINTS]
