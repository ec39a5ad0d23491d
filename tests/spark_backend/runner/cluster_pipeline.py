"""A pipeline run in its own process by test_cluster.py (it needs its own Spark master).

    python cluster_pipeline.py MASTER MARKER

Counts words on MASTER; the DoFn ``FailOnce`` raises once, in the task that first
meets the word "fail", unless MARKER exists (it creates MARKER first), so Spark must
retry that task. ``assert_that`` checks the output inside the pipeline (a missing or
duplicated element fails the run); the committed counter of processed words is printed
as JSON for the test to check it counted once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from spark_backend.runner import PySparkRunner

WORDS = ["a", "b", "fail", "c", "b", "a"] * 10


class FailOnce(beam.DoFn):
    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.seen = Metrics.counter("cluster", "seen")

    def process(self, word: str) -> Any:
        self.seen.inc()
        if word == "fail" and not Path(self.marker).exists():
            Path(self.marker).touch()
            raise RuntimeError("transient failure, once")
        yield word


def main(master: str, marker: str) -> None:
    options = PipelineOptions(["--spark_master", master])
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    words = p | beam.Create(WORDS) | beam.Reshuffle() | "FailOnce" >> beam.ParDo(FailOnce(marker))
    counts = words | beam.combiners.Count.PerElement()
    assert_that(counts, equal_to([("a", 20), ("b", 20), ("c", 10), ("fail", 10)]))
    result = p.run()
    state = result.wait_until_finish()
    seen = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    print(json.dumps({"state": str(state), "seen": [c.committed for c in seen]}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
