"""The project's Pub/Sub reader end to end on PySparkRunner --streaming and the emulator.

A publisher thread sends messages stamped (attribute ``ts``) with their publish time, and
then stragglers stamped 2 minutes in the past, while the pipeline reads them with
``ReadFromPubSubWithTrackingWatermark`` into 1 s windows, until ``--max_batches``. The
reader runs as it would in production: ``pt_base`` from its own ledger, a lease grace (4 s
after the first start; the 10 s default would outlast the 11 batches on a quiet machine),
and its bundles in whichever Python worker Spark picks
(the ledger, the owed acks and the clean-resume claims travel with the estimator state).
The tracking estimator's watermark, as the run recorded it (``result.watermarks()``),
decides:

- every window fires in the first batch after which that watermark is past its end,
  while the read goes on, in the order of window ends;
- the records the GroupByKey dropped as late are exactly those whose window had ended by
  the watermark at the end of the batch before the one that read them.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.transforms import window

from beam_pipelines.emulator import Emulator
from beam_pipelines.pubsub_sdf import METRICS_NAMESPACE, ReadFromPubSubWithTrackingWatermark
from tests.helpers.streaming import stamped_pane
from theory.time import MILLISECOND, SECOND

pytestmark = pytest.mark.slow

READ = "pubsub/Read"
GROUP = "group"


def publish(emulator: Emulator, topic: str, stop: threading.Event) -> None:
    """Messages at their publish time (5 a second) until ``stop`` (the end of the run: the
    read never runs dry), and every 2 s, from 3 s on, five stragglers 2 minutes old (so
    some are read after the watermark has moved, however fast the batches run)."""
    started = time.time()
    n = 0
    bursts = 0
    while not stop.is_set():
        now_ms = time.time_ns() // 1_000_000
        batch = [{"ts": str(now_ms - i * 10), "rid": f"r{n + i}"} for i in range(5)]
        n += 5
        if time.time() - started > 3 + 2 * bursts:
            batch += [{"ts": str(now_ms - 120_000 - i), "rid": f"s{n + i}"} for i in range(5)]
            n += 5
            bursts += 1
        emulator.publish(topic, batch)
        stop.wait(1.0)


def pipeline(topic: str, base: str, tracking: str) -> Any:
    def build(p: beam.Pipeline, capture: Any) -> None:
        records = p | "pubsub" >> ReadFromPubSubWithTrackingWatermark(
            topic,
            base,
            tracking,
            timestamp_attribute="ts",
            id_label="rid",
            band=300 * MILLISECOND,
            idle_lag=600 * MILLISECOND,
            idle_poll=0.3,
            records_per_bundle=100_000,  # a batch drains the subscription
            lease_grace=4 * SECOND,  # 10 s by default: about all 11 batches on a quiet machine
        )
        read = records | "stamp" >> beam.Map(  # fused with the read: its worker's pid
            lambda r: ("read", r.record_id, r.event_time, time.time_ns() // 1000, os.getpid())
        )
        panes = (
            records
            | "window" >> beam.WindowInto(window.FixedWindows(1))
            | "key" >> beam.Map(lambda r: ("all", r.record_id))
            | GROUP >> beam.GroupByKey()
            | "pane" >> beam.MapTuple(stamped_pane)
            | "unwindow" >> beam.WindowInto(window.GlobalWindows())  # one coder into Flatten
        )
        (read, panes) | beam.Flatten() | "capture" >> beam.ParDo(capture)

    return build


def test_windows_fire_by_the_tracking_watermark_while_pubsub_is_read(
    pubsub_emulator: Emulator, run_pipeline: Any
) -> None:
    topic = pubsub_emulator.create_topic()
    base = pubsub_emulator.create_subscription(topic)
    tracking = pubsub_emulator.create_subscription(topic)
    stop = threading.Event()
    publisher = threading.Thread(target=publish, args=(pubsub_emulator, topic, stop))
    publisher.start()
    try:
        values, result = run_pipeline(pipeline(topic, base, tracking), max_batches=11)
    finally:
        stop.set()
        publisher.join()
    marks = result.watermarks()
    estimate = marks[READ]["output"]  # the tracking estimator's watermark, per batch
    seen = marks[GROUP]["input"]
    starts = estimate.times  # each batch's processing time at its start
    assert seen.values.tolist() == estimate.values.tolist()

    def batch_of(wall: int) -> int:
        return int(np.searchsorted(starts, wall, side="right")) - 1

    def before(b: int) -> int:  # the watermark the batch started from
        return int(estimate.values[b - 1]) if b > 0 else int(np.iinfo(np.int64).min)

    def end_of(event_time: int) -> int:
        return (event_time // SECOND + 1) * SECOND

    reads = [v for v in values if v[0] == "read"]
    panes = sorted((v for v in values if v[0] == "pane"), key=lambda v: v[3])
    assert len(reads) >= 20 and panes, "the read and the windows must both happen"
    # windows fire while the read goes on, in the order of the estimator's watermark
    assert panes[0][3] < max(r[3] for r in reads)
    assert [p[1] for p in panes] == sorted(p[1] for p in panes)
    for _, end, _, wall in panes:
        b = batch_of(wall)
        assert before(b) < end <= int(estimate.values[b]), (end, b)
    # the late records are exactly those the watermark had passed when they were read
    final = int(estimate.values[-1])
    in_panes = {rid for p in panes for rid in p[2]}
    dropped = {r[1] for r in reads if end_of(r[2]) <= final and r[1] not in in_panes}
    expected = {r[1] for r in reads if end_of(r[2]) <= before(batch_of(r[3]))}
    t0 = int(starts[0])
    late_ones = sorted(((r[3] - t0) // 1000, (r[2] - t0) // 1000) for r in reads if r[1][0] == "s")
    assert expected, (
        "no record came after the watermark: the test would say nothing; "
        f"batches at {[(int(t) - t0) // 1000 for t in starts]} ms, watermarks "
        f"{[(int(v) - t0) // 1000 for v in estimate.values]} ms, stragglers read "
        f"{late_ones[:20]}"
    )
    assert dropped == expected
    stragglers = {r[1] for r in reads if r[1].startswith("s")}
    assert stragglers & expected  # 2 minutes old: behind the watermark once it moved
    # the grace was armed at the first start only: every resume, in whichever worker
    # (processes that read: {r[4] for r in reads}), was a clean one
    armed = result.metrics().query(
        MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("lease_grace_armed")
    )["counters"]
    workers = sorted({r[4] for r in reads})
    assert sum(c.committed for c in armed) == 1, workers
