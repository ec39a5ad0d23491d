"""The holds frontier against the specialised minima it did not replace, one run.

:class:`theory.structures.Frontier` is the one home of "the minimum of a changing multiset
of holds"; four users keep their own structure because it measured faster. This script
replays each one's pattern of operations (seeded, plain Python lists prepared first) on
its structure and on the frontier, both through the reporting path (``update_iter``:
the change report the users do not need) and the cheap path (``add``/``retract``/``move``
and ``min``), and prints the medians over ``--repeats`` runs and the frontier/structure
ratios (above 1: the frontier is slower). Timed by ``time.perf_counter`` (CPU time under
``bench/compare_revisions.py --cpu-clock``).

- ``move``: ``--items`` keys, each operation moves a random one up by 1-1000 µs and reads
  the minimum (the valve's aligned channels, the aggregator's ranges); the structure is
  :class:`~theory.structures.IndexedMinHeap` (``update`` then ``peek``; the valve inlines
  a faster sift-down still).
- ``lazy``: publish times pushed in order, acked out of order, the oldest unacked read
  after each operation (``SimulatedPubSub``'s subscriptions); the structure is a lazy
  heap of ``(publish time, id)`` with an acked flag per id.
- ``down``: bucket minima that only move down and buckets that leave from the low end,
  the band minimum read after each operation (``TrackingEstimator``); the structure is a
  lazy heap of ``(minimum, bucket)`` whose stale entries are recognised by comparing with
  the bucket. Usage::

    python bench/frontier.py --ops 200000 --repeats 5

``--record`` appends the figures to ``bench/results/frontier.json``.
"""

from __future__ import annotations

import heapq
import statistics
import time
from collections.abc import Callable

import numpy as np
from bench_args import add_repeats, add_seed, bench_parser
from record import Recorder

from theory.structures import Frontier, IndexedMinHeap


def move_ops(items: int, ops: int, seed: int) -> tuple[list[int], list[int], list[int]]:
    """(start keys, item moved, its new key) of the ``move`` pattern."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 1000, items).tolist()
    which = rng.integers(0, items, ops).tolist()
    steps = rng.integers(1, 1001, ops).tolist()
    cur = list(keys)
    new = []
    for i, s in zip(which, steps, strict=True):
        cur[i] += s
        new.append(cur[i])
    return keys, which, new


def run_move_heap(keys: list[int], which: list[int], new: list[int]) -> int:
    heap = IndexedMinHeap.from_keys(keys)
    update, peek = heap.update, heap.peek
    acc = 0
    for i, k in zip(which, new, strict=True):
        update(i, k)
        acc ^= peek()[1]
    return acc


def run_move_frontier(keys: list[int], which: list[int], new: list[int], cheap: bool) -> int:
    f = Frontier(keys)
    cur = list(keys)
    acc = 0
    for i, k in zip(which, new, strict=True):
        if cheap:
            f.move(cur[i], k)
        else:
            f.update_iter(((cur[i], -1), (k, 1)))
        cur[i] = k
        acc ^= f.min()
    return acc


def lazy_ops(ops: int, seed: int) -> list[int]:
    """Publish (id >= 0, in order) and ack (-1 - id, out of order) of the ``lazy`` pattern:
    each message is acked 0-2000 operations after its publish."""
    rng = np.random.default_rng(seed)
    n = ops // 2
    ack_at = np.arange(n) + rng.integers(0, 2000, n)
    seq: list[tuple[int, int]] = [(i, i) for i in range(n)]
    seq += [(int(t), -1 - i) for i, t in enumerate(ack_at.tolist())]
    seq.sort(key=lambda x: (x[0], x[1] < 0))
    return [op for _, op in seq]


def run_lazy_heap(seq: list[int]) -> int:
    heap: list[tuple[int, int]] = []
    acked: list[bool] = [False] * (len(seq) // 2 + 1)
    acc = 0
    for op in seq:
        if op >= 0:
            heapq.heappush(heap, (op * 10, op))  # publish time 10 µs per id
            acked[op] = False
        else:
            acked[-1 - op] = True
        while heap and acked[heap[0][1]]:
            heapq.heappop(heap)
        acc ^= heap[0][0] if heap else -1
    return acc


def run_lazy_frontier(seq: list[int], cheap: bool) -> int:
    f = Frontier()
    acc = 0
    for op in seq:
        if cheap:
            f.add(op * 10) if op >= 0 else f.retract((-1 - op) * 10)
        else:
            f.update_iter((((op * 10, 1) if op >= 0 else ((-1 - op) * 10, -1)),))
        acc ^= f.min(-1)
    return acc


def down_ops(ops: int, seed: int) -> list[tuple[int, int]]:
    """(bucket, event time) of the ``down`` pattern, with (-1, 0) for "the oldest bucket
    leaves": 100 messages per bucket, event times up to 5,000 µs before the bucket's,
    a bucket leaves once 50 are newer."""
    rng = np.random.default_rng(seed)
    per = 100
    n = ops // per * per
    bucket = np.arange(n) // per
    et = bucket * 1000 - rng.integers(0, 5000, n)
    seq: list[tuple[int, int]] = []
    for b, e in zip(bucket.tolist(), et.tolist(), strict=True):
        seq.append((b, e))
        if b >= 50 and e == et[b * per]:  # once per bucket: its first message
            seq.append((-1, 0))
    return seq


def run_down_heap(seq: list[tuple[int, int]]) -> int:
    mins: dict[int, int] = {}
    heap: list[tuple[int, int]] = []
    low = 0
    acc = 0
    for b, e in seq:
        if b < 0:
            mins.pop(low, None)
            low += 1
        else:
            m = mins.get(b)
            if m is None or e < m:
                mins[b] = e
                heapq.heappush(heap, (e, b))
        while heap and mins.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        acc ^= heap[0][0] if heap else -1
    return acc


def run_down_frontier(seq: list[tuple[int, int]], cheap: bool) -> int:
    mins: dict[int, int] = {}
    f = Frontier()
    low = 0
    acc = 0
    for b, e in seq:
        if b < 0:
            m = mins.pop(low, None)
            low += 1
            if m is not None:
                f.retract(m) if cheap else f.update_iter(((m, -1),))
        else:
            m = mins.get(b)
            if m is None:
                mins[b] = e
                f.add(e) if cheap else f.update_iter(((e, 1),))
            elif e < m:
                mins[b] = e
                f.move(m, e) if cheap else f.update_iter(((m, -1), (e, 1)))
        acc ^= f.min(-1)
    return acc


def median_s(fn: Callable[[], int], repeats: int) -> tuple[float, int]:
    """Median seconds of ``repeats`` calls, and the last result (to check agreement)."""
    times, out = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--ops", type=int, default=200_000, help="operations per pattern")
    parser.add_argument("--items", type=int, nargs="+", default=[64, 1024], help="move keys")
    add_repeats(parser, 5)
    add_seed(parser, 0)
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float] = {}
    cases: list[tuple[str, Callable[[], int], Callable[[], int], Callable[[], int]]] = []
    for items in args.items:
        k, w, n = move_ops(items, args.ops, args.seed)
        cases.append(
            (
                f"move {items}",
                lambda k=k, w=w, n=n: run_move_heap(k, w, n),
                lambda k=k, w=w, n=n: run_move_frontier(k, w, n, False),
                lambda k=k, w=w, n=n: run_move_frontier(k, w, n, True),
            )
        )
    lazy = lazy_ops(args.ops, args.seed)
    cases.append(
        (
            "lazy",
            lambda: run_lazy_heap(lazy),
            lambda: run_lazy_frontier(lazy, False),
            lambda: run_lazy_frontier(lazy, True),
        )
    )
    down = down_ops(args.ops, args.seed)
    cases.append(
        (
            "down",
            lambda: run_down_heap(down),
            lambda: run_down_frontier(down, False),
            lambda: run_down_frontier(down, True),
        )
    )
    print(
        f"{'pattern':>10} {'structure s':>12} {'update_iter s':>14} {'cheap s':>9} "
        f"{'ratio upd':>10} {'ratio cheap':>12}"
    )
    for name, own, rep, cheap in cases:
        t_own, r_own = median_s(own, args.repeats)
        t_rep, r_rep = median_s(rep, args.repeats)
        t_cheap, r_cheap = median_s(cheap, args.repeats)
        if not r_own == r_rep == r_cheap:
            raise SystemExit(f"{name}: the structures disagree ({r_own}, {r_rep}, {r_cheap})")
        print(
            f"{name:>10} {t_own:>12.4f} {t_rep:>14.4f} {t_cheap:>9.4f} "
            f"{t_rep / t_own:>10.2f} {t_cheap / t_own:>12.2f}"
        )
        figures[f"{name} structure s"] = round(t_own, 5)
        figures[f"{name} frontier/structure update_iter"] = round(t_rep / t_own, 3)
        figures[f"{name} frontier/structure cheap"] = round(t_cheap / t_own, 3)
    recorder.save(figures)


if __name__ == "__main__":
    main()
