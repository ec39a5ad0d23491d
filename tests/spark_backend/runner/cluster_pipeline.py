"""Pipelines run in their own process by test_cluster.py (each master needs its own
SparkContext, and a process holds one at a time).

    python cluster_pipeline.py MARKER_DIR MASTER [MASTER ...]

For each MASTER in turn (the Spark session is stopped between them, so the JVM starts
once), counts words; the DoFn ``FailOnce`` raises once, in the task that first meets the
word "fail", unless its marker file (one per master, in MARKER_DIR) exists (it creates
the marker first), so Spark must retry that task. ``assert_that`` checks the output
inside the pipeline (a missing or duplicated element fails the run); a JSON line per
master gives the state, the committed counter of processed words (to check it counted
once) and whether the DoFn failed.
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
from spark_backend.session.session import stop_session

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


def run(master: str, marker: Path) -> dict[str, Any]:
    options = PipelineOptions(["--spark_master", master])
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    words = (
        p | beam.Create(WORDS) | beam.Reshuffle() | "FailOnce" >> beam.ParDo(FailOnce(str(marker)))
    )
    counts = words | beam.combiners.Count.PerElement()
    assert_that(counts, equal_to([("a", 20), ("b", 20), ("c", 10), ("fail", 10)]))
    result = p.run()
    state = result.wait_until_finish()
    seen = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    return {
        "master": master,
        "state": str(state),
        "seen": [c.committed for c in seen],
        "failed_once": marker.exists(),
    }


def main(marker_dir: str, masters: list[str]) -> None:
    for number, master in enumerate(masters):
        report = run(master, Path(marker_dir) / f"failed-once-{number}")
        stop_session()
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
