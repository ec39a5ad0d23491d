"""theory.structures.Frontier: a counted multiset whose minimum is the frontier."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.structures import Frontier

UPDATES = st.lists(st.tuples(st.integers(-5, 5), st.integers(-2, 3)), max_size=60)


def brute_min(counts: Counter[int]) -> int | None:
    present = [t for t, c in counts.items() if c > 0]
    return min(present) if present else None


@given(UPDATES)
def test_frontier_is_the_minimum_of_a_counted_multiset(updates: list[tuple[int, int]]) -> None:
    f = Frontier()
    counts: Counter[int] = Counter()
    for t, d in updates:
        before = brute_min(counts)
        if counts[t] + d < 0:
            with pytest.raises(ValueError, match="below zero"):
                f.update(t, d)
        else:
            counts[t] += d
            changed = f.update(t, d)
            assert changed == (brute_min(counts) != before)
        expected = brute_min(counts)
        assert f.min(default=10**9) == (10**9 if expected is None else expected)
        assert len(f) == sum(1 for c in counts.values() if c > 0)
        for x in range(-5, 6):
            assert f.count(x) == counts[x]
            assert (x in f) == (counts[x] > 0)


@given(st.lists(UPDATES, max_size=10))
def test_update_iter_reports_antichain_changes(batches: list[list[tuple[int, int]]]) -> None:
    f = Frontier()
    counts: Counter[int] = Counter()
    for batch in batches:
        before = brute_min(counts)
        trial = counts.copy()
        ok = True
        for t, d in batch:
            trial[t] += d
            if trial[t] < 0:
                ok = False
                break
        if not ok:
            with pytest.raises(ValueError):
                f.update_iter(batch)
            # rolled back: nothing changed
            assert f.min(default=10**9) == (10**9 if before is None else before)
            continue
        counts = trial
        after = brute_min(counts)
        changes = f.update_iter(batch)
        if after == before:
            assert changes == []
        else:
            expected = ([] if before is None else [(before, -1)]) + (
                [] if after is None else [(after, 1)]
            )
            assert changes == expected


def test_moving_a_hold_in_one_step_reports_one_change() -> None:
    f = Frontier([10, 20])
    assert f.min() == 10
    assert f.update_iter([(10, -1), (15, 1)]) == [(10, -1), (15, 1)]
    assert f.update_iter([(15, -1), (15, 1)]) == []  # moved to where it was: no change
    assert f.update_iter([(15, -1), (20, -1)]) == [(15, -1)]  # emptied
    assert not f
    with pytest.raises(ValueError, match="empty"):
        f.min()


def test_numpy_integers_are_accepted_and_wrong_types_refused() -> None:
    f = Frontier()
    f.update(np.int64(7), 1)
    assert f.min() == 7 and type(f.min()) is int
    for bad in (7.0, "7", True, None):
        with pytest.raises(TypeError, match="timestamp must be an int"):
            f.update(bad, 1)  # type: ignore[arg-type]
    assert f.min() == 7 and len(f) == 1


def test_churn_does_not_grow_the_heap_without_bound() -> None:
    f = Frontier([0])
    for i in range(10_000):
        f.update(i % 7 + 1, 1)
        f.update(i % 7 + 1, -1)
    assert f.min() == 0
    assert len(f._heap) <= 2 * len(f) + 64 + 1
