"""Order statistics of array suffixes, many at once: a wavelet matrix in numpy.

:func:`kth_in_suffix` answers a batch of queries "the k-th smallest of ``ranks[pos:]``"
over a permutation ``ranks`` of ``0..m-1``. A value array is brought to that form by a
stable argsort (its ranks); the answer rank indexes back into the sorted values. The
Spark analytics use it for the percentile watermark of a bucket's backlog
(:class:`theory.watermarks.backlog.SourceBacklog`): the backlog at a time is a suffix of
the rows in arrival order, minus the rows not yet activated, which are all larger.

The wavelet matrix is descended level by level (most significant bit first) for all
queries at once, so the work is ``O((m + q) log m)`` vectorised numpy operations and the
memory ``O(m + q)``: int32 while ``m < 2**31 - 1``, int64 above.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import int_column, same_length

__all__ = ["kth_in_suffix"]


def kth_in_suffix(ranks: ArrayLike, pos: ArrayLike, k: ArrayLike) -> np.ndarray:
    """For each query ``i``: the ``k[i]``-th smallest (1-based) of ``ranks[pos[i]:]``.

    ``ranks`` is a permutation of ``0..m-1``; ``0 <= pos[i]`` and
    ``1 <= k[i] <= m - pos[i]``, so that the answer exists. Returns int64 ranks, one per
    query. Runs of equal consecutive queries are answered once (a percentile evaluated
    at times where nothing moved repeats ``(pos, k)``). ``TypeError`` for non-integer
    columns, ``ValueError`` naming the column for anything else outside the contract.
    """
    r, s, kk = _checked(ranks, pos, k)
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    first = _first_of_runs(s, kk)
    ans = _descend(r, s[first], kk[first])
    return ans.astype(np.int64)[np.cumsum(first) - 1]


def _checked(ranks: ArrayLike, pos: ArrayLike, k: ArrayLike) -> tuple[np.ndarray, ...]:
    """The three columns as int64, checked against the contract of :func:`kth_in_suffix`.

    A permutation is checked (one O(m) pass): any other multiset would make the descent
    return ranks that index nothing, silently.
    """
    r = int_column(ranks, "ranks")
    s = int_column(pos, "pos")
    kk = int_column(k, "k")
    same_length("pos", s.size, k=kk)
    m = r.size
    if m and (int(r.min()) < 0 or int(r.max()) >= m or np.bincount(r, minlength=m).max() > 1):
        raise ValueError(f"ranks must be a permutation of 0..{m - 1}")
    if s.size:
        if int(s.min()) < 0:
            raise ValueError(f"pos must be >= 0, got {int(s.min())}")
        bad = (kk < 1) | (kk > m - s)
        if bool(bad.any()):
            i = int(np.argmax(bad))
            raise ValueError(
                f"k[{i}]={int(kk[i])} is outside [1, {m - int(s[i])}], the size of ranks[pos[{i}]:]"
            )
    return r, s, kk


def _first_of_runs(s: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Which queries differ from the one before (the first always does)."""
    first = np.empty(s.size, dtype=bool)
    first[0] = True
    np.not_equal(s[1:], s[:-1], out=first[1:])
    first[1:] |= k[1:] != k[:-1]
    return first


def _descend(ranks: np.ndarray, pos: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The wavelet-matrix descent for distinct queries (see :func:`kth_in_suffix`).

    At each level the rows are stably partitioned by the level's bit (zeros first); a
    query's range ``[s, e)`` maps to the zero part or the one part by counting the ones
    before ``s`` and ``e``. All arrays are preallocated and updated in place, so the loop
    makes no temporaries (they cost more than the arithmetic on large buckets).
    """
    m = ranks.size
    it = np.int32 if m < 2**31 - 1 else np.int64
    s: np.ndarray = pos.astype(it)
    kk: np.ndarray = k.astype(it)
    q = s.size
    e: np.ndarray = np.full(q, m, dtype=it)
    cur: np.ndarray = ranks.astype(it)
    nxt: np.ndarray = np.empty_like(cur)
    ans: np.ndarray = np.zeros(q, dtype=it)
    ones: np.ndarray = np.zeros(m + 1, dtype=it)  # ones among the first i rows
    bit: np.ndarray = np.empty(m, dtype=it)
    is_one: np.ndarray = np.empty(m, dtype=bool)
    is_zero: np.ndarray = np.empty(m, dtype=bool)
    go_one: np.ndarray = np.empty(q, dtype=bool)
    os_: np.ndarray = np.empty(q, dtype=it)
    oe: np.ndarray = np.empty(q, dtype=it)
    zeros: np.ndarray = np.empty(q, dtype=it)
    for lvl in range(max(1, int(m - 1).bit_length()) - 1, -1, -1):
        np.bitwise_and(cur, it(1 << lvl), out=bit)
        np.not_equal(bit, 0, out=is_one)
        np.cumsum(is_one, out=ones[1:])
        nz = m - int(ones[m])  # zeros at this level
        np.take(ones, s, out=os_)
        np.take(ones, e, out=oe)
        np.subtract(e, s, out=zeros)  # zeros in [s, e) = (e - s) - (oe - os)
        zeros -= oe
        zeros += os_
        np.greater(kk, zeros, out=go_one)
        np.subtract(kk, zeros, out=kk, where=go_one)
        np.bitwise_or(ans, it(1 << lvl), out=ans, where=go_one)
        # zero part: [s - os, e - oe); one part: [nz + os, nz + oe)
        s -= os_
        e -= oe
        np.add(os_, it(nz), out=s, where=go_one)
        np.add(oe, it(nz), out=e, where=go_one)
        np.logical_not(is_one, out=is_zero)
        np.compress(is_zero, cur, out=nxt[:nz])
        np.compress(is_one, cur, out=nxt[nz:])
        cur, nxt = nxt, cur
    return ans
