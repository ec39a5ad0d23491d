"""The vectorised path of :func:`~theory.windowing.runner.run_script`: a whole script at
once, for watermark-only triggers (DefaultTrigger, a bare AfterWatermark()) on non-merging
windows under one of Beam's output-timestamp policies. All times are µs.

Why a script can be run at once: under these triggers a window's first non-late batch sets
its end-of-window timer, which fires (ON_TIME) at the first watermark event reaching
``window.end``, and each batch of data for a window already past fires (LATE) at once. What
the engine computes element by element is then a function of the input watermark alone,
except where the *output* watermark matters:

- an element older than the input watermark adds a hold only if it is at or after the
  output watermark (Beam's "too late to hold" rule, see :mod:`theory.windowing.engine`);
- a late pane is LATE and releases its hold only if the output watermark is past the
  window (else Beam's runner calls it EARLY and keeps the hold).

So the path computes the output watermark from the holds (an interval minimum over
events), settles which old elements hold with it (:func:`settle_holds`: rounds until the
holds and the output watermark agree), and finds the late panes fired EARLY with it: those
keep their holds to the end (a stall), which can hold later late panes back in turn, so
rounds again until the EARLY ones agree with the output watermark they make (each round
adds some, so the first that agrees is the engine's run; beyond :data:`SETTLE_ROUNDS` the
path refuses, :attr:`Refusal.HELD_LATE_PANE`, and the caller runs the incremental engine).
The steps, one function each: :func:`strategy_refusal` (eligibility, checked first),
:func:`_rows` (assign windows, drop expired rows, group by key and window),
:func:`_batches` (late batches, closed windows), :func:`_hold_intervals` (the holds),
:func:`settle_holds`, :func:`_held_late_panes` (the second case above) and
:func:`_panes`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from enum import StrEnum
from itertools import accumulate, chain, count
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import numpy as np

from theory.arrays import cover_min
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.windowing.engine import Timing
from theory.windowing.pane_columns import TIMINGS, Keys, PaneColumns, build_panes, take_keys
from theory.windowing.script import (
    ElementEvent,
    Event,
    ProcessingTimeEvent,
    ScriptResult,
    WatermarkEvent,
)
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import AfterWatermark
from theory.windowing.windows import GlobalWindows

__all__ = [
    "Refusal",
    "ScriptColumns",
    "int_key_codes",
    "key_codes",
    "run_fast",
    "run_fast_columns",
    "script_columns",
    "strategy_refusal",
    "take_elements",
]


class Refusal(StrEnum):
    """Why the vectorised path does not run a script (the engine then does)."""

    TRIGGER = (
        "a trigger no vectorised path models (they take DefaultTrigger, AfterWatermark(), "
        "count early/late firings and Repeatedly(AfterCount) on sessions, and, on "
        "non-merging windows, "
        "AfterCount early/late firings, Repeatedly(AfterCount) and "
        "Repeatedly(AfterProcessingTime))"
    )
    MERGING = "merging windows"
    ELEMENT_POLICY = "a user-chosen output policy"
    EVENT_TYPE = "an event not exactly an ElementEvent, WatermarkEvent or ProcessingTimeEvent"
    OVERFLOW = "a window bound does not fit in int64"
    UNHASHABLE_KEY = "an unhashable key (the engine raises its own error)"
    NEVER_FIRES = "a window ending past MAX_TIMESTAMP never fires"
    HELD_LATE_PANE = (
        "a late pane fired EARLY (the output watermark held at or before its window) keeps "
        "a hold not modelled: a late row's under count triggers, or not settled in 8 rounds"
    )
    OLD_ELEMENT_HOLDS = (
        "which elements older than the input watermark hold did not settle in 8 rounds"
    )
    LATE_SESSION_DATA = "late data for a session (a part of it may have fired already)"
    MANY_TIMER_CYCLES = "a window fires on processing time more than 2,000 times"
    SPLIT_SESSION_BATCH = "under OUTPUT_AT_LATEST, a batch over parts of a session not yet joined"
    MERGING_PARTS = "early count firings on a session whose parts arrive apart and merge later"


def strategy_refusal(strategy: WindowingStrategy) -> Refusal | None:
    """Why the path cannot model ``strategy`` at all, or None when it may (the script may
    still be refused: see :func:`run_fast`)."""
    if not strategy.trigger.watermark_only():
        return Refusal.TRIGGER
    if getattr(strategy.window_fn, "is_merging", False):
        return Refusal.MERGING
    if not isinstance(strategy.timestamp_combiner, TimestampCombiner):
        return Refusal.ELEMENT_POLICY
    return None


def run_fast(evs: tuple[Event, ...], strategy: WindowingStrategy) -> ScriptResult | Refusal:
    """The result of ``evs`` (ended by a watermark at ``MAX_TIMESTAMP``) under ``strategy``,
    identical to the incremental engine's, or why this path does not model it."""
    refusal = strategy_refusal(strategy)
    if refusal is not None:
        return refusal
    scan = script_columns(evs)
    if scan is None:
        return Refusal.EVENT_TYPE
    return run_fast_columns(scan, strategy)


def run_fast_columns(
    scan: ScriptColumns,
    strategy: WindowingStrategy,
    *,
    build: bool = True,
    external: np.ndarray | None = None,
) -> ScriptResult | Refusal:
    """:func:`run_fast` on a script given as columns (the last event's watermark must be
    ``MAX_TIMESTAMP``); the panes are built as tuples only if ``build`` (they are always
    in ``result.pane_columns``). ``external``: a hold (µs) after each event from state
    outside the stage's own (see :func:`theory.windowing.runner.run_columns`)."""
    refusal = strategy_refusal(strategy)
    if refusal is not None:
        return refusal
    rows = _rows(scan, strategy)
    if isinstance(rows, Refusal):
        return rows
    batches = _batches(rows, isinstance(strategy.trigger, AfterWatermark))
    policy = strategy.timestamp_combiner
    assert isinstance(policy, TimestampCombiner)  # (strategy_refusal checked it)
    n_ev = scan.iw_after.size
    # late batches firing EARLY (their holds kept), found by rounds as the holds are
    held = np.zeros(batches.first.size, bool)
    for _ in range(SETTLE_ROUNDS):
        held_row = np.repeat(held, batches.last - batches.first)

        def hold_of(passing: np.ndarray, held: np.ndarray = held) -> np.ndarray:
            return _interval_min(n_ev, *_hold_intervals(rows, batches, policy, passing, held, n_ev))

        settled = settle_holds(
            scan,
            rows.ts,
            rows.event,
            rows.ontime | held_row,
            _passing(rows, policy, held_row),
            hold_of,
            external,
            policy is TimestampCombiner.OUTPUT_AT_EOW,
        )
        if settled is None:
            return Refusal.OLD_ELEMENT_HOLDS
        hold, passing = settled
        ow_after = with_external(np.minimum(scan.iw_after, hold), external)
        again = _held_late_panes(rows, batches, ow_after)
        if np.array_equal(again, held):
            return _panes(
                scan, rows, batches, ow_after, hold, strategy, policy, build, passing, held
            )
        held = again
    return Refusal.HELD_LATE_PANE


# ---------------------------------------------------------------------------- events

#: Event kinds of the scan (exact types; anything else goes to the engine).
_KIND = {ElementEvent: 0, WatermarkEvent: 1, ProcessingTimeEvent: 2}
_ELEMENTS = attrgetter("elements")
_WATERMARK = attrgetter("watermark")
_DELTA = attrgetter("delta")
_KEY, _VALUE, _TS = itemgetter(0), itemgetter(1), itemgetter(2)
_new_tuple = tuple.__new__


class ScriptColumns(NamedTuple):
    """A script as columns: one entry per event (for a script, plus the final
    ``MAX_TIMESTAMP`` step), and per element, in arrival order, its key, value, timestamp
    (µs) and event. At an event its elements arrive first, then the watermark and
    processing time move to their values after it. ``key`` may be a numpy integer array
    (the simulator's; the panes' keys are then an array too), ``value`` an object or a
    float64 array."""

    iw_after: np.ndarray  # the input watermark after each event
    pt_after: np.ndarray  # processing time after each event
    key: Keys
    value: np.ndarray  # object (the garbage collector need not walk it) or float64
    ts: np.ndarray
    element_event: np.ndarray  # each element's event index


def script_columns(evs: tuple[Event, ...]) -> ScriptColumns | None:
    """The script's columns, without a per-event Python loop, ended by the
    ``MAX_TIMESTAMP`` step; None for an event that is not exactly one of the three script
    types."""
    n_ev = len(evs) + 1
    try:
        kinds = np.fromiter(map(_KIND.__getitem__, map(type, evs)), np.int8, n_ev - 1)
    except KeyError:
        return None
    get = evs.__getitem__
    iw_after = np.full(n_ev, MIN_TIMESTAMP, np.int64)
    pos = np.flatnonzero(kinds == 1)
    if pos.size:
        iw_after[pos] = np.fromiter(map(_WATERMARK, map(get, pos.tolist())), np.int64, pos.size)
        np.maximum.accumulate(iw_after, out=iw_after)  # scripts never move it backwards
    iw_after[-1] = MAX_TIMESTAMP
    pt_after = np.zeros(n_ev, np.int64)
    pos = np.flatnonzero(kinds == 2)
    if pos.size:
        # Python ints, so a sum past int64 raises OverflowError as the engine does
        pt_after[pos] = np.asarray(list(accumulate(map(_DELTA, map(get, pos.tolist())))), np.int64)
        np.maximum.accumulate(pt_after, out=pt_after)  # deltas are >= 0
    pos = np.flatnonzero(kinds == 0)
    chunks = list(map(_ELEMENTS, map(get, pos.tolist())))
    counts = np.fromiter(map(len, chunks), np.int64, len(chunks))
    # the element tuples become columns at once: no list of them stays alive for the
    # garbage collector to walk at every full collection while panes are built
    flat = list(chain.from_iterable(chunks))
    n = len(flat)
    return ScriptColumns(
        iw_after,
        pt_after,
        list(map(_KEY, flat)),
        np.fromiter(map(_VALUE, flat), object, n),
        np.fromiter(map(_TS, flat), np.int64, n),
        np.repeat(pos, counts),
    )


def take_elements(columns: ScriptColumns, idx: np.ndarray, keys: bool = True) -> ScriptColumns:
    """The script with only the elements ``idx`` (ascending: arrival order kept) and every
    event; without ``keys`` the key column is left empty (a caller that has their codes)."""
    return columns._replace(
        key=take_keys(columns.key, idx) if keys else (),
        value=columns.value[idx],
        ts=columns.ts[idx],
        element_event=columns.element_event[idx],
    )


def with_external(ow_after: np.ndarray, external: np.ndarray | None) -> np.ndarray:
    """The output watermark after each event held by ``external`` too (µs; None: no
    external hold)."""
    return ow_after if external is None else np.minimum(ow_after, external)


def key_codes(keys: Keys) -> tuple[np.ndarray, Keys] | None:
    """Each key's code (keys numbered in order of first appearance) and the keys by code
    (an array for an integer array of keys, else a list); None for an unhashable key."""
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
        return int_key_codes(keys)
    index: defaultdict[Hashable, int] = defaultdict(count().__next__)
    try:
        codes = np.fromiter(map(index.__getitem__, keys), np.int64, len(keys))
    except TypeError:
        return None
    return codes, list(index)


def int_key_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`key_codes` of an integer array, vectorised: the keys' first appearances from
    ``np.unique`` on the shortest prefix (growing 4× at a time) that holds every distinct
    key, counted first (a table over the keys' span when it is small, else a sort)."""
    n = keys.size
    if n == 0:
        return np.zeros(0, np.int64), keys[:0]
    lo, hi = keys.min(), keys.max()
    dense = keys.dtype.kind == "i" and int(hi) - int(lo) < 4 * n + (1 << 16)
    rel = keys.astype(np.intp) - int(lo) if dense else keys
    distinct = int(np.count_nonzero(np.bincount(rel))) if dense else np.unique(keys).size
    m = 1024
    while True:
        uniq, first = np.unique(rel[:m], return_index=True)
        if uniq.size == distinct or m >= n:
            break
        m *= 4
    by_first = uniq[np.argsort(first)]
    if dense:
        code_of = np.empty(int(hi) - int(lo) + 1, np.int64)
        code_of[by_first] = np.arange(by_first.size)
        return code_of[rel], (by_first + lo).astype(keys.dtype)
    code = np.argsort(by_first)  # the codes of the distinct keys, ascending
    return code[np.searchsorted(by_first[code], keys)], by_first


def _before(after: np.ndarray) -> np.ndarray:
    """A series as each event finds it: ``MIN_TIMESTAMP``, then ``after`` shifted by one."""
    out = np.empty_like(after)
    out[0] = MIN_TIMESTAMP
    out[1:] = after[:-1]
    return out


# ------------------------------------------------------------------------------ rows


class _Rows(NamedTuple):
    """The kept (element, window) rows, grouped by (key, window) in arrival order (a
    non-merging window is determined by its start), with their groups' columns."""

    element: np.ndarray  # per row: the element's index
    start: np.ndarray  # per row: window bounds
    end: np.ndarray
    event: np.ndarray  # per row: the event it arrived with
    iw: np.ndarray  # per row: the input watermark it arrived at
    ts: np.ndarray  # per row: the element's timestamp
    key: np.ndarray  # per row: the key's code
    ontime: np.ndarray  # per row: its window's timer was not yet due (else it fires at once)
    gid: np.ndarray  # per row: its group
    g_first: np.ndarray  # per group: its first row
    g_end: np.ndarray  # per group: window end
    g_fire: np.ndarray  # per group: the event at which its end-of-window timer fires
    g_on: np.ndarray  # per group: its on-time rows, which come first (the watermark only rises)
    keys: Keys  # key by code
    values: np.ndarray  # per element: its value (an object array: the GC need not scan it)
    n_expired: int


def _rows(scan: ScriptColumns, strategy: WindowingStrategy) -> _Rows | Refusal:
    """Assign windows, drop the expired rows, and group the rest by key and window."""
    ts_el = scan.ts
    prepared = assign_and_code(scan, strategy)
    if isinstance(prepared, Refusal):
        return prepared
    assigned, key_el, keys = prepared
    values_el = scan.value
    el, start, end = assigned.element, assigned.start, assigned.end
    event = scan.element_event[el]
    iw = _before(scan.iw_after)[event]
    expired = _expired(iw, end, strategy.allowed_lateness)
    n_expired = int(np.count_nonzero(expired))
    if n_expired:
        kept = np.flatnonzero(~expired)
        order = kept[_group_order(key_el[el[kept]], start[kept], len(keys))]
    else:
        order = _group_order(key_el[el], start, len(keys))
    el, start, end, event, iw = el[order], start[order], end[order], event[order], iw[order]
    key = key_el[el]
    new_group = _run_starts(key, start)
    g_first = np.flatnonzero(new_group)
    g_end = end[g_first]
    g_fire = np.searchsorted(scan.iw_after, g_end, side="left")  # the timer's watermark event
    if np.any(g_fire >= scan.iw_after.size):
        return Refusal.NEVER_FIRES  # (the engine keeps such a window's hold: a stall)
    ontime = iw < end  # the window's timer is not yet due
    g_on = np.add.reduceat(ontime, g_first, dtype=np.int64) if el.size else np.zeros(0, np.int64)
    gid = np.cumsum(new_group) - 1
    return _Rows(
        el, start, end, event, iw, ts_el[el], key, ontime, gid, g_first, g_end, g_fire, g_on,
        keys, values_el, n_expired,
    )  # fmt: skip


def assign_and_code(
    scan: ScriptColumns, strategy: WindowingStrategy
) -> tuple[Any, np.ndarray, Keys] | Refusal:
    """The elements' windows (a ``WindowAssignment``), key codes and keys by code, or the
    refusal: a window bound past int64, or an unhashable key."""
    try:
        assigned = strategy.window_fn.assign_array(scan.ts)  # type: ignore[attr-defined]
    except OverflowError:
        return Refusal.OVERFLOW
    coded = key_codes(scan.key)
    if coded is None:
        return Refusal.UNHASHABLE_KEY
    return (assigned, *coded)


def _expired(iw: np.ndarray, end: np.ndarray, lateness: int) -> np.ndarray:
    """Rows arriving when ``iw > end + lateness`` (the engine's rule), without int64
    overflow: the difference is taken in uint64 where ``iw > end``."""
    gap = iw.view(np.uint64) - end.view(np.uint64)
    return (iw > end) & (gap > np.uint64(lateness))


def _run_starts(*columns: np.ndarray) -> np.ndarray:
    """Mask of the rows where any column changes from the row before (row 0 included)."""
    m = columns[0].size
    starts = np.zeros(m, bool)
    if m:
        starts[0] = True
        for col in columns:
            starts[1:] |= col[1:] != col[:-1]
    return starts


def _group_order(key: np.ndarray, start: np.ndarray, n_keys: int) -> np.ndarray:
    """``np.lexsort((start, key))``: rows by key, then start, then position (stable), as two
    stable sorts (a radix sort for the small key codes)."""
    if n_keys > 1 << 15:
        return np.lexsort((start, key))
    by_start = np.argsort(start, kind="stable")
    if n_keys <= 1:
        return by_start
    return by_start[np.argsort(key[by_start].astype(np.int16), kind="stable")]


def _rank_in_run(ids: np.ndarray) -> np.ndarray:
    """For ids in runs (equal ids adjacent), each entry's rank within its run (0, 1, ...)."""
    k = ids.size
    positions = np.arange(k)
    run_start = np.maximum.accumulate(np.where(_run_starts(ids), positions, 0))
    return positions - run_start


# --------------------------------------------------------------------------- batches


class _Batches(NamedTuple):
    """The (group, event) runs of rows: the elements of one window arriving together."""

    first: np.ndarray  # first row
    last: np.ndarray  # one past the last row
    gid: np.ndarray  # group
    event: np.ndarray  # event
    late: np.ndarray  # the window's timer was due: the batch fires at once
    firing_late: np.ndarray  # a late batch that fires (its window is not closed)
    closed: np.ndarray  # per row: dropped as "closed"


def _batches(rows: _Rows, finishes: bool) -> _Batches:
    """The batches, and which late ones fire: all under DefaultTrigger; under
    AfterWatermark() (``finishes``) only a window's first pane fires, and later data for
    the window is dropped as "closed" (the trigger finished)."""
    new_batch = _run_starts(rows.gid, rows.event)
    first = np.flatnonzero(new_batch)
    last = np.append(first[1:], rows.element.size)
    gid = rows.gid[first]
    late = ~rows.ontime[first]
    if finishes:
        late_rank = np.zeros(first.size, np.int64)
        lb = np.flatnonzero(late)
        late_rank[lb] = _rank_in_run(gid[lb])
        closed_batch = late & ((rows.g_on[gid] > 0) | (late_rank > 0))
        closed = np.repeat(closed_batch, last - first)
        firing_late = late & ~closed_batch
    else:
        closed = np.zeros(rows.element.size, bool)
        firing_late = late
    return _Batches(first, last, gid, rows.event[first], late, firing_late, closed)


# ----------------------------------------------------------------------------- holds


def _passing(rows: _Rows, policy: TimestampCombiner, held_row: np.ndarray) -> np.ndarray:
    """Rows that surely add a hold: on-time rows and under END_OF_WINDOW the rows of late
    batches firing EARLY (``held_row``: their holds stay), under EARLIEST/LATEST the
    on-time rows not older than the input watermark (older ones, and the rows of late
    batches firing EARLY, hold if not behind the output watermark: :func:`settle_holds`)."""
    if policy is TimestampCombiner.OUTPUT_AT_EOW:
        return rows.ontime | held_row
    return rows.ontime & (rows.ts >= rows.iw)


#: How many rounds :func:`settle_holds` tries before the path refuses the script.
SETTLE_ROUNDS = 8


def settle_holds(
    scan: ScriptColumns,
    ts: np.ndarray,
    event: np.ndarray,
    kept: np.ndarray,
    passing: np.ndarray,
    hold_of: Callable[[np.ndarray], np.ndarray],
    external: np.ndarray | None,
    settled: bool,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The state hold after each event (µs) and which rows add a hold, or None.

    A ``kept`` row (timestamp ``ts``, arriving at ``event``) holds unless it is too late
    to hold: below the output watermark as its batch finds it, which depends on the holds
    (``hold_of(passing)``: the state hold after each event). Starting from ``passing``
    (the rows that surely hold: not older than the input watermark), each round
    recomputes the holds, then the rows at or above the output watermark, until they
    agree: that is the engine's run (it is causal, so the agreeing one is unique). None
    if they do not within :data:`SETTLE_ROUNDS` rounds; ``settled``: ``passing`` is
    already final (END_OF_WINDOW holds whatever the watermark)."""
    for _ in range(1 if settled else SETTLE_ROUNDS):
        hold = hold_of(passing)
        if settled:
            return hold, passing
        ow_before = _before(with_external(np.minimum(scan.iw_after, hold), external))
        again = kept & (ts >= ow_before[event])
        if np.array_equal(again, passing):
            return hold, passing
        passing = again
    return None


def _hold_intervals(
    rows: _Rows,
    batches: _Batches,
    policy: TimestampCombiner,
    passing: np.ndarray,
    held: np.ndarray,
    n_ev: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The holds as event intervals ``[lo, hi]`` with their value (hold - 1 µs), keeping
    only those below every earlier hold of their window that ends with them (the others
    never matter). The output watermark is then ``min(input, smallest hold - 1 µs)``.

    A non-late batch's hold lasts from its event until its window's timer fires. A late
    batch firing LATE adds none that outlasts its event: its pane releases it (and its
    elements, below the output watermark, are too late to hold). A late batch firing
    EARLY (``held``, per batch: the output watermark is held at or before its window)
    keeps its hold to the end of the script (a stall, as Beam's runner: no later pane of
    the window can release it). ``passing``: the rows that hold (:func:`settle_holds`)."""
    if policy is TimestampCombiner.OUTPUT_AT_LATEST and rows.element.size:
        # one hold per batch: the batch's latest passing timestamp
        n_b = batches.first.size
        latest = np.full(n_b, MIN_TIMESTAMP - 1, np.int64)
        batch_of_row = np.repeat(np.arange(n_b), batches.last - batches.first)
        np.maximum.at(latest, batch_of_row[passing], rows.ts[passing])
        has = np.flatnonzero((~batches.late | held) & (latest >= MIN_TIMESTAMP))
        group = batches.gid[has] * 2 + held[has]  # (a window's held batches come last)
        has = has[_records(group, latest[has])]
        until = np.where(held[has], n_ev - 1, rows.g_fire[batches.gid[has]] - 1)
        return batches.event[has], until, latest[has] - 1
    # EOW and EARLIEST: one hold per row (a batch's minimum is among them)
    value = rows.end - 1 if policy is TimestampCombiner.OUTPUT_AT_EOW else rows.ts
    held_row = np.repeat(held, batches.last - batches.first)
    at = np.flatnonzero(passing)
    at = at[_records(rows.gid[at] * 2 + held_row[at], value[at])]
    until = np.where(held_row[at], n_ev - 1, rows.g_fire[rows.gid[at]] - 1)
    return rows.event[at], until, value[at] - 1


def _records(group: np.ndarray, val: np.ndarray) -> np.ndarray:
    """Mask of the entries strictly below every earlier entry of the same group (entries
    grouped contiguously, groups ascending): a segmented running minimum, computed as one
    running minimum by giving later groups lower offsets."""
    n = val.size
    if n == 0:
        return np.zeros(0, bool)
    low = int(val.min())
    span = int(val.max()) - low + 1
    top = int(group[-1])
    if span * (top + 1) >= 1 << 62:
        return np.ones(n, bool)  # no room for offsets: keep every entry (still exact)
    v = (val - low) + (top - group) * span
    run = np.minimum.accumulate(v)
    out = np.empty(n, bool)
    out[0] = True
    out[1:] = v[1:] < run[:-1]
    return out


def _interval_min(n: int, lo: np.ndarray, hi: np.ndarray, val: np.ndarray) -> np.ndarray:
    """For each point 0..n-1, the minimum ``val`` (at most ``MAX_TIMESTAMP``) over the
    intervals ``[lo, hi]`` holding it (``0 <= lo``, ``hi < n``; empty ones ignored), or
    MAX_TIMESTAMP where none: :func:`theory.arrays.cover_min` on half-open intervals."""
    return np.minimum(cover_min(lo, hi + 1, val, n), MAX_TIMESTAMP)


def _held_late_panes(rows: _Rows, batches: _Batches, ow_after: np.ndarray) -> np.ndarray:
    """Per batch: a late pane fired with the output watermark at or before its window, so
    EARLY, its hold kept (Beam's runner; the model would say LATE)."""
    ow_found = _before(ow_after)[batches.event]
    return batches.firing_late & (ow_found < rows.g_end[batches.gid])


# ----------------------------------------------------------------------------- panes


class _PaneColumns(NamedTuple):
    """The panes in firing order (ON_TIME panes before late ones within an event)."""

    event: np.ndarray  # the event it fires at
    group: np.ndarray
    lo: np.ndarray  # its values: grouped rows lo..hi
    hi: np.ndarray
    timestamp: np.ndarray
    pane_index: np.ndarray
    timing: np.ndarray  # codes into TIMINGS
    nonspeculative: np.ndarray


def _panes(
    scan: ScriptColumns,
    rows: _Rows,
    batches: _Batches,
    ow_after: np.ndarray,
    hold: np.ndarray,
    strategy: WindowingStrategy,
    policy: TimestampCombiner,
    build: bool,
    passing: np.ndarray,
    held: np.ndarray,
) -> ScriptResult:
    """The panes (built as tuples if ``build``) and the result (``hold``: the state hold
    after each event, µs; ``passing``: the rows that hold; ``held``: the late batches
    firing EARLY). The ON_TIME pane at the window's timer (index 0), then one late pane
    per firing late batch: LATE, or EARLY when ``held``."""
    accumulating = strategy.accumulation_mode is AccumulationMode.ACCUMULATING
    columns = _pane_columns(rows, batches, policy, accumulating, passing, held)
    pane_columns = _build_panes(rows, columns, strategy)
    grouped = ~batches.closed
    return ScriptResult(
        pane_columns.lazy() if build else [],
        columns.event,
        scan.pt_after,
        scan.iw_after,
        ow_after,
        {"expired": rows.n_expired, "closed": int(batches.closed.sum())},
        int(np.count_nonzero(grouped & (rows.ts < rows.iw))),
        bool(ow_after[-1] < MAX_TIMESTAMP),  # (a hold kept by an EARLY late pane)
        0,
        state_hold=hold,
        pane_columns=pane_columns,
    )


def _on_time_timestamps(rows: _Rows, policy: TimestampCombiner, passing: np.ndarray) -> np.ndarray:
    """Per group, the ON_TIME pane's timestamp: the policy over the group's holding rows
    (``passing``), or ``window.max_timestamp`` under END_OF_WINDOW or where none holds."""
    max_timestamp = rows.g_end - 1
    if policy is TimestampCombiner.OUTPUT_AT_EOW:
        return max_timestamp
    gid, ts = rows.gid[passing], rows.ts[passing]
    n_groups = rows.g_first.size
    if policy is TimestampCombiner.OUTPUT_AT_LATEST:
        out = np.full(n_groups, MIN_TIMESTAMP, np.int64)
        np.maximum.at(out, gid, ts)
    else:
        out = np.full(n_groups, MAX_TIMESTAMP, np.int64)
        np.minimum.at(out, gid, ts)
    return np.where(np.bincount(gid, minlength=n_groups) == 0, max_timestamp, out)


def _pane_columns(
    rows: _Rows,
    batches: _Batches,
    policy: TimestampCombiner,
    accumulating: bool,
    passing: np.ndarray,
    held: np.ndarray,
) -> _PaneColumns:
    """ON_TIME panes (groups with on-time rows) and late panes (firing late batches), in
    firing order; a late pane's index counts the ON_TIME pane and earlier late panes."""
    on = np.flatnonzero(rows.g_on > 0)
    lb = np.flatnonzero(batches.firing_late)
    lg = batches.gid[lb]
    late_index = _rank_in_run(lg) + (rows.g_on[lg] > 0)
    early = held[lb]
    event = np.concatenate([rows.g_fire[on], batches.event[lb]])
    order = np.argsort(event, kind="stable")
    late_lo = rows.g_first[lg] if accumulating else batches.first[lb]
    return _PaneColumns(
        event[order],
        np.concatenate([on, lg])[order],
        np.concatenate([rows.g_first[on], late_lo])[order],
        np.concatenate([rows.g_first[on] + rows.g_on[on], batches.last[lb]])[order],
        np.concatenate(
            [
                _on_time_timestamps(rows, policy, passing & rows.ontime)[on],
                _late_timestamps(rows, batches, policy, passing, lb, early),
            ]
        )[order],
        np.concatenate([np.zeros(on.size, np.int64), late_index])[order],
        np.concatenate(
            [np.full(on.size, _ON_TIME, np.int8), np.where(early, _EARLY, _LATE).astype(np.int8)]
        )[order],
        np.concatenate(
            [np.zeros(on.size, np.int64), _late_nonspeculative(lg, late_index, early, rows)]
        )[order],
    )


def _late_timestamps(
    rows: _Rows,
    batches: _Batches,
    policy: TimestampCombiner,
    passing: np.ndarray,
    lb: np.ndarray,
    early: np.ndarray,
) -> np.ndarray:
    """The late panes' timestamps (batches ``lb``, ``early``: fired EARLY): the end of
    the window, but for an EARLY one the policy over the holds its window keeps, if any
    (the passing rows of its EARLY batches so far: a LATE pane releases none of them, as
    none fires after a kept hold)."""
    out = rows.g_end[batches.gid[lb]] - 1
    if policy is TimestampCombiner.OUTPUT_AT_EOW or not early.any():
        return out
    latest = policy is TimestampCombiner.OUTPUT_AT_LATEST
    e = lb[early]
    size = batches.last[e] - batches.first[e]
    row = np.repeat(batches.first[e], size) + _rank_in_run(np.repeat(np.arange(e.size), size))
    none = MIN_TIMESTAMP - 1 if latest else MAX_TIMESTAMP + 1  # (int64 has room)
    ts = np.where(passing[row], rows.ts[row], none)
    reduce = np.maximum if latest else np.minimum
    starts = np.concatenate([[0], np.cumsum(size)[:-1]])
    per_batch = reduce.reduceat(ts, starts) if ts.size else ts
    # running combine over a window's EARLY batches: ranks, lifted per window
    gid = batches.gid[e]
    rank = np.empty(e.size, np.int64)
    by_value = np.argsort(-per_batch if latest else per_batch, kind="stable")
    rank[by_value] = np.arange(e.size)
    lifted = rank + (int(gid[-1]) - gid) * e.size
    running = by_value[np.minimum.accumulate(lifted) - (int(gid[-1]) - gid) * e.size]
    stamp = per_batch[running]
    out[early] = np.where(stamp == none, out[early], stamp)
    return out


def _late_nonspeculative(
    lg: np.ndarray, index: np.ndarray, early: np.ndarray, rows: _Rows
) -> np.ndarray:
    """The late panes' non-speculative index (groups ``lg``, pane ``index``, ``early``):
    Beam's runner counts non-EARLY panes, and EARLY ones after the first of them; an
    EARLY pane before it has -1. A window's first non-EARLY pane: its ON_TIME pane (index
    0), else its first LATE pane."""
    big = np.iinfo(np.int64).max
    first = np.where(early, big, index)
    if lg.size:
        starts = np.flatnonzero(_run_starts(lg))
        per_group = np.minimum.reduceat(first, starts)
        first = np.repeat(per_group, np.diff(np.append(starts, lg.size)))
    first = np.where(rows.g_on[lg] > 0, 0, first)
    return np.where(index < first, -1, index - np.minimum(first, index))


def _build_panes(rows: _Rows, columns: _PaneColumns, strategy: WindowingStrategy) -> PaneColumns:
    """The panes of the non-merging path: every pane ON_TIME (index 0) or LATE."""
    group = columns.group
    return build_panes(
        take_keys(rows.keys, rows.key[rows.g_first][group]),
        rows.start[rows.g_first][group],
        rows.g_end[group],
        rows.values[rows.element],
        columns.lo,
        columns.hi,
        columns.timestamp,
        columns.timing,
        columns.pane_index,
        isinstance(strategy.trigger, AfterWatermark),  # is_last: the trigger finishes
        global_window=isinstance(strategy.window_fn, GlobalWindows),
        nonspeculative_index=columns.nonspeculative,
    )


_EARLY, _ON_TIME, _LATE = (TIMINGS.index(t) for t in (Timing.EARLY, Timing.ON_TIME, Timing.LATE))
