"""The vectorised percentile watermark: the whole curve of a trace in one sweep (µs).

:func:`percentile_curve` / :func:`percentile_details` evaluate ``W_p`` (definition in
:mod:`theory.watermarks.percentile`) at every activation and completion time of an
element with ``completion > activation`` and every change time of the fallback. They
sort with numpy and then run one sweep over the 2n events with a cursor on a rank-space
bitmap (:func:`_sweep`; at the source level, activation = event time, it starts
prefilled and runs over the completions and the activations that move the query). The
result equals the incremental :class:`~theory.watermarks.percentile.PercentileWatermark`
and, for ``p = 1``, :func:`~theory.watermarks.holds.inflight_min` with the fallback where
nothing is active. :func:`reference_percentile_values` is the naive oracle the tests
and benchmarks compare against.

This is a measured hot path (``bench/percentile.py``; figures in ``bench/RESULTS.md``):
the sweep's loop body is written for CPython's speed, and the arrays it builds are
freed (``del``) as soon as they are spent, since first touches of fresh memory
dominate on some VMs.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import stable_order
from theory.columns import time_column
from theory.series import StepSeries
from theory.watermarks.latch import latch_estimates
from theory.watermarks.percentile import percentile_input

__all__ = [
    "THIN_AT_MOST",
    "PercentileCurve",
    "percentile_curve",
    "percentile_details",
    "reference_percentile_values",
]

#: :func:`percentile_details` sweeps the thinned source-level stream (:func:`_thin`) when
#: it keeps at most this fraction of the events (else the gathers cost more than the
#: skipped events: about 12 ns an event against 50 ns a skipped activation).
THIN_AT_MOST = 0.8


# --------------------------------------------------------------------------- the sweep


def _sweep(
    events: Iterable[int], queries: Iterable[int], size: int, *, prefilled: bool = False
) -> tuple[array[int], array[int]]:
    """Order statistics over a stream of activations and completions of ranks.

    ``events[i] >= 0`` activates rank ``events[i]``, ``events[i] < 0`` completes rank
    ``~events[i]`` (ranks are distinct, in ``[0, size)``, ordered like the event times).
    After event ``i``, if ``queries[i] >= 0``, the answer is the rank of the active element
    at 0-based position ``queries[i]``. The answers come back as their change points, two
    int64 arrays ``(at, rank)``: the answer to a query at event ``i`` is ``rank[j]`` for
    the last ``at[j] <= i``; ``at[0] = -1`` and ``rank[0] = 0`` (see :func:`_answers`).
    A change point may repeat the previous rank, and may sit at an event without a query.

    State: a bytearray ``present`` over rank space, a cursor rank ``c`` and ``below``, the
    number of present ranks below ``c``. The cursor always stands on a present rank (-1
    while nothing is present): when its own rank completes it steps to the next present
    rank at once. So an update above the cursor changes nothing, one below shifts
    ``below`` by one, and a query whose target equals ``below`` is answered by the cursor
    as it stands: most events cost a compare. Otherwise the cursor moves to the next or
    previous present rank until ``below`` is the target, with ``bytearray.find`` /
    ``rfind`` (C ``memchr`` scans). The target and ``below`` change by at most 2 per
    event, so the Python work is O(1) per event; the C scans cost the number of inactive
    ranks stepped over (small when the active set is dense around the percentile; a
    percentile jumping back and forth between two distant clusters of active values
    rescans the gap each time).

    ``prefilled``: every rank starts present. Valid when the ranks activate in increasing
    order (source level: activation = event time): the ranks not yet activated are all
    above every active one, and a cursor at an active position never stops on them.
    Activations are then no-ops, so the stream may leave out those that do not change
    the query (see :func:`_thin`).
    """
    present = bytearray(b"\x01") * size if prefilled else bytearray(size)
    find = present.find
    rfind = present.rfind
    c = 0 if prefilled else -1
    below = 0
    at = array("q", [-1])
    rank = array("q", [0])
    at_append = at.append
    rank_append = rank.append
    i = -1
    for x, k in zip(events, queries, strict=True):
        i += 1
        if x >= 0:
            present[x] = 1
            if x < c:  # below the cursor (never when prefilled)
                below += 1
                if k < 0:  # no query here; the next one moves the cursor
                    continue
            elif c < 0:  # the first active rank: the cursor stands on it
                c = x
            elif k == below or k < 0:  # above the cursor: only the query may move it
                continue
        else:
            x = ~x
            present[x] = 0
            if x > c:  # above the cursor: only the query may move it
                if k == below or k < 0:
                    continue
            elif x < c:  # below: one fewer present rank under the cursor
                below -= 1
                if k < 0:
                    continue
            else:  # the cursor's own rank: step to the next present rank (the same
                # position), or, at the top, to the previous one (-1 if none is left)
                y = find(1, c)
                if y >= 0:
                    c = y
                else:
                    c = rfind(1, 0, c)
                    below = below - 1 if c >= 0 else 0
                # recorded even without a query: later queries may not move it again
        if k >= 0:
            while below < k:
                c = find(1, c + 1)
                below += 1
            while below > k:
                c = rfind(1, 0, c)
                below -= 1
        at_append(i)
        rank_append(c)
    return at, rank


def _thin(events: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For :func:`_sweep` with ``prefilled``: the indices of the events that matter, ascending.
    Every completion, and every event whose query target differs from the previous
    event's. The others are activations (no-ops when prefilled) asking what the event
    before them asked of the same set: the cursor answers them as it stands."""
    keep = events < 0
    keep[1:] |= queries[1:] != queries[:-1]
    keep[0] = True
    return np.flatnonzero(keep)


def _answers(
    changes: tuple[array[int], array[int]],
    which: np.ndarray,
    asked: np.ndarray | None,
    kept: np.ndarray | None = None,
) -> np.ndarray:
    """The answer of each query from :func:`_sweep`'s change points: at every event
    (``asked`` None) or at the events where the boolean mask ``asked`` holds. ``kept``:
    the sweep ran over these event indices only (:func:`_thin`); they are mapped back.
    ``which``: an integer array with one slot per event, overwritten (reusing a spent
    array spares the first touch of fresh memory, which dominates on some VMs)."""
    at = np.frombuffer(changes[0], dtype=np.int64)[1:]
    rank = np.frombuffer(changes[1], dtype=np.int64)
    which.fill(0)
    which[at if kept is None else kept[at]] = 1
    np.cumsum(which, out=which)
    return rank[which if asked is None else which[asked]]


# --------------------------------------------------------------------------- events


def _event_stream(
    e: np.ndarray, a: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 2m events in time order: their times, their codes for :func:`_sweep` (``r``
    activates value rank ``r``, ``~r`` completes it; activations first at equal times),
    and the event times sorted (``values[r]`` has rank ``r``). Sorted columns skip their
    sort, and ``activation is event_time`` (source level) reuses the value order. The two
    sorted streams are merged by a stable argsort of their concatenation: timsort finds
    the two runs and merges them in linear time (binary searches cost more)."""
    m = e.size
    itype = np.int32 if 2 * m < 1 << 31 else np.int64  # half the memory traffic
    idx: np.ndarray = np.arange(m, dtype=itype)
    by_value = stable_order(e)
    rank: np.ndarray
    if by_value is None:
        values, rank = e, idx
    else:
        values = e[by_value]
        rank = np.empty(m, dtype=itype)
        rank[by_value] = idx
        del by_value
    if a is e:
        a_s, a_code = values, idx
    else:
        order_a = stable_order(a)
        a_s, a_code = (a, rank) if order_a is None else (a[order_a], rank[order_a])
    order_c = stable_order(c)
    c_s = c if order_c is None else c[order_c]
    c_code = ~rank if order_c is None else ~rank[order_c]
    ts = np.concatenate((a_s, c_s))
    merge = np.argsort(ts, kind="stable")  # activations first at equal times
    ev = np.concatenate((a_code, c_code))[merge]
    return ts[merge], ev, values


@dataclass(frozen=True)
class PercentileCurve:
    """The evaluation of ``W_p`` over a trace (module docstring).

    ``times``: the evaluation grid (sorted, µs); ``raw``: the computed value at each (the
    order statistic, or the fallback where nothing is active); ``active``: ``n(t)``;
    ``latched``: the running maximum at each grid time; ``curve``: the latched watermark
    as a compressed :class:`StepSeries`; ``regressions``: as defined in
    :mod:`theory.watermarks.percentile`.
    """

    times: np.ndarray
    raw: np.ndarray
    active: np.ndarray
    latched: np.ndarray
    curve: StepSeries
    regressions: int


def percentile_details(
    event_time: ArrayLike,
    activation: ArrayLike,
    completion: ArrayLike,
    p: float,
    fallback: StepSeries | None = None,
) -> PercentileCurve:
    """``W_p`` at every change time of a trace (see :class:`PercentileCurve`).

    Rows may come in any order. Raises ``ValueError`` for ``p`` outside (0, 1], a row with
    ``completion < activation`` (naming the row), or columns that are not 1-d µs, and
    ``TypeError`` for a ``p``, a column or a ``fallback`` of the wrong type.
    Cost: O(n log n) numpy sorting, then :func:`_sweep` over the 2n events.
    """
    p_, e, a, c, fb = percentile_input(event_time, activation, completion, p, fallback)
    q = 1.0 - p_
    e, a, c = _live(e, a, c)
    if e.size == 0:
        times, active, raw = fb.times, np.zeros(fb.times.size, dtype=np.int64), fb.values.copy()
    else:
        ev_times, n_ev, raw_ev = _evaluate_events(e, a, c, q, fb.initial)
        times, active, raw = _with_fallback(ev_times, n_ev, raw_ev, fb)
    return _latched_curve(times, raw, active, fb.initial)


def _live(
    e: np.ndarray, a: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows that are ever active (``completion > activation``); ``activation is
    event_time`` (source level) stays so."""
    live = c > a
    if bool(np.all(live)):
        return e, a, c
    same = a is e
    e, c = e[live], c[live]
    return e, (e if same else a[live]), c


def _evaluate_events(
    e: np.ndarray, a: np.ndarray, c: np.ndarray, q: float, initial: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At each distinct activation or completion time: the time, ``n(t)``, and the order
    statistic of rank ``floor((n - 1) q)`` (``initial`` where nothing is active)."""
    ts, ev, values = _event_stream(e, a, c)
    queries, ev_times, n_ev, asked = _queries(ts, ev, q)
    ranks = _ranks(ev, queries, asked, e.size, prefilled=a is e)
    del ev, queries, asked
    full = n_ev > 0
    if bool(full.all()):
        return ev_times, n_ev, values[ranks]
    raw_ev = np.full(n_ev.size, initial, dtype=np.int64)
    raw_ev[full] = values[ranks]
    return ev_times, n_ev, raw_ev


def _queries(
    ts: np.ndarray, ev: np.ndarray, q: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """A query after every event: the rank ``floor((n - 1) q)`` by table, -1 when nothing
    is active. And what is read back: the distinct times, ``n(t)`` at each, and the mask
    of the events answered there (None: every event).

    Only the last event at each time is read back; a query inside a run of ties moves the
    cursor no further than the run's last query would (and needs no index arrays, which
    cost more than the few extra queries)."""
    step = (ev >= 0).view(np.int8) * np.int8(2)
    step -= 1
    count = np.cumsum(step, dtype=ev.dtype)  # n(t) after each event
    del step
    table = np.floor(np.arange(-1, int(count.max()), dtype=np.float64) * q)
    table[0] = -1
    queries = table.astype(ev.dtype)[count]
    del table
    last = np.empty(ts.size, dtype=bool)  # the last event at its time
    last[-1] = True
    np.not_equal(ts[1:], ts[:-1], out=last[:-1])
    distinct = bool(last.all())  # each event at its own time: no compressions
    n_ev = count if distinct else count[last]
    ev_times = ts if distinct else ts[last]
    del count
    asked: np.ndarray | None = None  # events read back: last at a time, n > 0
    if not distinct:
        asked = last & (queries >= 0)
    elif not bool((n_ev > 0).all()):
        asked = n_ev > 0
    return queries, ev_times, n_ev, asked


def _ranks(
    ev: np.ndarray, queries: np.ndarray, asked: np.ndarray | None, m: int, *, prefilled: bool
) -> np.ndarray:
    """The value rank answering each query read back (:func:`_sweep`, :func:`_answers`).

    ``prefilled`` (source level: ranks activate in increasing order): the sweep starts
    with every rank present and may leave out the activations that change no query (near
    p = 1 about half the events go, near p = 0.5 a quarter), when enough go. Memoryviews
    iterate as Python ints without materialising 2m-element lists."""
    if not prefilled:
        return _answers(_sweep(ev.data, queries.data, m), queries, asked)
    thinned = _thin(ev, queries)
    kept = thinned if thinned.size <= THIN_AT_MOST * ev.size else None
    del thinned
    sweep_ev, sweep_q = (ev, queries) if kept is None else (ev[kept], queries[kept])
    changes = _sweep(sweep_ev.data, sweep_q.data, m, prefilled=True)
    del sweep_ev, sweep_q
    return _answers(changes, queries, asked, kept)


def _with_fallback(
    ev_times: np.ndarray, n_ev: np.ndarray, raw_ev: np.ndarray, fb: StepSeries
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The evaluation grid with the fallback's change times added: times, ``n(t)`` and
    the computed value (the fallback where nothing is active)."""
    if not fb.times.size:
        return ev_times, n_ev, raw_ev
    times = np.union1d(ev_times, fb.times)
    at = np.searchsorted(ev_times, times, side="right") - 1
    active = np.where(at >= 0, n_ev[np.maximum(at, 0)], 0)
    raw = np.where(active > 0, raw_ev[np.maximum(at, 0)], fb.at(times))
    return times, active, raw


def _latched_curve(
    times: np.ndarray, raw: np.ndarray, active: np.ndarray, initial: int
) -> PercentileCurve:
    """Latch the computed values (:func:`~theory.watermarks.latch.latch_estimates`) and
    keep the changes as the curve."""
    latched, regressions = latch_estimates(raw, active > 0, initial)
    keep = np.empty(latched.size, dtype=bool)
    if latched.size:
        keep[0] = latched[0] != initial
        np.not_equal(latched[1:], latched[:-1], out=keep[1:])
    curve = StepSeries(times[keep], latched[keep], initial)
    return PercentileCurve(times, raw, active, latched, curve, regressions)


def percentile_curve(
    event_time: ArrayLike,
    activation: ArrayLike,
    completion: ArrayLike,
    p: float,
    fallback: StepSeries | None = None,
) -> StepSeries:
    """The latched ``W_p`` of a trace as a :class:`StepSeries` (:func:`percentile_details`)."""
    return percentile_details(event_time, activation, completion, p, fallback).curve


def reference_percentile_values(
    event_time: ArrayLike,
    activation: ArrayLike,
    completion: ArrayLike,
    p: float,
    times: ArrayLike,
    fallback: StepSeries | None = None,
) -> np.ndarray:
    """Naive oracle: ``np.quantile(A(t), 1 - p, method="lower")`` (or the fallback) at each
    of ``times``, by a full scan per time: O(n) each. For tests and benchmarks."""
    p_, e, a, c, fb = percentile_input(event_time, activation, completion, p, fallback)
    q = 1.0 - p_
    ts = time_column(times, "times")
    out = np.empty(ts.size, dtype=np.int64)
    for i, t in enumerate(ts.tolist()):
        act = e[(a <= t) & (t < c)]
        out[i] = int(np.quantile(act, q, method="lower")) if act.size else int(fb.at(t))
    return out

