"""ReadFromPubSubWithTrackingWatermark on the Pub/Sub emulator: records stamped with their
event time, a dead-letter output for bad event-time attributes, and a pipeline that fails
naming a missing subscription or one of another topic."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.sdf_utils import (
    RestrictionTrackerView,
    ThreadsafeRestrictionTracker,
    ThreadsafeWatermarkEstimator,
)
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines.emulator import Emulator
from beam_pipelines.metrics import query_metrics
from beam_pipelines.pubsub import system_clock
from beam_pipelines.pubsub_sdf import (
    DEAD_LETTER,
    METRICS_NAMESPACE,
    PubsubReadSpec,
    ReadFromPubSubWithTrackingWatermark,
    ReadWithTrackingWatermarkFn,
)
from theory.time import MILLISECOND, SECOND

MS = MILLISECOND

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


#: The readings of each :class:`_TickingClock` in this process, by the clock's key.
_TICKS: dict[str, int] = {}


class _TickingClock:
    """Processing time (µs) that moves ``step`` µs at each reading, from the wall clock
    when made. FnApiRunner runs the DoFn in this process: the copies it unpickles share
    the readings through ``_TICKS``."""

    def __init__(self, step: int) -> None:
        self.key = uuid.uuid4().hex
        self.step = step
        self.start = _TICKS[self.key] = system_clock()

    def __call__(self) -> int:
        _TICKS[self.key] += self.step
        return _TICKS[self.key]

    def elapsed(self) -> int:
        return _TICKS[self.key] - self.start


def test_an_idle_subscription_is_read_in_few_large_bundles(pubsub_emulator: Emulator) -> None:
    """With nothing to read, the reader polls within a bundle for ``idle_poll`` (1 s of its
    clock) before it checkpoints: a few checkpoints, not one per empty pull (20 a second
    before, which took FnApiRunner's metrics past its recursion limit within a minute). Its
    clock moves 100 ms at each reading: the read ends after 6 s of it without data
    (``stop_after_idle``), with no wall time spent on the idle seconds."""
    topic, base, tracking = _topic_and_subscriptions(pubsub_emulator)
    clock = _TickingClock(100 * MILLISECOND)
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | ReadFromPubSubWithTrackingWatermark(
        topic, base, tracking, idle_poll=1.0, stop_after_idle=6.0, clock=clock, **FAST
    )
    result = pipeline.run()
    result.wait_until_finish()
    elapsed = clock.elapsed() / SECOND
    got = query_metrics(
        result, MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("checkpoints")
    )
    checkpoints = sum(c.committed for c in got["counters"])
    assert elapsed > 6.0
    assert 2 <= checkpoints <= elapsed / 1.0 + 1, (checkpoints, elapsed)


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
    for bad in (0, 601, 1.5, True):
        with pytest.raises(ValueError, match=r"owed_lease must be whole seconds in \[1, 600\]"):
            ReadFromPubSubWithTrackingWatermark(None, sub + "a", sub + "b", owed_lease=bad)
    assert ReadWithTrackingWatermarkFn(owed_lease=None).owed_lease is None


class _NeverFinalized:
    """A bundle finalizer that keeps its callbacks and never runs them (Beam allows it)."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def register(self, callback: Any) -> None:
        self.callbacks.append(callback)


def _attempt(
    fn: ReadWithTrackingWatermarkFn,
    spec: Any,
    state: Any,
    restriction: OffsetRange | None = None,
    deferred: list[Any] | None = None,
) -> tuple[list[Any], Any]:
    """One attempt from ``state`` and ``restriction`` in a fresh copy of ``fn`` (another
    worker: nothing kept in the process is shared); its records and the state it
    checkpoints (None if it ended the read). The restriction it defers is appended to
    ``deferred``."""
    worker = pickle.loads(pickle.dumps(fn))
    worker.setup()
    try:
        estimator = ThreadsafeWatermarkEstimator(worker.create_watermark_estimator(state))
        tracker = ThreadsafeRestrictionTracker(
            worker.create_tracker(restriction or OffsetRange(0, 1_000))
        )
        out = list(
            worker.process(spec, _NeverFinalized(), RestrictionTrackerView(tracker), estimator)
        )
        status = tracker.deferred_status()
        tracker.check_done()
        if status is None:  # it ended the read
            return [v.value for v in out], None
        if deferred is not None:
            deferred.append(status[0])
        return [v.value for v in out], estimator.get_estimator_state()
    finally:
        worker.teardown()


@pytest.mark.filterwarnings("ignore:The return_immediately:DeprecationWarning")
def test_any_worker_resumes_any_state_and_a_retry_re_arms_the_grace(
    pubsub_emulator: Emulator, tmp_path: Path
) -> None:
    """Everything the reader keeps between bundles is in the estimator state: attempts in
    separate DoFn copies (separate workers) resume each other's states. The ledger's
    ``pt_base`` travels; the resumer sends the acks its predecessor owed, though no
    finalizer ever ran. A clean resume keeps the grace it inherited; a second attempt
    from the same state (a retry) re-arms it."""
    topic, base, tracking = _topic_and_subscriptions(pubsub_emulator)
    pubsub_emulator.publish(topic, [{"ts": "1000"}, {"ts": "2000"}, {"ts": "3000"}])
    fast = {**FAST, "lease_grace": 10 * SECOND}  # long enough to tell re-arming apart
    fn = ReadWithTrackingWatermarkFn(
        idle_poll=0, records_per_bundle=1, max_messages=1, claims_dir=str(tmp_path), **fast
    )
    spec = PubsubReadSpec(base, tracking, "ts", topic=topic)
    (first,), state1 = _attempt(fn, spec, fn.initial_estimator_state(spec, None))
    assert state1["hold_until"] > system_clock()  # a first start waits out leases
    # all three tracked, one read from the base: the base owes two
    assert len(state1["ledger"]["outstanding"]) == 2
    owed_tracking, owed_base = state1["owed"]
    assert len(owed_tracking) == 3 and [b[1] for b in owed_base] == [first.record_id]

    (second,), state2 = _attempt(fn, spec, state1)
    assert second.record_id != first.record_id
    assert len(state2["ledger"]["outstanding"]) == 1  # the ledger travelled
    assert state2["owed"] == ([], [(second.ack_id, second.record_id, second.publish_time, True)])
    assert state2["hold_until"] == state1["hold_until"]  # a clean resume: not re-armed

    (control,) = pubsub_emulator.publish(topic, [{"ts": "4000"}])
    client = pubsub_emulator.subscriber
    # a second ack (the finalizer's, had it run) is a no-op, not an error
    client.acknowledge(request={"subscription": tracking, "ack_ids": owed_tracking})
    for sub, ack_ids in ((tracking, owed_tracking), (base, [b[0] for b in owed_base])):
        # the owed acks were sent: asking for their redelivery brings none of them back
        client.modify_ack_deadline(
            request={"subscription": sub, "ack_ids": ack_ids, "ack_deadline_seconds": 0}
        )
        got = client.pull(
            request={"subscription": sub, "max_messages": 10, "return_immediately": True},
            timeout=10,
        ).received_messages
        ids = [m.message.message_id for m in got]
        assert control in ids and first.message_id not in ids, (sub, ids)
        if sub == tracking:
            assert ids == [control]
        client.modify_ack_deadline(  # back to the subscription for the next attempt
            request={
                "subscription": sub,
                "ack_ids": [m.ack_id for m in got],
                "ack_deadline_seconds": 0,
            }
        )

    _, state3 = _attempt(fn, spec, state1)  # the same state again: a retry
    assert state3["hold_until"] > state1["hold_until"]  # re-armed

    # the idle time travels too: a worker that never read stops a read idle elsewhere
    assert state1["last_record"] <= state2["last_record"] <= system_clock()
    empty = PubsubReadSpec(*_topic_and_subscriptions(pubsub_emulator)[1:], "ts")
    idle = {**state2, "last_record": system_clock() - 60 * SECOND, "token": None}
    stopping = ReadWithTrackingWatermarkFn(stop_after_idle=30, claims_dir=str(tmp_path), **fast)
    deferred: list[Any] = []
    # an idle stop leaves only the read's end (its last position): the resume of that
    # committed state sends what it owed and ends the read, reading nothing
    (_, ending), _ = (_attempt(f, empty, idle, deferred=deferred) for f in (stopping, fn))
    assert deferred[0] == OffsetRange(999, 1_000)
    assert ending is not None and _attempt(stopping, empty, ending, deferred[0]) == ([], None)
    assert deferred[1] == OffsetRange(0, 1_000)  # without stop_after_idle: unbounded
    # a drain's truncate leaves the end too (an empty restriction: nothing)
    assert fn.truncate(empty, OffsetRange(5, 1_000)) == OffsetRange(999, 1_000)
    assert fn.truncate(empty, OffsetRange(7, 7)) is None
    assert fn.initial_restriction(empty) == OffsetRange(0, empty.max_records + 1)


class _NothingUnacked:
    """A base backlog reporting nothing unacked (``pt_base`` from elsewhere)."""

    def oldest_unacked_publish_time(self) -> int | None:
        return None


def _nothing_unacked(spec: Any) -> _NothingUnacked:
    return _NothingUnacked()


def test_with_a_backlog_factory_the_state_keeps_no_ledger(
    pubsub_emulator: Emulator, tmp_path: Path
) -> None:
    """Two messages tracked, one read: the ledger owes one and remembers one ack; with
    ``pt_base`` from a backlog factory the state keeps neither."""
    kw: dict[str, Any] = {
        "idle_poll": 0,
        "records_per_bundle": 1,
        "max_messages": 1,
        "claims_dir": str(tmp_path),
    }
    for factory, kept in ((None, 1), (_nothing_unacked, 0)):
        topic, base, tracking = _topic_and_subscriptions(pubsub_emulator)
        pubsub_emulator.publish(topic, [{"ts": "1000"}, {"ts": "2000"}])
        spec = PubsubReadSpec(base, tracking, "ts", topic=topic)
        fn = ReadWithTrackingWatermarkFn(backlog_factory=factory, **kw, **FAST)
        (_,), state = _attempt(fn, spec, fn.initial_estimator_state(spec, None))
        ledger = state["ledger"]
        assert (len(ledger["outstanding"]), len(ledger["acked"])) == (kept, kept), factory
