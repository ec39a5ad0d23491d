"""The vectorised path for session windows: a whole script at once, for watermark-only
triggers (DefaultTrigger, a bare AfterWatermark()) and count firings
(``AfterWatermark`` with ``AfterCount`` sides, ``Repeatedly(AfterCount)``: see
:mod:`theory.windowing.session_counts`) on :class:`Sessions` under one of Beam's
output-timestamp policies. All times are µs.

The engine merges session windows batch by batch; what it outputs is a function of the
final sessions and of the order in which their parts arrived:

- **Final sessions** per key: the kept (unexpired) rows sorted by timestamp, cut where
  two neighbours are ``gap`` or more apart (Beam merges strictly overlapping windows).
  A session ``[start, end)`` fires once, ON_TIME, at the first watermark event reaching
  ``end``, with all its rows, when no part of it can fire before it is whole. That holds
  when no kept row is late (timestamp below the input watermark at its arrival): every
  part a row joins then ends after the row's timestamp, so after the watermark. A late
  row is refused (:attr:`Refusal.LATE_SESSION_DATA`): the runner then gives the
  sessions with late data to the engine and the others to this path
  (:func:`engine_session_elements`; ``path == "mixed"``). Under early count firings
  (:mod:`theory.windowing.session_counts`) so do the sessions that are not one part at
  every event (:attr:`Refusal.MERGING_PARTS`).
- **Holds.** A session's smallest hold is the smallest over its batches, kept until it
  fires. Under END_OF_WINDOW a batch holds at the end of the part it lands in: the
  smallest such end is that of a *fresh* part, a run of one event's rows that overlaps
  no earlier row (a part that grows only ends later). Under EARLIEST each row holds at its
  timestamp (none is late, so none is too late to hold). Under LATEST a batch holds at
  its latest timestamp: the path refuses a batch split over two parts that may or may not
  be joined yet (:attr:`Refusal.SPLIT_SESSION_BATCH`).

The output watermark is then ``min(input, smallest live hold - 1 µs)`` after every
event (:func:`theory.windowing.fast_path._interval_min`). Values of a pane are its rows
in arrival order; the engine's order follows its merges (both are the same multiset,
and Beam's bundles keep no order either).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from theory.arrays import range_min
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.windowing.engine import Timing
from theory.windowing.fast_path import (
    Refusal,
    ScriptColumns,
    _expired,
    _group_order,
    _interval_min,
    _records,
    _run_starts,
    assign_and_code,
    take_elements,
    with_external,
)
from theory.windowing.pane_columns import TIMINGS, Keys, PaneColumns, take_keys
from theory.windowing.script import ScriptResult
from theory.windowing.session_counts import EarlyPanes, early_panes, session_counts
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import AfterWatermark
from theory.windowing.windows import Sessions

__all__ = ["engine_session_elements", "run_sessions_columns", "sessions_refusal"]

_EARLY, _ON_TIME = TIMINGS.index(Timing.EARLY), TIMINGS.index(Timing.ON_TIME)


def sessions_refusal(strategy: WindowingStrategy) -> Refusal | None:
    """Why this path cannot model ``strategy`` at all, or None when it may."""
    if session_counts(strategy) is None:
        return Refusal.TRIGGER
    if type(strategy.window_fn) is not Sessions:
        return Refusal.MERGING
    if not isinstance(strategy.timestamp_combiner, TimestampCombiner):
        return Refusal.ELEMENT_POLICY
    return None


def run_sessions_columns(
    scan: ScriptColumns,
    strategy: WindowingStrategy,
    *,
    build: bool = True,
    external: np.ndarray | None = None,
) -> ScriptResult | Refusal:
    """The result of a script given as columns (its last event's watermark at
    ``MAX_TIMESTAMP``) under a Sessions ``strategy``, identical to the incremental
    engine's (values as multisets), or why this path does not model it. The panes are
    built as tuples only if ``build`` (they are always in ``result.pane_columns``).
    ``external``: a hold (µs) after each event from state outside the stage's own; it
    holds the output watermark, on which these sessions do not depend (no late data)."""
    refusal = sessions_refusal(strategy)
    if refusal is not None:
        return refusal
    prepared = assign_and_code(scan, strategy)  # (a session's window is [ts, ts + gap))
    if isinstance(prepared, Refusal):
        return prepared
    _, code, keys = prepared
    policy = strategy.timestamp_combiner
    assert isinstance(policy, TimestampCombiner)  # (sessions_refusal checked it)
    gap = strategy.window_fn.gap  # type: ignore[attr-defined]
    n_ev = scan.iw_after.size
    parts, holds = [], []
    for idx in _chunks(code, len(keys)):
        sub = scan if idx is None else take_elements(scan, idx, keys=False)
        rows = _session_rows(sub, strategy, coded=(code if idx is None else code[idx], keys))
        if isinstance(rows, Refusal):
            return rows
        early = _early(rows, strategy, n_ev - 1)
        if isinstance(early, Refusal):
            return early
        part_holds = (
            early.holds  # Repeatedly(AfterCount)
            if early is not None and early.holds is not None
            else _holds(rows, policy, gap)
        )
        if isinstance(part_holds, Refusal):
            return part_holds
        holds.append(part_holds)
        parts.append(_part_panes(rows, strategy, policy, early))
    hold = _interval_min(n_ev, *(_joined(list(c)) for c in zip(*holds, strict=True)))
    result = _result(scan, parts, keys, hold, build)
    return replace(result, output_watermark=with_external(result.output_watermark, external))


#: Rows per key chunk of a script of more than twice as many elements: the per-row work
#: runs chunk by chunk (8 MB per int64 column, which glibc serves again from memory
#: freed before, where a temporary over 32 MB is fresh memory from the kernel each
#: time, mapped and zeroed: at 5M rows as much system time as the computation's own);
#: the holds and watermarks are then computed once over all events. Exact: sessions of
#: different keys never merge, and this path's sessions (no late data) do not depend on
#: the output watermark (which the runner's mixed path relies on too).
CHUNK_ROWS = 1 << 20


def _chunks(code: np.ndarray, n_keys: int) -> list[np.ndarray | None]:
    """The elements of each key chunk (keys dealt round robin by code), or ``[None]``:
    one chunk of every element."""
    n_parts = min(-(-code.size // CHUNK_ROWS), n_keys)
    if code.size <= 2 * CHUNK_ROWS or n_parts < 2:
        return [None]
    part = code % n_parts
    return [np.flatnonzero(part == p) for p in range(n_parts)]


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays one after the other (the array itself when there is one)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _early(
    rows: _SessionRows, strategy: WindowingStrategy, last_event: int
) -> EarlyPanes | Refusal | None:
    """The count panes (None without a count trigger), or the refusal."""
    counts = session_counts(strategy)
    assert counts is not None  # (sessions_refusal checked it)
    n = counts.early
    if not n or not rows.s_first.size:
        return None
    gap = strategy.window_fn.gap  # type: ignore[attr-defined]
    if np.any(_parts(rows, gap) > 1):
        return Refusal.MERGING_PARTS
    by_arrival = rows.by_arrival
    policy = strategy.timestamp_combiner
    assert isinstance(policy, TimestampCombiner)
    early = early_panes(
        rows.sess[by_arrival],
        rows.event[by_arrival],
        rows.ts[by_arrival],
        rows.s_first,
        rows.s_start,
        n,
        gap,
        policy,
        strategy.accumulation_mode is AccumulationMode.DISCARDING,
        not counts.watermark,
        last_event,
    )
    return Refusal.OVERFLOW if early is None else early


class _SessionRows(NamedTuple):
    """The kept rows sorted by (key, timestamp, arrival), with their sessions."""

    ts: np.ndarray  # per row: timestamp
    event: np.ndarray  # per row: the event it arrived with
    element: np.ndarray  # per row: the element's index (arrival order)
    sess: np.ndarray  # per row: its session (sessions numbered in row order)
    by_arrival: np.ndarray  # the rows by (session, arrival)
    s_base: np.ndarray | None  # per session: see _session_offsets
    s_first: np.ndarray  # per session: its first row
    s_start: np.ndarray  # per session: window bounds
    s_end: np.ndarray
    s_fire: np.ndarray  # per session: the watermark event at which it fires
    s_key: np.ndarray  # per session: the key's code
    keys: Keys
    values: np.ndarray  # per element
    n_expired: int


class _Cut(NamedTuple):
    """The kept rows sorted by (key, timestamp, arrival) and cut into sessions."""

    kept: np.ndarray  # the kept elements, ascending
    order: np.ndarray  # the kept elements by (key, timestamp, arrival): the rows
    ts: np.ndarray  # per row: timestamp
    late: np.ndarray  # per row: timestamp below the input watermark at its arrival
    new: np.ndarray  # per row: it starts a session
    key: np.ndarray  # per row: key code
    keys: Keys


#: Each element's key code, and the keys by code.
_Coded = tuple[np.ndarray, Keys]


def _cut(
    scan: ScriptColumns, strategy: WindowingStrategy, coded: _Coded | None = None
) -> _Cut | Refusal:
    """Drop the expired rows and cut the rest into sessions (``coded``: the key codes,
    when known)."""
    ts_el = scan.ts
    gap = strategy.window_fn.gap  # type: ignore[attr-defined]
    if coded is None:
        prepared = assign_and_code(scan, strategy)  # (a session's window is [ts, ts + gap))
        if isinstance(prepared, Refusal):
            return prepared
        coded = prepared[1:]
    key_el, keys = coded
    event = scan.element_event  # the input watermark each element finds:
    iw_el = np.where(event > 0, scan.iw_after[event - 1], MIN_TIMESTAMP)
    kept = np.flatnonzero(~_expired(iw_el, ts_el + gap, strategy.allowed_lateness))
    # by key, then timestamp, then arrival
    if kept.size == ts_el.size:  # (none expired: no gathers)
        order = _group_order(key_el, ts_el, len(keys))
    else:
        order = kept[_group_order(key_el[kept], ts_el[kept], len(keys))]
    ts, key = ts_el[order], key_el[order]
    new = _run_starts(key)
    if ts.size:
        new[1:] |= ts[1:] >= ts[:-1] + gap  # (no overflow: ts + gap fits, see assign_array)
    return _Cut(kept, order, ts, ts < iw_el[order], new, key, keys)


def engine_session_elements(scan: ScriptColumns, strategy: WindowingStrategy) -> np.ndarray:
    """Per element: whether it is kept and in a session this path refuses, for the
    engine: one with late data (a kept row with its timestamp below the input watermark
    at its arrival) or, under early count firings, one not a single part at every event;
    all False where the path refuses the script for another reason."""
    out = np.zeros(scan.ts.size, bool)
    cut = _cut(scan, strategy)
    if isinstance(cut, Refusal) or not cut.order.size:
        return out
    sess = np.cumsum(cut.new) - 1
    engine = np.zeros(int(sess[-1]) + 1, bool)
    engine[sess[cut.late]] = True
    counts = session_counts(strategy)
    if counts is not None and counts.early:
        rows = _session_rows(scan, strategy, late_ok=True)
        if not isinstance(rows, Refusal):
            engine |= _parts(rows, strategy.window_fn.gap) > 1  # type: ignore[attr-defined]
    out[cut.order] = engine[sess]
    return out


def _parts(rows: _SessionRows, gap: int) -> np.ndarray:
    """Per session: how many fresh parts it has (1: one part at every event)."""
    first, _, fresh = _fresh_parts(rows, gap)
    return np.bincount(rows.sess[first[fresh]], minlength=rows.s_first.size)


def _session_rows(
    scan: ScriptColumns,
    strategy: WindowingStrategy,
    late_ok: bool = False,
    coded: _Coded | None = None,
) -> _SessionRows | Refusal:
    """The sessions of the kept rows, or the refusal (late data among them, unless
    ``late_ok``; ``coded``: the key codes, when known)."""
    cut = _cut(scan, strategy, coded)
    if isinstance(cut, Refusal):
        return cut
    if not late_ok and np.any(cut.late):
        return Refusal.LATE_SESSION_DATA
    gap = strategy.window_fn.gap  # type: ignore[attr-defined]
    kept, order, ts, new, key = cut.kept, cut.order, cut.ts, cut.new, cut.key
    s_first = np.flatnonzero(new)
    s_last = _run_ends(s_first, ts.size) - 1
    s_end = ts[s_last] + gap
    s_fire = np.searchsorted(scan.iw_after, s_end, side="left")
    if np.any(s_fire >= scan.iw_after.size):
        return Refusal.NEVER_FIRES
    sess = np.cumsum(new) - 1
    by_arrival = _by_arrival(sess, order, n_el := scan.ts.size)
    return _SessionRows(
        ts, scan.element_event[order], order, sess, by_arrival,
        _session_offsets(ts, sess, s_first, gap), s_first, ts[s_first], s_end, s_fire,
        key[s_first], cut.keys, scan.value, n_el - kept.size,
    )  # fmt: skip


def _by_arrival(sess: np.ndarray, order: np.ndarray, n_el: int) -> np.ndarray:
    """The rows by (session, arrival), given each row's session (ascending) and element
    (``order``, below ``n_el``): one stable sort of ``(session, element)`` as one int64,
    nearly sorted already (a session's rows by timestamp come nearly by arrival)."""
    if sess.size and int(sess[-1]) + 1 < (1 << 62) // max(n_el, 1):
        return np.argsort(sess * n_el + order, kind="stable")
    return np.lexsort((order, sess))


def _session_offsets(
    ts: np.ndarray, sess: np.ndarray, s_first: np.ndarray, gap: int
) -> np.ndarray | None:
    """Per session, where it starts on one line on which sessions follow each other more
    than ``gap`` apart (a row sits at its session's offset plus its time since the
    session's start), so that one ``np.searchsorted`` finds ranges within a session;
    None if that line would not fit in int64."""
    span = ts[_run_ends(s_first, ts.size) - 1] - ts[s_first]
    if float(span.astype(np.float64).sum()) + float(s_first.size) * (gap + 1) >= 2.0**62:
        return None
    base = np.zeros(s_first.size, np.int64)
    if base.size > 1:
        np.cumsum(span[:-1] + (gap + 1), out=base[1:])
    return base


def _run_ends(first: np.ndarray, n: int) -> np.ndarray:
    """One past the last row of each run, given each run's first row (of ``n`` rows)."""
    return np.append(first[1:], n) if first.size else first


# ----------------------------------------------------------------------------- holds


def _holds(
    rows: _SessionRows, policy: TimestampCombiner, gap: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | Refusal:
    """The holds as event intervals ``[lo, hi]`` with their value (hold - 1 µs): each from
    its batch's event until the event before its session fires."""
    until = rows.s_fire[rows.sess] - 1
    if policy is TimestampCombiner.OUTPUT_AT_EOW:
        first, last, fresh = _fresh_parts(rows, gap)
        hold = rows.ts[last][fresh] + (gap - 1)  # the part's max_timestamp
        return rows.event[first][fresh], until[first][fresh], hold - 1
    # in (session, arrival) order, so that a session's holds come by rising event
    by_arrival = rows.by_arrival
    sess, event, ts = rows.sess[by_arrival], rows.event[by_arrival], rows.ts[by_arrival]
    if policy is TimestampCombiner.OUTPUT_AT_LATEST:
        first, last, _ = _fresh_parts(rows, gap)
        batch = _run_starts(sess, event)
        if np.count_nonzero(batch) != first.size:
            return Refusal.SPLIT_SESSION_BATCH  # a batch in two parts: one hold or two?
        starts = np.flatnonzero(batch)
        sess, event = sess[starts], event[starts]
        ts = np.maximum.reduceat(ts, starts) if ts.size else ts
    keep = _records(sess, ts)
    return event[keep], rows.s_fire[sess[keep]] - 1, ts[keep] - 1


def _fresh_parts(rows: _SessionRows, gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The parts one event's rows form within a session (runs of them less than ``gap``
    apart): each part's first and last row, and whether it is *fresh* (no earlier row's
    window overlaps it, so it is a new window when it arrives)."""
    by_event = _by_session_event(rows)
    sess, event, ts = rows.sess[by_event], rows.event[by_event], rows.ts[by_event]
    new = _run_starts(sess, event)
    if ts.size:
        new[1:] |= ts[1:] >= ts[:-1] + gap
    starts = np.flatnonzero(new)
    first = by_event[starts]
    last = by_event[_run_ends(starts, ts.size) - 1]
    # the rows whose windows overlap the part (start, end): timestamps in (start - gap, end)
    part_sess = rows.sess[first]
    if rows.s_base is None:
        lo = _search(rows.sess, rows.ts + gap, part_sess, rows.ts[first], "right")
        hi = _search(rows.sess, rows.ts, part_sess, rows.ts[last] + gap, "left")
    else:  # per row: ascending queries, which numpy's search resumes from the last answer
        line = rows.s_base[rows.sess] + (rows.ts - rows.s_start[rows.sess])  # ascending
        lo = np.searchsorted(line, line - gap, side="right")[first]
        hi = np.searchsorted(line, line + gap, side="left")[last]
    fresh = range_min(rows.event, lo, hi) >= rows.event[first]
    return first, last, fresh


def _by_session_event(rows: _SessionRows) -> np.ndarray:
    """The rows by (session, event, timestamp, arrival): a stable sort of the rows (by
    session, timestamp, arrival) on (session, event), nearly sorted already."""
    n_ev = int(rows.event.max()) + 1 if rows.event.size else 1
    if (int(rows.sess[-1]) + 1 if rows.sess.size else 1) * n_ev >= 1 << 62:
        return np.lexsort((rows.ts, rows.event, rows.sess))
    return np.argsort(rows.sess * n_ev + rows.event, kind="stable")


def _search(
    seg: np.ndarray, vals: np.ndarray, q_seg: np.ndarray, q_vals: np.ndarray, side: str
) -> np.ndarray:
    """``np.searchsorted`` of ``(q_seg, q_vals)`` in the rows sorted by ``(seg, vals)``,
    pairs compared in order (both columns ascending within a segment), as one lexsort."""
    n, m = seg.size, q_seg.size
    # on ties, "left" puts queries before rows, "right" after
    kind = np.concatenate([np.ones(n, np.int8), np.zeros(m, np.int8)])
    if side == "right":
        kind = 1 - kind
    order = np.lexsort((kind, np.concatenate([vals, q_vals]), np.concatenate([seg, q_seg])))
    is_row = order < n
    rows_before: np.ndarray = np.cumsum(is_row) - is_row
    out = np.empty(m, np.int64)
    out[order[~is_row] - n] = rows_before[~is_row]
    return out


# ----------------------------------------------------------------------------- result


class _PartPanes(NamedTuple):
    """A chunk's panes, in no order: per pane its key code and columns (``sess`` first,
    in the order of :func:`_part_panes`); ``values``: the chunk's rows by (session,
    arrival), which ``lo``/``hi`` index."""

    key: np.ndarray
    columns: list[np.ndarray]
    values: np.ndarray
    n_expired: int


def _part_panes(
    rows: _SessionRows,
    strategy: WindowingStrategy,
    policy: TimestampCombiner,
    early: EarlyPanes | None,
) -> _PartPanes:
    """One ON_TIME pane per session at its firing event, and the ``early`` panes, if any.
    A pane's values are its rows in arrival order."""
    n_s = rows.s_first.size
    if policy is TimestampCombiner.OUTPUT_AT_EARLIEST or (
        policy is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
    ):
        stamp = rows.ts[rows.s_first]  # the session's smallest timestamp
    elif policy is TimestampCombiner.OUTPUT_AT_LATEST:
        stamp = rows.ts[_run_ends(rows.s_first, rows.ts.size) - 1]
    else:
        stamp = rows.s_end - 1
    s_hi = _run_ends(rows.s_first, rows.ts.size)
    trigger = strategy.trigger
    last = isinstance(trigger, AfterWatermark) and trigger.late is None
    cols = [
        np.arange(n_s),  # session
        rows.s_fire,
        rows.s_start,
        rows.s_end,
        stamp,
        np.zeros(n_s, np.int64) if early is None else early.on_index,
        rows.s_first if early is None else early.on_lo,
        s_hi,
        np.full(n_s, _ON_TIME, np.int8),
        np.zeros(n_s, np.int64),  # non-speculative index
        np.full(n_s, last),
    ]
    if early is not None and early.holds is not None:  # Repeatedly: no ON_TIME pane
        cols = [c[:0] for c in cols]
    if early is not None and early.sess.size:
        m = early.sess.size
        extra = [*early[:8], np.full(m, _EARLY, np.int8), np.full(m, -1), np.zeros(m, bool)]
        cols = [np.concatenate([a, b]) for a, b in zip(cols, extra, strict=True)]
    return _PartPanes(
        rows.s_key[cols[0]], cols, rows.values[rows.element[rows.by_arrival]], rows.n_expired
    )


def _result(
    scan: ScriptColumns,
    parts: list[_PartPanes],
    keys: Keys,
    hold: np.ndarray,
    build: bool,
) -> ScriptResult:
    """The chunks' panes by event, then early before ON_TIME, then chunk and session in
    row order. ``hold``: the state hold after each event (µs)."""
    offsets = np.cumsum([0] + [p.values.size for p in parts[:-1]])
    cols = [_joined([p.columns[i] for p in parts]) for i in range(1, len(parts[0].columns))]
    fire, start, end, stamp, index, lo, hi, timing, nonspec, is_last = cols
    if len(parts) > 1:
        sizes = [p.key.size for p in parts]
        lo, hi = lo + np.repeat(offsets, sizes), hi + np.repeat(offsets, sizes)
    order = np.argsort(fire * 2 + (timing == _ON_TIME), kind="stable")
    pane_columns = PaneColumns(
        take_keys(keys, _joined([p.key for p in parts])[order]),
        start[order],
        end[order],
        stamp[order],
        timing[order],
        index[order],
        nonspec[order],
        is_last[order],
        lo[order],
        hi[order],
        _joined([p.values for p in parts]),
    )
    output = np.minimum(scan.iw_after, hold)
    return ScriptResult(
        pane_columns.lazy() if build else [],
        fire[order],
        scan.pt_after,
        scan.iw_after,
        output,
        {"expired": sum(p.n_expired for p in parts), "closed": 0},
        0,
        bool(output[-1] < MAX_TIMESTAMP),  # (held for ever by a session never fired)
        0,
        state_hold=hold,
        pane_columns=pane_columns,
    )
