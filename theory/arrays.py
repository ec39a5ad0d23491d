"""Vectorised int64 kernels shared by the curves: ordering, grouping, clamped arithmetic.

Every function takes and returns 1-d numpy arrays and does O(n) or O(n log n) numpy
work with no Python loop over the elements; the curve builders of
:mod:`theory.watermarks` and :mod:`theory.dataflow` are made of them. They check
nothing: their callers validated the columns (:mod:`theory.columns`), and each
docstring states what the kernel assumes. Times and durations are µs; "clamped"
means kept inside ``[MIN_TIMESTAMP, MAX_TIMESTAMP]`` without int64 overflow (Beam's
bounds are within 808 µs of int64's, so a plain ``x - d`` can wrap).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from theory.columns import INT64_MAX
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = [
    "COVER_EMPTY",
    "cover_min",
    "equal_runs",
    "group_last",
    "minus_clamped",
    "plus_clamped",
    "range_min",
    "sorted_union",
    "sorted_unique",
    "stable_argsort_int",
    "stable_order",
]

#: :func:`cover_min`'s value for a slot that no interval covers (int64's maximum).
COVER_EMPTY: Final[int] = INT64_MAX


# --------------------------------------------------------------------------- ordering


def stable_order(x: np.ndarray) -> np.ndarray | None:
    """A stable argsort of ``x``, or None when ``x`` is already non-decreasing.

    The None spares the caller a gather on the common case of an ordered column. Stable
    is also the faster sort here: timsort profits from the partial order of trace
    columns (arrival times are nearly sorted)."""
    if x.size < 2 or bool(np.all(x[1:] >= x[:-1])):
        return None
    return np.argsort(x, kind="stable")


def stable_argsort_int(ids: np.ndarray) -> np.ndarray:
    """A stable argsort of integer ids (partitions): one or two 16-bit radix passes when
    they span less than ``2**32`` values, a general stable sort otherwise."""
    if ids.size == 0:
        return np.empty(0, dtype=np.intp)
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo < 1 << 16:
        return np.argsort((ids - lo).astype(np.uint16), kind="stable")
    if hi - lo < 1 << 32:
        q = (ids - lo).astype(np.uint32)
        first = np.argsort((q & 0xFFFF).astype(np.uint16), kind="stable")
        return first[np.argsort((q[first] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(ids, kind="stable")


def sorted_unique(x: np.ndarray) -> np.ndarray:
    """The distinct values of ``x``, ascending: a sort and a dedupe (``np.unique`` gives
    the same answer by a slower path)."""
    return _dedupe_sorted(np.sort(x))


def sorted_union(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The distinct values of sorted arrays, ascending: their concatenation merged by a
    stable sort (a merge of the sorted runs) and deduped. ``np.union1d`` and
    ``np.unique`` give the same answer far more slowly (numpy 2's hash-based unique)."""
    if not parts:
        return np.empty(0, dtype=np.int64)
    return _dedupe_sorted(np.sort(np.concatenate(parts), kind="stable"))


def _dedupe_sorted(s: np.ndarray) -> np.ndarray:
    """A sorted array without its repeats."""
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def range_min(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``min(a[lo[i]:hi[i]])`` for every i (all ranges non-empty): a sparse table built
    one level at a time, each range answered at its level, in two buffers used in turn
    (memory linear in ``a``, whatever the longest range; no fresh memory per level)."""
    out = np.empty(lo.size, a.dtype)
    if lo.size == 0:
        return out
    level = np.frexp((hi - lo).astype(np.float64))[1] - 1  # floor(log2(length))
    table = a
    buffers: list[np.ndarray] = []  # two, used in turn once the first level is built
    j = 0
    while True:
        at = np.flatnonzero(level == j)
        if at.size:
            out[at] = np.minimum(table[lo[at]], table[hi[at] - (1 << j)])
        if not np.any(level > j):
            return out
        w = 1 << j
        if not buffers:
            buffers = [np.empty(a.size - 1, a.dtype), np.empty(a.size - 1, a.dtype)]
        table = np.minimum(table[:-w], table[w:], out=buffers[j & 1][: table.size - w])
        j += 1


def group_last(sorted_values: np.ndarray) -> np.ndarray:
    """The index of the last entry of each run of equal values in a sorted array (so
    ``sorted_values[group_last(sorted_values)]`` are its distinct values). An empty
    array has no runs; callers of curves return early on it."""
    if sorted_values.size == 0:
        return np.empty(0, dtype=np.intp)
    brk = np.flatnonzero(sorted_values[1:] != sorted_values[:-1])
    return np.append(brk, sorted_values.size - 1)


def equal_runs(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of equal values of a sorted 1-d array: ``(values, starts, ends)``, each
    run being ``sorted_values[starts[i]:ends[i]]`` (int64 bounds; empty input, empty
    runs)."""
    if sorted_values.size == 0:
        none = np.empty(0, dtype=np.int64)
        return sorted_values, none, none
    brk = np.flatnonzero(sorted_values[1:] != sorted_values[:-1]) + 1
    starts = np.concatenate(([0], brk))
    ends = np.concatenate((brk, [sorted_values.size]))
    return sorted_values[starts], starts, ends


# --------------------------------------------------------------------------- clamped arithmetic


def minus_clamped(x: np.ndarray, d: int) -> np.ndarray:
    """``max(x - d, MIN_TIMESTAMP)`` (µs) for ``x`` in ``[MIN_TIMESTAMP, MAX_TIMESTAMP]``
    and an integer ``d >= 0``, which may exceed int64 (a bound plus one): never wraps.

    Always a new array (``d = 0`` copies)."""
    if d == 0:
        return x.copy()
    threshold = MIN_TIMESTAMP + d
    if threshold > MAX_TIMESTAMP:
        return np.full(x.shape, MIN_TIMESTAMP, dtype=np.int64)
    lifted = np.maximum(x, np.int64(threshold))  # lifted - d >= MIN_TIMESTAMP
    if d <= INT64_MAX:
        return lifted - np.int64(d)
    return (lifted - np.int64(MAX_TIMESTAMP)) - np.int64(d - MAX_TIMESTAMP)


def plus_clamped(x: np.ndarray, d: int) -> np.ndarray:
    """``min(x + d, MAX_TIMESTAMP)`` (µs) for ``x`` in ``[MIN_TIMESTAMP, MAX_TIMESTAMP]``
    and an integer ``d >= 0``, which may exceed int64 (a timeout plus one): never wraps."""
    limit = MAX_TIMESTAMP - d  # x above it saturates
    if limit < MIN_TIMESTAMP:
        return np.full(x.shape, MAX_TIMESTAMP, dtype=np.int64)
    clipped = np.minimum(x, np.int64(limit))
    if d <= INT64_MAX:
        return clipped + np.int64(d)
    return (clipped - np.int64(limit)) + np.int64(MAX_TIMESTAMP)  # limit < 0 here


# --------------------------------------------------------------------------- interval minimum


def cover_min(lo: np.ndarray, hi: np.ndarray, val: np.ndarray, m: int) -> np.ndarray:
    """For each slot ``j`` in ``[0, m)``, the minimum ``val[i]`` over the intervals with
    ``lo[i] <= j < hi[i]``; :data:`COVER_EMPTY` where no interval covers ``j``.

    Assumes ``0 <= lo`` and ``hi <= m`` (int64 arrays of one length; empty intervals
    are ignored). An offline sparse table of range-chmin updates: each interval is two
    overlapping power-of-two blocks; levels are pushed down from the top. O(n + m log m)
    numpy work, one Python iteration per level."""
    length = hi - lo
    keep = length > 0
    if not bool(np.all(keep)):
        lo, hi, val, length = lo[keep], hi[keep], val[keep], length[keep]
    if length.size == 0:
        return np.full(m, COVER_EMPTY, dtype=np.int64)
    level = (np.frexp(length.astype(np.float64))[1] - 1).astype(np.int8)
    order = np.argsort(level, kind="stable")
    bounds = np.searchsorted(level[order], np.arange(int(level.max()) + 2))
    # two buffers of m slots, used in turn: each level is written into the one the level
    # above it is not in (no fresh memory per level)
    buffers = [np.empty(m, np.int64), np.empty(m, np.int64)]
    cur: np.ndarray | None = None
    for lev in range(int(level.max()), -1, -1):
        w = 1 << lev
        new = _push_down(cur, w, buffers[lev & 1][: m - w + 1])
        sel = order[bounds[lev] : bounds[lev + 1]]
        if sel.size:
            v = val[sel]
            np.minimum.at(new, lo[sel], v)
            np.minimum.at(new, hi[sel] - w, v)
        cur = new
    assert cur is not None and cur.size == m
    return cur


def _push_down(cur: np.ndarray | None, w: int, new: np.ndarray) -> np.ndarray:
    """Into ``new`` (``m - w + 1`` slots, not overlapping ``cur``), the level of block
    width ``w`` (``m - w + 1`` starts) from the level above, where ``cur[i]`` covers
    ``[i, i + 2w)``: it goes to the blocks at ``i`` and ``i + w``."""
    if cur is None:
        new[:] = COVER_EMPTY
        return new
    k = cur.size
    if k <= w:
        new[:k] = cur
        new[k:w] = COVER_EMPTY
        new[w:] = cur
    else:
        new[:w] = cur[:w]
        np.minimum(cur[w:], cur[: k - w], out=new[w:k])
        new[k:] = cur[k - w :]
    return new
