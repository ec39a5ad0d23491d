"""theory.arrays: every kernel against a plain-Python or numpy reference, including the
int64 edges (Beam's MIN/MAX_TIMESTAMP are within 808 µs of int64's bounds)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.arrays import (
    COVER_EMPTY,
    cover_min,
    group_last,
    minus_clamped,
    plus_clamped,
    range_min,
    sorted_unique,
    stable_argsort_int,
    stable_order,
)
from theory.columns import INT64_MAX
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

I64 = np.int64
timestamps = st.integers(MIN_TIMESTAMP, MAX_TIMESTAMP)


# --------------------------------------------------------------------------- ordering


@given(st.lists(st.integers(-5, 5), max_size=30))
def test_stable_order_is_a_stable_argsort_or_none_when_sorted(xs: list[int]) -> None:
    x = np.array(xs, dtype=I64)
    order = stable_order(x)
    if xs == sorted(xs):
        assert order is None
    else:
        assert order is not None
        assert order.tolist() == sorted(range(len(xs)), key=lambda i: (xs[i], i))


@pytest.mark.parametrize("span", [10, 1 << 16, (1 << 16) + 5, 1 << 32, (1 << 32) + 7, 1 << 62])
def test_stable_argsort_int_is_stable_at_every_span(span: int) -> None:
    """One radix pass below 2**16, two below 2**32, numpy's stable sort above."""
    rng = np.random.default_rng(span % 1000)
    ids = rng.integers(0, 6, 200).astype(I64) * (span // 5) - span // 2
    ids[:3] = [-(span // 2), span - span // 2 - 1, 0]  # the whole span
    got = stable_argsort_int(ids)
    assert got.tolist() == sorted(range(ids.size), key=lambda i: (int(ids[i]), i))


def test_stable_argsort_int_of_nothing() -> None:
    assert stable_argsort_int(np.empty(0, dtype=I64)).size == 0


@given(st.lists(st.integers(-3, 3), max_size=30))
def test_sorted_unique_is_np_unique(xs: list[int]) -> None:
    x = np.array(xs, dtype=I64)
    assert sorted_unique(x).tolist() == np.unique(x).tolist()


@given(st.lists(st.integers(-3, 3), max_size=30))
def test_group_last_indexes_the_last_of_each_run(xs: list[int]) -> None:
    s = np.sort(np.array(xs, dtype=I64))
    last = group_last(s)
    want = [i for i in range(s.size) if i == s.size - 1 or s[i] != s[i + 1]]
    assert last.tolist() == want
    assert s[last].tolist() == np.unique(s).tolist()


# --------------------------------------------------------------------------- clamped arithmetic


@given(st.lists(timestamps, max_size=10), st.integers(0, 2**64))
def test_minus_clamped_is_max_of_difference_and_min(xs: list[int], d: int) -> None:
    got = minus_clamped(np.array(xs, dtype=I64), d)
    assert got.dtype == I64
    assert got.tolist() == [max(x - d, MIN_TIMESTAMP) for x in xs]


def test_minus_clamped_at_bound_zero_copies() -> None:
    x = np.array([MIN_TIMESTAMP, 0, MAX_TIMESTAMP], dtype=I64)
    got = minus_clamped(x, 0)
    assert got.tolist() == x.tolist() and got is not x and not np.shares_memory(got, x)


def test_minus_clamped_near_min_timestamp() -> None:
    x = np.array([MIN_TIMESTAMP, MIN_TIMESTAMP + 1, MIN_TIMESTAMP + 5, MIN_TIMESTAMP + 6], I64)
    assert minus_clamped(x, 5).tolist() == [MIN_TIMESTAMP] * 3 + [MIN_TIMESTAMP + 1]
    # a plain x - d would wrap below int64: MIN_TIMESTAMP - 809 < INT64_MIN
    assert minus_clamped(x, 809).tolist() == [MIN_TIMESTAMP] * 4


def test_minus_clamped_beyond_int64_and_beyond_the_range() -> None:
    x = np.array([MIN_TIMESTAMP, 0, MAX_TIMESTAMP], dtype=I64)
    d = INT64_MAX + 1  # Flink's bound + 1 for the largest bound
    assert minus_clamped(x, d).tolist() == [MIN_TIMESTAMP, MIN_TIMESTAMP, MAX_TIMESTAMP - d]
    span = MAX_TIMESTAMP - MIN_TIMESTAMP
    assert minus_clamped(x, span).tolist() == [MIN_TIMESTAMP] * 3
    assert minus_clamped(x, span + 1).tolist() == [MIN_TIMESTAMP] * 3


@given(st.lists(timestamps, max_size=10), st.integers(0, 2**64))
def test_plus_clamped_is_min_of_sum_and_max(xs: list[int], d: int) -> None:
    got = plus_clamped(np.array(xs, dtype=I64), d)
    assert got.dtype == I64
    assert got.tolist() == [min(x + d, MAX_TIMESTAMP) for x in xs]


def test_plus_clamped_edges() -> None:
    x = np.array([MIN_TIMESTAMP, 0, MAX_TIMESTAMP - 1, MAX_TIMESTAMP], dtype=I64)
    assert plus_clamped(x, 0).tolist() == x.tolist()
    assert plus_clamped(x, 1).tolist() == [MIN_TIMESTAMP + 1, 1, MAX_TIMESTAMP, MAX_TIMESTAMP]
    d = INT64_MAX + 1  # an idle timeout of INT64_MAX µs, plus one
    assert plus_clamped(x, d).tolist() == [MIN_TIMESTAMP + d] + [MAX_TIMESTAMP] * 3
    assert plus_clamped(x, MAX_TIMESTAMP - MIN_TIMESTAMP + 1).tolist() == [MAX_TIMESTAMP] * 4


# --------------------------------------------------------------------------- interval minimum


@given(st.integers(1, 40).flatmap(lambda m: st.tuples(
    st.just(m),
    st.lists(st.tuples(st.integers(0, m), st.integers(0, m), st.integers(-50, 50)), max_size=30),
)))
def test_cover_min_matches_brute_force(case: tuple[int, list[tuple[int, int, int]]]) -> None:
    m, ivs = case
    lo = np.array([min(x, y) for x, y, _ in ivs], dtype=I64)
    hi = np.array([max(x, y) for x, y, _ in ivs], dtype=I64)
    val = np.array([v for _, _, v in ivs], dtype=I64)
    got = cover_min(lo, hi, val, m)
    for j in range(m):
        cover = val[(lo <= j) & (j < hi)]
        assert got[j] == (int(cover.min()) if cover.size else np.iinfo(np.int64).max)


def test_cover_min_empty_slots_are_cover_empty() -> None:
    assert np.iinfo(np.int64).max == COVER_EMPTY
    empty = np.empty(0, dtype=I64)
    assert cover_min(empty, empty, empty, 3).tolist() == [COVER_EMPTY] * 3
    lo, hi, val = np.array([1, 2], I64), np.array([1, 3], I64), np.array([7, -4], I64)
    assert cover_min(lo, hi, val, 4).tolist() == [COVER_EMPTY, COVER_EMPTY, -4, COVER_EMPTY]


@given(st.integers(1, 70).flatmap(lambda n: st.tuples(
    st.lists(st.integers(-50, 50), min_size=n, max_size=n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, n)), max_size=30),
)))
def test_range_min_matches_brute_force(case: tuple[list[int], list[tuple[int, int]]]) -> None:
    # ranges up to 70 long: up to 6 levels, built in two buffers used in turn
    values, ranges = case
    ranges = [(min(x, y - 1), max(x + 1, y)) for x, y in ranges]
    a = np.array(values, dtype=I64)
    lo = np.array([x for x, _ in ranges], dtype=I64)
    hi = np.array([y for _, y in ranges], dtype=I64)
    got = range_min(a, lo, hi)
    assert got.tolist() == [min(values[x:y]) for x, y in ranges]
    assert a.tolist() == values  # the input is left as it was
