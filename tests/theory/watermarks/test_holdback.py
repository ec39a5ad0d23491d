"""theory.watermarks.holdback.holder_runs against a brute force over every interval."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from theory.watermarks.holdback import holder_runs

ROWS = st.lists(st.tuples(st.integers(0, 8), st.integers(-5, 5), st.integers(0, 3)), max_size=25)
CARRY = st.one_of(st.none(), st.tuples(st.integers(-6, 6), st.integers(0, 3)))


def brute_runs(
    rows: list[tuple[int, int, Any]], carry: tuple[int, Any] | None, nxt: int | None
) -> list[tuple[Any, int, int]]:
    """Per interval between arrival times, the smallest (event time, holder) arriving
    later (or the carry); adjacent intervals of one holder joined."""
    times = sorted({a for a, _, _ in rows})
    runs: list[tuple[Any, int, int]] = []
    for g, t in enumerate(times):
        if g + 1 == len(times) and nxt is None:
            break
        end = times[g + 1] if g + 1 < len(times) else nxt
        later = [(e, h) for a, e, h in rows if a > t] + ([carry] if carry else [])
        if not later:
            continue
        who = min(later)[1]
        if runs and runs[-1][0] == who and runs[-1][2] == t:
            runs[-1] = (who, runs[-1][1], end)  # type: ignore[assignment]
        else:
            runs.append((who, t, end))  # type: ignore[arg-type]
    return runs


def kernel(rows, carry, nxt, holders=lambda h: h, dtype=np.int64):
    rows = sorted(rows, key=lambda r: r[0])
    a = np.array([r[0] for r in rows], dtype=np.int64)
    e = np.array([r[1] for r in rows], dtype=np.int64)
    h = np.array([holders(r[2]) for r in rows], dtype=dtype)
    hs, st_, en = holder_runs(a, e, h, carry, nxt)
    return list(zip(hs, st_, en, strict=True))


@given(ROWS, CARRY, st.booleans())
def test_holder_runs_match_brute_force(rows, carry, has_next) -> None:
    nxt = 9 + len(rows) if has_next else None
    assert kernel(rows, carry, nxt) == brute_runs(rows, carry, nxt)


@given(ROWS, CARRY)
def test_string_holders_and_shuffled_ties(rows, carry) -> None:
    """String ids (object arrays) order as strings; rows sharing an arrival time may
    come in any order."""
    name = "p{}".format
    c = None if carry is None else (carry[0], name(carry[1]))
    nxt = 20 if c else None
    expected = brute_runs([(a, e, name(h)) for a, e, h in rows], c, nxt)
    got = kernel(rows[::-1], c, nxt, holders=name, dtype=object)
    assert got == expected


def test_a_worked_example() -> None:
    # partition 0 has event times 5 then 1 (arriving at 10 and 30); partition 1 has 3 at 20
    a = np.array([10, 20, 30], dtype=np.int64)
    e = np.array([5, 3, 1], dtype=np.int64)
    h = np.array([0, 1, 0], dtype=np.int64)
    # after 10: min of (3, 1) -> e=1 by partition 0; after 20: (1, 0) -> 0; the carry
    # (2, 1) then holds after 30 until the next chunk's first arrival, 40
    assert holder_runs(a, e, h, (2, 1), 40) == ([0, 1], [10, 30], [30, 40])
    assert holder_runs(a, e, h) == ([0], [10], [30])
    assert holder_runs(a[:0], e[:0], h[:0], (2, 1), 40) == ([], [], [])
