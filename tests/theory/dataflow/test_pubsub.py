"""Pub/Sub base/tracking estimator, Beam's rule, the simulated Pub/Sub and the driver."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.dataflow.pubsub import (
    DEFAULT_MAX_CLOCK_SKEW,
    REASON_BAND_MIN,
    REASON_BEAM_HELD,
    REASON_BEAM_IDLE,
    REASON_BEAM_MIN,
    REASON_CAPPED,
    REASON_HELD_NOT_AHEAD,
    REASON_HELD_PRUNED,
    REASON_IDLE,
    REASON_LATCHED,
    REASON_NO_DATA,
    BeamPubsubRule,
    TrackingEstimator,
    tracking_estimate_series,
)
from theory.dataflow.pubsub_simulation import (
    ManualClock,
    SimulatedPubSub,
    make_stream,
    scenario,
    simulate_pubsub,
)
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, MINUTE, SECOND

S = SECOND
I64 = np.int64


def book_estimator(**kw: Any) -> TrackingEstimator:
    """The book's rule: one clock for the reader and Pub/Sub (no skew)."""
    kw.setdefault("max_clock_skew", 0)
    return TrackingEstimator(band=10 * S, bucket_width=S, **kw)


def track(est: TrackingEstimator, pairs: Sequence[tuple[int, int]]) -> None:
    for pt, et in pairs:
        est.on_tracked(pt * S, et * S)


# --------------------------------------------------------------------------- the book


def test_book_example_base_100_backlog_min_6_estimates_6() -> None:
    est = book_estimator()
    # 90 s was acked by the base long ago; the base still owes publish times >= 100 s.
    track(est, [(90, 1), (100, 6), (104, 50), (112, 95), (120, 100)])
    e = est.estimate(130 * S, 100 * S, tracking_has_backlog=True)  # ahead by 20 s >= 10 s
    assert (e.watermark, e.reason, e.computed) == (6 * S, REASON_BAND_MIN, 6 * S)


@pytest.mark.parametrize(
    ("newest", "backlog", "advances"),
    [
        (120, True, True),  # ahead by 20 s, backlog: ahead suffices
        (110, True, True),  # ahead by exactly the band
        (105, False, True),  # not ahead, no backlog: no backlog suffices
        (105, True, False),  # both conditions fail: holds
        (109, True, False),  # 1 s short of the band: holds
    ],
)
def test_each_sufficiency_condition(newest: int, backlog: bool, advances: bool) -> None:
    est = book_estimator()
    track(est, [(100, 6), (newest, 80)])
    e = est.estimate(200 * S, 100 * S, backlog)
    if advances:
        assert (e.watermark, e.reason) == (6 * S, REASON_BAND_MIN)
    else:
        assert (e.watermark, e.reason, e.computed) == (MIN_TIMESTAMP, REASON_HELD_NOT_AHEAD, None)


def test_held_keeps_an_earlier_value() -> None:
    est = book_estimator()
    track(est, [(100, 6), (120, 100)])
    assert est.estimate(130 * S, 100 * S, True).watermark == 6 * S
    track(est, [(121, 2)])  # would lower it, but tracking is 1 s ahead of a base at 120 s
    e = est.estimate(131 * S, 120 * S, True)
    assert (e.watermark, e.reason) == (6 * S, REASON_HELD_NOT_AHEAD)


# --------------------------------------------------------------------------- band


def test_band_is_newest_minus_band_when_base_is_empty() -> None:
    est = book_estimator()
    track(est, [(80, 1), (95, 40), (100, 60), (105, 70)])
    # L = 105 - 10 = 95: the 80 s message is out, 95 s is in.
    assert est.estimate(200 * S, None, False).watermark == 40 * S


def test_band_reaches_back_to_base_when_base_lags() -> None:
    est = book_estimator()
    track(est, [(50, 3), (60, 30), (130, 120)])
    assert est.estimate(200 * S, 60 * S, True).watermark == 30 * S  # L = min(60, 120) = 60


def test_band_extends_below_a_close_base_conservatively() -> None:
    est = book_estimator()
    track(est, [(96, 9), (100, 50), (104, 60)])
    # No backlog, base at 100 s: L = min(100, 94) = 94 keeps the acked 96 s message.
    assert est.estimate(200 * S, 100 * S, False).watermark == 9 * S


def test_bucketing_includes_the_whole_bucket_holding_the_band_start() -> None:
    est = TrackingEstimator(band=10 * S, bucket_width=10 * S)
    track(est, [(91, 2), (100, 50), (107, 60)])
    # L = 97 s; bucket [90 s, 100 s) intersects the band, so 91 s counts: lower, never higher.
    assert est.estimate(200 * S, None, False).watermark == 2 * S
    exact = TrackingEstimator(band=10 * S, bucket_width=1)
    track(exact, [(91, 2), (100, 50), (107, 60)])
    assert exact.estimate(200 * S, None, False).watermark == 50 * S


@settings(max_examples=150, deadline=None)
@given(
    msgs=st.lists(st.tuples(st.integers(0, 200), st.integers(-50, 200)), min_size=1, max_size=40),
    base=st.one_of(st.none(), st.integers(0, 200)),
    width=st.integers(1, 30),
    band=st.integers(0, 40),
)
def test_bucketed_never_exceeds_exact(
    msgs: list[tuple[int, int]], base: int | None, width: int, band: int
) -> None:
    kw: dict[str, Any] = {
        "band": band,
        "idle_advance_after": MAX_TIMESTAMP,
        "cap_at_idle_lag": False,
    }
    coarse = TrackingEstimator(bucket_width=width, **kw)
    exact = TrackingEstimator(bucket_width=1, **kw)
    for pt, et in msgs:
        coarse.on_tracked(pt, et)
        exact.on_tracked(pt, et)
    a = coarse.estimate(1000, base, False)
    b = exact.estimate(1000, base, False)
    newest = max(pt for pt, _ in msgs)
    lower = newest - band if base is None else min(base, newest - band)
    assert b.watermark == min(et for pt, et in msgs if pt >= lower)
    assert a.watermark <= b.watermark
    assert a.watermark >= min(et for pt, et in msgs if pt >= lower - width + 1)


def test_cap_at_idle_lag_and_switch_off() -> None:
    capped = book_estimator()
    track(capped, [(100, 99)])
    e = capped.estimate(105 * S, None, False)
    assert (e.watermark, e.reason) == (95 * S, REASON_CAPPED)  # now - idle_lag (10 s)
    plain = book_estimator(cap_at_idle_lag=False)
    track(plain, [(100, 99)])
    assert plain.estimate(105 * S, None, False).watermark == 99 * S


# --------------------------------------------------------------------------- pruning, memory


def test_prune_keeps_band_and_drops_stale_messages() -> None:
    est = book_estimator()
    track(est, [(10, 1), (50, 40), (60, 55)])
    assert est.estimate(100 * S, 50 * S, True).watermark == 40 * S  # L = 50: 10 s pruned
    assert est.bucket_count == 2
    est.on_tracked(20 * S, 0)  # published before pt_base: the base acked it; dropped
    assert (est.dropped, est.bucket_count) == (1, 2)
    est.on_tracked(55 * S, 30 * S)  # in the band: kept
    assert est.estimate(101 * S, 50 * S, False).watermark == 40 * S  # latched: 30 < 40
    assert est.regressions == 1


def test_base_moving_back_below_pruned_history_holds() -> None:
    est = book_estimator()
    track(est, [(10, 1), (50, 40), (70, 60)])
    assert est.estimate(100 * S, 50 * S, True).watermark == 40 * S
    track(est, [(80, 75)])
    e = est.estimate(101 * S, 30 * S, True)  # lost acks: pt_base went back to 30 s
    assert (e.watermark, e.reason) == (40 * S, REASON_HELD_PRUNED)


def test_memory_is_bounded_by_buckets_in_band() -> None:
    width = S // 10
    est = TrackingEstimator(band=10 * S, bucket_width=width)
    rng = np.random.default_rng(0)
    counts = []
    for step in range(200):
        pt = step * S + np.sort(rng.integers(0, S, 2_000))
        et = pt - rng.integers(0, 5 * S, pt.size)
        est.on_tracked_batch(pt, et)
        est.estimate(int(pt[-1]), int(pt[-1]) - 2 * S, False)
        counts.append(est.bucket_count)
    assert max(counts) <= (10 * S) // width + 2  # the band, never the 400k messages
    assert est.tracked == 400_000


# --------------------------------------------------------------------------- idle


def test_idle_advance_with_injectable_clock() -> None:
    clock = ManualClock(1_000 * S)
    est = book_estimator()
    est.on_tracked(clock(), clock() - 3 * S)
    assert est.estimate(clock(), None, False).reason == REASON_CAPPED
    clock.advance_to(clock() + 2 * MINUTE - 1)
    assert est.estimate(clock(), None, False).watermark == 997 * S  # band minimum
    clock.advance_to(1_000 * S + 2 * MINUTE)
    # A base backlog or a tracking backlog blocks the jump.
    assert est.estimate(clock(), 999 * S, False).reason == REASON_BAND_MIN
    assert est.estimate(clock(), None, True).reason == REASON_HELD_NOT_AHEAD
    e = est.estimate(clock(), None, False)
    assert (e.watermark, e.reason) == (clock() - 10 * S, REASON_IDLE)
    clock.advance_to(clock() + MINUTE)
    assert est.estimate(clock(), None, False).watermark == clock() - 10 * S


def test_no_data_then_idle() -> None:
    est = book_estimator()
    e = est.estimate(0, None, False)
    assert (e.watermark, e.reason) == (MIN_TIMESTAMP, REASON_NO_DATA)
    assert est.estimate(2 * MINUTE - 1, None, False).reason == REASON_NO_DATA
    assert est.estimate(2 * MINUTE, None, True).reason == REASON_NO_DATA
    e = est.estimate(2 * MINUTE, None, False)
    assert (e.watermark, e.reason) == (2 * MINUTE - 10 * S, REASON_IDLE)


def test_latched_after_idle_counts_regression() -> None:
    est = book_estimator()
    est.on_tracked(0, 0)
    assert est.estimate(5 * MINUTE, None, False).reason == REASON_IDLE
    est.on_tracked(5 * MINUTE, MINUTE)  # data older than the idle jump: a regression
    e = est.estimate(5 * MINUTE + S, None, False)
    assert (e.watermark, e.reason, e.computed) == (5 * MINUTE - 10 * S, REASON_LATCHED, MINUTE)
    assert est.regressions == 1


# --------------------------------------------------------------------------- vectorised, restart

Op = tuple[Any, ...]


@st.composite
def op_lists(draw: st.DrawFn) -> list[Op]:
    """Interleavings of tracked messages (single and batches) and estimate queries."""
    ops: list[Op] = []
    now = draw(st.integers(-50, 50))
    fresh = False  # messages since the last query: the next one must be strictly later
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["track", "track", "batch", "estimate", "estimate"]))
        if kind == "track":
            ops.append(("track", draw(st.integers(-60, 120)), draw(st.integers(-80, 120))))
            fresh = True
        elif kind == "batch":
            n = draw(st.integers(0, 5))
            pts = draw(st.lists(st.integers(-60, 120), min_size=n, max_size=n))
            ets = draw(st.lists(st.integers(-80, 120), min_size=n, max_size=n))
            ops.append(("batch", pts, ets))
            fresh = fresh or n > 0
        else:
            now += draw(st.integers(1 if fresh else 0, 30))
            fresh = False
            base = draw(st.one_of(st.none(), st.integers(-60, 120)))
            ops.append(("estimate", now, base, draw(st.booleans())))
    return ops


PARAMS = st.fixed_dictionaries(
    {
        "band": st.integers(0, 25),
        "idle_advance_after": st.integers(0, 80),
        "idle_lag": st.integers(0, 20),
        "bucket_width": st.integers(1, 8),
        "cap_at_idle_lag": st.booleans(),
    }
)


def run_ops(
    ops: list[Op], params: dict[str, Any], restart_at: int | None = None
) -> list[tuple[int, str, int | None]]:
    est = TrackingEstimator(**params)
    out = []
    prev = MIN_TIMESTAMP
    for i, op in enumerate(ops):
        if i == restart_at:
            est = TrackingEstimator.from_state(json.loads(json.dumps(est.state())))
        if op[0] == "track":
            est.on_tracked(op[1], op[2])
        elif op[0] == "batch":
            est.on_tracked_batch(np.array(op[1], I64), np.array(op[2], I64))
        else:
            e = est.estimate(op[1], op[2], op[3])
            assert e.watermark >= prev and e.watermark == est.watermark
            prev = e.watermark
            out.append((e.watermark, e.reason, e.computed))
    return out


@settings(max_examples=300, deadline=None)
@given(ops=op_lists(), params=PARAMS)
def test_vectorised_equals_incremental(ops: list[Op], params: dict[str, Any]) -> None:
    expected = run_ops(ops, params)
    pts: list[int] = []
    ets: list[int] = []
    at: list[int] = []
    q: list[tuple[int, int | None, bool]] = []
    # A message is tracked "at" the time of the next query, so queries see it in order.
    pending: list[tuple[int, int]] = []
    for op in ops:
        if op[0] == "track":
            pending.append((op[1], op[2]))
        elif op[0] == "batch":
            pending.extend(zip(op[1], op[2], strict=True))
        else:
            for pt, et in pending:
                pts.append(pt)
                ets.append(et)
                at.append(op[1])
            pending = []
            q.append((op[1], op[2], op[3]))
    s = tracking_estimate_series(
        np.array(pts, I64),
        np.array(ets, I64),
        np.array(at, I64),
        np.array([x[0] for x in q], I64),
        np.array([0 if x[1] is None else x[1] for x in q], I64),
        np.array([x[1] is not None for x in q], bool),
        np.array([x[2] for x in q], bool),
        **params,
    )
    got = [
        (int(w), r, None if h else int(c))
        for w, r, c, h in zip(s.watermark, s.reasons(), s.computed, s.held, strict=True)
    ]
    assert got == expected
    regressions = sum(1 for _, r, _ in expected if r == REASON_LATCHED)
    assert s.regressions == regressions


@settings(max_examples=300, deadline=None)
@given(ops=op_lists(), params=PARAMS, data=st.data())
def test_restart_from_snapshot_changes_nothing(
    ops: list[Op], params: dict[str, Any], data: st.DataObject
) -> None:
    restart = data.draw(st.integers(0, len(ops)))
    assert run_ops(ops, params, restart_at=restart) == run_ops(ops, params)


def test_restored_state_round_trips_and_keeps_watermark() -> None:
    est = book_estimator()
    track(est, [(100, 6), (120, 100)])
    est.estimate(130 * S, 100 * S, True)
    state = est.state()
    again = TrackingEstimator.from_state(json.loads(json.dumps(state)))
    assert again.state() == state and again.watermark == 6 * S
    assert again.estimate(131 * S, 100 * S, True).watermark == 6 * S


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("band", -1, "band"),
        ("watermark", MAX_TIMESTAMP + 1, "watermark"),
        ("buckets", [[1, 0, 0]], "count"),
        ("frontier", 10**9, "frontier"),
        ("version", 99, "version"),
    ],
)
def test_bad_snapshot_is_rejected(key: str, value: Any, needle: str) -> None:
    est = book_estimator()
    track(est, [(100, 6)])
    est.estimate(100 * S, None, False)
    state = est.state()
    state[key] = value
    with pytest.raises(ValueError, match=needle):
        TrackingEstimator.from_state(state)
    del state[key]
    with pytest.raises(ValueError, match=key if key != "version" else "version"):
        TrackingEstimator.from_state(state)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"band": -1}, "band"),
        ({"bucket_width": 0}, "bucket_width"),
        ({"bucket_width": -5}, "bucket_width"),
        ({"idle_advance_after": -1}, "idle_advance_after"),
        ({"idle_lag": -1}, "idle_lag"),
        ({"band": MAX_TIMESTAMP + 1}, "band"),
    ],
)
def test_bad_parameters(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        TrackingEstimator(**kw)


def test_bad_input_names_the_parameter_and_changes_nothing() -> None:
    est = book_estimator()
    track(est, [(100, 6), (120, 100)])
    est.estimate(130 * S, 100 * S, True)
    before = est.state()
    bad_calls = [
        (lambda: est.on_tracked(MAX_TIMESTAMP + 1, 0), ValueError, "publish_time"),
        (lambda: est.on_tracked(0, MIN_TIMESTAMP - 1), ValueError, "event_time"),
        (lambda: est.on_tracked(1.5, 0), TypeError, "publish_time"),  # type: ignore[arg-type]
        (
            lambda: est.on_tracked_batch(np.array([1, MAX_TIMESTAMP + 1]), np.array([0, 0])),
            ValueError,
            "publish_times",
        ),
        (lambda: est.on_tracked_batch(np.array([1, 2]), np.array([0])), ValueError, "length|has"),
        (lambda: est.estimate(MAX_TIMESTAMP + 1, None, False), ValueError, "now"),
        (
            lambda: est.estimate(0, MIN_TIMESTAMP - 1, False),
            ValueError,
            "base_oldest_unacked_publish_time",
        ),
        (lambda: est.estimate(0, None, 1), TypeError, "tracking_has_backlog"),  # type: ignore[arg-type]
    ]
    for call, exc, needle in bad_calls:
        with pytest.raises(exc, match=needle):
            call()
        assert est.state() == before


def test_vectorised_rejects_decreasing_now() -> None:
    e = np.empty(0, I64)
    with pytest.raises(ValueError, match="now"):
        tracking_estimate_series(
            e, e, e, np.array([2, 1]), np.zeros(2, I64), np.zeros(2, bool), np.zeros(2, bool)
        )


# --------------------------------------------------------------------------- Beam's rule


def test_beam_rule_significance_min_and_idle_jump() -> None:
    beam = BeamPubsubRule()
    t0 = 1_000 * S
    beam.on_received(t0)
    beam.on_read(t0, t0 - 3 * S)
    assert beam.estimate(t0).reason == REASON_BEAM_HELD  # one sample, one bucket
    beam.on_read(t0 + 5 * S, t0 - 1 * S)  # a second bucket: significant
    e = beam.estimate(t0 + 5 * S)
    assert (e.watermark, e.reason) == (t0 - 3 * S, REASON_BEAM_MIN)
    # Nothing read for a minute and nothing received for over a minute: wall time, no lag.
    e = beam.estimate(t0 + 5 * S + MINUTE + 1)
    assert (e.watermark, e.reason) == (t0 + 5 * S + MINUTE + 1, REASON_BEAM_IDLE)
    beam.on_received(t0 + 2 * MINUTE)
    for k in range(10):
        beam.on_read(t0 + 2 * MINUTE, t0 + k * S)  # ten samples: significant, but older
    e = beam.estimate(t0 + 2 * MINUTE)
    assert (e.reason, e.computed) == (REASON_LATCHED, t0) and beam.regressions == 1


def test_beam_rule_moving_window_forgets_after_the_sample_period() -> None:
    beam = BeamPubsubRule()
    for k in range(20):
        beam.on_received(k * 5 * S)
        beam.on_read(k * 5 * S, k * 5 * S - 2 * S)
    # The window keeps the last 12 five-second buckets: reads at 40 s .. 95 s.
    assert beam.estimate(95 * S).watermark == 38 * S


# --------------------------------------------------------------------------- simulated Pub/Sub


def pubsub(seed: int = 0, **kw: Any) -> tuple[ManualClock, SimulatedPubSub]:
    clock = ManualClock(0)
    ps = SimulatedPubSub(clock, seed=seed, **kw)
    ps.create_subscription("s")
    return clock, ps


def test_delivery_order_disorder_is_bounded_and_seeded() -> None:
    orders = []
    for _ in range(2):
        clock, ps = pubsub(seed=3, delivery_disorder=5 * S)
        for k in range(500):
            clock.advance_to(k * S // 10)
            ps.publish(k)
        got = ps.pull("s", 1_000)
        pts = [d.publish_time for d in got]
        assert sorted(pts) != pts  # out of order...
        assert all(a <= b + 5 * S for i, a in enumerate(pts) for b in pts[i + 1 :])  # bounded
        orders.append([d.message_id for d in got])
    assert orders[0] == orders[1]
    clock, ps = pubsub(delivery_disorder=0)
    for k in range(50):
        clock.advance_to(k)
        ps.publish(k)
    assert [d.message_id for d in ps.pull("s", 100)] == list(range(50))


def test_ack_deadline_redelivery_and_oldest_unacked() -> None:
    clock, ps = pubsub(ack_deadline=10 * S)
    assert ps.oldest_unacked_publish_time("s") is None
    for k in range(3):
        clock.advance_to(k * S)
        ps.publish(100 + k)
    got = ps.pull("s", 10)
    assert [d.attempt for d in got] == [1, 1, 1]
    ps.ack("s", [0, 2])
    assert ps.oldest_unacked_publish_time("s") == 1 * S and ps.has_backlog("s")
    clock.advance_to(2 * S + 10 * S - 1)
    assert ps.pull("s", 10) == []  # still leased
    clock.advance_to(1 * S + 10 * S + 2 * S)
    again = ps.pull("s", 10)
    assert [(d.message_id, d.attempt) for d in again] == [(1, 2)]
    assert ps.redeliveries == 1
    ps.ack("s", [1])
    assert ps.oldest_unacked_publish_time("s") is None and not ps.has_backlog("s")


def test_duplicates_are_delivered_even_after_ack() -> None:
    _, ps = pubsub(duplicate_probability=1.0)
    ps.publish(7)
    first = ps.pull("s", 1)
    ps.ack("s", [first[0].message_id])
    dup = ps.pull("s", 10)
    assert [(d.message_id, d.duplicate) for d in dup] == [(0, True)]
    assert ps.duplicates == 1 and ps.oldest_unacked_publish_time("s") is None


def test_pubsub_errors() -> None:
    clock, ps = pubsub()
    with pytest.raises(KeyError, match="nope"):
        ps.pull("nope", 1)
    with pytest.raises(ValueError, match="already exists"):
        ps.create_subscription("s")
    clock.advance_to(10)
    ps.publish(0)
    ps.create_subscription("late")
    assert ps.pull("late", 10) == []  # created after the publish
    with pytest.raises(ValueError, match="duplicate_probability"):
        SimulatedPubSub(clock, duplicate_probability=2.0)
    with pytest.raises(ValueError, match="clock"):
        clock.advance_to(5)


# --------------------------------------------------------------------------- simulation


@pytest.mark.parametrize("kind", ["dense", "bursty", "slow-base", "sparse"])
def test_simulation_safe_under_faults_with_disorder_inside_the_band(kind: str) -> None:
    pt, et, cfg = scenario(
        kind,
        seed=11,
        duration=3 * MINUTE,
        duplicate_probability=0.05,
        base_loss_probability=0.01,
        ack_deadline=3 * S,
        tracking_period=S,
    )
    r = simulate_pubsub(pt, et, cfg)
    wm = r.watermarks["tracking"]
    assert r.counters["redeliveries"] > 0 or kind == "sparse"
    assert r.counters["processed"] == pt.size
    assert bool(np.all(wm[1:] >= wm[:-1]))
    assert bool(np.all(wm <= r.unacked_min))  # never passes an unacked in-band message
    assert bool(np.all(wm <= r.true_watermark))
    assert r.late("tracking").size == 0
    assert r.counters["regressions"] == 0
    # The recorded stream replays to the same series, vectorised.
    s = r.record.series(**cfg.estimator_params())
    assert np.array_equal(s.watermark, wm) and s.reasons() == r.reasons


def test_simulation_restart_from_snapshot_is_invisible() -> None:
    pt, et, cfg = scenario("bursty", seed=2, duration=2 * MINUTE, duplicate_probability=0.02)
    plain = simulate_pubsub(pt, et, cfg)
    mid = int(plain.ticks[plain.ticks.size // 2])
    restarted = simulate_pubsub(pt, et, cfg.__class__(**{**cfg.__dict__, "restart_at": mid}))
    assert np.array_equal(plain.watermarks["tracking"], restarted.watermarks["tracking"])
    assert plain.reasons == restarted.reasons


def test_simulation_slow_tracking_holds_then_catches_up() -> None:
    pt, et, cfg = scenario("dense", seed=4, duration=MINUTE, tracking_period=2 * S)
    r = simulate_pubsub(pt, et, cfg)
    assert REASON_HELD_NOT_AHEAD in r.reasons and REASON_BAND_MIN in r.reasons
    assert r.late("tracking").size == 0


def test_sparse_idle_reaches_near_real_time() -> None:
    pt, et = make_stream("sparse", seed=1, duration=10 * MINUTE)
    _, _, cfg = scenario("sparse", seed=1)
    r = simulate_pubsub(pt, et, cfg)
    idle = [j for j, reason in enumerate(r.reasons) if reason == REASON_IDLE]
    assert idle
    # the idle jump lands at now - skew - idle_lag (one clock here, but the default bound)
    skew = DEFAULT_MAX_CLOCK_SKEW
    assert all(r.watermarks["tracking"][j] == r.ticks[j] - skew - cfg.idle_lag for j in idle)
    assert r.late("tracking").size == 0


def test_the_cap_is_what_keeps_sparse_data_on_time() -> None:
    pt, et, cfg = scenario("sparse", seed=0)
    r = simulate_pubsub(pt, et, cfg)
    book = r.record.series(**{**cfg.estimator_params(), "cap_at_idle_lag": False})
    assert np.array_equal(book.step_series().at(r.ticks), book.watermark)
    late_book = np.flatnonzero(
        (r.processed_tick > 0)
        & (r.event_time < book.watermark[np.maximum(r.processed_tick - 1, 0)])
    )
    assert late_book.size > 0  # the bare rule: a cluster's later, older message is late
    assert r.late("tracking").size == 0


def test_percentile_one_is_the_true_watermark() -> None:
    pt, et, cfg = scenario("dense", seed=3, duration=MINUTE, percentile=1.0)
    r = simulate_pubsub(pt, et, cfg)
    wm = r.watermarks["percentile:1"]
    first = int(r.processed_tick[r.processed_tick >= 0].min())
    # the true watermark is an oracle; the percentile one falls back to the perfect
    # watermark, which never passes the clock: min(true, tick) while messages remain
    left = np.arange(wm.size) >= first
    left &= r.true_watermark < MAX_TIMESTAMP
    assert left.any()
    assert np.array_equal(wm[left], np.minimum(r.true_watermark, r.ticks)[left])
    # then it stays at the tick of the last processing (the curve steps at arrivals)
    last = int(r.processed_tick.max())
    assert bool(np.all(wm[last:] == r.ticks[last]))
    assert bool(np.all(wm[1:] >= wm[:-1]))
    assert r.late("percentile:1").size == 0


def test_lower_percentiles_run_ahead_and_lose_data() -> None:
    runs = {}
    for p in (0.5, 0.9, 0.99):
        pt, et, cfg = scenario("dense", seed=5, duration=MINUTE, percentile=p)
        runs[p] = simulate_pubsub(pt, et, cfg)
    wm = {p: r.watermarks[f"percentile:{p:g}"] for p, r in runs.items()}
    late = {p: runs[p].late_fraction(f"percentile:{p:g}") for p in runs}
    assert bool(np.all(wm[0.5] >= wm[0.9])) and bool(np.all(wm[0.9] >= wm[0.99]))
    assert late[0.5] > late[0.9] >= late[0.99]
    assert late[0.5] > 0.01  # the median of the backlog is no safe watermark
    # The other estimators do not depend on the percentile.
    assert np.array_equal(runs[0.5].watermarks["tracking"], runs[0.99].watermarks["tracking"])


@pytest.mark.parametrize("p", [0.0, 1.5, float("nan")])
def test_bad_percentile_is_named(p: float) -> None:
    pt, et, cfg = scenario("dense", seed=0, duration=10 * S, percentile=p)
    with pytest.raises(ValueError, match=r"config\.percentile"):
        simulate_pubsub(pt, et, cfg)


@pytest.mark.parametrize(
    ("overrides", "exc", "needle"),
    [
        ({"base_rate": 0.0}, ValueError, "base_rate"),
        ({"base_loss_probability": 1.0}, ValueError, "base_loss_probability"),
        ({"base_ack_latency": -1}, ValueError, "base_ack_latency"),
        ({"tracking_period": SECOND // 7}, ValueError, "tracking_period"),
        ({"tick": 0.5}, TypeError, "tick"),
    ],
)
def test_bad_config_is_named(overrides: dict[str, Any], exc: type, needle: str) -> None:
    pt, et, cfg = scenario("dense", seed=0, duration=10 * S, **overrides)
    with pytest.raises(exc, match=needle):
        simulate_pubsub(pt, et, cfg)


def test_error_convention_for_flags_columns_and_snapshots() -> None:
    """TypeError for a wrong type, ValueError for a bad value, the parameter named."""
    with pytest.raises(TypeError, match="cap_at_idle_lag"):
        TrackingEstimator(cap_at_idle_lag=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="state"):
        TrackingEstimator.from_state([("version", 1)])  # type: ignore[arg-type]
    e, now, flags = np.empty(0, I64), np.array([1, 2], I64), np.zeros(2, bool)
    with pytest.raises(TypeError, match="base_has_backlog"):
        tracking_estimate_series(e, e, e, now, np.zeros(2, I64), np.zeros(2, I64), flags)
    with pytest.raises(ValueError, match="tracking_has_backlog"):
        tracking_estimate_series(e, e, e, now, np.zeros(2, I64), flags, np.zeros(3, bool))
    with pytest.raises(TypeError, match="base_oldest_unacked_publish_time"):
        tracking_estimate_series(e, e, e, now, np.zeros(2), flags, flags)
    with pytest.raises(ValueError, match="tracked_at"):
        tracking_estimate_series(e, e, np.zeros(1, I64), now, np.zeros(2, I64), flags, flags)
    pt, et = make_stream("dense", seed=0, duration=10 * S)
    with pytest.raises(TypeError, match="publish_time"):
        simulate_pubsub(pt.astype(float), et, scenario("dense", duration=10 * S)[2])
    with pytest.raises(ValueError, match="event_time"):
        simulate_pubsub(pt, et[:-1], scenario("dense", duration=10 * S)[2])
    with pytest.raises(ValueError, match="rate"):
        make_stream("dense", rate=-1.0)


# ----------------------------------------------------------------- clock skew (issue 14)


def test_a_reader_clock_ahead_never_idles_past_now_minus_skew_minus_idle_lag() -> None:
    """Reader 1 s ahead of Pub/Sub, bound 1.5 s: the idle jump and the cap stay below
    ``now - skew - idle_lag``, so a record published at Pub/Sub time ``now - 1 s`` with
    the largest allowed delay (idle_lag) is not late; with no skew bound it would be."""
    ahead = SECOND
    for skew, late in ((3 * SECOND // 2, False), (0, True)):
        est = book_estimator(max_clock_skew=skew, idle_lag=10 * S, idle_advance_after=60 * S)
        track(est, [(100, 99)])
        now = 200 * S  # the reader's clock; Pub/Sub's reads 199 s
        e = est.estimate(now, None, False)
        assert e.reason == REASON_IDLE
        assert e.watermark == now - skew - 10 * S
        next_event = now - ahead - 10 * S  # published at 199 s, idle_lag old
        assert (next_event < e.watermark) == late


def test_a_reader_clock_behind_is_accepted_within_the_skew_and_still_advances() -> None:
    """Reader 30 s behind Pub/Sub: with a 31 s bound every estimate is accepted and the
    watermark reaches near real time once quiet; with a 10 s bound the first estimate
    after data is a ValueError naming the bound, and nothing changes."""
    behind = 30 * S
    est = book_estimator(max_clock_skew=31 * S, idle_lag=10 * S, idle_advance_after=60 * S)
    marks = []
    for pt in range(100, 160, 5):  # Pub/Sub time pt; the reader reads pt - 30 s
        track(est, [(pt, pt - 1)])
        marks.append(est.estimate(pt * S - behind, None, False).watermark)
    assert marks == sorted(marks) and marks[-1] > marks[0]  # it advances
    quiet = est.estimate(155 * S + 60 * S + 31 * S, None, False)  # quiet 60 s, surely
    assert quiet.reason == REASON_IDLE
    assert quiet.watermark == 155 * S + 60 * S - 10 * S
    tight = book_estimator(max_clock_skew=10 * S)
    track(tight, [(100, 99)])
    state = tight.state()
    with pytest.raises(ValueError, match=r"behind Pub/Sub's by more than max_clock_skew"):
        tight.estimate(100 * S - behind, None, False)
    assert tight.state() == state


def test_the_vectorised_rule_takes_the_skew_too() -> None:
    """tracking_estimate_series equals the incremental estimator under a skew bound, and
    refuses a clock behind the newest publish time beyond it with the same message."""
    pt = np.array([100, 130, 131], dtype=np.int64) * S
    et = pt - S
    at = pt - 20 * S  # tracked by a reader 20 s behind
    now = np.array([81, 111, 112, 200, 400], dtype=np.int64) * S
    kw = {"band": 10 * S, "bucket_width": S, "idle_lag": 10 * S, "max_clock_skew": 25 * S}
    series = tracking_estimate_series(pt, et, at, now, np.zeros(5, np.int64), np.zeros(5, bool),
                                      np.zeros(5, bool), **kw)
    est = TrackingEstimator(**kw)
    done = 0
    wms = []
    for t in now.tolist():
        while done < 3 and at[done] <= t:
            est.on_tracked(int(pt[done]), int(et[done]))
            done += 1
        wms.append(est.estimate(t, None, False).watermark)
    assert series.watermark.tolist() == wms
    assert series.reasons()[-1] == REASON_IDLE
    with pytest.raises(ValueError, match=r"now\[0\]: .* more than max_clock_skew"):
        tracking_estimate_series(pt, et, at, now, np.zeros(5, np.int64), np.zeros(5, bool),
                                 np.zeros(5, bool), **{**kw, "max_clock_skew": 5 * S})
