"""A drained, or finished, Pub/Sub read sends its last bundle's acks (PySparkRunner
--streaming, the real emulator).

The streaming runner never calls bundle finalizers: the reader acks what a committed state
owed when that state resumes (:mod:`spark_backend.runner.streaming.driver`). One pipeline,
two reads, every message published before it starts:

- ``drained``: unbounded, 4 records a bundle, so every batch reads some; its ids are
  grouped in the global window, a pane that fires only when a drain puts the watermark at
  infinity. The drain's last batch resumes the committed residual truncated (the reader's
  ``truncate``: only the read's end), which sends the last batch's acks. This stage is
  lean.
- ``ends``: ``max_records`` ends the read in its first batch; the resume of that committed
  state (the read's end) acks it. This stage is on the bundle processor (the capture
  DoFn fused into it has ``start_bundle``).

The first run (``--max_batches 3 --drain``, a checkpoint) fails in its drain batch, on the
pane, after that batch acked what batch 2 committed and before its own commit (a crash
before the drain's commit). The second run resumes from batch 2's commit, runs one batch
and drains: its pane holds every record read, once (nothing the failed drain acked was
lost). Then a second reader of the four subscriptions pulls for longer than
``owed_lease`` plus the ack deadline: no record the pipeline read comes back, and the
drained base subscription hands over exactly the messages the pipeline did not read.
Before the fix the last batch's records and the ended read's came back after 2 s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from beam_pipelines.emulator import Emulator
from beam_pipelines.pubsub_sdf import ReadFromPubSubWithTrackingWatermark
from spark_backend.runner.plan.plan import BUNDLE_PROCESSOR, LEAN
from tests.spark_backend.runner.streaming.conftest import CaptureValues, read_values
from theory.time import SECOND

pytestmark = pytest.mark.slow

OWED_LEASE = 2  # s: an unsent ack's message comes back this long after its bundle
DRAINED = [f"d{i:02d}" for i in range(40)]
ENDS = [f"e{i}" for i in range(4)]


def _read(topic: str, base: str, tracking: str, **kw: Any) -> ReadFromPubSubWithTrackingWatermark:
    return ReadFromPubSubWithTrackingWatermark(
        topic,
        base,
        tracking,
        timestamp_attribute="ts",
        id_label="rid",
        max_messages=4,  # a pull takes at most 4 ...
        records_per_bundle=4,  # ... and a bundle ends after 4 records: every batch reads
        idle_poll=1.0,
        lease_grace=1 * SECOND,
        owed_lease=OWED_LEASE,
        stop_after_idle=60,  # a lost message must not hang the test
        **kw,
    )


def _subscriptions(emulator: Emulator, ids: list[str]) -> tuple[str, str, str]:
    topic = emulator.create_topic()
    base = emulator.create_subscription(topic, ack_deadline_seconds=1)
    tracking = emulator.create_subscription(topic, ack_deadline_seconds=1)
    now_ms = time.time_ns() // 1_000_000
    emulator.publish(topic, [{"ts": str(now_ms), "rid": rid} for rid in ids])
    return topic, base, tracking


def _pull_for(emulator: Emulator, subscriptions: list[str], seconds: float) -> dict[str, list[str]]:
    """Every record id each subscription delivers within ``seconds`` (acked)."""
    got: dict[str, list[str]] = {sub: [] for sub in subscriptions}
    deadline = time.monotonic() + seconds
    client = emulator.subscriber
    while time.monotonic() < deadline:
        for sub in subscriptions:
            request = {"subscription": sub, "max_messages": 100, "return_immediately": True}
            received = client.pull(request=request, timeout=10).received_messages
            if received:
                ack_ids = [m.ack_id for m in received]
                client.acknowledge(request={"subscription": sub, "ack_ids": ack_ids})
                got[sub] += [m.message.attributes["rid"] for m in received]
        time.sleep(0.1)
    return got


class Pane(beam.DoFn):
    """The drained read's pane, its ids one by one; with ``fail``, raises on it instead."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def process(self, kv: Any) -> Any:
        if self.fail:
            raise RuntimeError("failing on the drain's pane before its commit")
        yield from kv[1]


def run(
    streams: dict[str, tuple[str, str, str]], out: Path, checkpoint: Path, fail: bool, batches: int
) -> Any:
    from spark_backend.runner import PySparkRunner

    options = PipelineOptions(
        [
            *("--streaming", "--key_partitions", "2", "--checkpoint_dir", str(checkpoint)),
            *("--max_batches", str(batches), "--drain"),
        ]
    )
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    capture = CaptureValues(str(out))
    (
        p
        | "drained" >> _read(*streams["drained"])
        | "drained/id" >> beam.Map(lambda r: (0, r.record_id))
        | "drained/group" >> beam.GroupByKey()
        | "drained/pane" >> beam.ParDo(Pane(fail))
        | "drained/capture" >> beam.ParDo(capture)
    )
    (
        p
        | "ends" >> _read(*streams["ends"], max_records=len(ENDS))
        | "ends/id" >> beam.Map(lambda r: r.record_id)
        | "ends/capture" >> beam.ParDo(capture)
    )
    return p.run()


@pytest.mark.filterwarnings("ignore:The return_immediately:DeprecationWarning")
def test_a_drained_or_finished_read_leaves_nothing_to_come_back(
    spark: Any, pubsub_emulator: Emulator, tmp_path: Path
) -> None:
    streams = {
        "drained": _subscriptions(pubsub_emulator, DRAINED),
        "ends": _subscriptions(pubsub_emulator, ENDS),
    }
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    failed = run(streams, out, checkpoint, fail=True, batches=3)
    with pytest.raises(Exception, match="failing on the drain's pane"):
        failed.wait_until_finish()
    assert failed.batches == 3  # the drain batch failed: the checkpoint is batch 2's
    assert sorted(read_values(out)) == ENDS  # the ended read's records, written in batch 0

    result = run(streams, out, checkpoint, fail=False, batches=1)
    assert result.wait_until_finish() == PipelineState.DONE
    assert result._driver.drained and result.batches == 2  # one batch, then the drain
    assert not result._driver.residuals  # the reads ended
    stages = result.stage_paths
    paths = {read: stages[n] for n in stages for read in streams if f"{read}/Read/Process" in n}
    assert paths == {"drained": LEAN, "ends": BUNDLE_PROCESSOR}, paths

    output = read_values(out)
    assert len(output) == len(set(output))  # nothing twice
    read = {rid for rid in output if rid.startswith("d")}
    assert sorted(rid for rid in output if rid.startswith("e")) == ENDS
    assert 12 < len(read) < len(DRAINED)  # 4 batches read some; the drains read none

    # a second reader, for longer than the leases the reader set and the ack deadline
    (_, base, tracking), (_, ends_base, ends_tracking) = streams["drained"], streams["ends"]
    subscriptions = [base, tracking, ends_base, ends_tracking]
    back = _pull_for(pubsub_emulator, subscriptions, OWED_LEASE + 2.0)
    assert not read & set(back[base]), "records the pipeline read came back"
    assert sorted(back[base]) == sorted(set(DRAINED) - read)  # the unread ones, each once
    assert back[ends_base] == [] and back[ends_tracking] == []
    assert back[tracking] == []  # the first batch pulled every tracking message
