"""A sorted multiset with positional access, in plain Python: a list of sorted blocks.

:class:`OrderStatisticList` keeps its items in sorted blocks of about ``load`` items
(the layout of ``sortedcontainers.SortedList``), plus the block maxima for a
``bisect`` lookup. Costs, with ``n`` items and block load ``L``:

- ``add`` / ``remove``: O(log n) comparisons (``bisect`` on the block maxima and inside
  one block) plus an O(L) C-level ``memmove`` inside the block; a block that grows past
  ``2 L`` is split, a block that shrinks below ``L / 4`` is merged with a neighbour.
- ``kth(i)``: walks from a *finger* (the block found by the previous ``kth`` call and the
  number of items before it), so a rank that moves by a few places between calls, as a
  percentile of a slowly changing set does, costs O(1) amortised; a far jump costs
  O(n / L) block steps.
- ``count_le(x)`` / ``count_lt(x)``: O(n / L) (a prefix sum of the block sizes) plus
  O(log n); :meth:`OrderStatisticList.counter` snapshots the prefix sums once for many
  O(log n) counts between changes.

Items only need a total order consistent with ``==`` (ints in this project).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate, chain

__all__ = ["OrderStatisticList"]


class OrderStatisticList:
    """A sorted multiset of ints: ``add``, ``remove``, ``kth``, ``count_le``, ``count_lt``."""

    __slots__ = ("_blocks", "_fb", "_fpre", "_len", "_load", "_maxes")

    def __init__(self, items: Iterable[int] = (), *, load: int = 256) -> None:
        if isinstance(load, bool) or not isinstance(load, int) or load < 4:
            raise ValueError(f"load must be an int >= 4, got {load!r}")
        self._load = load
        self._blocks: list[list[int]] = []
        self._maxes: list[int] = []
        self._len = 0
        self._fb = 0  # finger: a block index ...
        self._fpre = 0  # ... and the number of items in the blocks before it
        data = sorted(items)
        for s in range(0, len(data), load):
            blk = data[s : s + load]
            self._blocks.append(blk)
            self._maxes.append(blk[-1])
        self._len = len(data)

    # ------------------------------------------------------------------ basics

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(self._blocks)

    def __contains__(self, x: object) -> bool:
        if not isinstance(x, int):
            return False
        maxes = self._maxes
        j = bisect_left(maxes, x)
        if j == len(maxes):
            return False
        blk = self._blocks[j]
        return blk[bisect_left(blk, x)] == x

    def __repr__(self) -> str:
        return f"OrderStatisticList({list(self)!r})"

    # ------------------------------------------------------------------ updates

    def add(self, x: int) -> None:
        """Insert ``x`` (duplicates are kept)."""
        maxes = self._maxes
        if not maxes:
            self._blocks.append([x])
            maxes.append(x)
            self._len = 1
            self._fb = self._fpre = 0
            return
        j = bisect_right(maxes, x)
        if j == len(maxes):
            j -= 1
            blk = self._blocks[j]
            blk.append(x)
            maxes[j] = x
        else:
            blk = self._blocks[j]
            insort(blk, x)
        self._len += 1
        if j < self._fb:
            self._fpre += 1
        if len(blk) > 2 * self._load:
            self._split(j)

    def remove(self, x: int) -> None:
        """Remove one ``x``; ``ValueError`` (nothing changed) if ``x`` is not present."""
        maxes = self._maxes
        j = bisect_left(maxes, x)
        if j == len(maxes):
            raise ValueError(f"{x!r} is not in the list")
        blk = self._blocks[j]
        i = bisect_left(blk, x)
        if blk[i] != x:
            raise ValueError(f"{x!r} is not in the list")
        del blk[i]
        self._len -= 1
        if j < self._fb:
            self._fpre -= 1
        if not blk:
            self._drop(j)
        else:
            if i == len(blk):
                maxes[j] = blk[-1]
            if len(blk) < self._load >> 2 and len(self._blocks) > 1:
                self._merge(j if j + 1 < len(self._blocks) else j - 1)

    def _split(self, j: int) -> None:
        blk = self._blocks[j]
        half = len(blk) >> 1
        self._blocks.insert(j + 1, blk[half:])
        del blk[half:]
        self._maxes.insert(j, blk[-1])
        if self._fb > j:
            self._fb += 1

    def _drop(self, j: int) -> None:
        """Delete the (empty) block ``j``."""
        del self._blocks[j]
        del self._maxes[j]
        if self._fb > j:
            self._fb -= 1
        if self._fb >= len(self._blocks):
            if self._blocks:
                self._fb = len(self._blocks) - 1
                self._fpre -= len(self._blocks[self._fb])
            else:
                self._fb = self._fpre = 0

    def _merge(self, j: int) -> None:
        """Append block ``j + 1`` to block ``j``, then re-split if it is too long."""
        blocks = self._blocks
        left = blocks[j]
        if self._fb == j + 1:
            self._fb = j
            self._fpre -= len(left)
        elif self._fb > j + 1:
            self._fb -= 1
        left.extend(blocks[j + 1])
        del blocks[j + 1]
        self._maxes[j] = self._maxes[j + 1]
        del self._maxes[j + 1]
        if len(left) > 2 * self._load:
            self._split(j)

    # ------------------------------------------------------------------ queries

    def kth(self, i: int) -> int:
        """The item at 0-based sorted position ``i`` (``IndexError`` outside [0, n))."""
        if not 0 <= i < self._len:
            raise IndexError(f"position {i} is outside [0, {self._len})")
        blocks = self._blocks
        b = self._fb
        pre = self._fpre
        if pre <= i:
            blk = blocks[b]
            if i - pre < len(blk):
                return blk[i - pre]
        while i < pre:
            b -= 1
            pre -= len(blocks[b])
        size = len(blocks[b])
        while i >= pre + size:
            pre += size
            b += 1
            size = len(blocks[b])
        self._fb = b
        self._fpre = pre
        return blocks[b][i - pre]

    def count_le(self, x: int) -> int:
        """How many items are ``<= x``."""
        j = bisect_right(self._maxes, x)
        if j == len(self._blocks):
            return self._len
        return sum(map(len, self._blocks[:j])) + bisect_right(self._blocks[j], x)

    def count_lt(self, x: int) -> int:
        """How many items are ``< x``."""
        j = bisect_left(self._maxes, x)
        if j == len(self._blocks):
            return self._len
        return sum(map(len, self._blocks[:j])) + bisect_left(self._blocks[j], x)

    def counter(self) -> Callable[[int], int]:
        """``count_le`` in O(log n), valid until the next ``add`` or ``remove``."""
        blocks = self._blocks
        maxes = self._maxes
        cum = [0, *accumulate(map(len, blocks))]
        nblocks = len(blocks)
        total = self._len

        def count_le(x: int) -> int:
            j = bisect_right(maxes, x)
            if j == nblocks:
                return total
            return cum[j] + bisect_right(blocks[j], x)

        return count_le

    def min(self) -> int:
        """The smallest item (``ValueError`` when empty)."""
        if not self._len:
            raise ValueError("min() of an empty OrderStatisticList")
        return self._blocks[0][0]

    def max(self) -> int:
        """The largest item (``ValueError`` when empty)."""
        if not self._len:
            raise ValueError("max() of an empty OrderStatisticList")
        return self._maxes[-1]

    def check(self) -> None:
        """Assert the internal invariants (for tests)."""
        blocks = self._blocks
        assert len(blocks) == len(self._maxes)
        assert all(blocks), "empty block"
        flat = list(chain.from_iterable(blocks))
        assert flat == sorted(flat), "not sorted"
        assert len(flat) == self._len
        assert [b[-1] for b in blocks] == self._maxes
        if blocks:
            assert 0 <= self._fb < len(blocks)
            assert self._fpre == sum(len(b) for b in blocks[: self._fb])
        assert all(len(b) <= 2 * self._load for b in blocks)
