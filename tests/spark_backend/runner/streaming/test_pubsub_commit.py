"""Pub/Sub acks follow the driver's commit (PySparkRunner --streaming, the real emulator).

A batch's output is committed by the driver after its Spark job; a bundle finalizer run
inside the task (where the reader registers its acks) would ack messages whose batch then
fails, or whose driver dies, before the commit: the restart would never see them. The
streaming runner calls no finalizer; the reader acks what a state owed when that
committed state resumes.

The run: 6 messages are published and read in the first batches, which commit; then 6
more are published, and a stateful DoFn downstream of the read fails on them, so their
batch is never committed (as a driver killed between the task and the commit). A second
run of the same pipeline from the checkpoint must output the 6 new records, once each
(before the fix they were acked by the failed batch's finalizer and lost).
"""

# ruff: noqa: B008

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from beam_pipelines.emulator import Emulator
from beam_pipelines.pubsub_sdf import ReadFromPubSubWithTrackingWatermark
from beam_pipelines.sinks import WriteBatchesToText
from tests.spark_backend.runner.streaming.ckpt_pipeline import outputs
from theory.time import SECOND

pytestmark = pytest.mark.slow

FIRST = [f"a{i}" for i in range(6)]
SECOND_SET = [f"b{i}" for i in range(6)]


class FailOnSecondSet(beam.DoFn):
    """Passes record ids on; with ``fail``, raises on an id of the second set (its batch
    then never commits). Stateful, so it runs after a shuffle, in another task than the
    read's bundle."""

    SEEN = ReadModifyWriteStateSpec("seen", VarIntCoder())

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def process(self, kv: Any, seen: Any = beam.DoFn.StateParam(SEEN)) -> Any:
        _, rid = kv
        if self.fail and rid.startswith("b"):
            raise RuntimeError(f"failing on {rid} before the batch commits")
        seen.write((seen.read() or 0) + 1)
        yield rid


def build(p: beam.Pipeline, topic: str, base: str, tracking: str, out: str, fail: bool) -> None:
    (
        p
        | "pubsub"
        >> ReadFromPubSubWithTrackingWatermark(
            topic,
            base,
            tracking,
            timestamp_attribute="ts",
            id_label="rid",
            max_records=len(FIRST) + len(SECOND_SET),  # the read ends once all are out
            records_per_bundle=100,
            idle_poll=0.2,
            lease_grace=1 * SECOND,
            owed_lease=2,  # the failed batch's messages come back 2 s after it
            stop_after_idle=30,  # a lost message must not hang the test
        )
        | "key" >> beam.Map(lambda r: (r.record_id[0], r.record_id))
        | "check" >> beam.ParDo(FailOnSecondSet(fail))
        | "write" >> WriteBatchesToText(out),
    )


def run(topic: str, base: str, tracking: str, out: Path, checkpoint: Path, fail: bool) -> Any:
    from spark_backend.runner import PySparkRunner

    options = PipelineOptions(
        ["--streaming", "--key_partitions", "2", "--checkpoint_dir", str(checkpoint)]
    )
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    build(p, topic, base, tracking, str(out), fail)
    return p.run()


def publish(emulator: Emulator, topic: str, ids: list[str]) -> None:
    now_ms = time.time_ns() // 1_000_000
    emulator.publish(topic, [{"ts": str(now_ms), "rid": rid} for rid in ids])


def test_a_batch_that_fails_before_its_commit_acks_nothing(
    spark: Any, pubsub_emulator: Emulator, tmp_path: Path
) -> None:
    topic = pubsub_emulator.create_topic()
    # the shortest lease the emulator takes: the failed batch's messages come back then
    base = pubsub_emulator.create_subscription(topic, ack_deadline_seconds=1)
    tracking = pubsub_emulator.create_subscription(topic, ack_deadline_seconds=1)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    publish(pubsub_emulator, topic, FIRST)

    def second_set_after_a_commit() -> None:
        deadline = time.monotonic() + 120
        while not list(checkpoint.glob("commit-*.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        publish(pubsub_emulator, topic, SECOND_SET)

    publisher = threading.Thread(target=second_set_after_a_commit)
    publisher.start()
    try:
        failed = run(topic, base, tracking, out, checkpoint, fail=True)
        with pytest.raises(Exception, match="failing on b"):
            failed.wait_until_finish()
    finally:
        publisher.join()
    before = outputs(out)
    first_run = sorted(line for lines in before.values() for line in lines)
    assert first_run == FIRST, "the first set was committed before the failure"

    result = run(topic, base, tracking, out, checkpoint, fail=False)
    result.wait_until_finish()
    after = outputs(out)
    assert {b: after[b] for b in before} == before  # committed batches untouched
    second_run = [line for b, lines in after.items() if b not in before for line in lines]
    # nothing lost (the failed batch acked nothing) and nothing twice
    assert sorted(second_run) == SECOND_SET
    # the reader's stage ran on the lean path (spark_backend.runner.stages.lean.sdf): its claims,
    # estimator state and owed acks went through Beam's tracker and estimator there
    (read,) = [n for n in result.stage_paths if "Read/Process" in n]
    assert result.stage_paths[read] == "lean"
