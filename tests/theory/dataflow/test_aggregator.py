"""The Dataflow-style central aggregator: leases, fencing by epoch, expiry, unowned ranges
holding the global watermark, recovery from a snapshot, and bad input."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.dataflow.aggregator import REJECT_REASONS, CentralAggregator, Lease
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

RANGES = ["a", "b", (0, 100)]
LEASE = 1_000


def agg3():
    return CentralAggregator(RANGES, workers=["w1", "w2", "w3"])


def state(agg):
    """Everything observable, for 'unchanged' checks."""
    return (
        agg.snapshot(),
        [agg.lease(r) for r in agg.ranges],
        agg.global_watermark(),
        dict(agg.rejected),
        agg.regressions,
        agg.accepted,
        agg.now,
    )


def test_initial_state():
    agg = agg3()
    assert agg.ranges == ("a", "b", (0, 100))
    assert agg.global_watermark() == MIN_TIMESTAMP
    assert all(agg.epoch(r) == 0 and agg.lease(r) is None for r in RANGES)
    assert agg.rejected == dict.fromkeys(REJECT_REASONS, 0)
    why = agg.why()
    assert why.range_id == "a" and not why.owned and why.watermark == MIN_TIMESTAMP


def test_global_is_min_over_ranges_and_why_names_it():
    agg = agg3()
    for i, r in enumerate(RANGES):
        assert agg.assign(range_id=r, worker="w1", now=i, lease_duration=LEASE) == 1
        assert agg.report(worker="w1", range_id=r, epoch=1, watermark=100 * (i + 1), now=i)
    assert agg.global_watermark() == 100
    assert agg.why().range_id == "a" and agg.why().owned and agg.why().holder == "w1"
    agg.report(worker="w1", range_id="a", epoch=1, watermark=500, now=20)
    assert agg.global_watermark() == 200
    assert agg.why().range_id == "b"
    assert "range 'b' at 200, held by 'w1'" in str(agg.why())


def test_epoch_increments_on_every_assignment_and_fences_old_holder():
    agg = agg3()
    assert agg.assign(range_id="a", worker="w1", now=0, lease_duration=LEASE) == 1
    assert agg.report(worker="w1", range_id="a", epoch=1, watermark=50, now=1)
    # reassigned to w2: the old holder's reports under epoch 1 are stale
    assert agg.assign(range_id="a", worker="w2", now=2, lease_duration=LEASE) == 2
    assert not agg.report(worker="w1", range_id="a", epoch=1, watermark=999, now=3)
    assert agg.rejected["stale_epoch"] == 1
    assert agg.range_watermark("a") == 50
    # w1 claiming the current epoch is not the holder
    assert not agg.report(worker="w1", range_id="a", epoch=2, watermark=999, now=4)
    assert agg.rejected["not_holder"] == 1
    assert agg.report(worker="w2", range_id="a", epoch=2, watermark=60, now=5)
    # reassigning to the same worker also bumps the epoch and fences its own old lease
    assert agg.assign(range_id="a", worker="w2", now=6, lease_duration=LEASE) == 3
    assert not agg.report(worker="w2", range_id="a", epoch=2, watermark=70, now=7)
    assert agg.rejected["stale_epoch"] == 2
    assert agg.report(worker="w2", range_id="a", epoch=3, watermark=70, now=8)
    assert agg.range_watermark("a") == 70
    assert agg.accepted == 3


def test_lease_expiry_rejects_and_expire_releases():
    agg = agg3()
    agg.assign(range_id="a", worker="w1", now=0, lease_duration=LEASE)
    assert agg.report(
        worker="w1", range_id="a", epoch=1, watermark=10, now=LEASE - 1
    )  # expiry is exclusive
    assert not agg.report(
        worker="w1", range_id="a", epoch=1, watermark=20, now=LEASE
    )  # expired, not yet released
    assert agg.rejected["expired"] == 1
    assert agg.lease("a") == Lease("w1", 1, LEASE)
    assert agg.why().lease_expired is False  # 'a' does not hold the global (b is at MIN)
    assert agg.expire(LEASE) == ["a"]
    assert agg.lease("a") is None
    assert agg.expire(LEASE) == []
    # after release the old holder's report is still 'expired'; another worker's is not
    assert not agg.report(worker="w1", range_id="a", epoch=1, watermark=20, now=LEASE + 1)
    assert not agg.report(worker="w2", range_id="a", epoch=1, watermark=20, now=LEASE + 1)
    assert agg.rejected == {"stale_epoch": 0, "not_holder": 1, "expired": 2}
    assert agg.range_watermark("a") == 10


def test_renew_and_release():
    agg = agg3()
    agg.assign(range_id="a", worker="w1", now=0, lease_duration=LEASE)
    assert agg.renew(range_id="a", worker="w1", epoch=1, now=900, lease_duration=LEASE)
    assert agg.lease("a") == Lease("w1", 1, 1900)
    assert agg.report(
        worker="w1", range_id="a", epoch=1, watermark=5, now=1500
    )  # would have expired without renewal
    assert not agg.renew(range_id="a", worker="w2", epoch=1, now=1500, lease_duration=LEASE)
    assert agg.rejected["not_holder"] == 1
    assert agg.release(range_id="a", worker="w1", epoch=1, now=1600)
    assert agg.lease("a") is None and agg.range_watermark("a") == 5
    assert not agg.release(range_id="a", worker="w1", epoch=1, now=1700)  # nothing left to release
    assert agg.rejected["expired"] == 1
    assert agg.epoch("a") == 1


def test_unowned_range_holds_the_global_watermark():
    agg = agg3()
    for r in RANGES:
        agg.assign(range_id=r, worker="w1", now=0, lease_duration=LEASE)
        agg.report(worker="w1", range_id=r, epoch=1, watermark=100, now=0)
    agg.assign(
        range_id="b", worker="w2", now=2, lease_duration=5 * LEASE
    )  # b moves to w2, others stay with w1 and expire
    agg.report(worker="w2", range_id="b", epoch=2, watermark=150, now=3)
    assert agg.expire(LEASE) == ["a", (0, 100)]
    agg.report(worker="w2", range_id="b", epoch=2, watermark=10_000, now=LEASE + 1)
    # nobody owns a or (0, 100): the global watermark stays at their last value
    assert agg.global_watermark() == 100
    why = agg.why()
    assert (why.range_id, why.watermark, why.owned, why.holder) == ("a", 100, False, None)
    assert str(why) == "range 'a' at 100, unowned"
    # a new holder releases the hold
    e = agg.assign(range_id="a", worker="w3", now=LEASE + 2, lease_duration=LEASE)
    agg.report(worker="w3", range_id="a", epoch=e, watermark=20_000, now=LEASE + 3)
    assert agg.global_watermark() == 100 and agg.why().range_id == (0, 100)
    e = agg.assign(range_id=(0, 100), worker="w3", now=LEASE + 4, lease_duration=LEASE)
    agg.report(worker="w3", range_id=(0, 100), epoch=e, watermark=30_000, now=LEASE + 5)
    assert agg.global_watermark() == 10_000 and agg.why().range_id == "b"


def test_why_flags_an_expired_but_unreleased_lease():
    agg = CentralAggregator(["only"], workers=["w"])
    agg.assign(range_id="only", worker="w", now=0, lease_duration=LEASE)
    agg.report(worker="w", range_id="only", epoch=1, watermark=7, now=1)
    agg.expire(LEASE - 1)
    assert agg.why().owned and not agg.why().lease_expired
    agg.expire(LEASE - 1)
    assert not agg.report(worker="w", range_id="only", epoch=1, watermark=9, now=LEASE + 5)
    assert agg.why().lease_expired
    assert "lease expired" in str(agg.why())


def test_per_range_watermark_latched_and_regressions_counted():
    agg = agg3()
    agg.assign(range_id="a", worker="w1", now=0, lease_duration=LEASE)
    assert agg.report(worker="w1", range_id="a", epoch=1, watermark=50, now=1)
    assert agg.report(
        worker="w1", range_id="a", epoch=1, watermark=40, now=2
    )  # accepted, but latched
    assert agg.range_watermark("a") == 50 and agg.regressions == 1
    assert agg.report(worker="w1", range_id="a", epoch=1, watermark=50, now=3)  # equal: neither
    assert agg.regressions == 1


def test_snapshot_restore_never_regresses_and_fences_old_leases():
    agg = agg3()
    for r in RANGES:
        agg.assign(range_id=r, worker="w1", now=0, lease_duration=LEASE)
    agg.assign(range_id="a", worker="w2", now=1, lease_duration=LEASE)  # a at epoch 2
    agg.report(worker="w2", range_id="a", epoch=2, watermark=300, now=2)
    agg.report(worker="w1", range_id="b", epoch=1, watermark=200, now=2)
    agg.report(worker="w1", range_id=(0, 100), epoch=1, watermark=250, now=2)
    snap = copy.deepcopy(agg.snapshot())
    assert snap == {"ranges": [("a", 300, 2), ("b", 200, 1), ((0, 100), 250, 1)]}

    # a new aggregator after a crash: no regression, every range unowned
    new = CentralAggregator.from_snapshot(snap, workers=["w1", "w2"])
    assert new.global_watermark() == 200 == agg.global_watermark()
    assert all(new.lease(r) is None for r in RANGES)
    # the pre-crash holder's reports are fenced: not the holder of the restored epoch
    assert not new.report(worker="w2", range_id="a", epoch=2, watermark=400, now=3)
    # the next assignment is a new epoch above every pre-crash epoch
    assert new.assign(range_id="a", worker="w1", now=4, lease_duration=LEASE) == 3
    assert new.report(worker="w1", range_id="a", epoch=3, watermark=400, now=5)

    # restoring an older snapshot onto a live aggregator never lowers anything
    agg.report(worker="w1", range_id="b", epoch=1, watermark=900, now=6)
    agg.report(worker="w1", range_id=(0, 100), epoch=1, watermark=900, now=6)
    before = agg.global_watermark()
    old = {"ranges": [("a", 1, 1), ("b", 2, 1)]}
    agg.restore(old)
    assert agg.global_watermark() == before == 300
    assert agg.range_watermark("b") == 900 and agg.epoch("a") == 2
    assert agg.lease("b") == Lease("w1", 1, LEASE)
    # a newer snapshot's epoch takes away a lease granted under an older epoch
    agg.restore({"ranges": [("b", 950, 5)]})
    assert agg.lease("b") is None and agg.epoch("b") == 5 and agg.range_watermark("b") == 950


# ---------------------------------------------------------------------------------------
# Bad input raises and leaves the state unchanged
# ---------------------------------------------------------------------------------------


def setup_agg():
    agg = agg3()
    agg.assign(range_id="a", worker="w1", now=10, lease_duration=LEASE)
    agg.assign(range_id="b", worker="w2", now=10, lease_duration=LEASE)
    agg.report(worker="w1", range_id="a", epoch=1, watermark=5, now=20)
    agg.report(
        worker="w2", range_id="a", epoch=1, watermark=5, now=20
    )  # one rejection on the books
    return agg


BAD_CALLS = [
    # unknown worker / range
    (
        lambda g: g.report(worker="nobody", range_id="a", epoch=1, watermark=10, now=30),
        KeyError,
        "unknown worker",
    ),
    (
        lambda g: g.report(worker="w1", range_id="zz", epoch=1, watermark=10, now=30),
        KeyError,
        "unknown key range",
    ),
    (
        lambda g: g.report(worker="w1", range_id=["a"], epoch=1, watermark=10, now=30),
        KeyError,
        "unknown key range",
    ),
    (
        lambda g: g.report(worker=["w1"], range_id="a", epoch=1, watermark=10, now=30),
        KeyError,
        "unknown worker",
    ),
    # epoch from the future, or not an epoch at all
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=2, watermark=10, now=30),
        ValueError,
        "from the future",
    ),
    (
        lambda g: g.report(worker="w1", range_id=(0, 100), epoch=1, watermark=10, now=30),
        ValueError,
        "from the future",
    ),
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=0, watermark=10, now=30),
        ValueError,
        "epoch must be >= 1",
    ),
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=True, watermark=10, now=30),
        TypeError,
        "epoch",
    ),
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=1.0, watermark=10, now=30),
        TypeError,
        "epoch",
    ),
    # bad watermark or time
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=1, watermark=10.5, now=30),
        TypeError,
        "watermark",
    ),
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=1, watermark=False, now=30),
        TypeError,
        "watermark",
    ),
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=1, watermark=MAX_TIMESTAMP + 1, now=30),
        ValueError,
        "watermark",
    ),
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=1, watermark=10, now=19),
        ValueError,
        "before the aggregator",
    ),
    (
        lambda g: g.report(worker="w1", range_id="a", epoch=1, watermark=10, now="30"),
        TypeError,
        "now",
    ),
    # leases
    (
        lambda g: g.assign(range_id="zz", worker="w1", now=30, lease_duration=LEASE),
        KeyError,
        "unknown key range",
    ),
    (
        lambda g: g.assign(range_id="a", worker="nobody", now=30, lease_duration=LEASE),
        KeyError,
        "unknown worker",
    ),
    (
        lambda g: g.assign(range_id="a", worker="w1", now=30, lease_duration=0),
        ValueError,
        "lease_duration",
    ),
    (
        lambda g: g.assign(range_id="a", worker="w1", now=30, lease_duration=-5),
        ValueError,
        "lease_duration",
    ),
    (
        lambda g: g.assign(range_id="a", worker="w1", now=5, lease_duration=LEASE),
        ValueError,
        "before the aggregator",
    ),
    (
        lambda g: g.renew(range_id="a", worker="w1", epoch=1, now=30, lease_duration=0),
        ValueError,
        "lease_duration",
    ),
    (
        lambda g: g.renew(range_id="a", worker="w1", epoch=9, now=30, lease_duration=LEASE),
        ValueError,
        "from the future",
    ),
    (
        lambda g: g.release(range_id="a", worker="nobody", epoch=1, now=30),
        KeyError,
        "unknown worker",
    ),
    (lambda g: g.expire(19), ValueError, "before the aggregator"),
    # snapshots
    (lambda g: g.restore({"ranges": [("a", 50, 1), ("zz", 1, 1)]}), KeyError, "unknown key"),
    (lambda g: g.restore({"ranges": [("a", 50, 1), ("b", 1.5, 1)]}), TypeError, "watermark"),
    (lambda g: g.restore({"ranges": [("a", 50, 9), ("b", 60, -1)]}), ValueError, "negative"),
    (lambda g: g.restore({"ranges": [("a", 50)]}), ValueError, "malformed"),
    (lambda g: g.restore({}), ValueError, "malformed"),
]


@pytest.mark.parametrize(("call", "exc", "match"), BAD_CALLS)
def test_bad_input_raises_and_leaves_state_unchanged(call, exc, match):
    agg = setup_agg()
    before = state(agg)
    with pytest.raises(exc, match=match):
        call(agg)
    assert state(agg) == before


def test_bad_construction():
    with pytest.raises(ValueError, match="at least one"):
        CentralAggregator([])
    with pytest.raises(ValueError, match="duplicate"):
        CentralAggregator(["a", "a"])
    with pytest.raises(ValueError, match="malformed"):
        CentralAggregator.from_snapshot({"wrong": []})
    agg = CentralAggregator(["a"])
    with pytest.raises(KeyError, match="add_worker"):
        agg.assign(range_id="a", worker="w", now=0, lease_duration=LEASE)
    agg.add_worker("w")
    assert agg.assign(range_id="a", worker="w", now=0, lease_duration=LEASE) == 1


# ---------------------------------------------------------------------------------------
# Property: the global watermark is monotonic and equals the min of the per-range values
# ---------------------------------------------------------------------------------------

N_RANGES = 4
WORKERS = ["w0", "w1", "w2"]
op_strategy = st.one_of(
    st.tuples(st.just("assign"), st.integers(0, N_RANGES - 1), st.sampled_from(WORKERS)),
    st.tuples(
        st.just("report"),
        st.integers(0, N_RANGES - 1),
        st.sampled_from(WORKERS),
        st.integers(-1, 0),  # epoch offset from the current epoch
        st.integers(0, 60),
    ),
    st.tuples(
        st.just("report"),
        st.integers(0, N_RANGES - 1),
        st.sampled_from(WORKERS),
        st.just(0),
        st.integers(0, 60),
    ),
    st.tuples(st.just("expire")),
    st.tuples(st.just("crash")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(op_strategy, st.integers(0, 400)), max_size=80))
def test_global_watermark_monotonic_and_min_of_ranges(ops):
    ranges = [f"r{i}" for i in range(N_RANGES)]
    agg = CentralAggregator(ranges, WORKERS)
    now = 0
    last_global = agg.global_watermark()
    holder_wm = {r: MIN_TIMESTAMP for r in ranges}  # model: max accepted per range
    for op, dt in ops:
        now += dt
        kind = op[0]
        if kind == "assign":
            agg.assign(range_id=ranges[op[1]], worker=op[2], now=now, lease_duration=500)
        elif kind == "report":
            _, i, worker, offset, wm = op
            r = ranges[i]
            epoch = agg.epoch(r) + offset
            if epoch < 1:
                continue
            lease = agg.lease(r)
            should_accept = (
                lease is not None
                and lease.holder == worker
                and lease.epoch == epoch
                and now < lease.expiry
            )
            assert (
                agg.report(worker=worker, range_id=r, epoch=epoch, watermark=wm, now=now)
                == should_accept
            )
            if should_accept:
                holder_wm[r] = max(holder_wm[r], wm)
        elif kind == "expire":
            agg.expire(now)
            leases = [agg.lease(r) for r in ranges]
            assert all(lease is None or lease.expiry > now for lease in leases)
        else:  # crash and recover from the persisted state
            snap = copy.deepcopy(agg.snapshot())
            epochs = {r: agg.epoch(r) for r in ranges}
            agg = CentralAggregator.from_snapshot(snap, WORKERS)
            assert {r: agg.epoch(r) for r in ranges} == epochs
            assert all(agg.lease(r) is None for r in ranges)
            if now:
                agg.expire(now)  # the new aggregator's clock starts at now
        g = agg.global_watermark()
        assert g >= last_global
        assert g == min(agg.range_watermark(r) for r in ranges)
        assert all(agg.range_watermark(r) == holder_wm[r] for r in ranges)
        assert agg.range_watermark(agg.why().range_id) == g
        last_global = g
