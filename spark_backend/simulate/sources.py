"""A source of ``simulate --engine spark`` made on the executors, block by block
(:class:`theory.data.blocks.BlockedTrace`): each task makes one block, splits its rows
by key partition, and sends the driver only a summary of it, from which the driver
computes the source watermark exactly as the local simulator does on the whole trace.
All times are µs.

A block's :class:`BlockSummary` holds its distinct arrival times and two short lists of
(arrival, event time) points: where the minimum event time of the rows arriving at or
after an arrival changes (the suffix minima), and where the maximum event time seen up
to it changes (the prefix maxima). The whole trace's minimum of the rows arriving after
``t`` is the minimum over blocks of theirs, and its maximum seen up to ``t`` the maximum,
so :func:`source_watermark` gives, at every distinct arrival time of the whole trace:

- ``perfect``: ``min(t, min event time arriving > t)``; ``perfect:oracle``: uncapped;
- ``bounded:<d>``: ``max event time seen - d`` (clamped at MIN_TIMESTAMP);
- ``ingress``: ``t + 1``;

which are :func:`theory.watermarks.perfect.perfect_curve` and the others on the whole
trace (a test checks it). A task sends only the points its spec needs, and the driver
reads the summaries a share of the blocks at a time (the driver JVM holding that share
pickled), so its peak in a source is about the distinct arrival times and the points
(about 24 B per event at most) besides the series it keeps (16 B per distinct arrival).
Other specs need every row (:data:`SUMMARISED` says which do not); the driver then makes
the whole trace.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from spark_backend.simulate.parts import Part, split
from theory.arrays import group_last, minus_clamped
from theory.data.blocks import BlockedTrace, block_places
from theory.data.trace import Trace
from theory.pipeline.simulator import Stream, finished_source
from theory.pipeline.stages import Source
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.watermarks.source_trace import empty_curve
from theory.watermarks.spec import make_source_watermark

__all__ = ["SUMMARISED", "BlockSummary", "block_rows", "source_watermark", "summarise"]

#: The source-watermark kinds :func:`source_watermark` computes from block summaries.
SUMMARISED = frozenset({"perfect", "oracle", "bounded", "ingress"})


class BlockSummary(NamedTuple):
    """A block's distinct arrival times and its suffix-minimum and prefix-maximum change
    points ((arrival, event time) int64 columns each), µs."""

    times: np.ndarray
    min_at: np.ndarray
    min_event: np.ndarray
    max_at: np.ndarray
    max_event: np.ndarray


def summarise(trace: Trace, kind: str | None = None) -> BlockSummary:
    """The summary of a block in arrival order (:meth:`BlockedTrace.block`'s): with a
    watermark ``kind``, only the points it needs (the others empty); None: all."""
    a, e = trace.arrival_time, trace.event_time
    empty = np.empty(0, np.int64)
    if a.size == 0:
        return BlockSummary(empty, empty, empty, empty, empty)
    last = group_last(a)
    times = a[last]
    first = np.concatenate([[0], last[:-1] + 1])
    low = high = (empty, empty)
    if kind in (None, "perfect", "oracle"):
        # the least event time of the rows at or after each arrival time
        suffix = np.minimum.reduceat(e, first)[::-1]
        np.minimum.accumulate(suffix, out=suffix)
        suffix = suffix[::-1]
        moves = np.flatnonzero(np.append(suffix[:-1] != suffix[1:], True))
        low = (times[moves], suffix[moves])
    if kind in (None, "bounded"):
        # the greatest event time of the rows at or before each arrival time
        prefix = np.maximum.accumulate(np.maximum.reduceat(e, first))
        rises = np.flatnonzero(np.insert(prefix[1:] != prefix[:-1], 0, True))
        high = (times[rises], prefix[rises])
    return BlockSummary(times, *low, *high)


def source_watermark(spec: Source, summaries: Iterable[BlockSummary]) -> StepSeries:
    """The source watermark of the whole trace (µs) from its blocks' summaries (read one
    at a time), as :func:`theory.pipeline.simulator.source_input` computes it from every
    row (a finished source steps to the end of time at its last arrival). ValueError if
    the spec is not in :data:`SUMMARISED`."""
    wm = make_source_watermark(spec.watermark)
    if wm.kind not in SUMMARISED:
        raise ValueError(f"source {spec.name!r}: watermark {spec.watermark!r} needs every row")
    low = wm.kind in ("perfect", "oracle")
    times_in: list[np.ndarray] = []
    at_in: list[np.ndarray] = []
    event_in: list[np.ndarray] = []
    for s in summaries:
        times_in.append(s.times)
        at_in.append(s.min_at if low else s.max_at)
        event_in.append(s.min_event if low else s.max_event)
    times = _distinct(times_in)
    if times.size == 0:
        return empty_curve()
    if wm.kind == "ingress":
        values = np.minimum(times + 1, MAX_TIMESTAMP)
    elif wm.kind == "bounded":
        at, event = _points(at_in, event_in)
        np.maximum.accumulate(event, out=event)
        # (every time is at or after the first arrival: index >= 0)
        assert wm.bound is not None
        values = minus_clamped(event[np.searchsorted(at, times, "right") - 1], wm.bound)
    else:
        at, event = _points(at_in, event_in)
        suffix = np.append(event, MAX_TIMESTAMP)
        del event
        np.minimum.accumulate(suffix[::-1], out=suffix[::-1])
        values = suffix[np.searchsorted(at, times, "right")]  # the rows after each time
        if wm.kind == "perfect":
            np.minimum(values, times, out=values)
    iw = StepSeries(times, values, MIN_TIMESTAMP)
    return finished_source(iw, int(times[-1])) if spec.finish else iw


def _distinct(pieces: list[np.ndarray]) -> np.ndarray:
    """The sorted distinct values of the pieces (the list emptied as they are joined)."""
    joined = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
    pieces.clear()
    joined.sort()
    if joined.size < 2:
        return joined
    keep = np.empty(joined.size, bool)
    keep[0] = True
    np.not_equal(joined[1:], joined[:-1], out=keep[1:])
    return joined[keep]


def _points(at: list[np.ndarray], event: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every block's points of one kind, by arrival time (the lists emptied)."""
    a = np.concatenate(at) if at else np.empty(0, np.int64)
    at.clear()
    order = np.argsort(a, kind="stable")
    a = a[order]
    e = np.concatenate(event) if event else np.empty(0, np.int64)
    event.clear()
    return a, e[order]


def block_rows(
    blocked: BlockedTrace, i: int, n: int, kind: str | None = None
) -> tuple[BlockSummary, list[tuple[int, Part]]]:
    """Block ``i`` made here: its summary (for watermark ``kind``; None: every point)
    and its rows as parts by key partition (of ``n``), each row's place (arrival, event
    time, block, row) in the whole trace."""
    trace = blocked.block(i)
    stream = Stream(trace.arrival_time, trace.event_time, trace.key,
                    trace.value.astype(np.float64))  # fmt: skip
    return summarise(trace, kind), split(Part(stream, block_places(trace, i)), n, False)
