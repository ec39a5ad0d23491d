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

from theory.arrays import cover_min as _cover_min
from theory.columns import check_duration, check_timestamp
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
_EMPTY: Final[int] = int(np.iinfo(np.int64).max)


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
        if not 0.0 <= duplicate_probability <= 1.0:
            raise ValueError(
                f"duplicate_probability must be in [0, 1], got {duplicate_probability}"
            )
        self.duplicate_probability = float(duplicate_probability)
        self._rng = random.Random(seed)
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
        n = check_duration(max_messages, "max_messages")
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
    rng = np.random.default_rng(seed)
    end = start + dur
    if kind in ("dense", "slow-base"):
        r = 100.0 if rate is None else rate
        pt = np.sort(rng.integers(start, end, size=rng.poisson(r * dur / SECOND)))
    elif kind == "bursty":
        r = 10 * (30.0 if rate is None else rate)
        parts = []
        for s in range(start, end, 80 * SECOND):
            e = min(s + 20 * SECOND, end)
            parts.append(np.sort(rng.integers(s, e, size=rng.poisson(r * (e - s) / SECOND))))
        pt = np.concatenate(parts) if parts else np.empty(0, np.int64)
    elif kind == "sparse":
        mean_gap = 50 * SECOND
        times: list[int] = []
        t = start
        while True:
            t += int(rng.exponential(mean_gap))
            if t >= end:
                break
            size = int(rng.integers(1, 4))
            times.extend(t + int(x) for x in rng.integers(0, SECOND, size=size))
        pt = np.sort(np.minimum(np.array(times, dtype=np.int64), end - 1))
    else:
        raise ValueError(f"unknown stream kind {kind!r}: dense, sparse, bursty or slow-base")
    pt = pt.astype(np.int64)
    et = pt - rng.integers(0, jit + 1, size=pt.size)
    return pt, et


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
    pt_all = np.asarray(publish_time, dtype=np.int64)
    et_all = np.asarray(event_time, dtype=np.int64)
    if pt_all.shape != et_all.shape or pt_all.ndim != 1:
        raise ValueError("publish_time and event_time must be 1-d arrays of one length")
    if pt_all.size and not bool(np.all(pt_all[1:] >= pt_all[:-1])):
        raise ValueError("publish_time must be sorted")
    c = config
    tick = check_duration(c.tick, "tick", allow_zero=False)
    every = check_duration(c.tracking_period, "tracking_period", allow_zero=False)
    if every % tick:
        raise ValueError(f"tracking_period={every} µs must be a multiple of tick={tick} µs")
    every //= tick
    try:
        check_p(c.percentile)
    except ValueError as err:
        raise ValueError(f"config.percentile: {err}") from None
    if c.base_rate <= 0 or not 0.0 <= c.base_loss_probability < 1.0:
        raise ValueError("base_rate must be > 0 and base_loss_probability in [0, 1)")
    n = pt_all.size
    start = int(pt_all[0]) if n else T0
    start -= start % tick
    end = (int(pt_all[-1]) if n else start) + check_duration(c.drain, "drain")
    ticks = np.arange(start, end + tick, tick, dtype=np.int64)
    restart_tick = (
        -1 if c.restart_at is None else int(np.searchsorted(ticks, c.restart_at, "left"))
    )

    clock = ManualClock(start)
    ps = SimulatedPubSub(
        clock,
        seed=c.seed,
        delivery_disorder=c.delivery_disorder,
        ack_deadline=c.ack_deadline,
        duplicate_probability=c.duplicate_probability,
    )
    ps.create_subscription("base")
    ps.create_subscription("tracking")
    est = c.estimator()
    beam = BeamPubsubRule()
    loss_rng = random.Random(c.seed * 7919 + 1)
    pts, ets = pt_all.tolist(), et_all.tolist()

    q = ticks.size
    wm = np.empty(q, dtype=np.int64)
    beam_wm = np.empty(q, dtype=np.int64)
    reasons: list[str] = []
    q_base = np.zeros(q, dtype=np.int64)
    q_base_has = np.zeros(q, dtype=bool)
    q_trk = np.zeros(q, dtype=bool)
    trk_pt: list[int] = []
    trk_et: list[int] = []
    trk_at: list[int] = []
    read_t: list[int] = []
    read_e: list[int] = []
    processed = np.full(n, -1, dtype=np.int64)
    acked_tick = np.full(n, q, dtype=np.int64)
    pending: deque[tuple[int, int]] = deque()
    budget = 0.0
    lost = 0
    max_buckets = 0
    i = 0
    for j, t in enumerate(ticks.tolist()):
        while i < n and pts[i] <= t:
            clock.advance_to(pts[i])
            ps.publish(ets[i])
            i += 1
        clock.advance_to(t)
        if j % every == 0:
            got = ps.pull("tracking", c.tracking_max_per_pull)
            for d in got:
                est.on_tracked(d.publish_time, d.event_time)
                trk_pt.append(d.publish_time)
                trk_et.append(d.event_time)
                trk_at.append(t)
            ps.ack("tracking", [d.message_id for d in got])
        done = []
        while pending and pending[0][0] <= t:
            mid = pending.popleft()[1]
            done.append(mid)
            if acked_tick[mid] == q:
                acked_tick[mid] = j
        ps.ack("base", done)
        budget += c.base_rate * tick / SECOND
        take = int(budget)
        budget -= take
        got = ps.pull("base", take)
        if got:
            beam.on_received(t)
        for d in got:
            if c.base_loss_probability and loss_rng.random() < c.base_loss_probability:
                lost += 1  # the reader crashed before processing: redelivered later
                continue
            beam.on_read(t, d.event_time)
            read_t.append(t)
            read_e.append(d.event_time)
            if processed[d.message_id] < 0:
                processed[d.message_id] = j
            pending.append((t + c.base_ack_latency, d.message_id))
        if j == restart_tick:
            est = TrackingEstimator.from_state(est.state())
        base = ps.oldest_unacked_publish_time("base")
        trk = ps.has_backlog("tracking")
        q_base_has[j] = base is not None
        q_base[j] = 0 if base is None else base
        q_trk[j] = trk
        e = est.estimate(t, base, trk)
        wm[j] = e.watermark
        reasons.append(e.reason)
        max_buckets = max(max_buckets, est.bucket_count)
        beam_wm[j] = beam.estimate(t).watermark

    if read_t:
        bounded = bounded_out_of_orderness_curve(
            np.array(read_e, dtype=np.int64), np.array(read_t, dtype=np.int64), bound=c.band
        ).at(ticks)
    else:
        bounded = np.full(q, MIN_TIMESTAMP, dtype=np.int64)

    # The percentile watermark (an oracle, as the true one): over the backlog of messages
    # whose event happened and that the base reader has not processed yet.
    done_at = np.where(processed >= 0, ticks[np.maximum(processed, 0)], MAX_TIMESTAMP)
    percentile = (
        percentile_source_curve(et_all, done_at, p=c.percentile).at(ticks)
        if n
        else np.full(q, MIN_TIMESTAMP, dtype=np.int64)
    )

    # True watermark after tick j: min event time of messages processed after j (or never).
    key = np.where(processed >= 0, processed, q)
    order = np.argsort(key, kind="stable")
    suffix = np.full(n + 1, MAX_TIMESTAMP, dtype=np.int64)
    if n:
        suffix[:-1] = np.minimum.accumulate(et_all[order][::-1])[::-1]
    true = suffix[np.searchsorted(key[order], np.arange(q), side="right")]
    # Base-unacked after tick j: published at or before ticks[j], first acked after j.
    pub_tick = np.searchsorted(ticks, pt_all, side="left")
    unacked = _cover_min(pub_tick, acked_tick, et_all, q) if n else np.full(q, _EMPTY)
    unacked = np.minimum(unacked, MAX_TIMESTAMP)

    record = TrackingRecord(
        np.array(trk_pt, dtype=np.int64),
        np.array(trk_et, dtype=np.int64),
        np.array(trk_at, dtype=np.int64),
        ticks,
        q_base,
        q_base_has,
        q_trk,
    )
    counters = {
        "messages": n,
        "processed": int(np.count_nonzero(processed >= 0)),
        "redeliveries": ps.redeliveries,
        "duplicates": ps.duplicates,
        "lost_before_processing": lost,
        "tracked": est.tracked,
        "dropped": est.dropped,
        "regressions": est.regressions,
        "beam_regressions": beam.regressions,
        "max_buckets": max_buckets,
    }
    return PubSubSimResult(
        ticks=ticks,
        true_watermark=true,
        watermarks={
            "tracking": wm,
            "beam": beam_wm,
            "bounded": bounded,
            f"percentile:{c.percentile:g}": percentile,
        },
        reasons=reasons,
        publish_time=pt_all,
        event_time=et_all,
        processed_tick=processed,
        unacked_min=unacked,
        record=record,
        counters=counters,
    )
