"""The base/tracking estimator against the real Pub/Sub emulator (issue 7).

Each test publishes a seeded trace (event time in the ``ts`` attribute, alternately
milliseconds and RFC 3339; record id in ``rid``, Beam's ``id_label``) to a fresh topic,
runs a :class:`TrackingReader` on the tracking subscription and our own
:class:`BaseConsumer` (which keeps the :class:`AckLedger`) on the base subscription, and
checks at every step that the watermark is monotonic and never passes the event time of a
record the base has not acked. A record is *late* if the base processes it (first copy)
with an event time below the watermark of the step before.

Times are real (Pub/Sub stamps publish times with the wall clock), compressed: a 300 ms
band, event times up to 150 ms before their scheduled publish, a 600 ms idle lag. The
readers' clock is an :class:`OffsetClock`, which skips minutes of silence without sleeping.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.util import assert_that, equal_to
from google.api_core import exceptions as gexc

from beam_pipelines.pubsub import (
    ERROR_EMPTY,
    ERROR_MISSING,
    ERROR_OUT_OF_RANGE,
    ERROR_UNPARSEABLE,
    REASON_LEASE_GRACE,
    AckLedger,
    BaseConsumer,
    OffsetClock,
    PubsubRecord,
    TrackingReader,
    system_clock,
)
from beam_pipelines.pubsub_sdf import METRICS_NAMESPACE, PubsubReadSpec, ReadWithTrackingWatermarkFn
from theory.dataflow.pubsub import (
    REASON_BAND_MIN,
    REASON_CAPPED,
    REASON_HELD_NOT_AHEAD,
    REASON_IDLE,
    REASON_LATCHED,
    TrackingEstimator,
)
from theory.time import MILLISECOND, MIN_TIMESTAMP, MINUTE, SECOND, format_timestamp

pytestmark = pytest.mark.slow

MS = MILLISECOND
BAND = 300 * MS
DISORDER = 150 * MS
IDLE_LAG = 600 * MS
WIDTH = 10 * MS
ATTR = "ts"
ID = "rid"
STEP_LIMIT_S = 40.0  # every loop below is bounded by this much real time


@dataclass(frozen=True)
class Rec:
    """One record of the trace: id, seeded lag and due time (µs); once published, its
    event time (whole ms) and attribute (milliseconds or RFC 3339, alternately)."""

    rid: str
    lag: int
    due: int
    index: int
    event_time: int = MIN_TIMESTAMP
    attr: str = ""

    def stamped(self, now: int) -> Rec:
        """The record published at ``now``: event time = now - lag. Stamping at the
        publish call keeps ``publish time - event time`` at the lag plus the publish
        latency even when a loaded machine publishes behind schedule."""
        et = (now // MS) * MS - self.lag
        attr = str(et // MS) if self.index % 2 else rfc3339(et)
        return replace(self, event_time=et, attr=attr)


def rfc3339(micros: int) -> str:
    return format_timestamp(micros).replace("+00:00", "Z")


def make_trace(seed: int, n: int, pace: int, start: int, prefix: str = "r") -> list[Rec]:
    """``n`` records due every ``pace`` µs from ``start``, each ``U[0, DISORDER]`` old
    when published (whole ms): disorder (150 ms) inside the band (300 ms)."""
    rng = random.Random(seed)
    return [
        Rec(f"{prefix}{i}", rng.randint(0, DISORDER // MS) * MS, start + i * pace, i)
        for i in range(n)
    ]


class Harness:
    """Publisher, tracking reader, base consumer and the ground truth, stepped together."""

    def __init__(
        self,
        env: Any,
        clock: OffsetClock,
        trace: Sequence[Rec] = (),
        *,
        seed: int = 0,
        lease_grace: int = 0,
        base_batch: int = 100,
        skew: int = 0,
    ) -> None:
        self.env = env
        self.clock = clock
        self.skew = skew  # the estimator's max_clock_skew (0: the host's one clock)
        self.rng = random.Random(seed)
        self.ledger = AckLedger()
        self.snapshots: list[str] = []
        self.reader = self.new_reader(None, lease_grace)
        self.consumer = BaseConsumer(
            env.subscriber,
            env.base,
            timestamp_attribute=ATTR,
            id_label=ID,
            ledger=self.ledger,
            max_messages=base_batch,
        )
        self.future = list(trace)
        self.next = 0
        self.published: dict[str, Rec] = {}  # rid -> the record as first published
        self.unacked: dict[str, int] = {}  # rid -> event time: published, base has not acked
        self.processed: dict[str, int] = {}  # rid -> watermark when first processed
        self.late: list[str] = []
        self.wm = MIN_TIMESTAMP
        # now, watermark, newest tracked, true watermark, reason, tracking backlog
        self.rows: list[tuple[int, int, int | None, int, str, bool]] = []
        self.max_delay = 0  # max publish time - event time seen by the base
        self.lost: set[str] = set()  # rids the "worker" drops (no ack, no processing)
        self.dropped: list[PubsubRecord] = []  # ... the copies it dropped

    def new_reader(self, snapshot: dict[str, Any] | None, lease_grace: int) -> TrackingReader:
        kw: dict[str, Any] = {
            "backlog": self.ledger,
            "ledger": self.ledger,
            "timestamp_attribute": ATTR,
            "id_label": ID,
            "clock": self.clock,
            "snapshot_sink": lambda s: self.snapshots.append(json.dumps(s)),
            "lease_grace": lease_grace,
        }
        if snapshot is None:
            est = TrackingEstimator(
                band=BAND, idle_lag=IDLE_LAG, bucket_width=WIDTH, max_clock_skew=self.skew
            )
            return TrackingReader(self.env.subscriber, self.env.tracking, estimator=est, **kw)
        return TrackingReader.from_snapshot(snapshot, self.env.subscriber, self.env.tracking, **kw)

    # ------------------------------------------------------------------ publishing

    def publish(self, recs: Iterable[Rec], *, duplicate: bool = False) -> list[Rec]:
        """Publish (a record published before goes out again with its event time)."""
        now = system_clock()
        out = [self.published.get(r.rid) or r.stamped(now) for r in recs]
        for r in out:
            self.published.setdefault(r.rid, r)
        self.env.publish([{ATTR: r.attr, ID: r.rid} for r in out])
        if not duplicate:
            for r in out:
                self.unacked[r.rid] = r.event_time
        return out

    def et(self, rec: Rec) -> int:
        """A published record's event time."""
        return self.published[rec.rid].event_time

    def publish_due(self, limit: int | None = None) -> None:
        now = system_clock()
        start = self.next
        while self.next < len(self.future) and self.future[self.next].due <= now:
            if limit is not None and self.next - start >= limit:
                break
            self.next += 1
        if self.next > start:
            self.publish(self.future[start : self.next])

    @property
    def done_publishing(self) -> bool:
        return self.next >= len(self.future)

    def true_watermark(self, now: int) -> int:
        """Min event time of what the base still owes; a record not yet published will
        be at least ``now - DISORDER`` (a lower bound, so distances are overestimated)."""
        pending = [now - DISORDER] if not self.done_publishing else []
        return min([*self.unacked.values(), *pending], default=2**62)

    # ------------------------------------------------------------------ base consumer

    def base_step(self, *, nack_fraction: float = 0.0, ack_lost_fraction: float = 0.0) -> int:
        """One pull of the base: drop ``lost`` records, give back some (nack: delivery
        disorder), process the rest, lose some acks (redelivered: duplicates)."""
        got = self.consumer.pull() or []
        keep, give_back, ack_lost = [], [], []
        for rec in got:
            if rec.event_time is not None:
                self.max_delay = max(self.max_delay, rec.publish_time - rec.event_time)
            if rec.record_id in self.lost:
                self.dropped.append(rec)
                continue
            if rec.error is None and self.rng.random() < nack_fraction:
                give_back.append(rec)
                continue
            self.process(rec)
            if rec.error is None and self.rng.random() < ack_lost_fraction:
                ack_lost.append(rec)
            else:
                keep.append(rec)
        self.consumer.nack(give_back)
        self.consumer.nack(ack_lost)
        if keep and self.consumer.ack(keep):
            for rec in keep:
                self.unacked.pop(rec.record_id, None)
        return len(got)

    def process(self, rec: PubsubRecord) -> None:
        if rec.event_time is None or rec.record_id in self.processed:
            return  # dead-lettered, or a duplicate (Beam's id_label dedup drops it)
        self.processed[rec.record_id] = self.wm
        if rec.event_time < self.wm:
            self.late.append(rec.record_id)

    # ------------------------------------------------------------------ estimating

    def estimate(self) -> str:
        before = self.clock()
        e = self.reader.estimate()
        assert e.watermark >= self.wm, f"watermark went back: {e}"
        lowest = min(self.unacked.values(), default=None)
        assert lowest is None or e.watermark <= lowest, (
            f"watermark {e.watermark} passed an unacked record at {lowest}: {e.reason}"
        )
        self.wm = e.watermark
        newest = self.reader.estimator.newest_publish_time
        backlog = self.reader.tracking_has_backlog()
        true = self.true_watermark(before)
        self.rows.append((before, e.watermark, newest, true, e.reason, backlog))
        return e.reason

    def step(self, **base: float) -> str:
        self.publish_due()
        self.reader.poll()
        self.base_step(**base)
        return self.estimate()

    def run(self, *, until_done: bool = True, **base: float) -> None:
        deadline = time.monotonic() + STEP_LIMIT_S
        while not (self.done_publishing and not self.unacked and until_done):
            assert time.monotonic() < deadline, "the stream did not drain in time"
            self.step(**base)

    # ------------------------------------------------------------------ checks

    def check_distance(self) -> np.ndarray:
        """The estimate is within the rule's reach of the true watermark at every step
        that applied the rule (tracking drained each step): ``true - wm <= max(band + D +
        bucket + (true - newest)+, idle_lag + (true - now)+)``, D the largest publish -
        event delay seen. Returns the lags (µs)."""
        d = self.max_delay
        lags = []
        for now, wm, newest, true, why, backlog in self.rows:
            if why not in (REASON_BAND_MIN, REASON_CAPPED, REASON_LATCHED) or true >= 2**62:
                continue
            if backlog:  # not drained: the distance is not the rule's to bound
                continue
            assert newest is not None
            bound = max(BAND + d + WIDTH + max(0, true - newest), IDLE_LAG + max(0, true - now))
            assert true - wm <= bound, (true - wm, bound, why)
            lags.append(true - wm)
        return np.array(lags, dtype=np.int64)

    def check_clean(self) -> None:
        assert self.late == [], f"late records: {self.late[:10]}"
        assert not self.reader.attribute_errors and not self.consumer.attribute_errors


def expire(env: Any, subscription: str, records: Sequence[PubsubRecord], seconds: int) -> None:
    """Cut the leases of ``records`` to ``seconds`` (0: they expire now)."""
    env.subscriber.modify_ack_deadline(
        request={
            "subscription": subscription,
            "ack_ids": [r.ack_id for r in records],
            "ack_deadline_seconds": seconds,
        },
        timeout=10,
    )


def wait_for(predicate: Any, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# --------------------------------------------------------------------------- the stream


def test_seeded_stream_is_safe_on_time_and_close(pubsub_env: Any) -> None:
    clock = OffsetClock()
    trace = make_trace(seed=7, n=500, pace=10 * MS, start=system_clock() + 50 * MS)
    h = Harness(pubsub_env, clock, trace, seed=7)
    h.run(nack_fraction=0.1)  # give back 10% at random: redelivered out of order

    h.check_clean()
    assert set(h.processed) == {r.rid for r in trace}
    assert h.consumer.redeliveries > 0  # there was delivery disorder
    assert not h.reader.rpc_errors and not h.consumer.rpc_errors
    assert h.max_delay <= IDLE_LAG  # the cap's assumption held (D = disorder + latency)
    lags = h.check_distance()
    assert lags.size > 20, lags.size
    # The typical distance is about band + disorder, never the stream's length.
    assert float(np.median(lags)) <= BAND + h.max_delay + WIDTH + 200 * MS
    assert h.wm >= h.et(trace[-1]) - BAND - h.max_delay - WIDTH
    assert h.reader.estimator.bucket_count <= (BAND + h.max_delay) // WIDTH + 50


def test_slow_tracking_advances_only_when_ahead_by_the_band(pubsub_env: Any) -> None:
    clock = OffsetClock()
    trace = make_trace(seed=31, n=1000, pace=MS, start=system_clock())
    h = Harness(pubsub_env, clock, trace, seed=31, base_batch=3)
    h.reader.max_messages, h.reader.max_pulls = 15, 1  # one small pull per step
    h.run()
    h.check_clean()
    assert set(h.processed) == {r.rid for r in trace}
    seen = {(why, backlog) for *_, why, backlog in h.rows}
    assert (REASON_HELD_NOT_AHEAD, True) in seen  # behind, with a backlog: held
    assert (REASON_BAND_MIN, True) in seen  # a backlog, but ahead of the base by the band
    h.check_distance()


def test_two_minutes_of_silence_advance_to_near_real_time(pubsub_env: Any) -> None:
    clock = OffsetClock()
    trace = make_trace(seed=3, n=40, pace=5 * MS, start=system_clock())
    h = Harness(pubsub_env, clock, trace, seed=3)
    h.run()
    h.check_clean()
    settled = h.wm
    ets = [h.et(r) for r in trace]
    assert settled <= min(ets[-5:])

    clock.advance(MINUTE)  # one quiet minute: nothing beyond the data is claimed
    assert h.step() in (REASON_BAND_MIN, REASON_CAPPED, REASON_LATCHED)
    assert settled <= h.wm <= max(ets)

    clock.advance(MINUTE + 100 * MS)  # two: the idle rule moves it to near real time
    before = clock()
    assert h.step() == REASON_IDLE
    after = clock()
    assert before - IDLE_LAG <= h.wm <= after - IDLE_LAG
    assert h.wm > ets[-1] + 2 * MINUTE - SECOND


def _check_skewed_run(h: Harness, trace: Sequence[Rec], offset: int) -> None:
    """No record late; the watermark follows the stream within the band, the bound and
    the disorder; after two quiet minutes it reaches near real time, ``now - skew -
    idle_lag``, so at most Pub/Sub's clock (``now - offset``) minus idle_lag (the
    skipped minutes pass on both clocks)."""
    h.run()
    h.check_clean()
    assert set(h.processed) == {r.rid for r in trace}
    # it advanced with the stream: to the band minimum or the cap, now - skew - idle_lag,
    # which lies skew - offset behind Pub/Sub's clock
    reach = BAND + h.max_delay + WIDTH + h.skew - offset + IDLE_LAG
    assert h.wm >= h.et(trace[-1]) - reach
    h.clock.advance(2 * MINUTE + h.skew - offset + 100 * MS)  # quiet for sure, either way
    before = h.clock()
    assert h.step() == REASON_IDLE
    after = h.clock()
    assert before - h.skew - IDLE_LAG <= h.wm <= after - h.skew - IDLE_LAG
    assert h.wm <= after - offset - IDLE_LAG  # behind Pub/Sub's clock minus idle_lag


def test_reader_clock_ahead_of_pubsub_within_the_skew_makes_nothing_late(
    pubsub_env: Any,
) -> None:
    """Issue 14's fault: the reader's clock 1 s ahead of Pub/Sub's, past the 600 ms idle
    lag, made records late (the cap at ``now - idle_lag`` ran ahead of publishing). With
    ``max_clock_skew`` 1.2 s the cap and the idle jump stay behind Pub/Sub's clock."""
    offset = SECOND
    clock = OffsetClock(offset)
    trace = make_trace(seed=5, n=60, pace=5 * MS, start=system_clock())
    h = Harness(pubsub_env, clock, trace, seed=5, skew=6 * SECOND // 5)
    _check_skewed_run(h, trace, offset)


def test_reader_clock_behind_pubsub_advances_within_the_skew_and_fails_beyond(
    pubsub_env: Any,
) -> None:
    """The reader's clock 30 s behind Pub/Sub's: within a 31 s bound every estimate is
    accepted, nothing is late and the watermark advances, also to near real time once
    quiet (it is not stuck); a reader bounded at 10 s refuses with a clear error."""
    offset = -30 * SECOND
    trace = make_trace(seed=9, n=60, pace=5 * MS, start=system_clock())
    h = Harness(pubsub_env, OffsetClock(offset), trace, seed=9, skew=31 * SECOND)
    _check_skewed_run(h, trace, offset)
    tight = Harness(pubsub_env, OffsetClock(offset), make_trace(9, 5, MS, system_clock(), "x"),
                    skew=10 * SECOND)
    with pytest.raises(ValueError, match=r"behind Pub/Sub's by more than max_clock_skew"):
        for _ in range(200):  # until the reader has tracked a message
            tight.step()


def test_attribute_errors_are_counted_never_zero_or_crash(pubsub_env: Any) -> None:
    clock = OffsetClock()
    h = Harness(pubsub_env, clock)
    now = system_clock()
    good = h.publish(make_trace(seed=5, n=10, pace=MS, start=now))
    bad = [
        {ID: "missing"},
        {ID: "empty", ATTR: ""},
        {ID: "words", ATTR: "yesterday"},
        {ID: "feb30", ATTR: "2023-02-30T00:00:00Z"},
        {ID: "naive", ATTR: "2023-11-14T22:13:20"},  # RFC 3339 needs an offset
        {ID: "huge", ATTR: "99999999999999999999"},
    ]
    pubsub_env.publish(bad)
    wait_for(lambda: h.reader.poll() == 0 and h.reader.tracking_has_backlog() is False, "drain")
    for _ in range(20):
        if not h.base_step():
            break
    h.estimate()

    expected = {ERROR_MISSING: 1, ERROR_EMPTY: 1, ERROR_UNPARSEABLE: 3, ERROR_OUT_OF_RANGE: 1}
    assert dict(h.reader.attribute_errors) == expected
    assert dict(h.consumer.attribute_errors) == expected
    assert h.reader.estimator.tracked == len(good)  # bad ones never reach the estimator
    assert h.wm > now - SECOND  # never a silent zero: the estimate comes from real data
    assert h.wm <= min(r.event_time for r in good)
    assert not h.unacked and set(h.processed) == {r.rid for r in good}
    # The counts survive a restart from the snapshot.
    snap = json.loads(h.snapshots[-1])
    assert snap["attribute_errors"] == expected


# --------------------------------------------------------------------------- faults


def test_emulator_restart_mid_stream_and_reading_resumes(pubsub_private_env: Any) -> None:
    env = pubsub_private_env
    clock = OffsetClock()
    trace = make_trace(seed=11, n=300, pace=5 * MS, start=system_clock())
    h = Harness(env, clock, trace, seed=11, base_batch=3)  # a slow base: a backlog builds
    deadline = time.monotonic() + STEP_LIMIT_S
    while h.next < 150:
        assert time.monotonic() < deadline
        h.publish_due(limit=150 - h.next)
        h.reader.poll()
        h.base_step()
        h.estimate()
    assert h.unacked, "the base should be behind when the emulator dies"
    before = h.wm

    env.emulator.stop(signal.SIGKILL)  # mid-stream: Pub/Sub is gone, with its messages
    for _ in range(3):
        h.reader.poll()
        h.base_step()
        h.estimate()
    assert any(k.startswith("pull: ") for k in h.reader.rpc_errors)
    assert h.reader.tracking_has_backlog()  # a failed pull is never "drained"

    env.emulator.start()  # same port; the emulator remembers nothing
    wait_for(lambda: _try(env.create), "the restarted emulator", timeout=20)
    # The publisher retries what the base never acked (same record ids and event times).
    lost = [h.published[r.rid] for r in trace[: h.next] if r.rid in h.unacked]
    h.publish(lost)
    h.run()

    h.check_clean()
    assert h.wm >= before
    assert set(h.processed) == {r.rid for r in trace}
    assert not h.ledger.outstanding


def _try(create: Any) -> bool:
    try:
        create()
    except gexc.GoogleAPIError:
        return False
    return True


def test_ack_deadline_expires_and_the_message_is_redelivered(pubsub_env: Any) -> None:
    clock = OffsetClock()
    trace = make_trace(seed=13, n=400, pace=5 * MS, start=system_clock())
    victim = trace[40]
    h = Harness(pubsub_env, clock, trace, seed=13)
    h.lost.add(victim.rid)  # the worker that pulls it dies: no ack, no processing
    deadline = time.monotonic() + STEP_LIMIT_S
    while not h.dropped:
        assert time.monotonic() < deadline
        h.step()
    held = h.dropped[-1]
    victim = h.published[victim.rid]
    h.lost.clear()
    # Its lease (10 s on the subscription) is cut to 1 s, the emulator's minimum above 0
    # (0 is an immediate nack); the stream runs on while it runs out.
    t_lost = time.monotonic()  # before the call: the emulator cuts the lease after it
    assert h.consumer.nack([held], ack_deadline_seconds=1)
    while victim.rid not in h.processed:
        assert time.monotonic() < deadline
        h.step()  # checks at every step that the watermark stays <= the victim
    waited = time.monotonic() - t_lost
    # Redelivered only once the 1 s lease has run out (0.1 s of slack for the emulator's
    # clock; timed from before the nack, so a slow reply cannot shorten it), and
    # redelivered at all: within the test's own deadline, however loaded the machine is
    # (a tighter upper bound only measures load).
    assert 0.9 < waited < deadline - t_lost, waited
    newest = h.reader.estimator.newest_publish_time
    # The tracked stream was far ahead of the victim, yet pt_base held the watermark.
    assert newest is not None and newest - held.publish_time > 2 * (BAND + DISORDER)
    assert h.processed[victim.rid] <= victim.event_time  # processed on time
    h.run()
    h.check_clean()
    assert h.consumer.redeliveries >= 1
    assert h.wm > victim.event_time  # once acked, the watermark moves past it


def test_duplicates_from_publisher_pubsub_and_tracking(pubsub_env: Any) -> None:
    clock = OffsetClock()
    trace = make_trace(seed=17, n=300, pace=5 * MS, start=system_clock())
    h = Harness(pubsub_env, clock, trace, seed=17)
    rng = random.Random(17)
    later: list[tuple[int, Rec]] = []
    steps = 0
    deadline = time.monotonic() + STEP_LIMIT_S
    while not (h.done_publishing and not h.unacked and not later):
        assert time.monotonic() < deadline
        steps += 1
        start = h.next
        h.publish_due()
        for r in h.future[start : h.next]:  # publisher retries: the same record again
            if rng.random() < 0.1:
                later.append((steps + rng.randint(1, 5), r))
        due = [r for s, r in later if s <= steps]
        later = [(s, r) for s, r in later if s > steps]
        if due:
            h.publish(due, duplicate=True)
        if steps % 5 == 0:  # the tracking ack is lost: the batch comes back
            batch = h.reader.pull()
            if batch:
                h.reader.record(batch)
                expire(pubsub_env, pubsub_env.tracking, batch, 0)
        h.reader.poll()
        h.base_step(ack_lost_fraction=0.1)  # base acks lost: processed twice
        h.estimate()

    h.check_clean()
    assert set(h.processed) == {r.rid for r in trace}
    assert h.reader.estimator.tracked > len(trace)  # the estimator saw duplicates
    assert h.consumer.redeliveries > 0
    assert h.ledger.counters["already acked"] > 0
    assert not h.ledger.outstanding


def test_estimator_restarts_from_snapshot_taken_before_ack(pubsub_env: Any) -> None:
    clock = OffsetClock()
    trace = make_trace(seed=19, n=300, pace=5 * MS, start=system_clock())
    h = Harness(pubsub_env, clock, trace, seed=19)
    deadline = time.monotonic() + STEP_LIMIT_S
    while h.next < 150:
        assert time.monotonic() < deadline
        h.step()
    n0 = h.next
    while h.next < n0 + 10:
        assert time.monotonic() < deadline
        h.publish_due()
    batch = h.reader.pull()  # the reader pulls and records (snapshot) ... and dies
    assert batch
    h.reader.record(batch)
    old = h.reader
    snapshot = json.loads(h.snapshots[-1])

    h.reader = h.new_reader(snapshot, lease_grace=10 * SECOND)
    new = h.reader
    assert new.estimator.state() == old.estimator.state()  # nothing in the band forgotten
    assert new.estimator.watermark == h.wm
    assert h.estimate() == REASON_LEASE_GRACE
    # The dead reader's lease expires (forced) and its batch comes back: duplicates.
    expire(pubsub_env, pubsub_env.tracking, batch, 0)
    tracked = new.estimator.tracked
    wait_for(lambda: new.poll() > 0 or new.estimator.tracked > tracked, "redelivery")
    clock.advance(10 * SECOND)  # the grace is one tracking ack deadline
    h.run()
    h.check_clean()
    assert new.estimator.tracked >= len(trace) + len(batch)
    assert set(h.processed) == {r.rid for r in trace}


def test_lost_lease_after_restart_is_held_by_the_grace(pubsub_env: Any) -> None:
    """A reader that dies after a pull and before recording leaves a batch nobody sees
    until its lease expires; without the grace the restored estimator passes it."""
    clock = OffsetClock()
    now = system_clock()
    first = make_trace(seed=23, n=100, pace=5 * MS, start=now, prefix="a")
    h = Harness(pubsub_env, clock, first, seed=23)
    h.run()
    burst = make_trace(seed=24, n=50, pace=0, start=system_clock(), prefix="b")
    h.publish(burst)
    lost: list[PubsubRecord] = []  # the dead reader pulls the whole burst
    deadline = time.monotonic() + STEP_LIMIT_S
    while len(lost) < len(burst):
        assert time.monotonic() < deadline
        lost.extend(h.reader.pull() or [])
    lost_min = min(r.event_time for r in lost if r.event_time is not None)
    h.reader = h.new_reader(json.loads(h.snapshots[-1]), lease_grace=10 * SECOND)

    # Half a second on, more data; the base is paused, the new reader tracks it all.
    after = make_trace(seed=25, n=120, pace=5 * MS, start=system_clock() + 500 * MS, prefix="c")
    h.future.extend(after)
    deadline = time.monotonic() + STEP_LIMIT_S
    while not h.done_publishing:
        assert time.monotonic() < deadline
        h.publish_due()
        h.reader.poll()
        assert h.estimate() == REASON_LEASE_GRACE
    counterfactual = TrackingEstimator.from_state(h.reader.estimator.state()).estimate(
        clock(), h.ledger.oldest_unacked_publish_time(), False
    )
    assert counterfactual.watermark > lost_min  # the hazard the grace prevents

    expire(pubsub_env, pubsub_env.tracking, lost, 0)  # the dead lease expires (forced)
    wait_for(lambda: h.reader.poll() > 0, "the lost batch")
    clock.advance(10 * SECOND)
    h.run()
    h.check_clean()
    assert set(h.processed) == {r.rid for r in [*first, *burst, *after]}


# --------------------------------------------------------------------------- Beam SDF


def _metric(result: Any, name: str, stat: str = "") -> int:
    """A counter's committed value, or a distribution's ``stat`` (0 when never set)."""
    got = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name(name))
    if stat:
        return int(max((getattr(r.committed, stat) for r in got["distributions"]), default=0))
    return int(sum(r.committed for r in got["counters"]))


def test_splittable_dofn_reads_the_emulator_with_the_tracking_watermark(pubsub_env: Any) -> None:
    """The SDF on the DirectRunner (FnApiRunner) reads the emulator while a thread
    publishes; it checkpoints every 25 records, so the estimator state round-trips
    through the runner and acks happen in the bundle finalizer."""
    env = pubsub_env
    trace = make_trace(seed=29, n=400, pace=10 * MS, start=system_clock() + 100 * MS)
    published: list[Rec] = []
    stop = threading.Event()

    def publisher() -> None:
        for r in trace:
            while system_clock() < r.due and not stop.is_set():
                time.sleep(0.002)
            if stop.is_set():
                return
            rec = r.stamped(system_clock())
            env.publish([{ATTR: rec.attr, ID: rec.rid}])
            published.append(rec)
            if r.index == 100:
                env.publish([{ID: "no-ts"}, {ID: "bad-ts", ATTR: "soon"}])

    thread = threading.Thread(target=publisher, daemon=True)
    fn = ReadWithTrackingWatermarkFn(
        band=BAND,
        idle_lag=IDLE_LAG,
        bucket_width=WIDTH,
        lease_grace=SECOND,
        records_per_bundle=25,
        stop_after_idle=10.0,
    )
    spec = PubsubReadSpec(env.base, env.tracking, ATTR, id_label=ID, max_records=len(trace))
    pipeline = beam.Pipeline(runner="DirectRunner")
    records = pipeline | beam.Create([spec]) | beam.ParDo(fn)
    ids = records | beam.Map(lambda r: r.record_id)
    assert_that(ids, equal_to([r.rid for r in trace]), label="every record once")
    mistimed = (
        records
        | beam.Map(lambda r, t=beam.DoFn.TimestampParam: (r.record_id, t.micros, r.event_time))
        | beam.Filter(lambda x: x[1] != x[2])
    )
    assert_that(mistimed, equal_to([]), label="stamped with the event time")
    thread.start()
    try:
        result = pipeline.run()
        result.wait_until_finish()
    finally:
        stop.set()
        thread.join(timeout=10)

    ets = [r.event_time for r in published]
    assert len(ets) == len(trace)
    assert _metric(result, "emitted") == len(trace)
    assert _metric(result, "late_emitted") == 0
    assert _metric(result, "checkpoints") >= 5
    assert _metric(result, "lease_grace_holds") >= 1  # the first start waits out leases
    # one arming for the whole read: clean resumes (finalized here) never re-arm it, and
    # lease_grace_holds counts the updates held during that one grace, not new graces
    assert _metric(result, "lease_grace_armed") == 1
    wm = _metric(result, "watermark_us", "max")
    # ... but clean resumes do not re-arm it: the watermark got going within the read.
    assert ets[len(ets) // 2] <= wm <= max(ets)
    assert _metric(result, f"tracking attribute_errors: {ERROR_MISSING}") == 1
    assert _metric(result, f"tracking attribute_errors: {ERROR_UNPARSEABLE}") == 1
    assert _metric(result, f"base attribute_errors: {ERROR_MISSING}") == 1
