"""One key partition's steps of ``simulate --engine spark`` (the executor side): pure
functions on numpy columns, the local simulator's own stage functions run on the
partition's elements. All times are µs.

A partition's share of a stream is a :class:`Part`: the
:class:`~theory.pipeline.simulator.Stream` of its keys' elements, in the local stream's
order, and each element's ``place`` in the whole stream: int64 columns compared
lexicographically (a source row's index; a merged stream's (time, input, upstream place);
a pane's (fire time, key rank, window start, window end, pane index)). Keys go to
partitions by :func:`key_partition`, so a key's elements, and its panes, stay together.

A grouping stage runs on the partition's own instants of the stage's grid
(:mod:`spark_backend.simulate.grid`), so a task's arrays grow with its partition, not with
the stage's input. Holds travel as their changes only (:class:`~theory.series.StepSeries`
over those instants), so what a partition sends to the driver grows with its hold's
changes.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from spark_backend.simulate.grid import external_after, grid_columns, partition_grid
from theory.pipeline.simulator import (
    PaneTable,
    Stream,
    element_outputs,
    lateness,
    pane_order,
    pane_outputs,
)
from theory.pipeline.stages import Flatten, GroupByWindow, ParDo, Source
from theory.series import StepSeries, pointwise_min, union_times
from theory.time import MAX_TIMESTAMP
from theory.watermarks.holds import inflight_min
from theory.windowing.partitioned import PartResult, run_part

__all__ = [
    "RECORD_LIMIT",
    "ElementStats",
    "OthersMin",
    "Part",
    "bounded",
    "elementwise",
    "first_places",
    "group_outputs",
    "group_round",
    "hold_changes",
    "key_partition",
    "merge",
    "others_min",
    "record_bytes",
    "settle",
    "split",
]

#: No hold: the step series over event indices that is MAX_TIMESTAMP throughout.
NO_STEPS = StepSeries(np.empty(0, np.int64), np.empty(0, np.int64), MAX_TIMESTAMP)

# (elementwise stages with instant processing draw no random numbers: any generator will do)
_NO_DRAWS = np.random.default_rng(0)


class Part(NamedTuple):
    """A partition's elements of a stream and their places in the whole stream."""

    stream: Stream
    place: np.ndarray  # (elements, width) int64, lexicographic


class ElementStats(NamedTuple):
    """What a partition sends the driver after a stage: its arrivals, late elements,
    drops, late elements grouped, its in-flight holds (µs series), the path its grouping
    ran on, its windows' first-pane latencies (fire time minus window end, µs) and the
    instants its grouping ran over (0 for an element-wise stage)."""

    arrivals: int
    late: int
    dropped: dict[str, int]
    late_grouped: int
    buffer: StepSeries
    processing_hold: StepSeries
    path: str
    latencies: np.ndarray
    instants: int = 0


#: The most bytes a partition's part may hold: Spark moves it between its JVM and
#: Python as one record, whose length is a signed 32-bit int (64 MiB left for pickling).
RECORD_LIMIT = 2**31 - 2**26


def record_bytes(part: Part) -> int:
    """About how many bytes ``part`` takes as one pickled record (an object key: its
    pointer and a small int or short string besides)."""
    s = part.stream
    columns = (s.time, s.timestamp, s.key, s.value, part.place)
    return sum(c.nbytes + (32 * c.size if c.dtype == object else 0) for c in columns)


def bounded(part: Part, p: int, stage: str) -> Part:
    """``part`` if it fits one Spark record (:data:`RECORD_LIMIT`); ValueError naming
    the stage, the partition, its elements and bytes otherwise."""
    size = record_bytes(part)
    if size > RECORD_LIMIT:
        raise ValueError(
            f"stage {stage!r}: key partition {p} holds {len(part.stream):,} elements "
            f"({size / 2**30:.2f} GiB), past the {RECORD_LIMIT / 2**30:.2f} GiB Spark moves "
            "as one record: use more --partitions (a stage that groups every key together, "
            "or one key this large, cannot be split; run a smaller trace)"
        )
    return part


def _key_hash(k: Hashable) -> int:
    if k is None:
        return 0
    if isinstance(k, (int, np.integer)):
        return int(k)
    return zlib.crc32(repr(k).encode())


def key_partition(key: np.ndarray, n: int) -> np.ndarray:
    """The partition (0..n-1) of each key: an int key modulo ``n``, else a CRC of its
    repr (None: 0); the same for a key whatever the array's dtype."""
    if key.dtype.kind in "iu":
        return (key % n).astype(np.int64)
    return np.fromiter((_key_hash(k) % n for k in key.tolist()), np.int64, key.size)


def _order(place: np.ndarray) -> np.ndarray:
    return np.lexsort(place.T[::-1]) if place.shape[1] else np.arange(place.shape[0])


def _take(part: Part, idx: np.ndarray) -> Part:
    return Part(part.stream.take(idx), part.place[idx])


def split(part: Part, n: int, rekey_global: bool) -> list[tuple[int, Part]]:
    """The part's elements by target partition (all to the key None's under
    ``rekey_global``), as (partition, part) pairs, empty ones left out."""
    if rekey_global:
        target = np.zeros(len(part.stream), np.int64)
    else:
        target = key_partition(part.stream.key, n)
    return [(int(p), _take(part, np.flatnonzero(target == p))) for p in np.unique(target)]


def merge(pieces: Sequence[tuple[int, Part]], inputs: int) -> Part:
    """One partition's stream from ``(input index, part)`` pieces, in the local order:
    for a stage of one input, by place; of several (``inputs`` > 1), as the local
    simulator merges them (by time, then input, then place)."""
    width = max((p.place.shape[1] for _, p in pieces), default=1)
    streams, places = [], []
    for i, p in pieces:
        place = np.pad(p.place, ((0, 0), (0, width - p.place.shape[1])))
        if inputs > 1:
            tag = np.column_stack([p.stream.time, np.full(len(p.stream), i, np.int64)])
            place = np.hstack([tag, place])
        streams.append(p.stream)
        places.append(place)
    if not streams:
        empty = np.empty(0, np.int64)
        return Part(Stream(empty, empty, empty, np.empty(0)), np.empty((0, width), np.int64))
    keys = [s.key for s in streams]
    key = (
        np.concatenate(keys)
        if all(k.dtype.kind in "iu" for k in keys)
        else np.concatenate([k.astype(object) for k in keys])
    )
    stream = Stream(
        np.concatenate([s.time for s in streams]),
        np.concatenate([s.timestamp for s in streams]),
        key,
        np.concatenate([s.value for s in streams]),
    )
    whole = Part(stream, np.vstack(places))
    return _take(whole, _order(whole.place))


def elementwise(
    spec: Source | ParDo | Flatten, part: Part, iw: StepSeries
) -> tuple[Part, ElementStats, np.ndarray]:
    """The stage on the partition (instant processing: checked by the driver): its
    output part, stats, and its late elements' (arrival, timestamp) rows (µs)."""
    s = part.stream
    out, late, buffer, processing_hold = element_outputs(spec, s, iw, _NO_DRAWS)
    stats = ElementStats(len(s), int(np.count_nonzero(late)), {}, 0, buffer, processing_hold,
                         "", np.empty(0, np.int64))  # fmt: skip
    return Part(out, part.place), stats, np.column_stack([s.time[late], s.timestamp[late]])


def hold_changes(hold: np.ndarray, instants: np.ndarray) -> StepSeries:
    """A partition's hold after each of its events (µs; the final step's left out) as
    its changes over the ``instants`` (µs) of its events."""
    n = instants.size
    h = hold[:n]
    change = np.flatnonzero(np.diff(h, prepend=MAX_TIMESTAMP) != 0)
    return StepSeries(instants[change], h[change], MAX_TIMESTAMP)


def others_min(holds: Mapping[int, StepSeries], p: int) -> StepSeries | None:
    """The minimum of the partitions' own holds other than ``p``'s (None: no other);
    :class:`OthersMin` gives every partition's at once."""
    others = [h for q, h in holds.items() if q != p]
    return pointwise_min(others) if others else None


_ABOVE = np.iinfo(np.int64).max  # (above every hold: no partition yet)


class OthersMin(NamedTuple):
    """Every partition's :func:`others_min` in one table as long as the holds' changes
    together (not one series per partition, which would make ``n`` partitions' rounds
    cost ``n**2``). Position 0 is before the first change time, position ``i + 1`` after
    ``times[i]`` (µs): the lowest hold (``best``), the lowest partition holding it
    (``who``) and the lowest hold of the partitions but ``who`` (``second``). Partition
    ``p``'s minimum of the others is ``second`` where ``who == p``, else ``best``."""

    members: frozenset[int]
    times: np.ndarray
    best: np.ndarray
    who: np.ndarray
    second: np.ndarray

    @classmethod
    def of(cls, holds: Mapping[int, StepSeries]) -> OthersMin:
        """The table of ``holds`` (each partition's own hold, µs series)."""
        times = union_times(holds.values())
        size = times.size + 1
        best = np.full(size, _ABOVE, np.int64)
        second = best.copy()
        who = np.full(size, -1, np.int64)
        for p in sorted(holds):
            h = holds[p]
            v = np.empty(size, np.int64)
            v[0] = h.initial
            v[1:] = h.at(times)
            lower = v < best  # (a tie keeps the lower partition as ``who``)
            np.copyto(second, np.where(lower, best, np.minimum(second, v)))
            who[lower] = p
            np.minimum(best, v, out=best)
        return cls(frozenset(holds), times, best, who, second)

    def of_partition(self, p: int) -> StepSeries | None:
        """``others_min(holds, p)`` (None: no partition but ``p``)."""
        if not self.members - {p}:
            return None
        v = np.where(self.who == p, self.second, self.best)
        return StepSeries(self.times, v[1:], int(v[0])).compressed()

    def settled(self, last: OthersMin | None) -> bool:
        """Whether every member's minimum of the others is the same function as in
        ``last`` (None: none held, as in a first round; False if the members differ)."""
        if last is not None and last.members != self.members:
            return False
        held = {int(p) for p in np.unique(self.who)}
        if last is not None:
            held |= {int(p) for p in np.unique(last.who)}
        plain = self.members - held  # (theirs is ``best`` in both tables)
        checks = sorted(self.members & held) + sorted(plain)[:1]
        return all(
            _same(self.of_partition(p), None if last is None else last.of_partition(p))
            for p in checks
        )


def settle(
    run_round: Callable[[OthersMin | None], tuple[dict[int, StepSeries], Any]],
    max_rounds: int,
    name: str,
    release: Callable[[Any], None] = lambda _: None,
) -> tuple[int, dict[int, StepSeries], Any]:
    """A grouping stage's rounds until the partitions' external holds settle (as
    :func:`theory.windowing.partitioned.run_partitioned`). ``run_round(others)`` runs
    every partition ``p`` under ``others.of_partition(p)``, the minimum of the others'
    holds from the last round (``others`` None in the first: no hold) and returns each
    partition's own hold and what it ran (a round not kept is passed to ``release``).
    Returns (rounds, own holds, the settled round's). RuntimeError naming stage
    ``name`` if ``max_rounds`` do not settle."""
    last: OthersMin | None = None
    for r in range(1, max_rounds + 1):
        new, ran = run_round(last)
        table = OthersMin.of(new)
        if len(new) <= 1 or table.settled(last):
            return r, new, ran
        release(ran)
        last = table
    raise RuntimeError(
        f"stage {name!r}: the key partitions' holds did not settle in {max_rounds} rounds"
    )


def _same(a: StepSeries | None, b: StepSeries | None) -> bool:
    """Whether two holds are the same function (None: no hold, as a series without a
    change)."""
    a = NO_STEPS if a is None else a  # (not ``a or``: a series without a change is falsy)
    b = NO_STEPS if b is None else b
    return (
        a.initial == b.initial
        and np.array_equal(a.times, b.times)
        and np.array_equal(a.values, b.values)
    )


def group_round(
    spec: GroupByWindow,
    part: Part,
    iw: StepSeries,
    fast: bool,
    external: StepSeries | None,
) -> tuple[np.ndarray, PartResult]:
    """One round of the grouping stage on the partition over its own instants
    (:func:`spark_backend.simulate.grid.partition_grid`), under the other partitions' hold
    ``external`` (µs series; None: none): (the instants, the result, whose events index
    them; the final step is the last event)."""
    instants = partition_grid(spec.strategy, part.stream, iw)
    key = [None] * len(part.stream) if spec.rekey == "global" else part.stream.key.tolist()
    columns = grid_columns(key, part.stream, iw, instants)
    held = None if external is None else external_after(external, instants)
    return instants, run_part(columns, spec.strategy, fast, held)


def first_places(part: Part, rekey_global: bool) -> dict[Hashable, tuple[int, ...]]:
    """Each key's first place in the stage's stream (the key None under ``rekey_global``)."""
    order = _order(part.place)  # (a part is kept in place order; this is cheap then)
    keys = [None] * len(order) if rekey_global else part.stream.key[order].tolist()
    first: dict[Hashable, tuple[int, ...]] = {}
    for k, row in zip(keys, order.tolist(), strict=True):
        if k not in first:
            first[k] = tuple(part.place[row].tolist())
    return first


def group_outputs(
    spec: GroupByWindow,
    part: Part,
    iw: StepSeries,
    instants: np.ndarray,
    run: PartResult,
    key_rank: Mapping[Hashable, int],
) -> tuple[Part, PaneTable, ElementStats, np.ndarray]:
    """The stage's outputs on the partition from its settled round ``run`` over its
    ``instants`` (:func:`group_round`'s): the panes fired before the final step in the
    local order (``key_rank``: every key's rank by first arrival in the whole stream), as
    a table and as the output part, the stats and the late elements' (arrival,
    timestamp) rows (µs)."""
    order = pane_order(run.pane_columns, run.pane_event, instants.size, key_rank)
    panes = run.pane_columns.take(order)
    fire = instants[run.pane_event[order]]
    table, out = pane_outputs(spec, panes, fire, _NO_DRAWS)
    rank = np.fromiter(map(key_rank.__getitem__, panes.key), np.int64, panes.n_panes)
    place = np.column_stack([table.fire_time, rank, table.window_start, table.window_end,
                             table.index]).astype(np.int64)  # fmt: skip
    late = lateness(part.stream, iw)
    stats = ElementStats(
        len(part.stream),
        int(np.count_nonzero(late)),
        run.dropped,
        run.late_elements,
        inflight_min(table.fire_time, table.emit_time, table.timestamp),
        inflight_min(table.fire_time, table.emit_time, table.fire_time),
        run.path,
        table.fire_time[table.index == 0] - table.window_end[table.index == 0],
        instants.size,
    )
    rows = np.column_stack([part.stream.time[late], part.stream.timestamp[late]])
    return Part(out, place.reshape(-1, 5)), table, stats, rows
