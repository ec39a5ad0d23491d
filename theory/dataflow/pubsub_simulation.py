"""A deterministic in-memory Pub/Sub, and a base/tracking watermark simulation.

:class:`SimulatedPubSub` is one topic with subscriptions (all times int µs, from an
injectable processing-time clock):

- ``publish`` stamps the clock's time as the publish time (non-decreasing);
- a subscription receives the messages published after it was created; every unacked
  message not leased is *available* at once, and ``pull`` hands out the available ones in
  order of ``publish_time + U[0, delivery_disorder]`` (seeded): a message can overtake
  ones published up to ``delivery_disorder`` before it, when both wait in the backlog;
- a delivery leases the message until ``now + ack_deadline``; an unacked message whose
  lease expired is available again (redelivery, ``attempt`` + 1);
- with ``duplicate_probability`` a delivery is followed by a duplicate, delivered later
  even if the original is acked by then (at-least-once);
- ``oldest_unacked_publish_time`` is the subscription's ``pt_base`` (None when empty).

:func:`simulate_pubsub` drives a base reader (``base_rate`` messages/s, acking
``base_ack_latency`` after reading, optionally losing messages before processing so they
are redelivered) and a tracking reader (pulls every ``tracking_period``, records, acks),
and after each tick queries :class:`~theory.dataflow.pubsub.TrackingEstimator`, Beam's rule and
bounded out-of-orderness; it also records the percentile watermark
(``percentile:<p>``, p = ``config.percentile``) of the backlog of messages whose event
happened and which the base reader has not processed, an oracle like the true watermark
(:func:`theory.watermarks.percentile_source.percentile_source_curve`). The true watermark
at a tick is the
minimum event time of the messages the base reader has not processed yet (published or
not); a message is *late* for an estimator if its event time is below that estimator's
watermark at the previous tick when the base reader first processes it (duplicates are
deduplicated by id).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from theory.arrays import cover_min
from theory.columns import (
    check_count,
    check_duration,
    check_fraction,
    check_positive,
    check_seed,
    check_timestamp,
    same_length,
    time_column,
)
from theory.dataflow.pubsub import (
    BeamPubsubRule,
    EstimateSeries,
    TrackingEstimator,
    tracking_estimate_series,
)
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, MINUTE, SECOND
from theory.watermarks.heuristic import bounded_out_of_orderness_curve
from theory.watermarks.percentile import check_p
from theory.watermarks.percentile_source import percentile_source_curve

__all__ = [
    "SCENARIOS",
    "Delivery",
    "ManualClock",
    "PubSubSimConfig",
    "PubSubSimResult",
    "SimulatedPubSub",
    "TrackingRecord",
    "make_stream",
    "scenario",
    "simulate_pubsub",
]

#: A realistic epoch for generated streams: 2023-11-14T22:13:20Z in µs.
T0: Final[int] = 1_700_000_000 * SECOND


class ManualClock:
    """An injectable processing-time clock (µs) that only moves forward."""

    def __init__(self, now: int = 0) -> None:
        self.now = check_timestamp(now, "now")

    def __call__(self) -> int:
        return self.now

    def advance_to(self, t: int) -> None:
        """Move to ``t`` (µs, >= the current time)."""
        v = check_timestamp(t, "t")
        if v < self.now:
            raise ValueError(f"t={v} µs is before the clock's time {self.now} µs")
        self.now = v


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivered message (µs); ``attempt`` counts non-duplicate deliveries."""

    message_id: int
    publish_time: int
    event_time: int
    attempt: int
    duplicate: bool


class _Subscription:
    """One subscription's state; message ``mid`` is at index ``mid - first``.

    The oldest unacked publish time is kept in a lazy heap of ``(publish time, id)``, whose
    acked entries are popped when they reach the top, rather than in a
    :class:`~theory.structures.Frontier`: every publish and ack would be a counted update
    (two minima each), which made :func:`simulate_pubsub` slower. An ack here is one flag.
    The frontier's cheap path (``add``/``retract``, no report) is still slower than this
    heap on the pattern (``bench/frontier.py``'s ``lazy``).
    """

    __slots__ = ("acked", "attempts", "avail", "first", "leases", "oldest")

    def __init__(self, first: int) -> None:
        self.first = first  # id of the first message this subscription receives
        self.avail: list[tuple[int, int, bool]] = []  # (order key, id, is duplicate)
        self.oldest: list[tuple[int, int]] = []  # lazy heap of (publish time, id)
        self.acked = bytearray()
        self.attempts: list[int] = []
        self.leases: list[tuple[int, int, int]] = []  # (deadline, id, attempt)


class SimulatedPubSub:
    """A deterministic (seeded) in-memory topic with subscriptions; see the module doc."""

    def __init__(
        self,
        clock: Callable[[], int],
        *,
        seed: int = 0,
        delivery_disorder: int = 0,
        ack_deadline: int = 10 * SECOND,
        duplicate_probability: float = 0.0,
    ) -> None:
        self.clock = clock
        self.delivery_disorder = check_duration(delivery_disorder, "delivery_disorder")
        self.ack_deadline = check_duration(ack_deadline, "ack_deadline", allow_zero=False)
        self.duplicate_probability = check_fraction(duplicate_probability, "duplicate_probability")
        self._rng = random.Random(check_seed(seed))
        self._pt: list[int] = []
        self._et: list[int] = []
        self._subs: dict[str, _Subscription] = {}
        self.redeliveries = 0
        self.duplicates = 0

    def _sub(self, name: str) -> _Subscription:
        try:
            return self._subs[name]
        except KeyError:
            raise KeyError(f"no subscription {name!r}") from None

    def create_subscription(self, name: str) -> None:
        """A new subscription; it receives the messages published from now on."""
        if name in self._subs:
            raise ValueError(f"subscription {name!r} already exists")
        self._subs[name] = _Subscription(len(self._pt))

    def publish(self, event_time: int) -> int:
        """Publish a message at the clock's time; returns its id."""
        e = check_timestamp(event_time, "event_time")
        pt = check_timestamp(self.clock(), "clock()")
        if self._pt and pt < self._pt[-1]:
            raise ValueError(f"clock went back: {pt} µs < last publish time {self._pt[-1]} µs")
        mid = len(self._pt)
        self._pt.append(pt)
        self._et.append(e)
        d = self.delivery_disorder
        for sub in self._subs.values():
            key = pt + self._rng.randrange(d + 1) if d else pt
            heapq.heappush(sub.avail, (key, mid, False))
            heapq.heappush(sub.oldest, (pt, mid))
            sub.acked.append(0)
            sub.attempts.append(0)
        return mid

    def _expire(self, sub: _Subscription, now: int) -> None:
        leases = sub.leases
        while leases and leases[0][0] <= now:
            _, mid, attempt = heapq.heappop(leases)
            i = mid - sub.first
            if not sub.acked[i] and sub.attempts[i] == attempt:
                heapq.heappush(sub.avail, (self._pt[mid], mid, False))

    def pull(self, subscription: str, max_messages: int) -> list[Delivery]:
        """Up to ``max_messages`` (>= 0) available messages, leased until ``now +
        ack_deadline``."""
        n = check_count(max_messages, "max_messages")
        sub = self._sub(subscription)
        now = self.clock()
        self._expire(sub, now)
        out: list[Delivery] = []
        avail, pts, ets, rng = sub.avail, self._pt, self._et, self._rng
        p, d = self.duplicate_probability, self.delivery_disorder
        while avail and len(out) < n:
            key, mid, dup = heapq.heappop(avail)
            i = mid - sub.first
            if dup:
                self.duplicates += 1
                out.append(Delivery(mid, pts[mid], ets[mid], sub.attempts[i], True))
                continue
            if sub.acked[i]:
                continue  # acked after its redelivery was queued
            a = sub.attempts[i] + 1
            sub.attempts[i] = a
            if a > 1:
                self.redeliveries += 1
            heapq.heappush(sub.leases, (now + self.ack_deadline, mid, a))
            out.append(Delivery(mid, pts[mid], ets[mid], a, False))
            if p and rng.random() < p:
                heapq.heappush(avail, (max(key, now) + rng.randrange(d + 1), mid, True))
        return out

    def ack(self, subscription: str, message_ids: list[int]) -> None:
        """Acknowledge messages by id (idempotent)."""
        sub = self._sub(subscription)
        for mid in message_ids:
            i = mid - sub.first
            if not 0 <= i < len(sub.acked):
                raise ValueError(f"message {mid} was never delivered to {subscription!r}")
            sub.acked[i] = 1

    def oldest_unacked_publish_time(self, subscription: str) -> int | None:
        """The subscription's oldest unacked publish time (µs), None when all are acked."""
        sub = self._sub(subscription)
        heap = sub.oldest
        while heap and sub.acked[heap[0][1] - sub.first]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def has_backlog(self, subscription: str) -> bool:
        """True while the subscription has an unacked message."""
        return self.oldest_unacked_publish_time(subscription) is not None


# --------------------------------------------------------------------------- streams


def make_stream(
    kind: str,
    *,
    seed: int = 0,
    duration: int = 10 * MINUTE,
    start: int = T0,
    jitter: int = 5 * SECOND,
    rate: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded ``(publish_time, event_time)`` (µs, sorted by publish time).

    ``event_time = publish_time - U[0, jitter]``. Kinds: ``dense`` (Poisson, ``rate``
    default 100/s), ``slow-base`` (the same; its scenario slows the base reader),
    ``bursty`` (20 s at 10x ``rate`` default 30/s, then 60 s silent) and ``sparse``
    (clusters of 1-3 messages within 1 s, gaps exponential with mean 50 s).
    """
    dur = check_duration(duration, "duration")
    jit = check_duration(jitter, "jitter")
    begin = check_timestamp(start, "start")
    if rate is not None:
        check_positive(rate, "rate")
    rng = np.random.default_rng(check_seed(seed))
    end = begin + dur
    if kind in ("dense", "slow-base"):
        pt = _poisson_times(rng, begin, end, 100.0 if rate is None else rate)
    elif kind == "bursty":
        pt = _bursty_times(rng, begin, end, 10 * (30.0 if rate is None else rate))
    elif kind == "sparse":
        pt = _sparse_times(rng, begin, end)
    else:
        raise ValueError(f"unknown stream kind {kind!r}: dense, sparse, bursty or slow-base")
    pt = pt.astype(np.int64)
    et = pt - rng.integers(0, jit + 1, size=pt.size)
    return pt, et


def _poisson_times(rng: np.random.Generator, start: int, end: int, rate: float) -> np.ndarray:
    """Sorted uniform times in ``[start, end)`` µs, Poisson many at ``rate`` per second."""
    return np.sort(rng.integers(start, end, size=rng.poisson(rate * (end - start) / SECOND)))


def _bursty_times(rng: np.random.Generator, start: int, end: int, rate: float) -> np.ndarray:
    """Every 80 s, 20 s of :func:`_poisson_times` at ``rate`` per second, then silence."""
    parts = [
        _poisson_times(rng, s, min(s + 20 * SECOND, end), rate)
        for s in range(start, end, 80 * SECOND)
    ]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def _sparse_times(rng: np.random.Generator, start: int, end: int) -> np.ndarray:
    """Clusters of 1-3 times within 1 s, exponential gaps (mean 50 s), below ``end``."""
    times: list[int] = []
    t = start
    while True:
        t += int(rng.exponential(50 * SECOND))
        if t >= end:
            break
        size = int(rng.integers(1, 4))
        times.extend(t + int(x) for x in rng.integers(0, SECOND, size=size))
    return np.sort(np.minimum(np.array(times, dtype=np.int64), end - 1))


# --------------------------------------------------------------------------- driver


@dataclass(frozen=True)
class PubSubSimConfig:
    """Simulation knobs (durations in µs, rates in messages/s)."""

    tick: int = SECOND // 10
    base_rate: float = 1_000.0
    base_ack_latency: int = SECOND
    base_loss_probability: float = 0.0
    tracking_period: int = SECOND // 10
    tracking_max_per_pull: int = 1_000_000
    delivery_disorder: int = 5 * SECOND
    ack_deadline: int = 10 * SECOND
    duplicate_probability: float = 0.0
    band: int = 10 * SECOND
    idle_advance_after: int = 2 * MINUTE
    idle_lag: int = 10 * SECOND
    bucket_width: int = SECOND // 10
    cap_at_idle_lag: bool = True
    drain: int = 3 * MINUTE
    restart_at: int | None = None
    seed: int = 0
    percentile: float = 0.99

    def estimator(self) -> TrackingEstimator:
        """A fresh estimator with these parameters."""
        return TrackingEstimator(**self.estimator_params())

    def estimator_params(self) -> dict[str, Any]:
        """The estimator's keyword parameters."""
        return {
            "band": self.band,
            "idle_advance_after": self.idle_advance_after,
            "idle_lag": self.idle_lag,
            "bucket_width": self.bucket_width,
            "cap_at_idle_lag": self.cap_at_idle_lag,
        }


#: Scenario name -> config overrides (with the stream kind of the same name).
SCENARIOS: Final[dict[str, dict[str, Any]]] = {
    "dense": {},
    "sparse": {},
    "bursty": {"base_rate": 200.0},
    "slow-base": {"base_rate": 70.0},
}


def scenario(
    kind: str, *, seed: int = 0, duration: int = 10 * MINUTE, **overrides: Any
) -> tuple[np.ndarray, np.ndarray, PubSubSimConfig]:
    """A named stream with its config (``overrides`` win)."""
    if kind not in SCENARIOS:
        raise ValueError(f"unknown scenario {kind!r}: {', '.join(SCENARIOS)}")
    pt, et = make_stream(kind, seed=seed, duration=duration)
    cfg = replace(PubSubSimConfig(seed=seed), **{**SCENARIOS[kind], **overrides})
    return pt, et, cfg


@dataclass(frozen=True)
class TrackingRecord:
    """What the estimator saw: tracked messages and estimate queries (µs)."""

    publish_time: np.ndarray
    event_time: np.ndarray
    tracked_at: np.ndarray
    now: np.ndarray
    base_oldest: np.ndarray
    base_has_backlog: np.ndarray
    tracking_has_backlog: np.ndarray

    def series(self, **params: Any) -> EstimateSeries:
        """:func:`~theory.dataflow.pubsub.tracking_estimate_series` over this record."""
        return tracking_estimate_series(
            self.publish_time,
            self.event_time,
            self.tracked_at,
            self.now,
            self.base_oldest,
            self.base_has_backlog,
            self.tracking_has_backlog,
            **params,
        )


@dataclass(frozen=True)
class PubSubSimResult:
    """Per-tick series (µs) and per-message outcomes of :func:`simulate_pubsub`."""

    ticks: np.ndarray
    true_watermark: np.ndarray
    watermarks: dict[str, np.ndarray]
    reasons: list[str]
    publish_time: np.ndarray
    event_time: np.ndarray
    processed_tick: np.ndarray  # tick index of first processing, -1 if never
    unacked_min: np.ndarray  # min event time of base-unacked messages after each tick
    record: TrackingRecord
    counters: dict[str, int] = field(default_factory=dict)

    def late(self, name: str) -> np.ndarray:
        """Ids of the messages late for estimator ``name``."""
        wm = self.watermarks[name]
        j = self.processed_tick
        seen = j >= 0
        before = np.where(j > 0, wm[np.maximum(j - 1, 0)], MIN_TIMESTAMP)
        return np.flatnonzero(seen & (self.event_time < before))

    def late_fraction(self, name: str) -> float:
        """Late messages / processed messages."""
        processed = int(np.count_nonzero(self.processed_tick >= 0))
        return self.late(name).size / processed if processed else 0.0

    def lag_seconds(self, name: str) -> np.ndarray:
        """``true - watermark`` in seconds at the ticks where both are finite (negative:
        ahead of the truth)."""
        wm = self.watermarks[name]
        ok = (self.true_watermark < MAX_TIMESTAMP) & (wm > MIN_TIMESTAMP)
        diff = self.true_watermark[ok].astype(np.float64) - wm[ok].astype(np.float64)
        return diff / SECOND


def simulate_pubsub(
    publish_time: np.ndarray, event_time: np.ndarray, config: PubSubSimConfig
) -> PubSubSimResult:
    """Run the base/tracking simulation over a stream (µs, sorted by publish time)."""
    pt = time_column(publish_time, "publish_time")
    et = time_column(event_time, "event_time")
    same_length("publish_time", pt.size, event_time=et)
    if pt.size and not bool(np.all(pt[1:] >= pt[:-1])):
        raise ValueError("publish_time must be sorted")
    tick, every = _check_config(config)
    start = int(pt[0]) if pt.size else T0
    start -= start % tick
    end = (int(pt[-1]) if pt.size else start) + config.drain
    ticks = np.arange(start, end + tick, tick, dtype=np.int64)
    run = _Run(pt, et, ticks, config)
    for j, t in enumerate(ticks.tolist()):
        run.publish_due(t)
        if j % every == 0:
            run.track(t)
        run.ack_processed(j, t)
        run.read_base(j, t)
        run.query(j, t)
    return run.result()


def _check_config(c: PubSubSimConfig) -> tuple[int, int]:
    """Check the knobs the driver uses; return the tick (µs) and the tracking period in
    ticks. Each error names the config field."""
    tick = check_duration(c.tick, "tick", allow_zero=False)
    period = check_duration(c.tracking_period, "tracking_period", allow_zero=False)
    if period % tick:
        raise ValueError(f"tracking_period={period} µs must be a multiple of tick={tick} µs")
    check_p(c.percentile, "config.percentile")
    check_positive(c.base_rate, "base_rate")
    # a reader that loses every message never processes one
    if check_fraction(c.base_loss_probability, "base_loss_probability") == 1.0:
        raise ValueError("base_loss_probability must be < 1, got 1.0")
    check_duration(c.base_ack_latency, "base_ack_latency")
    check_count(c.tracking_max_per_pull, "tracking_max_per_pull")
    check_duration(c.drain, "drain")
    if c.restart_at is not None:
        check_timestamp(c.restart_at, "restart_at")
    check_seed(c.seed)
    return tick, period // tick


class _Run:
    """The state of one :func:`simulate_pubsub` run, advanced one tick at a time.

    Per tick ``j`` at time ``t`` (µs), in order: messages published by ``t`` are
    published; the tracking reader pulls (every ``tracking_period``), records and acks;
    the base reader acks what it finished ``base_ack_latency`` ago, then reads its budget
    (``base_rate``), losing some before processing; the estimators are queried.
    """

    def __init__(
        self, pt: np.ndarray, et: np.ndarray, ticks: np.ndarray, config: PubSubSimConfig
    ) -> None:
        c = self.config = config
        self.pt, self.et, self.ticks = pt, et, ticks
        self.pts, self.ets = pt.tolist(), et.tolist()
        self.clock = ManualClock(int(ticks[0]))
        self.ps = SimulatedPubSub(
            self.clock,
            seed=c.seed,
            delivery_disorder=c.delivery_disorder,
            ack_deadline=c.ack_deadline,
            duplicate_probability=c.duplicate_probability,
        )
        self.ps.create_subscription("base")
        self.ps.create_subscription("tracking")
        self.est = c.estimator()
        self.beam = BeamPubsubRule()
        self.loss_rng = random.Random(c.seed * 7919 + 1)
        self.restart_tick = (
            -1 if c.restart_at is None else int(np.searchsorted(ticks, c.restart_at, "left"))
        )
        q, n = ticks.size, pt.size
        self.wm = np.empty(q, dtype=np.int64)
        self.beam_wm = np.empty(q, dtype=np.int64)
        self.reasons: list[str] = []
        self.q_base = np.zeros(q, dtype=np.int64)
        self.q_base_has = np.zeros(q, dtype=bool)
        self.q_trk = np.zeros(q, dtype=bool)
        self.trk_pt: list[int] = []
        self.trk_et: list[int] = []
        self.trk_at: list[int] = []
        self.read_t: list[int] = []
        self.read_e: list[int] = []
        self.processed = np.full(n, -1, dtype=np.int64)  # tick of first processing
        self.acked_tick = np.full(n, q, dtype=np.int64)  # tick of the base's first ack
        self.pending: deque[tuple[int, int]] = deque()  # (ack due time, id)
        self.budget = 0.0
        self.lost = 0
        self.max_buckets = 0
        self.next = 0  # the next message to publish

    def publish_due(self, t: int) -> None:
        """Publish, at their publish times, the messages published by ``t``."""
        pts, ets, clock, ps = self.pts, self.ets, self.clock, self.ps
        i, n = self.next, len(pts)
        while i < n and pts[i] <= t:
            clock.advance_to(pts[i])
            ps.publish(ets[i])
            i += 1
        self.next = i
        clock.advance_to(t)

    def track(self, t: int) -> None:
        """The tracking reader: pull everything, record it in the estimator, ack."""
        got = self.ps.pull("tracking", self.config.tracking_max_per_pull)
        on_tracked = self.est.on_tracked
        for d in got:
            on_tracked(d.publish_time, d.event_time)
        self.trk_pt.extend(d.publish_time for d in got)
        self.trk_et.extend(d.event_time for d in got)
        self.trk_at.extend([t] * len(got))
        self.ps.ack("tracking", [d.message_id for d in got])

    def ack_processed(self, j: int, t: int) -> None:
        """The base reader acks the messages whose ack latency has passed by ``t``."""
        pending, acked_tick, q = self.pending, self.acked_tick, self.ticks.size
        done = []
        while pending and pending[0][0] <= t:
            mid = pending.popleft()[1]
            done.append(mid)
            if acked_tick[mid] == q:
                acked_tick[mid] = j
        self.ps.ack("base", done)

    def read_base(self, j: int, t: int) -> None:
        """The base reader pulls its budget and processes what it does not lose."""
        c = self.config
        self.budget += c.base_rate * c.tick / SECOND
        take = int(self.budget)
        self.budget -= take
        got = self.ps.pull("base", take)
        if got:
            self.beam.on_received(t)
        loss, rand = c.base_loss_probability, self.loss_rng.random
        processed = self.processed
        for d in got:
            if loss and rand() < loss:
                self.lost += 1  # the reader crashed before processing: redelivered later
                continue
            self.beam.on_read(t, d.event_time)
            self.read_t.append(t)
            self.read_e.append(d.event_time)
            if processed[d.message_id] < 0:
                processed[d.message_id] = j
            self.pending.append((t + c.base_ack_latency, d.message_id))

    def query(self, j: int, t: int) -> None:
        """Query the estimators after tick ``j`` (restarting the tracking one from its
        state at ``restart_at``) and record what they were given."""
        if j == self.restart_tick:
            self.est = TrackingEstimator.from_state(self.est.state())
        base = self.ps.oldest_unacked_publish_time("base")
        trk = self.ps.has_backlog("tracking")
        self.q_base_has[j] = base is not None
        self.q_base[j] = 0 if base is None else base
        self.q_trk[j] = trk
        e = self.est.estimate(t, base, trk)
        self.wm[j] = e.watermark
        self.reasons.append(e.reason)
        self.max_buckets = max(self.max_buckets, self.est.bucket_count)
        self.beam_wm[j] = self.beam.estimate(t).watermark

    def result(self) -> PubSubSimResult:
        """The run's series, with the oracles computed from the per-message outcomes."""
        c, ticks = self.config, self.ticks
        record = TrackingRecord(
            np.array(self.trk_pt, dtype=np.int64),
            np.array(self.trk_et, dtype=np.int64),
            np.array(self.trk_at, dtype=np.int64),
            ticks,
            self.q_base,
            self.q_base_has,
            self.q_trk,
        )
        return PubSubSimResult(
            ticks=ticks,
            true_watermark=_true_watermark(self.et, self.processed, ticks.size),
            watermarks={
                "tracking": self.wm,
                "beam": self.beam_wm,
                "bounded": self._bounded(),
                f"percentile:{c.percentile:g}": _backlog_percentile(
                    self.et, self.processed, ticks, c.percentile
                ),
            },
            reasons=self.reasons,
            publish_time=self.pt,
            event_time=self.et,
            processed_tick=self.processed,
            unacked_min=_unacked_min(self.pt, self.et, self.acked_tick, ticks),
            record=record,
            counters=self._counters(),
        )

    def _bounded(self) -> np.ndarray:
        """Bounded out-of-orderness (bound = band) over the base reads, at every tick."""
        if not self.read_t:
            return np.full(self.ticks.size, MIN_TIMESTAMP, dtype=np.int64)
        return bounded_out_of_orderness_curve(
            np.array(self.read_e, dtype=np.int64),
            np.array(self.read_t, dtype=np.int64),
            bound=self.config.band,
        ).at(self.ticks)

    def _counters(self) -> dict[str, int]:
        est = self.est
        return {
            "messages": int(self.pt.size),
            "processed": int(np.count_nonzero(self.processed >= 0)),
            "redeliveries": self.ps.redeliveries,
            "duplicates": self.ps.duplicates,
            "lost_before_processing": self.lost,
            "tracked": est.tracked,
            "dropped": est.dropped,
            "regressions": est.regressions,
            "beam_regressions": self.beam.regressions,
            "max_buckets": self.max_buckets,
        }


def _backlog_percentile(
    et: np.ndarray, processed: np.ndarray, ticks: np.ndarray, p: float
) -> np.ndarray:
    """The percentile watermark at every tick (an oracle, as the true one): over the
    backlog of messages whose event happened and that the base reader has not processed."""
    if not et.size:
        return np.full(ticks.size, MIN_TIMESTAMP, dtype=np.int64)
    done_at = np.where(processed >= 0, ticks[np.maximum(processed, 0)], MAX_TIMESTAMP)
    return percentile_source_curve(et, done_at, p=p).at(ticks)


def _true_watermark(et: np.ndarray, processed: np.ndarray, q: int) -> np.ndarray:
    """After each of ``q`` ticks: the minimum event time of the messages processed after
    it, or never (``MAX_TIMESTAMP`` when there are none)."""
    key = np.where(processed >= 0, processed, q)
    order = np.argsort(key, kind="stable")
    suffix = np.full(et.size + 1, MAX_TIMESTAMP, dtype=np.int64)
    if et.size:
        suffix[:-1] = np.minimum.accumulate(et[order][::-1])[::-1]
    return suffix[np.searchsorted(key[order], np.arange(q), side="right")]


def _unacked_min(
    pt: np.ndarray, et: np.ndarray, acked_tick: np.ndarray, ticks: np.ndarray
) -> np.ndarray:
    """After each tick: the minimum event time of the base-unacked messages (published at
    or before the tick, first acked after it); ``MAX_TIMESTAMP`` when there are none."""
    q = ticks.size
    if not pt.size:
        return np.full(q, MAX_TIMESTAMP, dtype=np.int64)
    pub_tick = np.searchsorted(ticks, pt, side="left")
    return np.minimum(cover_min(pub_tick, acked_tick, et, q), MAX_TIMESTAMP)
