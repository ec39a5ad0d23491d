"""The per-bucket kernels of the Spark analytics against theory's whole-trace curves.

A trace is cut at arbitrary arrival-time bounds into buckets; each bucket runs
:func:`bucket_curves` with its carry (the later buckets' minimum event time, the earlier
ones' maximum, and for percentiles the value latched before it, found from a first pass
as Spark's driver does). Joined, the buckets' curves and late counts must equal
:func:`perfect_curve`, :func:`bounded_out_of_orderness_curve` and
:func:`percentile_source_curve` exactly. :class:`SourceBacklog` is checked against the
backlog's definition ``A(t) = {e <= t < a}`` by brute force.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.backlog import SourceBacklog
from theory.watermarks.bucket_curves import backlog_percentile_curve, bucket_curves
from theory.watermarks.buckets import BucketCarry, SortedBucket, equal_runs
from theory.watermarks.percentile_source import percentile_source_curve
from theory.watermarks.percentile_sweep import percentile_curve
from theory.watermarks.perfect import perfect_curve
from theory.watermarks.spec import make_source_watermark

SPECS = (
    "perfect",
    "bounded:0",
    "bounded:3",
    "percentile:1",
    "percentile:0.5",
    "percentile:0.2:hold",
)

rows_st = st.lists(st.tuples(st.integers(-20, 40), st.integers(-5, 25)), min_size=1, max_size=60)
cuts_st = st.lists(st.integers(-25, 70), max_size=5)
p_st = st.sampled_from([1.0, 0.9, 0.5, 0.3, 1e-9]) | st.floats(min_value=1e-6, max_value=1.0)


def trace(rows: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    e = np.array([r[0] for r in rows], dtype=np.int64)
    return e, e + np.array([r[1] for r in rows], dtype=np.int64)


def same(x: StepSeries, y: StepSeries) -> bool:
    return (
        x.times.tolist() == y.times.tolist()
        and x.values.tolist() == y.values.tolist()
        and x.initial == y.initial
    )


@dataclass
class Bucket:
    a: np.ndarray
    e: np.ndarray
    rep_a: np.ndarray
    rep_e: np.ndarray
    carry: BucketCarry


def buckets(e: np.ndarray, a: np.ndarray, cuts: list[int]) -> list[Bucket]:
    """The layout of spark_backend.analytics.prepare: rows by arrival bucket (sorted),
    replicas in the buckets from their event's to the one before their arrival's, and
    the perfect and bounded carries."""
    bounds = np.unique(np.array(cuts, dtype=np.int64))
    of_a = np.searchsorted(bounds, a, side="right")
    of_e = np.searchsorted(bounds, e, side="right")
    out = []
    for j in range(bounds.size + 1):
        own = np.flatnonzero(of_a == j)
        own = own[np.argsort(a[own], kind="stable")]
        rep = (of_e <= j) & (of_a > j)
        later, earlier = of_a > j, of_a < j
        carry = BucketCarry(
            int(e[later].min()) if later.any() else MAX_TIMESTAMP,
            int(e[earlier].max()) if earlier.any() else MIN_TIMESTAMP,
            MIN_TIMESTAMP if j == 0 else int(bounds[j - 1]),
            MAX_TIMESTAMP + 1 if j == bounds.size else int(bounds[j]),
        )
        out.append(Bucket(a[own], e[own], a[rep], e[rep], carry))
    return out


def run_buckets(bs: list[Bucket], specs):
    """Both passes of the driver: the local maxima give each bucket's percentile carry."""
    first = [bucket_curves(b.a, b.e, b.rep_a, b.rep_e, specs, b.carry) for b in bs]
    for i, s in enumerate(specs):
        if s.kind != "percentile":
            continue
        latched = MIN_TIMESTAMP
        for b, r in zip(bs, first, strict=True):
            b.carry.latched[i] = latched
            latched = max(latched, r.local_max[i])
    final = [bucket_curves(b.a, b.e, b.rep_a, b.rep_e, specs, b.carry) for b in bs]
    return first, final


def joined(results, i: int, percentile: bool) -> StepSeries:
    if percentile:
        parts = [r.steps(i) for r in results]
    else:
        parts = [(r.times, r.values[i]) for r in results]
    times = np.concatenate([t for t, _ in parts])
    vals = np.concatenate([v for _, v in parts])
    out = StepSeries(times, vals, MIN_TIMESTAMP)
    return out.compressed() if percentile else out


@settings(max_examples=250)
@given(rows_st, cuts_st)
def test_buckets_joined_equal_theory_curves(rows, cuts):
    e, a = trace(rows)
    specs = [make_source_watermark(s) for s in SPECS]
    bs = buckets(e, a, cuts)
    first, final = run_buckets(bs, specs)
    for i, s in enumerate(specs):
        ref = s.curve(e, a)
        assert same(joined(final, i, s.kind == "percentile"), ref), s.spec
        late = int(np.count_nonzero(e < ref.before(a)))
        assert sum(r.late[i] for r in final) == late, s.spec
        if s.kind == "percentile":  # the driver's way: late within the bucket, or by carry
            by_carry = sum(
                int(np.count_nonzero(r.candidates[i][0] < b.carry.latched[i]))
                for b, r in zip(bs, first, strict=True)
                if i in r.candidates
            )
            assert sum(r.late[i] for r in first) + by_carry == late, s.spec


def test_perfect_and_bounded_ignore_replicas_and_need_no_percentile_carry():
    e = np.array([5, 1, 9, 3], dtype=np.int64)
    a = np.array([6, 7, 9, 12], dtype=np.int64)
    carry = BucketCarry(perfect_after=2, max_before=8, lo=6, hi=10)
    r = bucket_curves(
        a[:3],
        e[:3],
        a[3:],
        e[3:],
        [make_source_watermark("perfect"), make_source_watermark("bounded:2")],
        carry,
    )
    assert r.times.tolist() == [6, 7, 9]
    assert r.values[0].tolist() == [1, 2, 2]  # min(rows after, perfect_after)
    assert r.values[1].tolist() == [6, 6, 7]  # max(max_before, seen) - 2
    assert r.late == [0, 2]  # perfect: never; bounded: 5 < 6 and 1 < 6
    assert r.local_max == [MIN_TIMESTAMP, MIN_TIMESTAMP]
    assert r.extra.size == 0 and r.candidates == {}


@settings(max_examples=200)
@given(rows_st, st.integers(-10, 30), st.integers(0, 20))
def test_backlog_is_the_definition(rows, lo, width):
    """Counts and order statistics of A(t) by brute force at every evaluation time."""
    e, a = trace(rows)
    hi = lo + width
    own = np.flatnonzero((a >= lo) & (a < hi))
    own = own[np.argsort(a[own], kind="stable")]
    rep = (a >= hi) & (e < hi)
    perfect_after = int(e[a >= hi].min()) if (a >= hi).any() else MAX_TIMESTAMP
    bucket = SortedBucket.of(a[own], e[own], perfect_after)
    b = SourceBacklog(bucket, a[rep], e[rep], lo=lo, hi=hi)
    ee = np.concatenate((e[own], e[rep]))
    aa = np.concatenate((a[own], a[rep]))
    assert b.times.tolist() == sorted(
        set(a[own].tolist())
        | {int(x) for x, y in zip(ee, aa, strict=True) if x < y and lo <= x < hi}
    )
    assert b.times[b.is_arrival].tolist() == bucket.times.tolist()
    for p in (1.0, 0.5, 0.1):
        values, held = b.values(p), b.values(p, hold=True)
        for g, t in enumerate(b.times.tolist()):
            backlog = np.sort(ee[(ee <= t) & (t < aa)])
            assert b.counts[g] == backlog.size
            if backlog.size:
                expected = int(np.quantile(backlog, 1 - p, method="lower"))
                assert values[g] == held[g] == expected
            else:
                after = e[a > t]  # the perfect fallback, capped at the clock
                assert values[g] == min(t, int(after.min()) if after.size else MAX_TIMESTAMP)
                assert held[g] == MIN_TIMESTAMP


def test_numpy_kernel_equals_theory_percentile():
    """Moved from tests/spark_backend/analytics/test_analytics.py (it was
    percentile_curve_numpy)."""
    rng = np.random.default_rng(3)
    e = np.cumsum(rng.integers(0, 5_000, 4000)).astype(np.int64)
    a = e + rng.integers(0, 200_000, e.size) * (rng.random(e.size) < 0.9)
    a = (a // 1000) * 1000 + 1000  # ties, still causal
    fallback = perfect_curve(e, a)
    for p in (0.3, 0.9, 1.0):
        ref = percentile_curve(e, e, a, p, fallback=fallback)
        assert same(backlog_percentile_curve(e, a, p), ref)
        assert same(backlog_percentile_curve(e, a, p, hold=True), percentile_curve(e, e, a, p))


@settings(max_examples=200)
@given(rows_st, p_st, st.booleans())
def test_backlog_percentile_curve_is_the_source_curve(rows, p, hold):
    e, a = trace(rows)
    assert same(
        backlog_percentile_curve(e, a, p, hold=hold), percentile_source_curve(e, a, p=p, hold=hold)
    )


def test_equal_runs():
    values, starts, ends = equal_runs(np.array([1, 1, 4, 7, 7, 7], dtype=np.int64))
    assert (values.tolist(), starts.tolist(), ends.tolist()) == ([1, 4, 7], [0, 2, 3], [2, 3, 6])
    assert [x.size for x in equal_runs(np.empty(0, dtype=np.int64))] == [0, 0, 0]


def test_bad_input():
    carry = BucketCarry()
    one = np.array([1], dtype=np.int64)
    none = np.empty(0, dtype=np.int64)
    perfect = [make_source_watermark("perfect")]
    with pytest.raises(ValueError, match="arrival_time must be sorted"):
        bucket_curves(np.array([2, 1]), np.array([0, 0]), none, none, perfect, carry)
    with pytest.raises(ValueError, match="event_time has 2 elements but arrival_time has 1"):
        bucket_curves(one, np.array([0, 0]), none, none, perfect, carry)
    with pytest.raises(TypeError, match="event_time"):
        bucket_curves(one, np.array([0.5]), none, none, perfect, carry)
    with pytest.raises(ValueError, match=r"strategies\[0\] must be perfect, oracle, bounded"):
        bucket_curves(one, one, none, none, [make_source_watermark("ingress")], carry)
    with pytest.raises(ValueError, match="p must be in"):
        backlog_percentile_curve(one, one, 0.0)
    with pytest.raises(TypeError, match="hold must be a bool"):
        backlog_percentile_curve(one, one, 0.5, hold="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="replica_event_time has 0 elements"):
        SourceBacklog(SortedBucket.of(one, one), one, none)
