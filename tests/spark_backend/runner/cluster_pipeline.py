"""Pipelines and commands run in their own process by test_cluster.py (each master
needs its own SparkContext, and a process holds one at a time; the JVM starts once).

    python cluster_pipeline.py WORK_DIR LOCAL_MASTER CLUSTER_MASTER

First on LOCAL_MASTER (while the cluster starts), then on CLUSTER_MASTER:

- the retry case: counts words; the DoFn ``FailOnce`` raises once, in the task that
  first meets the word "fail", unless its marker file (one per master, in WORK_DIR)
  exists (it creates the marker first), so Spark must retry that task;
- on LOCAL_MASTER, the fault-free references: ``watermarks analyze`` and ``simulate``
  with ``--engine spark`` into ``WORK_DIR/ref-analyze`` and ``WORK_DIR/ref-simulate``;
- on CLUSTER_MASTER, the fault cases in turn (``pipeline``, ``analyze``, ``simulate``,
  outputs in ``WORK_DIR/fault-<case>``): before each, once both workers' executors are
  registered, the event ``ready-<case>`` in WORK_DIR is set and the case waits for
  ``go-<case>``, set by the test once it has armed a kill (see
  ``task_events/pyspark_task_event.py``).

``assert_that`` checks each pipeline's output inside the pipeline (a missing or
duplicated element fails the run); a JSON line per run gives the state, the committed
counter of processed words (to check it counted once) and, for the retry case, whether
the DoFn failed; a command's line gives its exit status.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from spark_backend.cli.commands import main as watermarks
from spark_backend.runner import PySparkRunner
from spark_backend.session.session import get_session, stop_session
from tests.helpers.events import FileEvent

WORDS = ["a", "b", "fail", "c", "b", "a"] * 10
EXPECTED = [("a", 20), ("b", 20), ("c", 10), ("fail", 10)]
TRACE_EVENTS = 4000  # rows of the trace analyze reads; simulate's events too
WORKERS = 2
WAIT_S = 900.0


class FailOnce(beam.DoFn):
    def __init__(self, marker: str | None) -> None:
        self.marker = marker
        self.seen = Metrics.counter("cluster", "seen")

    def process(self, word: str) -> Any:
        self.seen.inc()
        if self.marker and word == "fail" and not Path(self.marker).exists():
            Path(self.marker).touch()
            raise RuntimeError("transient failure, once")
        yield word


def run(master: str, marker: Path | None, name: str) -> dict[str, Any]:
    """The word count on ``master`` (every stage on Spark, 6 partitions)."""
    options = PipelineOptions(["--spark_master", master])
    p = beam.Pipeline(runner=PySparkRunner(driver_stages=False), options=options)
    words = (
        p
        | beam.Create(WORDS, reshuffle=False)
        | beam.Reshuffle(num_buckets=6)
        | "FailOnce" >> beam.ParDo(FailOnce(str(marker) if marker else None))
    )
    assert_that(words | beam.combiners.Count.PerElement(), equal_to(EXPECTED))
    result = p.run()
    state = result.wait_until_finish()
    seen = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    return {
        "run": name,
        "state": str(state),
        "seen": [c.committed for c in seen],
        "failed_once": marker is not None and marker.exists(),
    }


def commands(master: str, work: Path, prefix: str) -> list[list[str]]:
    """The ``analyze`` and ``simulate`` command lines on ``master``, outputs in ``work``."""
    spark = ["--engine", "spark", "--master", master]
    return [
        ["analyze", str(work / "t.csv"), *spark, "--systems", "none",
         "--strategies", "perfect,bounded:10s,percentile:0.9",
         "--out", str(work / f"{prefix}-analyze")],
        ["simulate", "--events", str(TRACE_EVENTS), *spark,
         "--out", str(work / f"{prefix}-simulate")],
    ]  # fmt: skip


def emit(report: dict[str, Any]) -> None:
    print(json.dumps(report), flush=True)


def wait_for_executors(master: str) -> None:
    """Until both workers' executors are registered (a killed worker's replacement too)."""
    tracker = get_session(master).sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + WAIT_S
    while len(tracker.getExecutorInfos()) < WORKERS + 1:  # and the driver's
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {WORKERS} executors after {WAIT_S} s")
        time.sleep(0.1)


def handshake(work: Path, case: str, master: str) -> None:
    wait_for_executors(master)
    FileEvent(work / f"ready-{case}").set()
    if not FileEvent(work / f"go-{case}").wait(WAIT_S):
        raise TimeoutError(f"no go-{case} from the test")


def main(work: Path, local: str, cluster: str) -> None:
    from theory.data.generators import generate_trace
    from theory.data.io import write_trace

    write_trace(generate_trace(TRACE_EVENTS, seed=3), work / "t.csv")
    get_session(local)
    emit({**run(local, work / "failed-once-local", "retry"), "master": local})
    for argv in commands(local, work, "ref"):
        emit({"run": f"ref-{argv[0]}", "code": watermarks(argv)})
    stop_session()
    get_session(cluster, ["spark.python.worker.module=pyspark_task_event",
                          "spark.locality.wait=0"])  # fmt: skip
    emit({**run(cluster, work / "failed-once-cluster", "retry"), "master": cluster})
    handshake(work, "pipeline", cluster)
    emit(run(cluster, None, "fault-pipeline"))
    for argv in commands(cluster, work, "fault"):
        handshake(work, argv[0], cluster)
        emit({"run": f"fault-{argv[0]}", "code": watermarks(argv)})
    stop_session()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
