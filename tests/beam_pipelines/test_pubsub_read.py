"""ReadFromPubSubWithTrackingWatermark on the Pub/Sub emulator: records stamped with their
event time, a dead-letter output for bad event-time attributes, and a pipeline that fails
naming a missing subscription or one of another topic."""

from __future__ import annotations

import threading
import time
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines.emulator import Emulator
from beam_pipelines.metrics import query_metrics
from beam_pipelines.pubsub_sdf import (
    DEAD_LETTER,
    METRICS_NAMESPACE,
    ReadFromPubSubWithTrackingWatermark,
    ReadWithTrackingWatermarkFn,
)
from theory.time import MILLISECOND, SECOND

pytestmark = pytest.mark.slow

FAST: dict[str, Any] = {
    "band": 300 * MILLISECOND,
    "idle_lag": 600 * MILLISECOND,
    "lease_grace": SECOND,
}


def _topic_and_subscriptions(emulator: Emulator) -> tuple[str, str, str]:
    topic = emulator.create_topic()
    return topic, emulator.create_subscription(topic), emulator.create_subscription(topic)


def test_records_are_stamped_and_bad_attributes_go_to_the_dead_letter_output(
    pubsub_emulator: Emulator,
) -> None:
    topic, base, tracking = _topic_and_subscriptions(pubsub_emulator)
    good = [{"ts": str(1_700_000_000_000 + i), "rid": f"r{i}"} for i in range(6)]
    bad = [{"rid": "no-ts"}, {"ts": "soon", "rid": "bad-ts"}]
    pubsub_emulator.publish(topic, [*good[:3], *bad, *good[3:]])
    read = ReadFromPubSubWithTrackingWatermark(
        topic,
        base,
        tracking,
        timestamp_attribute="ts",
        id_label="rid",
        max_records=len(good),
        dead_letter=True,
        stop_after_idle=20.0,  # a safety net for the test only
        **FAST,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = p | read
        stamped = out["records"] | beam.Map(
            lambda r, t=beam.DoFn.TimestampParam: (r.record_id, t.micros // 1000)
        )
        assert_that(
            stamped,
            equal_to([(g["rid"], int(g["ts"])) for g in good]),
            label="records at their event time",
        )
        dead = out[DEAD_LETTER] | beam.Map(lambda r: (r.record_id, r.error))
        assert_that(
            dead,
            equal_to([("no-ts", "missing"), ("bad-ts", "unparseable")]),
            label="dead letters",
        )


def test_an_idle_subscription_is_read_in_few_large_bundles(pubsub_emulator: Emulator) -> None:
    """With nothing to read for 3 s, the reader polls within a bundle for ``idle_poll``
    (1 s) before it checkpoints: a few checkpoints, not one per empty pull (20 a second
    before, which took FnApiRunner's metrics past its recursion limit within a minute)."""
    topic, base, tracking = _topic_and_subscriptions(pubsub_emulator)

    def publish_later() -> None:
        time.sleep(3.0)
        pubsub_emulator.publish(topic, [{"ts": "1000"}, {"ts": "2000"}])

    thread = threading.Thread(target=publish_later, daemon=True)
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | ReadFromPubSubWithTrackingWatermark(
        topic, base, tracking, max_records=2, idle_poll=1.0, stop_after_idle=30.0, **FAST
    )
    t0 = time.monotonic()
    thread.start()
    result = pipeline.run()
    result.wait_until_finish()
    elapsed = time.monotonic() - t0
    thread.join(timeout=10)
    got = query_metrics(
        result, MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("checkpoints")
    )
    checkpoints = sum(c.committed for c in got["counters"])
    assert 1 <= checkpoints <= elapsed / 1.0 + 1, (checkpoints, elapsed)


def test_a_missing_subscription_fails_the_pipeline_naming_it(pubsub_emulator: Emulator) -> None:
    topic, _, tracking = _topic_and_subscriptions(pubsub_emulator)
    missing = pubsub_emulator.subscription_path("no-such-subscription")
    with (
        pytest.raises(Exception, match=f"base subscription {missing}: NotFound"),
        beam.Pipeline(runner=FnApiRunner()) as p,
    ):
        _ = p | ReadFromPubSubWithTrackingWatermark(topic, missing, tracking, **FAST)


def test_a_subscription_of_another_topic_fails_the_pipeline(pubsub_emulator: Emulator) -> None:
    topic, base, _ = _topic_and_subscriptions(pubsub_emulator)
    other_topic, other, _ = _topic_and_subscriptions(pubsub_emulator)
    with (
        pytest.raises(Exception, match=f"tracking subscription {other} is attached to"),
        beam.Pipeline(runner=FnApiRunner()) as p,
    ):
        _ = p | ReadFromPubSubWithTrackingWatermark(topic, base, other, **FAST)
    assert other_topic != topic


def test_the_read_is_unbounded_unless_asked_and_arguments_are_checked() -> None:
    assert ReadWithTrackingWatermarkFn().stop_after_idle is None
    sub = "projects/p/subscriptions/"
    with pytest.raises(ValueError, match="base_subscription must be a path"):
        ReadFromPubSubWithTrackingWatermark(None, "base", sub + "t")
    with pytest.raises(ValueError, match="must differ"):
        ReadFromPubSubWithTrackingWatermark(None, sub + "a", sub + "a")
    with pytest.raises(ValueError, match="idle_poll must be >= 0 s"):
        ReadFromPubSubWithTrackingWatermark(None, sub + "a", sub + "b", idle_poll=-1)
    with pytest.raises(ValueError, match="stop_after_idle must be > 0 s or None"):
        ReadFromPubSubWithTrackingWatermark(None, sub + "a", sub + "b", stop_after_idle=0)
