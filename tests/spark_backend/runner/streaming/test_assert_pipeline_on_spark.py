"""assert_pipeline with PySparkRunner --streaming as the runner: the issue's pipeline
shape (a filter fed by a side input, early and late firings, a Sessions branch) checked
stage by stage against the model fed each stage's input and the run's own per-batch
input watermark; the panes are the direct runner's, timestamps at whole milliseconds."""

from __future__ import annotations

from typing import Any

import pytest

from beam_pipelines.testing.pipeline import assert_pipeline
from spark_backend.runner import PySparkRunner
from tests.helpers.clicks import SHORT_SCRIPT, Clicks
from theory.time import MICROS_PER_MILLI

pytestmark = pytest.mark.slow


def _key(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            repr(r.key),
            r.start,
            r.end,
            r.timestamp - r.timestamp % MICROS_PER_MILLI,
            r.timing,
            r.index,
            r.is_first,
            r.is_last,
            repr(r.value),
        )
        for r in rows
    )


def test_every_grouping_stage_matches_the_model_on_spark(spark: Any) -> None:
    on_spark = assert_pipeline(Clicks(), SHORT_SCRIPT, runner=PySparkRunner())
    direct = assert_pipeline(Clicks(), SHORT_SCRIPT)
    assert set(on_spark) == set(direct) == {"Clicks/Count", "Clicks/PerSession"}
    for label, rows in direct.items():
        assert _key(on_spark[label]) == _key(rows), label
    timings = [p.timing for p in on_spark["Clicks/Count"] if p.key == "alice"]
    assert timings == ["EARLY", "ON_TIME", "LATE"]
