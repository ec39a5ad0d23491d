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


OPS = st.lists(
    st.tuples(st.sampled_from(["add", "retract", "move"]), st.integers(-5, 5), st.integers(-5, 5)),
    max_size=80,
)


@given(OPS)
def test_cheap_path_add_retract_move_against_a_counter(ops: list[tuple[str, int, int]]) -> None:
    """add/retract/move (no change report) keep the same multiset as update would."""
    f, mirror = Frontier(), Frontier()
    counts: Counter[int] = Counter()
    for op, t, u in ops:
        if op == "add":
            f.add(t)
            mirror.update(t, 1)
            counts[t] += 1
        elif counts[t] == 0:  # retract or move from a timestamp with no count
            with pytest.raises(ValueError, match="below zero"):
                f.retract(t) if op == "retract" else f.move(t, u)
        elif op == "retract":
            f.retract(t)
            mirror.update(t, -1)
            counts[t] -= 1
        else:
            f.move(t, u)
            mirror.update_iter([(t, -1), (u, 1)])
            counts[t] -= 1
            counts[u] += 1
        expected = brute_min(counts)
        assert f.min(default=10**9) == (10**9 if expected is None else expected)
        assert f.min(default=10**9) == mirror.min(default=10**9)
        assert len(f) == sum(1 for c in counts.values() if c > 0)
        for x in range(-5, 6):
            assert f.count(x) == counts[x]


def test_cheap_path_types_and_atomic_move() -> None:
    f = Frontier()
    f.add(np.int64(7))
    assert f.min() == 7 and type(f.min()) is int
    for bad in (7.0, "7", True, None):
        with pytest.raises(TypeError, match="timestamp must be an int"):
            f.add(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="timestamp must be an int"):
            f.retract(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="timestamp must be an int"):
            f.move(7, bad)  # type: ignore[arg-type]
    assert f.count(7) == 1 and len(f) == 1  # the failed moves took nothing from 7
    with pytest.raises(ValueError, match="timestamp 3: count would go below zero"):
        f.move(3, 1)
    assert f.min() == 7 and 1 not in f
    f.retract(np.int64(7))
    assert not f


def test_cheap_path_churn_does_not_grow_the_heap_without_bound() -> None:
    f = Frontier([0])
    for i in range(10_000):
        f.add(i % 7 + 1)
        f.retract(i % 7 + 1)
        f.move(0, i % 5)
        f.move(i % 5, 0)
    assert f.min() == 0
    assert len(f._heap) <= 2 * len(f) + 64 + 1
