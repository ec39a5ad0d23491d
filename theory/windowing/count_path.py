"""The vectorised path for the count-based rich triggers (and repeated processing-time
firings) on non-merging windows: a whole script at once. All times are µs.

Triggers modelled (each ``AfterCount`` wrapped in ``Repeatedly``, as Beam does):

- ``Repeatedly(AfterCount(n))``;
- ``Repeatedly(AfterProcessingTime(d))``: a window's first batch after a firing sets a
  timer at its processing time plus d; the timer fires a pane with every batch up to
  the event whose processing time reaches it, EARLY or LATE by the *timer's* time
  against ``window.max_timestamp`` (Beam passes the timer's time as the watermark);
  timers never reached stay pending (:func:`_timer_cycles`);
- ``AfterWatermark(early=AfterCount(n), late=AfterCount(m))``, either side optional (not
  both absent: that is :mod:`theory.windowing.fast_path`'s).

under every :class:`TimestampCombiner`, both accumulation modes and any allowed lateness.
Processing-time sub-triggers, other composites and merging windows go to the engine.

What the engine does per (key, window), batch by batch (a batch is the window's rows of
one event), and how this path computes it:

- **Counting.** A count trigger adds the batch's size and fires once it reaches its
  count, then starts again from 0 (Beam's ``Repeatedly`` resets ``AfterCount``; a batch
  fires at most one pane, whatever its size). :func:`_count_fires` is a cumulative sum
  when every batch is one row or fires, else a scan of plain integers.
- **AfterWatermark.** Batches before the window's end-of-window timer count for
  ``early`` (EARLY panes, which keep their holds: the trigger has an ON_TIME pane); the
  timer fires the ON_TIME pane at the first watermark event reaching ``window.end``,
  even empty, releasing every hold; later batches count for ``late``, or are dropped as
  ``closed`` without it (the trigger finished). A window whose first batch is already
  late fires at once (its first pane), as in :mod:`theory.windowing.fast_path`.
- **Holds.** Each batch adds its hold (:mod:`theory.windowing.strategy`), kept until the
  next pane of its window that releases holds (for ever if none: a stall). The output
  watermark is then ``min(input, smallest hold - 1 µs)``
  (:func:`theory.windowing.fast_path._interval_min`).
- **The output watermark's part.** A pane fired by data has its timing from the output
  watermark as the batch finds it: EARLY at or before ``window.max_timestamp``, else
  LATE; its non-speculative index counts from the window's first pane that is not
  EARLY. Such a late pane of ``AfterWatermark`` keeps its window's holds when EARLY:
  under EARLIEST/LATEST the window has none then (no late row holds), under
  END_OF_WINDOW the path refuses it (:attr:`Refusal.HELD_LATE_PANE`). Which elements
  older than the input watermark still hold is settled with the output watermark
  (:func:`theory.windowing.fast_path.settle_holds`; :attr:`Refusal.OLD_ELEMENT_HOLDS`
  if that takes more than 8 rounds).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from theory.arrays import range_min
from theory.time import MAX_TIMESTAMP
from theory.windowing.engine import Timing
from theory.windowing.fast_path import (
    Refusal,
    ScriptColumns,
    _before,
    _interval_min,
    _rank_in_run,
    _records,
    _Rows,
    _rows,
    _run_starts,
    settle_holds,
    with_external,
)
from theory.windowing.pane_columns import TIMINGS, PaneColumns, take_keys
from theory.windowing.script import ScriptResult
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    Repeatedly,
    Trigger,
)
from theory.windowing.windows import GlobalWindows

__all__ = ["CountTriggers", "count_triggers", "run_count_columns"]

_EARLY, _ON_TIME, _LATE = (TIMINGS.index(t) for t in (Timing.EARLY, Timing.ON_TIME, Timing.LATE))


class CountTriggers(NamedTuple):
    """A modelled trigger's counts (0: absent): ``early`` and ``late`` of an
    ``AfterWatermark`` (``watermark``), or ``early`` alone for ``Repeatedly(AfterCount)``;
    ``delay`` (µs) for ``Repeatedly(AfterProcessingTime(delay))``, else -1."""

    watermark: bool
    early: int
    late: int
    delay: int = -1


def _repeated_count(trigger: Trigger | None) -> int | None:
    """n for ``Repeatedly(AfterCount(n))``, 0 for None, else None (not modelled)."""
    if trigger is None:
        return 0
    if type(trigger) is Repeatedly and type(trigger.underlying) is AfterCount:
        return int(trigger.underlying.count)
    return None


def count_triggers(strategy: WindowingStrategy) -> CountTriggers | Refusal:
    """The counts of ``strategy``'s trigger when this path models the strategy, else why
    not."""
    trigger = strategy.trigger
    if getattr(strategy.window_fn, "is_merging", False):
        return Refusal.MERGING
    if not isinstance(strategy.timestamp_combiner, TimestampCombiner):
        return Refusal.ELEMENT_POLICY
    if type(trigger) is AfterWatermark:
        early, late = _repeated_count(trigger.early), _repeated_count(trigger.late)
        if early is None or late is None or early == late == 0:
            return Refusal.TRIGGER
        return CountTriggers(True, early, late)
    if type(trigger) is Repeatedly and type(trigger.underlying) is AfterProcessingTime:
        return CountTriggers(False, 0, 0, int(trigger.underlying.delay))
    n = _repeated_count(trigger)
    if not n:
        return Refusal.TRIGGER
    return CountTriggers(False, n, 0)


def run_count_columns(
    scan: ScriptColumns,
    strategy: WindowingStrategy,
    *,
    build: bool = True,
    external: np.ndarray | None = None,
) -> ScriptResult | Refusal:
    """The result of a script given as columns (its last event's watermark at
    ``MAX_TIMESTAMP``) under a count-trigger ``strategy``, identical to the incremental
    engine's, or why this path does not model it. Panes are built as tuples only if
    ``build`` (they are always in ``result.pane_columns``); ``external``: a hold (µs)
    after each event from state outside the stage's own."""
    counts = count_triggers(strategy)
    if isinstance(counts, Refusal):
        return counts
    rows = _rows(scan, strategy)
    if isinstance(rows, Refusal):
        return rows
    policy = strategy.timestamp_combiner
    assert isinstance(policy, TimestampCombiner)  # (count_triggers checked it)
    b = _batches(rows, counts, scan.pt_after)
    if b is None:
        return Refusal.MANY_TIMER_CYCLES
    kept = np.repeat(~b.closed, b.last - b.first)
    held = _output_watermark(scan, rows, b, policy, kept, external)
    if held is None:
        return Refusal.OLD_ELEMENT_HOLDS
    hold, passing = held
    ow_after = with_external(np.minimum(scan.iw_after, hold), external)
    ow_before = _before(ow_after)
    if _held_late_pane(rows, b, ow_before, passing, counts):
        return Refusal.HELD_LATE_PANE
    grouped, pane_event, order = _panes(rows, b, ow_before, passing, policy, counts, strategy)
    panes = grouped.take(order)
    return ScriptResult(
        panes.lazy() if build else [],
        pane_event,
        scan.pt_after,
        scan.iw_after,
        ow_after,
        {"expired": rows.n_expired, "closed": int(np.sum((b.last - b.first)[b.closed]))},
        int(np.count_nonzero(kept & (rows.ts < rows.iw))),
        bool(ow_after[-1] < MAX_TIMESTAMP),
        b.pending,
        state_hold=hold,
        pane_columns=panes,
    )


# --------------------------------------------------------------------------- batches


class _Batches(NamedTuple):
    """The (window, event) runs of rows and what each does."""

    first: np.ndarray  # first row
    last: np.ndarray  # one past the last row
    gid: np.ndarray  # the window (group)
    event: np.ndarray
    late: np.ndarray  # the window's end-of-window timer was due when it arrived
    fires: np.ndarray  # it fires a pane
    closed: np.ndarray  # dropped: the trigger finished
    first_late: np.ndarray  # AfterWatermark: a window's first batch, already late
    release: np.ndarray  # the event at which its hold is released (int64 max: never)
    fire_event: np.ndarray  # a firing batch's pane's event (its own, or its timer's)
    timer: np.ndarray  # a firing batch's processing-time timer (µs), if it has one
    pending: int  # processing-time timers that never fire


def _count_fires(segment: np.ndarray, size: np.ndarray, n: int) -> np.ndarray:
    """Which batches fire a count trigger of ``n`` that counts the batches of each
    segment (contiguous ids) from 0, fires when its count reaches ``n`` and restarts
    from 0: at once when every batch is one row or fires, else one firing per segment
    per round (a search in the running sum of sizes), or, where a segment fires more
    than :data:`_MAX_ROUNDS` times, a scan of plain integers."""
    if n <= 1 or bool(np.all(size >= n)):
        return np.ones(size.size, bool)
    if bool(np.all(size == 1)):
        return (_rank_in_run(segment) + 1) % n == 0
    csum = np.cumsum(size)
    pos = np.flatnonzero(_run_starts(segment))
    end = np.append(pos[1:], size.size)
    if int(((csum[end - 1] - csum[pos] + size[pos]) // n).max()) > _MAX_ROUNDS:
        return _count_fires_scan(segment, size, n)
    fires = np.zeros(size.size, bool)
    while pos.size:
        base = csum[pos] - size[pos]  # the rows before the count restarts
        at = np.searchsorted(csum, base + n, side="left")
        ok = at < end
        fires[at[ok]] = True
        pos, end = at[ok] + 1, end[ok]
        going = pos < end
        pos, end = pos[going], end[going]
    return fires


#: Rounds :func:`_count_fires` takes at most (else it scans).
_MAX_ROUNDS = 2_000


def _count_fires_scan(segment: np.ndarray, size: np.ndarray, n: int) -> np.ndarray:
    """:func:`_count_fires` batch by batch."""
    fires = np.zeros(size.size, bool)
    count, current = 0, -1
    for i, (s, k) in enumerate(zip(segment.tolist(), size.tolist(), strict=True)):
        if s != current:
            count, current = 0, s
        count += k
        if count >= n:
            fires[i] = True
            count = 0
    return fires


def _batches(rows: _Rows, counts: CountTriggers, pt_after: np.ndarray) -> _Batches | None:
    """Each batch's firing, closing and hold release (see the module docstring); None
    where a window's processing-time timer fires more than :data:`_MAX_ROUNDS` times."""
    first = np.flatnonzero(_run_starts(rows.gid, rows.event))
    last = np.append(first[1:], rows.element.size)
    gid, event = rows.gid[first], rows.event[first]
    size = last - first
    late = ~rows.ontime[first]
    nb = first.size
    fires = np.zeros(nb, bool)
    closed = np.zeros(nb, bool)
    first_late = np.zeros(nb, bool)
    fire_event, timer, pending = event, np.zeros(nb, np.int64), 0
    if counts.delay >= 0:
        cycles = _timer_cycles(gid, event, pt_after, counts.delay)
        if cycles is None:
            return None
        fires, fire_event, timer, pending = cycles
    elif not counts.watermark:
        fires = _count_fires(gid, size, counts.early)
    else:
        on = np.flatnonzero(~late)
        if counts.early:
            fires[on] = _count_fires(gid[on], size[on], counts.early)
        lb = np.flatnonzero(late)
        created_late = rows.g_on[gid[lb]] == 0
        rank = _rank_in_run(gid[lb])
        first_late[lb] = created_late & (rank == 0)
        counting = lb[~first_late[lb]]
        if counts.late:
            fires[counting] = _count_fires(gid[counting], size[counting], counts.late)
        else:
            closed[counting] = True  # the trigger finished at the window's first pane
        fires |= first_late
    release = _releases(rows, gid, fire_event, late, fires, counts)
    return _Batches(
        first, last, gid, event, late, fires, closed, first_late, release, fire_event, timer,
        pending,
    )  # fmt: skip


def _timer_cycles(
    gid: np.ndarray, event: np.ndarray, pt_after: np.ndarray, delay: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """``Repeatedly(AfterProcessingTime(delay))`` per window: a batch with no timer set
    sets one at its processing time plus ``delay``; it fires at the first event whose
    processing time reaches it (the batch's own if already due), with every batch up to
    that event, and the next batch sets a new one. Per batch: whether it ends a cycle
    (fires), the cycle's event and timer (µs); and how many timers never fire. Found one
    cycle per window per round; None beyond :data:`_MAX_ROUNDS` rounds."""
    nb, n_ev = gid.size, pt_after.size
    fires = np.zeros(nb, bool)
    fire_event = event.copy()
    timer = np.zeros(nb, np.int64)
    if nb == 0:
        return fires, fire_event, timer, 0
    if (int(gid[-1]) + 1) * (n_ev + 1) >= 1 << 62:
        return None
    key = gid * (n_ev + 1) + event  # ascending: batches by (window, event)
    pt_before = np.concatenate(([0], pt_after[:-1]))
    pos = np.flatnonzero(_run_starts(gid))
    end = np.append(pos[1:], nb)
    pending = 0
    for _ in range(_MAX_ROUNDS):
        if not pos.size:
            return fires, fire_event, timer, pending
        at = pt_before[event[pos]] + delay
        f = np.maximum(np.searchsorted(pt_after, at, side="left"), event[pos])
        never = f >= n_ev
        pending += int(np.count_nonzero(never))
        pos, end, at, f = pos[~never], end[~never], at[~never], f[~never]
        nxt = np.searchsorted(key, gid[pos] * (n_ev + 1) + f, side="right")
        fires[nxt - 1] = True
        fire_event[nxt - 1] = f
        timer[nxt - 1] = at
        going = nxt < end
        pos, end = nxt[going], end[going]
    return None


def _releases(
    rows: _Rows,
    gid: np.ndarray,
    fire_event: np.ndarray,
    late: np.ndarray,
    fires: np.ndarray,
    counts: CountTriggers,
) -> np.ndarray:
    """Per batch, the event of the pane that releases its hold: the ON_TIME pane for an
    on-time batch under AfterWatermark (its early panes keep the holds), else the next
    pane its window fires at or after it; ``MAX`` (never) when there is none."""
    nb = gid.size
    releasing = fires & late if counts.watermark else fires
    at = np.flatnonzero(releasing)
    nxt = np.searchsorted(at, np.arange(nb), side="left")
    out = np.full(nb, np.iinfo(np.int64).max, np.int64)
    has = nxt < at.size
    idx = np.flatnonzero(has)
    same = gid[at[nxt[idx]]] == gid[idx]
    out[idx[same]] = fire_event[at[nxt[idx[same]]]]
    if counts.watermark:
        on = ~late
        out[on] = rows.g_fire[gid[on]]
    return out


# ----------------------------------------------------------------------------- holds


def _output_watermark(
    scan: ScriptColumns,
    rows: _Rows,
    b: _Batches,
    policy: TimestampCombiner,
    kept: np.ndarray,
    external: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The state hold after each event (µs) and which rows add a hold, or None: a kept
    row holds unless it is too late to hold (always under END_OF_WINDOW), settled with
    the output watermark by :func:`theory.windowing.fast_path.settle_holds`."""
    n_ev = scan.iw_after.size
    eow = policy is TimestampCombiner.OUTPUT_AT_EOW
    return settle_holds(
        scan,
        rows.ts,
        rows.event,
        kept,
        kept if eow else kept & (rows.ts >= rows.iw),
        lambda passing: _interval_min(n_ev, *_hold_intervals(rows, b, policy, passing, n_ev)),
        external,
        eow,
    )


def _hold_intervals(
    rows: _Rows, b: _Batches, policy: TimestampCombiner, passing: np.ndarray, n_ev: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batches' holds as event intervals ``[lo, hi]`` with their value (hold - 1
    µs): from the batch's event to the one before its release; ``passing``: the rows
    that hold (under END_OF_WINDOW a batch holds at ``max_timestamp`` if it is kept)."""
    hi = np.minimum(b.release, n_ev) - 1
    if policy is TimestampCombiner.OUTPUT_AT_EOW:
        keep = ~b.closed
        value = rows.g_end[b.gid] - 1
    else:
        ts = rows.ts
        if policy is TimestampCombiner.OUTPUT_AT_LATEST:
            none = np.iinfo(np.int64).min
            v = np.where(passing, ts, none)
            value = np.maximum.reduceat(v, b.first) if v.size else v
        else:
            none = np.iinfo(np.int64).max
            v = np.where(passing, ts, none)
            value = np.minimum.reduceat(v, b.first) if v.size else v
        keep = value != none
    event, hi, value, gid = b.event[keep], hi[keep], value[keep] - 1, b.gid[keep]
    # a window's holds released together: only those below every earlier one matter
    record = _records(np.cumsum(_run_starts(gid, hi)) - 1, value)
    return event[record], hi[record], value[record]


def _held_late_pane(
    rows: _Rows,
    b: _Batches,
    ow_before: np.ndarray,
    passing: np.ndarray,
    counts: CountTriggers,
) -> bool:
    """Whether an ``AfterWatermark`` late pane would be EARLY (the output watermark at or
    before its window) in a window where a late row holds: the pane would keep that
    hold, which this path does not model."""
    if not counts.watermark:
        return False
    late_rows = np.repeat(b.late, b.last - b.first) & passing
    held_windows = np.zeros(rows.g_first.size, bool)
    held_windows[rows.gid[late_rows]] = True
    late_panes = b.fires & b.late & held_windows[b.gid]
    return bool(np.any(ow_before[b.event[late_panes]] < rows.g_end[b.gid[late_panes]]))


# ----------------------------------------------------------------------------- panes


def _panes(
    rows: _Rows,
    b: _Batches,
    ow_before: np.ndarray,
    passing: np.ndarray,
    policy: TimestampCombiner,
    counts: CountTriggers,
    strategy: WindowingStrategy,
) -> tuple[PaneColumns, np.ndarray, np.ndarray]:
    """The panes grouped by window in firing order, their events in event order, and the
    order that puts the panes in event order (stable: by window within an event)."""
    fb = np.flatnonzero(b.fires)
    data_gid, data_event, data_hi = b.gid[fb], b.fire_event[fb], b.last[fb]
    if counts.watermark:
        on = np.flatnonzero(rows.g_on > 0)  # windows with an ON_TIME pane
        gid = np.concatenate([data_gid, on])
        event = np.concatenate([data_event, rows.g_fire[on]])
        hi = np.concatenate([data_hi, rows.g_first[on] + rows.g_on[on]])
        is_timer = np.concatenate([np.zeros(fb.size, bool), np.ones(on.size, bool)])
        src = np.concatenate([fb, np.full(on.size, -1)])
        order = np.lexsort((is_timer, event, gid))
        gid, event, hi = gid[order], event[order], hi[order]
        is_timer, src = is_timer[order], src[order]
    else:
        gid, event, hi, src = data_gid, data_event, data_hi, fb
        is_timer = np.zeros(fb.size, bool)
    n = gid.size
    index = _rank_in_run(gid)
    prev_hi = np.where(index > 0, np.roll(hi, 1), rows.g_first[gid])
    accumulating = strategy.accumulation_mode is AccumulationMode.ACCUMULATING
    lo = rows.g_first[gid] if accumulating else prev_hi
    end = rows.g_end[gid]
    data_late = np.zeros(n, bool)
    data_late[~is_timer] = b.late[src[~is_timer]]
    # a pane fired by data is EARLY while the output watermark (as the batch found it)
    # is at or before the window's max_timestamp, else LATE; a timer's pane is ON_TIME
    is_early = ~is_timer & (ow_before[event] < end)
    if counts.delay >= 0:  # a processing-time timer's pane: its timer's time decides
        is_early = b.timer[src] < end
    timing = np.where(is_early, _EARLY, np.where(is_timer, _ON_TIME, _LATE))
    # the non-speculative index counts from the window's first pane that is not EARLY
    nonspec_from = np.where(is_early, n, np.arange(n))
    first_nonspec = _segment_min(gid, nonspec_from)
    nonspec = np.where(np.arange(n) >= first_nonspec, np.arange(n) - first_nonspec, -1)
    # holds since the last release: under AfterWatermark early panes and the ON_TIME
    # pane see every hold since the window began, the others those since the last pane
    hold_lo = prev_hi
    if counts.watermark:
        hold_lo = np.where(data_late, prev_hi, rows.g_first[gid])
    stamp = _pane_timestamps(rows, policy, passing, hold_lo, hi, end)
    is_last = np.zeros(n, bool)
    if counts.watermark and not counts.late:
        is_last = is_timer.copy()
        is_last[~is_timer] = b.first_late[src[~is_timer]]
    order = np.argsort(event, kind="stable")
    panes = PaneColumns(
        take_keys(rows.keys, rows.key[rows.g_first[gid]]),
        rows.start[rows.g_first[gid]],
        end,
        stamp,
        timing.astype(np.int8),
        index,
        nonspec,
        is_last,
        lo,
        hi,
        rows.values[rows.element],
        isinstance(strategy.window_fn, GlobalWindows),
    )
    return panes, event[order], order


def _segment_min(gid: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per entry, the minimum of ``value`` over its run of equal ``gid``."""
    if gid.size == 0:
        return value.copy()
    starts = np.flatnonzero(_run_starts(gid))
    mins = np.minimum.reduceat(value, starts)
    return np.repeat(mins, np.diff(np.append(starts, gid.size)))


def _pane_timestamps(
    rows: _Rows,
    policy: TimestampCombiner,
    passing: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    end: np.ndarray,
) -> np.ndarray:
    """Each pane's timestamp: the policy over the holding rows ``lo..hi``, or
    ``window.max_timestamp`` under END_OF_WINDOW or where no row holds."""
    max_timestamp = end - 1
    if policy is TimestampCombiner.OUTPUT_AT_EOW or lo.size == 0:
        return max_timestamp
    big = np.iinfo(np.int64).max
    latest = policy is TimestampCombiner.OUTPUT_AT_LATEST
    key = np.where(passing, -rows.ts if latest else rows.ts, big)
    nonempty = hi > lo
    out = np.full(lo.size, big, np.int64)
    if np.any(nonempty):
        out[nonempty] = range_min(key, lo[nonempty], hi[nonempty])
    found = out != big
    value = -out if latest else out
    return np.where(found, value, max_timestamp)
