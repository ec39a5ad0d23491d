"""A drained, or finished, Pub/Sub read sends its last bundle's acks (PySparkRunner
--streaming, the real emulator).

The streaming runner never calls bundle finalizers: the reader acks what a committed state
owed when that state resumes (:mod:`spark_backend.runner.streaming.driver`). One pipeline,
two reads, every message published before it starts:

- ``drained``: unbounded, a few records a bundle, so each of the 3 batches reads some;
  then ``--drain``. The drain's last batch resumes the committed residual truncated (the
  reader's ``truncate``: only the read's end), which sends the third batch's acks.
- ``ends``: ``max_records`` ends the read in its first batch; the resume of that committed
  state (the read's end) acks it.

A second reader of the four subscriptions then pulls for longer than ``owed_lease`` plus
the ack deadline: no record the pipeline output comes back, and the drained base
subscription hands over exactly the messages the pipeline did not read (nothing lost).
Before the fix the third batch's records and the ended read's came back after 2 s.
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


@pytest.mark.filterwarnings("ignore:The return_immediately:DeprecationWarning")
def test_a_drained_or_finished_read_leaves_nothing_to_come_back(
    spark: Any, pubsub_emulator: Emulator, tmp_path: Path
) -> None:
    from spark_backend.runner import PySparkRunner

    drained = _subscriptions(pubsub_emulator, DRAINED)
    ends = _subscriptions(pubsub_emulator, ENDS)
    options = PipelineOptions(
        ["--streaming", "--key_partitions", "2", "--max_batches", "3", "--drain"]
    )
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    for name, (topic, base, tracking), kw in (
        ("drained", drained, {}),
        ("ends", ends, {"max_records": len(ENDS)}),
    ):
        (
            p
            | name >> _read(topic, base, tracking, **kw)
            | f"{name}/id" >> beam.Map(lambda r: r.record_id)
            | f"{name}/capture" >> beam.ParDo(CaptureValues(str(tmp_path)))
        )
    result = p.run()
    assert result.wait_until_finish() == PipelineState.DONE
    assert result._driver.drained and result.batches == 4  # 3 batches, then the drain
    assert not result._driver.residuals  # the reads ended

    output = read_values(tmp_path)
    assert len(output) == len(set(output))  # nothing twice
    read = {rid for rid in output if rid.startswith("d")}
    assert sorted(rid for rid in output if rid.startswith("e")) == ENDS
    assert 8 < len(read) < len(DRAINED)  # each batch read some; the drain read none

    # a second reader, for longer than the leases the reader set and the ack deadline
    (_, base, tracking), (_, ends_base, ends_tracking) = drained, ends
    subscriptions = [base, tracking, ends_base, ends_tracking]
    back = _pull_for(pubsub_emulator, subscriptions, OWED_LEASE + 2.0)
    assert not read & set(back[base]), "records the pipeline output came back"
    assert sorted(back[base]) == sorted(set(DRAINED) - read)  # the unread ones, each once
    assert back[ends_base] == [] and back[ends_tracking] == []
    assert back[tracking] == []  # the first batch pulled every tracking message
