"""The streaming pipeline of the checkpoint and fault tests (test_faults.py), also run in
its own process (a process holds one SparkContext; the tests kill it):

    python ckpt_pipeline.py OUT CHECKPOINT_DIR MASTER [EXIT_ONCE_MARKER]

Per-key sums in 10 s windows, early firings by processing time (the test clock), late
firings, accumulating (so every pane depends on the state kept between batches), written
with :class:`beam_pipelines.sinks.WriteBatchesToText` under ``OUT/batch-N/``. A counter
counts the elements read. With ``EXIT_ONCE_MARKER``, the Python worker running the element
``("b", 10)`` exits (``os._exit``) unless the marker file exists (it creates it first):
the task dies on its first attempt and Spark must retry it. Prints one JSON line: the
final state, the batches run and the counter.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Timestamp

from beam_pipelines.sinks import WriteBatchesToText

S = 1_000_000
#: The TestStream's events: each is one micro-batch, plus the last one.
ROUNDS = 1


def events() -> TestStream:
    stream = TestStream()
    for r in range(ROUNDS):
        t = 7 * r
        stream = (
            stream.add_elements([tv("a", r + 1, t + 1), tv("b", 10 * (r + 1), t + 3)])
            .advance_processing_time(2)
            .add_elements([tv("a", 100 * (r + 1), t + 2)])
            .advance_watermark_to(Timestamp(micros=(t + 12) * S))
        )
    return stream.add_elements([tv("a", 1000, 4)]).advance_watermark_to_infinity()  # late


def tv(key: str, value: int, seconds: int) -> window.TimestampedValue:
    return window.TimestampedValue((key, value), Timestamp(micros=seconds * S))


class Read(beam.DoFn):
    """Counts the elements; exits the worker once on ("b", 30) when armed."""

    def __init__(self, exit_once: str | None) -> None:
        self.exit_once = exit_once
        self.read = Metrics.counter("ckpt", "read")

    def process(self, element: Any) -> Any:
        self.read.inc()
        if self.exit_once and element == ("b", 10) and not Path(self.exit_once).exists():
            Path(self.exit_once).touch()
            os._exit(17)  # the Python worker dies mid-task
        yield element


class Describe(beam.DoFn):
    def process(
        self,
        kv: Any,
        timestamp: Any = beam.DoFn.TimestampParam,
        w: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Any:
        yield json.dumps(
            [kv[0], kv[1], int(timestamp.micros), repr(w), pane.timing, pane.index, pane.is_last]
        )


def window_like() -> beam.WindowInto:
    """10 s windows, early firings 1 s of processing time after a pane's first element,
    late firings per element, accumulating, 60 s allowed lateness."""
    return beam.WindowInto(
        window.FixedWindows(10),
        trigger=trigger.AfterWatermark(
            early=trigger.AfterProcessingTime(1), late=trigger.AfterCount(1)
        ),
        accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        allowed_lateness=60,
    )


def build(p: beam.Pipeline, out: str, exit_once: str | None = None) -> None:
    (
        p
        | "events" >> events()
        | "read" >> beam.ParDo(Read(exit_once))
        | "window" >> window_like()
        | "sum" >> beam.CombinePerKey(sum)
        | "describe" >> beam.ParDo(Describe())
        | "write" >> WriteBatchesToText(out)
    )


def options(checkpoint: str, *extra: str) -> PipelineOptions:
    return PipelineOptions(
        ["--streaming", "--checkpoint_dir", checkpoint, "--key_partitions", "2", *extra]
    )


def run(out: str, checkpoint: str, *extra: str, exit_once: str | None = None) -> Any:
    """Run the pipeline (PySparkRunner) to its end; the result."""
    from spark_backend.runner import PySparkRunner

    p = beam.Pipeline(runner=PySparkRunner(), options=options(checkpoint, *extra))
    build(p, out, exit_once)
    result = p.run()
    result.wait_until_finish()
    return result


def read_count(result: Any) -> int:
    counters = result.metrics().query(MetricsFilter().with_name("read"))["counters"]
    return sum(c.committed for c in counters)


def outputs(out: Path) -> dict[str, list[str]]:
    """Each committed batch's lines, sorted (files of a batch in any order)."""
    return {
        d.name: sorted(line for f in sorted(d.glob("*.txt")) for line in f.read_text().splitlines())
        for d in sorted(out.glob("batch-*"))
    }


if __name__ == "__main__":
    out_dir, checkpoint_dir, master, *marker = sys.argv[1:]
    # a small driver beside the suite's own sessions
    flags = ("--spark_master", master, "--spark_conf", "spark.driver.memory=1g")
    done = run(out_dir, checkpoint_dir, *flags, exit_once=(marker or [None])[0])
    print(json.dumps({"state": str(done.state), "batches": done.batches, "read": read_count(done)}))
