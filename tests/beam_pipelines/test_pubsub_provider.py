"""beam_pipelines.pubsub without a Pub/Sub: event-time parsing (against Beam's own), the
ack ledger, the Cloud Monitoring backlog, the readers over a fake client, and the Beam
WatermarkEstimatorProvider's contract. The emulator tests are test_pubsub_emulator.py."""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from apache_beam.runners.sdf_utils import ThreadsafeWatermarkEstimator
from apache_beam.utils.timestamp import Timestamp
from google.api_core import exceptions as gexc
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_pipelines.pubsub import (
    ERROR_EMPTY,
    ERROR_MISSING,
    ERROR_OUT_OF_RANGE,
    ERROR_UNPARSEABLE,
    REASON_LEASE_GRACE,
    AckLedger,
    BacklogSample,
    BaseConsumer,
    EventTimeError,
    MonitoredBaseBacklog,
    OffsetClock,
    OwedAcks,
    PubsubRecord,
    TrackingReader,
    TrackingWatermarkEstimator,
    TrackingWatermarkEstimatorProvider,
    decode_message,
    parse_event_time,
)
from beam_pipelines.resume_claims import ResumeClaims
from theory.dataflow.pubsub import (
    REASON_BAND_MIN,
    REASON_HELD_NOT_AHEAD,
    REASON_LATCHED,
    TrackingEstimator,
)
from theory.dataflow.pubsub_simulation import ManualClock
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, SECOND, from_datetime

S = SECOND
T = 1_700_000_000 * S  # 2023-11-14T22:13:20Z


# --------------------------------------------------------------------------- event time


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("1700000000123", T + 123_000),
        ("-5", -5_000),
        ("+7", 7_000),
        (" 42 ", 42_000),
        ("0", 0),  # an explicit epoch is a value, not an error
        ("2023-11-14T22:13:20Z", T),
        ("2023-11-14t22:13:20z", T),
        ("2023-11-14 22:13:20Z", T),
        ("2023-11-14T22:13:20.1Z", T + 100_000),
        ("2023-11-14T22:13:20.123456Z", T + 123_456),
        ("2023-11-14T22:13:20.123456789Z", T + 123_456),  # below the µs: truncated
        ("2023-11-15T00:13:20+02:00", T),
        ("2023-11-14T20:43:20-01:30", T),
        ("1969-12-31T23:59:59.999999Z", -1),
    ],
)
def test_parse_event_time(text: str, micros: int) -> None:
    assert parse_event_time(text) == micros


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, ERROR_MISSING),
        ("", ERROR_EMPTY),
        ("   ", ERROR_EMPTY),
        ("yesterday", ERROR_UNPARSEABLE),
        ("1.5", ERROR_UNPARSEABLE),
        ("2023-02-30T00:00:00Z", ERROR_UNPARSEABLE),
        ("2023-11-14T25:00:00Z", ERROR_UNPARSEABLE),
        ("2023-11-14T22:13:60Z", ERROR_UNPARSEABLE),
        ("2023-11-14T22:13:20", ERROR_UNPARSEABLE),  # no offset: local time is a guess
        ("2023-11-14T22:13:20+24:00", ERROR_UNPARSEABLE),
        ("2023-11-14T22:13:20.1234567891Z", ERROR_UNPARSEABLE),  # beyond nanoseconds
        ("99999999999999999999", ERROR_OUT_OF_RANGE),
        ("-9223372036854776", ERROR_OUT_OF_RANGE),
    ],
)
def test_bad_event_time_names_its_reason(text: str | None, reason: str) -> None:
    with pytest.raises(EventTimeError) as info:
        parse_event_time(text)
    assert info.value.reason == reason


@settings(max_examples=300, deadline=None)
@given(
    when=st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    offset_minutes=st.integers(-23 * 60 - 59, 23 * 60 + 59),
    digits=st.sampled_from([0, 3, 6, 9]),
)
def test_rfc3339_agrees_with_beam(when: dt.datetime, offset_minutes: int, digits: int) -> None:
    sign = "+" if offset_minutes >= 0 else "-"
    off = f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"
    frac = f"{when.microsecond:06d}{when.microsecond % 1000:03d}"[:digits]
    stamp = f"{when.year:04d}-{when:%m-%dT%H:%M:%S}"
    text = stamp + (f".{frac}" if frac else "") + off
    beam = Timestamp.from_rfc3339(text)
    beam_micros = beam.to_precision(Timestamp.MICROS_PRECISION, allow_lossy_conversion=True).micros
    assert parse_event_time(text) == beam_micros


@settings(max_examples=200, deadline=None)
@given(ms=st.integers(MIN_TIMESTAMP // 1000, MAX_TIMESTAMP // 1000))
def test_millis_agree_with_beam(ms: int) -> None:
    assert parse_event_time(str(ms)) == Timestamp(micros=int(str(ms)) * 1000).micros


# --------------------------------------------------------------------------- messages


def received(mid: str, publish_time: int, attrs: dict[str, str], ack_id: str | None = None) -> Any:
    return SimpleNamespace(
        ack_id=ack_id or f"ack-{mid}",
        delivery_attempt=0,
        message=SimpleNamespace(
            message_id=mid,
            publish_time=dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            + dt.timedelta(microseconds=publish_time),
            attributes=attrs,
            data=b"payload",
        ),
    )


def test_decode_message_keys_by_id_label_and_counts_no_zero() -> None:
    rec = decode_message(received("m1", T, {"ts": "1700000000000", "rid": "r1"}), "ts", "rid")
    assert (rec.record_id, rec.publish_time, rec.event_time, rec.error) == ("r1", T, T, None)
    plain = decode_message(received("m2", T, {"ts": "x"}), "ts", "rid")
    assert (plain.record_id, plain.event_time, plain.error) == ("m2", None, ERROR_UNPARSEABLE)


# --------------------------------------------------------------------------- ledger


def test_ledger_joins_tracking_and_base() -> None:
    led = AckLedger()
    assert led.oldest_unacked_publish_time() is None
    led.expect("a", 10 * S)  # tracked, the base has not seen it yet
    led.expect("b", 20 * S)
    led.on_received("c", 30 * S)  # the base got it before tracking did
    assert led.oldest_unacked_publish_time() == 10 * S
    led.on_acked([("a", 10 * S)])
    assert led.oldest_unacked_publish_time() == 20 * S
    led.expect("a", 10 * S)  # tracking sees it after the base acked it: ignored
    assert led.counters["already acked"] == 1
    led.on_acked([("b", 20 * S), ("c", 30 * S)])
    assert led.oldest_unacked_publish_time() is None and led.outstanding == 0


def test_ledger_republished_record_keeps_its_earliest_copy() -> None:
    led = AckLedger()
    led.expect("r", 10 * S)
    led.expect("r", 50 * S)  # a publisher retry of the same record id
    assert led.oldest_unacked_publish_time() == 10 * S
    led.on_received("r", 50 * S)
    led.on_acked([("r", 50 * S)])
    assert led.oldest_unacked_publish_time() is None


def test_ledger_redelivery_after_ack_is_owed_again() -> None:
    led = AckLedger()
    led.on_received("r", 10 * S)
    led.on_acked([("r", 10 * S)])
    led.on_received("r", 10 * S)  # Pub/Sub redelivers an acked message (at least once)
    assert led.oldest_unacked_publish_time() == 10 * S


def test_ledger_forgets_acks_beyond_its_memory() -> None:
    led = AckLedger(acked_memory=60 * S)
    led.on_received("old", 0)
    led.on_acked([("old", 0)])
    led.on_received("new", 100 * S)
    led.on_acked([("new", 100 * S)])  # the horizon is 40 s: "old" is forgotten
    led.expect("old", 0)
    assert led.counters["stale expect"] == 1 and led.oldest_unacked_publish_time() is None
    led.expect("mid", 50 * S)  # within the horizon and not acked: owed
    assert led.oldest_unacked_publish_time() == 50 * S


def test_ledger_state_round_trips() -> None:
    led = AckLedger()
    led.expect("a", 10 * S)
    led.on_received("b", 5 * S)
    led.on_acked([("c", 7 * S)])
    again = AckLedger.from_state(json.loads(json.dumps(led.state())))
    assert again.state() == led.state()
    assert again.oldest_unacked_publish_time() == 5 * S


# --------------------------------------------------------------------------- monitoring


def test_monitored_backlog_is_a_latched_lower_bound() -> None:
    samples: list[Any] = [None, BacklogSample(100 * S, 30 * S), RuntimeError("quota")]
    samples += [BacklogSample(90 * S, 30 * S), BacklogSample(200 * S, 0)]

    def fetch() -> BacklogSample | None:
        s = samples.pop(0)
        if isinstance(s, Exception):
            raise s
        return s

    b = MonitoredBaseBacklog(fetch)
    assert b.oldest_unacked_publish_time() == MIN_TIMESTAMP  # nothing known: keep all
    assert b.oldest_unacked_publish_time() == 69 * S  # 100 - 30 - 1 s of rounding
    assert b.oldest_unacked_publish_time() == 69 * S  # fetch failed: the last bound
    assert b.errors["RuntimeError"] == 1
    assert b.oldest_unacked_publish_time() == 69 * S  # an older sample never lowers it
    assert b.oldest_unacked_publish_time() == 199 * S  # empty at 200 s: never None


# --------------------------------------------------------------------------- readers


class FakeSubscriber:
    """Serves prepared pull answers; records every call (and snapshots) in ``log``."""

    def __init__(self, answers: Sequence[Any]) -> None:
        self.answers = list(answers)
        self.log: list[tuple[str, Any]] = []
        self.fail_ack: Exception | None = None

    def pull(self, request: dict[str, Any], timeout: float, retry: Any) -> Any:
        self.log.append(("pull", request["subscription"]))
        answer = self.answers.pop(0) if self.answers else []
        if isinstance(answer, Exception):
            raise answer
        return SimpleNamespace(received_messages=answer)

    def acknowledge(self, request: dict[str, Any], timeout: float, retry: Any) -> None:
        self.log.append(("ack", tuple(request["ack_ids"])))
        if self.fail_ack is not None:
            raise self.fail_ack

    def modify_ack_deadline(self, request: dict[str, Any], timeout: float, retry: Any) -> None:
        self.log.append(("modify", request["ack_deadline_seconds"]))


def reader_over(sub: FakeSubscriber, clock: ManualClock, **kw: Any) -> TrackingReader:
    """A reader on the fake subscriber; one clock for both, so no clock skew."""
    kw.setdefault("estimator", TrackingEstimator(max_clock_skew=0))
    kw.setdefault("lease_grace", 0)
    kw.setdefault("ledger", AckLedger())
    kw.setdefault("backlog", kw["ledger"])
    return TrackingReader(sub, "tracking", timestamp_attribute="ts", clock=clock, **kw)


def test_reader_snapshots_before_it_acks_and_before_it_answers() -> None:
    batch = [received(f"m{i}", T + i * S, {"ts": str((T + i * S) // 1000 - 500)}) for i in range(3)]
    sub = FakeSubscriber([batch, []])
    clock = ManualClock(T + 10 * S)

    def sink(state: dict[str, Any]) -> None:
        sub.log.append(("snapshot", state["estimator"]["tracked"]))

    r = reader_over(sub, clock, snapshot_sink=sink)
    assert r.poll() == 3
    assert [k for k, _ in sub.log] == ["pull", "snapshot", "ack", "pull"]
    assert sub.log[1] == ("snapshot", 3)  # the batch is in the snapshot it precedes
    assert not r.tracking_has_backlog()
    e = r.estimate()
    assert sub.log[-1][0] == "snapshot" and e.reason == REASON_BAND_MIN
    restored = TrackingReader.from_snapshot(
        r.state(),
        sub,
        "tracking",
        backlog=AckLedger(),
        timestamp_attribute="ts",
        clock=clock,
        lease_grace=0,
    )
    assert restored.estimator.state() == r.estimator.state()


def test_reader_failed_pull_is_counted_and_never_drained() -> None:
    sub = FakeSubscriber([gexc.ServiceUnavailable("down"), gexc.DeadlineExceeded("quiet")])
    r = reader_over(sub, ManualClock(T))
    assert r.poll() == 0
    assert r.rpc_errors == {"pull: ServiceUnavailable": 1} and r.tracking_has_backlog()
    assert r.estimate().reason != REASON_BAND_MIN
    assert r.poll() == 0 and not r.tracking_has_backlog()  # a quiet long poll is empty


def test_reader_failed_ack_is_counted_and_harmless() -> None:
    sub = FakeSubscriber([[received("m", T, {"ts": str(T // 1000)})], []])
    sub.fail_ack = gexc.NotFound("gone")
    r = reader_over(sub, ManualClock(T))
    assert r.poll() == 1 and r.rpc_errors == {"acknowledge: NotFound": 1}
    assert r.estimator.tracked == 1


def test_reader_bad_attributes_are_counted_and_acked() -> None:
    sub = FakeSubscriber([[received("a", T, {}), received("b", T, {"ts": "?"})], []])
    r = reader_over(sub, ManualClock(T))
    assert r.poll() == 0
    assert r.attribute_errors == {ERROR_MISSING: 1, ERROR_UNPARSEABLE: 1}
    assert ("ack", ("ack-a", "ack-b")) in sub.log and r.estimator.tracked == 0


def test_reader_holds_for_the_lease_grace() -> None:
    clock = ManualClock(T)
    sub = FakeSubscriber([[received("m", T, {"ts": str(T // 1000)})], []])
    r = reader_over(sub, clock, lease_grace=10 * S)
    r.poll()
    clock.advance_to(T + 10 * S - 1)
    assert r.estimate().reason == REASON_LEASE_GRACE
    clock.advance_to(T + 10 * S)
    assert r.estimate().reason == REASON_BAND_MIN


def test_base_consumer_clears_the_ledger_only_after_a_successful_ack() -> None:
    msgs = [received("m1", T, {"ts": str(T // 1000)}), received("m2", T + S, {})]
    sub = FakeSubscriber([msgs, [msgs[0]]])
    c = BaseConsumer(sub, "base", timestamp_attribute="ts")
    got = c.pull()
    assert got is not None and c.ledger.oldest_unacked_publish_time() == T
    assert c.attribute_errors == {ERROR_MISSING: 1}
    sub.fail_ack = gexc.ServiceUnavailable("down")
    assert not c.ack(got) and c.ledger.oldest_unacked_publish_time() == T
    assert c.pull() is not None and c.redeliveries == 1
    sub.fail_ack = None
    assert c.ack(got) and c.ledger.oldest_unacked_publish_time() is None
    assert c.nack(got[:1], 0) and sub.log[-1] == ("modify", 0)


def test_offset_clock_skips_ahead() -> None:
    clock = OffsetClock()
    a = clock()
    clock.advance(120 * S)
    assert clock() - a >= 120 * S
    assert pickle.loads(pickle.dumps(clock)).offset == 120 * S


# --------------------------------------------------------------------------- Beam provider


def provider() -> TrackingWatermarkEstimatorProvider:
    return TrackingWatermarkEstimatorProvider(
        band=10 * S,
        idle_lag=10 * S,
        bucket_width=S,
        max_clock_skew=0,  # one clock
    )


def rec(pt: int, et: int) -> PubsubRecord:
    return PubsubRecord("r", "m", pt, et, None, "ack", b"", {})


def test_provider_contract_and_state_round_trip() -> None:
    p = pickle.loads(pickle.dumps(provider()))  # a provider travels to workers
    state = p.initial_estimator_state("element", "restriction")
    est = p.create_watermark_estimator(state)
    assert isinstance(est, TrackingWatermarkEstimator)
    assert est.current_watermark() == Timestamp(micros=MIN_TIMESTAMP)
    assert est.tokens()[0] is None

    assert est.record([rec(100 * S, 6 * S), rec(120 * S, 100 * S)]) == 2  # the book's case
    e = est.update(130 * S, 100 * S, True)
    assert (e.watermark, e.reason) == (6 * S, REASON_BAND_MIN)
    assert est.current_watermark() == Timestamp(micros=6 * S)

    est.observe_timestamp(Timestamp(micros=7 * S))
    est.observe_timestamp(Timestamp(micros=5 * S))  # below the reported watermark: late
    assert est.counts() == {"observed": 2, "late_observed": 1, "tracked": 2, "regressions": 0}

    coder = p.estimator_state_coder()
    saved = est.get_estimator_state()
    again = p.create_watermark_estimator(coder.decode(coder.encode(saved)))
    assert again.current_watermark() == Timestamp(micros=6 * S)
    assert again.estimator.state() == est.estimator.state()
    assert again.tokens()[0] == est.tokens()[1]  # resumed from that attempt's state
    assert again.tokens()[1] != est.tokens()[1]
    assert again.counts() == est.counts()


def test_the_readers_whole_keep_travels_in_the_state() -> None:
    """The ledger (``pt_base``), the acks owed and the last record's time survive Beam's
    state coder, so another worker resumes exactly; owed acks are handed over once."""
    p = provider()
    coder = p.estimator_state_coder()
    est = p.create_watermark_estimator(p.initial_estimator_state(0, 0))
    assert est.ledger().oldest_unacked_publish_time() is None
    assert est.take_owed() == OwedAcks() and est.last_record() is None
    est.ledger().expect("a", 100 * S)
    est.ledger().on_received("b", 90 * S)
    tracked = PubsubRecord("a", "m1", 100 * S, 95 * S, None, "ack-t", b"x", {})
    good = PubsubRecord("b", "m2", 90 * S, 80 * S, None, "ack-b", b"y", {"k": "v"})
    bad = PubsubRecord("c", "m3", 91 * S, None, "missing", "ack-c", b"", {})
    est.owe(tracking=[tracked], base=[good, bad])
    est.set_last_record(120 * S)

    again = p.create_watermark_estimator(coder.decode(coder.encode(est.get_estimator_state())))
    assert again.ledger().oldest_unacked_publish_time() == 90 * S
    assert again.ledger().state() == est.ledger().state()
    assert again.last_record() == 120 * S
    owed = again.take_owed()
    assert owed == OwedAcks(
        ("ack-t",), (("ack-b", "b", 90 * S, True), ("ack-c", "c", 91 * S, False))
    )
    assert again.take_owed() == OwedAcks()  # handed over once
    assert again.get_estimator_state()["owed"] == ([], [])  # this attempt owes nothing yet

    sub = FakeSubscriber([])
    consumer = BaseConsumer(sub, "base", timestamp_attribute="ts", ledger=again.ledger())
    sub.fail_ack = gexc.ServiceUnavailable("down")
    assert not consumer.ack_owed(owed.base)  # failed, counted ...
    assert consumer.rpc_errors == {"acknowledge: ServiceUnavailable": 1}
    # ... and the ledger still drops b: the finalizer most likely acked it; if not, it is
    # redelivered and received again
    assert again.ledger().oldest_unacked_publish_time() == 100 * S


def test_resume_claims_first_claimant_wins_across_processes(tmp_path: Any) -> None:
    claims = ResumeClaims(str(tmp_path / "claims"))
    assert not claims.claim(None)  # a first start is never clean
    assert claims.claim("t1")
    assert not claims.claim("t1")  # a retry, in this process ...
    script = (
        "import sys; from beam_pipelines.resume_claims import ResumeClaims as C; "
        "c = C(sys.argv[1]); print(c.claim('t1'), c.claim('t2'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, claims.directory],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["False", "True"]  # ... and in another one
    assert not claims.claim("t2")
    with pytest.raises(ValueError, match="claim token"):
        claims.claim("../escape")
    with pytest.raises(ValueError, match="max_age"):
        ResumeClaims(max_age=0)
    old = time.time() - 7200
    os.utime(os.path.join(claims.directory, "t1"), (old, old))
    assert claims.sweep() == 1 and claims.claim("t1")  # swept after max_age


def test_current_watermark_is_monotonic_and_counts_regressions() -> None:
    est = provider().create_watermark_estimator(provider().initial_estimator_state(0, 0))
    est.record([rec(100 * S, 50 * S), rec(130 * S, 120 * S)])
    assert est.update(200 * S, None, False).watermark == 120 * S
    est.record([rec(131 * S, 10 * S)])  # older data: the computed value falls
    e = est.update(201 * S, None, False)
    assert (e.reason, e.watermark) == (REASON_LATCHED, 120 * S)
    assert est.current_watermark() == Timestamp(micros=120 * S)
    assert est.counts()["regressions"] == 1


def test_hold_until_holds_the_watermark() -> None:
    est = provider().create_watermark_estimator(provider().initial_estimator_state(0, 0))
    est.record([rec(100 * S, 90 * S), rec(120 * S, 110 * S)])
    est.hold_until_at_least(150 * S)
    e = est.update(149 * S, 100 * S, True)
    assert (e.reason, e.watermark) == (REASON_LEASE_GRACE, MIN_TIMESTAMP)
    assert est.update(150 * S, 100 * S, True).watermark == 90 * S
    assert est.update(151 * S, 118 * S, True).reason == REASON_HELD_NOT_AHEAD


def test_every_reader_method_survives_beams_threadsafe_wrapper() -> None:
    """Beam hands the DoFn a ThreadsafeWatermarkEstimator, which reaches methods only."""
    raw = provider().create_watermark_estimator(provider().initial_estimator_state(0, 0))
    wm: Any = ThreadsafeWatermarkEstimator(raw)
    resumed, token = wm.tokens()
    assert resumed is None and isinstance(token, str)
    wm.hold_until_at_least(0)
    assert wm.record([rec(100 * S, 90 * S)]) == 1
    assert wm.update(200 * S, None, False).watermark == 90 * S
    assert wm.watermark_micros() == 90 * S and wm.counts()["tracked"] == 1
    assert wm.current_watermark() == Timestamp(micros=90 * S)
    assert wm.get_estimator_state()["token"] == token
    assert wm.ledger().outstanding == 0 and wm.take_owed() == OwedAcks()
    wm.owe(tracking=[rec(1, 1)])
    wm.set_last_record(5 * S)
    assert wm.last_record() == 5 * S and wm.get_estimator_state()["owed"][0] == ["ack"]


def test_bad_estimator_state_is_rejected() -> None:
    state = provider().initial_estimator_state(0, 0)
    with pytest.raises(ValueError, match="version"):
        TrackingWatermarkEstimator({**state, "version": 99})
    for key in ("hold_until", "ledger", "owed", "last_record"):
        broken = dict(state)
        del broken[key]
        with pytest.raises(ValueError, match=key):
            TrackingWatermarkEstimator(broken)
    with pytest.raises(ValueError, match="expected version 2, got 1"):
        TrackingWatermarkEstimator({**state, "version": 1})  # a session-6 state
    with pytest.raises(ValueError, match="band"):
        TrackingWatermarkEstimatorProvider(band=-1)
    assert from_datetime(dt.datetime(2023, 11, 14, 22, 13, 20)) == T


_LEDGER_OPS = st.lists(
    st.tuples(
        st.sampled_from(["expect", "receive", "ack", "handover"]),
        st.integers(0, 7),  # record id
        st.integers(0, 20),  # publish time, s
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(_LEDGER_OPS)
def test_a_ledger_handed_between_workers_answers_as_one_in_process(ops: Any) -> None:
    """``pt_base`` from a ledger whose state goes through Beam's coder to a new estimator
    (another worker) at any points equals one process's ledger's, after every step."""
    p = TrackingWatermarkEstimatorProvider(acked_memory=5 * S)
    coder = p.estimator_state_coder()
    est = p.create_watermark_estimator(p.initial_estimator_state(0, 0))
    reference = AckLedger(5 * S)
    for op, rid, pt in ops:
        if op == "handover":
            est = p.create_watermark_estimator(
                coder.decode(coder.encode(est.get_estimator_state()))
            )
            continue
        for ledger in (est.ledger(), reference):
            if op == "expect":
                ledger.expect(f"r{rid}", pt * S)
            elif op == "receive":
                ledger.on_received(f"r{rid}", pt * S)
            else:
                ledger.on_acked([(f"r{rid}", pt * S)])
        assert est.ledger().oldest_unacked_publish_time() == reference.oldest_unacked_publish_time()
        assert est.ledger().outstanding == reference.outstanding


def test_permission_errors_fail_naming_the_subscription() -> None:
    """The emulator has no IAM, so the client's PermissionDenied is served here: at the
    start (``get_subscription``) and on a pull it fails the read naming the subscription;
    a transient error is only counted."""
    from beam_pipelines import pubsub_sdf

    path = "projects/p/subscriptions/scores"
    sub = FakeSubscriber([gexc.PermissionDenied("denied"), gexc.ServiceUnavailable("busy")])
    reader = TrackingReader(sub, path, backlog=AckLedger(), timestamp_attribute="ts")
    assert reader.pull() is None
    with pytest.raises(pubsub_sdf.SubscriptionError, match=f"{path}: pull failed with Permission"):
        pubsub_sdf._fail_if_fatal(reader)
    transient = TrackingReader(sub, path, backlog=AckLedger(), timestamp_attribute="ts")
    assert transient.pull() is None and transient.rpc_errors == {"pull: ServiceUnavailable": 1}
    pubsub_sdf._fail_if_fatal(transient)  # no raise

    def denied(request: dict[str, Any], **kw: Any) -> Any:
        raise gexc.PermissionDenied(f"no access to {request['subscription']}")

    fn = pubsub_sdf.ReadWithTrackingWatermarkFn()
    fn._subscriber = SimpleNamespace(get_subscription=denied)
    spec = pubsub_sdf.PubsubReadSpec(path, path + "-tracking", "ts")
    with pytest.raises(pubsub_sdf.SubscriptionError, match=f"base subscription {path}: Permission"):
        fn._check_subscriptions(spec)
