"""Ordered structures in plain Python: the multisets the watermark code is built from.

- :class:`Frontier`: a counted multiset of hold timestamps that reports when its minimum
  changes (timely-dataflow's ``MutableAntichain`` on a total order). This is the one type
  for "the minimum of a changing set of holds".
- :class:`IndexedMinHeap`: a heap of items ``0..n-1`` keyed by int, with O(log n) key
  updates; kept where a benchmark shows the frontier's multiset costs more (the valve,
  the aggregator; ``bench/frontier.py`` replays each non-user's pattern).
- :class:`OrderStatisticList`: a sorted multiset with positional access.

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

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate, chain
from typing import Final, cast

from theory.columns import check_count

__all__ = ["Frontier", "IndexedMinHeap", "OrderStatisticList"]


class Frontier:
    """A counted multiset of int timestamps (µs) whose minimum is the frontier.

    The model is timely-dataflow's ``MutableAntichain``: holders add and retract counts
    at timestamps (:meth:`update`), and the structure says when the frontier (on a total
    order, the minimum timestamp with a positive count) changes. A hold is "one count at
    its timestamp"; moving a hold is a retraction at the old timestamp and an addition at
    the new one, applied together (:meth:`update_iter`) so that no intermediate minimum is
    reported.

    Holders that do not need the change report use the cheap path: :meth:`add`,
    :meth:`retract` and :meth:`move` (one count each), then :meth:`min` when they want it.

    Costs: an update O(1) for a timestamp already present, O(log n) for a new one;
    ``min`` O(1) amortised (a retracted minimum is popped lazily from a heap of the
    distinct timestamps present). Counts never go below zero: a retraction of a count
    that is not there raises ``ValueError`` and changes nothing, since it would mean a
    holder released a hold it never took. Timestamps must be ints (numpy integers are
    converted); anything else is a ``TypeError``.
    """

    __slots__ = ("_counts", "_heap")

    def __init__(self, timestamps: Iterable[int] = ()) -> None:
        self._counts: dict[int, int] = {}
        self._heap: list[int] = []
        for t in timestamps:
            self.update(t, 1)

    def __len__(self) -> int:
        """The number of distinct timestamps with a positive count."""
        return len(self._counts)

    def __bool__(self) -> bool:
        return bool(self._counts)

    def __contains__(self, timestamp: object) -> bool:
        return timestamp in self._counts

    def count(self, timestamp: int) -> int:
        """The count at ``timestamp`` (0 when absent)."""
        return self._counts.get(timestamp, 0)

    def min(self, default: int | None = None) -> int:
        """The frontier: the smallest timestamp with a positive count.

        ``default`` is returned when the multiset is empty; without one, an empty
        frontier raises ``ValueError`` (an empty frontier means "no hold", which the caller
        must map to its own meaning, usually ``MAX_TIMESTAMP``)."""
        heap, counts = self._heap, self._counts
        while heap and heap[0] not in counts:
            heapq.heappop(heap)  # a timestamp whose count went to zero: drop it lazily
        if heap:
            return heap[0]
        if default is None:
            raise ValueError("the frontier is empty and no default was given")
        return default

    def update(self, timestamp: int, delta: int) -> bool:
        """Add ``delta`` (may be negative) to the count at ``timestamp``.

        Returns True when the frontier (the minimum) changed. The minimum is looked up
        once, before: an addition moves it iff it lands below it, a retraction iff it
        empties the minimum's count."""
        old = self.min(default=_NO_MIN)
        self._apply(timestamp, delta)
        if delta > 0:
            return old is _NO_MIN or timestamp < old
        return delta < 0 and timestamp == old and timestamp not in self._counts

    def add(self, timestamp: int) -> None:
        """One more count at ``timestamp`` (µs). No change report: see :meth:`update`."""
        if type(timestamp) is not int:
            timestamp = _timestamp(timestamp)
        counts = self._counts
        n = counts.get(timestamp)
        if n is not None:
            counts[timestamp] = n + 1
            return
        counts[timestamp] = 1
        heap = self._heap
        heapq.heappush(heap, timestamp)
        if len(heap) > 2 * len(counts) + 64:
            self._compact()

    def retract(self, timestamp: int) -> None:
        """One count less at ``timestamp`` (µs); ``ValueError`` (nothing changed) when it
        has none. No change report: see :meth:`update`."""
        if type(timestamp) is not int:
            timestamp = _timestamp(timestamp)
        counts = self._counts
        n = counts.get(timestamp, 0)
        if n > 1:
            counts[timestamp] = n - 1
        elif n == 1:
            del counts[timestamp]  # the heap entry goes stale; min() drops it lazily
        else:
            self._apply(timestamp, -1)  # raises, naming the timestamp (or its type)

    def move(self, old: int, new: int) -> None:
        """Move one count from ``old`` to ``new`` (µs): a hold that moved. Both or
        neither: a bad ``new`` or an ``old`` with no count raises with nothing changed."""
        if type(new) is not int:
            new = _timestamp(new)
        self.retract(old)
        self.add(new)

    def update_iter(self, updates: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        """Apply every ``(timestamp, delta)`` as one step; return the frontier's changes.

        The changes are ``MutableAntichain``'s: ``[(old_min, -1), (new_min, +1)]`` when the
        minimum moved (either side left out when the frontier was or becomes empty), and
        ``[]`` when it did not. A failing update (a count below zero) leaves the frontier
        unchanged: the updates before it are rolled back."""
        old = self.min(default=_NO_MIN)
        done: list[tuple[int, int]] = []
        try:
            for timestamp, delta in updates:
                self._apply(timestamp, delta)
                done.append((timestamp, delta))
        except (ValueError, TypeError):
            for timestamp, delta in reversed(done):
                self._apply(timestamp, -delta)
            raise
        new = self.min(default=_NO_MIN)
        if new == old:
            return []
        changes = [] if old is _NO_MIN else [(old, -1)]
        if new is not _NO_MIN:
            changes.append((new, 1))
        return changes

    def _apply(self, timestamp: int, delta: int) -> None:
        if type(timestamp) is not int:
            timestamp = _timestamp(timestamp)
        counts = self._counts
        n = counts.get(timestamp, 0) + delta
        if n > 0:
            if timestamp not in counts:
                heapq.heappush(self._heap, timestamp)
            counts[timestamp] = n
        elif n == 0:
            counts.pop(timestamp, None)
        else:
            raise ValueError(
                f"timestamp {timestamp}: count would go below zero ({n}): "
                "a hold was released that was never taken"
            )
        # Stale heap entries (count went to zero) are dropped by min(); re-adding a
        # timestamp before that pushes a duplicate, which min() tolerates. Bound the
        # heap so a churn of add/remove at the same times cannot grow it without limit.
        if len(self._heap) > 2 * len(counts) + 64:
            self._compact()

    def _compact(self) -> None:
        self._heap = list(self._counts)
        heapq.heapify(self._heap)


def _timestamp(timestamp: object) -> int:
    """A frontier timestamp that is not a plain ``int``: a numpy integer becomes one;
    anything else (``bool`` included) is a ``TypeError``."""
    if isinstance(timestamp, bool) or not hasattr(timestamp, "__index__"):
        raise TypeError(f"timestamp must be an int (µs), got {timestamp!r}")
    return int(timestamp)


class IndexedMinHeap:
    """A binary min-heap of items ``0..capacity-1``, each with an int key.

    Every item is in the heap at most once, and the heap knows where, so ``update``,
    ``remove`` and ``push`` cost O(log n), ``peek`` and membership O(1). Ties between
    equal keys are broken arbitrarily. Plain Python, three flat lists:

    - ``keys[slot]`` and ``items[slot]``: the heap in array form (children of ``s`` at
      ``2s+1`` and ``2s+2``); keys are kept by slot so comparisons need no indirection;
    - ``pos[item]``: the item's slot, or ``-1`` when it is not in the heap.

    Raises ``KeyError`` when pushing an item already present, or removing/updating an
    absent one, and ``IndexError`` when peeking an empty heap.

    Why it is kept beside :class:`Frontier`: the valve's aligned channels are one key per
    channel, moved by every watermark. On ``bench/valve.py``'s workloads the valve on a
    :class:`Frontier` (a retraction and an addition per watermark, then ``min``) took
    several times as long as on this heap with its inlined sift-down, and the frontier's
    cheap path (``move`` then ``min``, no change report) still loses to this heap's
    ``update`` and ``peek`` on that pattern (``bench/frontier.py``).
    """

    __slots__ = ("items", "keys", "pos")

    def __init__(self, capacity: int) -> None:
        capacity = check_count(capacity, "capacity")
        self.keys: list[int] = []
        self.items: list[int] = []
        self.pos: list[int] = [-1] * capacity

    @classmethod
    def from_keys(cls, keys: list[int]) -> IndexedMinHeap:
        """A heap holding every item ``i`` with key ``keys[i]`` (a sorted array is a heap)."""
        heap = cls(len(keys))
        order = sorted(range(len(keys)), key=keys.__getitem__)
        heap.items = order
        heap.keys = [keys[i] for i in order]
        for slot, item in enumerate(order):
            heap.pos[item] = slot
        return heap

    def __len__(self) -> int:
        return len(self.keys)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def __contains__(self, item: object) -> bool:
        return type(item) is int and 0 <= item < len(self.pos) and self.pos[item] >= 0

    @property
    def capacity(self) -> int:
        """The number of distinct items the heap can hold."""
        return len(self.pos)

    def peek(self) -> tuple[int, int]:
        """``(item, key)`` with the smallest key, without removing it."""
        if not self.keys:
            raise IndexError("peek from an empty IndexedMinHeap")
        return self.items[0], self.keys[0]

    def key(self, item: int) -> int:
        """The key of ``item`` (which must be in the heap)."""
        slot = self.pos[item]
        if slot < 0:
            raise KeyError(item)
        return self.keys[slot]

    def push(self, item: int, key: int) -> None:
        """Add ``item`` with ``key``; O(log n)."""
        if self.pos[item] >= 0:
            raise KeyError(f"item {item} is already in the heap")
        self.keys.append(key)
        self.items.append(item)
        self._sift_up(len(self.keys) - 1, item, key)

    def pop(self) -> tuple[int, int]:
        """Remove and return ``(item, key)`` with the smallest key; O(log n)."""
        item, key = self.peek()
        self.remove(item)
        return item, key

    def remove(self, item: int) -> int:
        """Remove ``item`` and return its key; O(log n)."""
        pos = self.pos
        slot = pos[item]
        if slot < 0:
            raise KeyError(item)
        keys, items = self.keys, self.items
        key = keys[slot]
        pos[item] = -1
        last_key = keys.pop()
        last_item = items.pop()
        if slot < len(keys):
            # fill the hole with the last leaf, then restore order in whichever direction
            if last_key < key:
                self._sift_up(slot, last_item, last_key)
            else:
                self._sift_down(slot, last_item, last_key)
        return key

    def update(self, item: int, key: int) -> None:
        """Change the key of ``item`` (in the heap) in either direction; O(log n)."""
        slot = self.pos[item]
        if slot < 0:
            raise KeyError(item)
        if key < self.keys[slot]:
            self._sift_up(slot, item, key)
        else:
            self._sift_down(slot, item, key)

    def _sift_up(self, slot: int, item: int, key: int) -> None:
        """Place ``(item, key)`` at ``slot`` or above, moving larger parents down."""
        keys, items, pos = self.keys, self.items, self.pos
        while slot:
            parent = (slot - 1) >> 1
            pkey = keys[parent]
            if pkey <= key:
                break
            keys[slot] = pkey
            pitem = items[parent]
            items[slot] = pitem
            pos[pitem] = slot
            slot = parent
        keys[slot] = key
        items[slot] = item
        pos[item] = slot

    def _sift_down(self, slot: int, item: int, key: int) -> None:
        """Place ``(item, key)`` at ``slot`` or below, moving smaller children up."""
        keys, items, pos = self.keys, self.items, self.pos
        n = len(keys)
        child = 2 * slot + 1
        while child < n:
            ckey = keys[child]
            right = child + 1
            if right < n:
                rkey = keys[right]
                if rkey < ckey:
                    child = right
                    ckey = rkey
            if ckey >= key:
                break
            keys[slot] = ckey
            citem = items[child]
            items[slot] = citem
            pos[citem] = slot
            slot = child
            child = 2 * slot + 1
        keys[slot] = key
        items[slot] = item
        pos[item] = slot

    def check(self) -> None:
        """Assert the heap invariants (for tests); O(n)."""
        keys, items, pos = self.keys, self.items, self.pos
        assert len(keys) == len(items)
        for slot in range(1, len(keys)):
            assert keys[(slot - 1) >> 1] <= keys[slot], f"heap order broken at slot {slot}"
        for slot, item in enumerate(items):
            assert pos[item] == slot, f"item {item} at slot {slot}, pos says {pos[item]}"
        assert sum(p >= 0 for p in pos) == len(items)


# A sentinel below every frontier value, distinct from any int (so ``!=`` works).
_NO_MIN: Final = cast(int, object())


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
