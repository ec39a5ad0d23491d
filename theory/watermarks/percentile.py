"""Percentile watermarks (DESIGN.md "Percentile watermarks"): exact and sketched.

Definition (all times int µs):

- An element is *active* over the processing-time interval ``[activation, completion)``
  and has an event time. An element with ``completion == activation`` is never active;
  ``completion < activation`` is an error.
- ``A(t)`` is the multiset of event times of the elements with
  ``activation <= t < completion``, ``n(t) = |A(t)|``. A change at ``t`` is visible at
  ``t`` (as in :class:`~theory.series.StepSeries`).
- For ``p`` in (0, 1], the computed value is the order statistic of ``A(t)`` with 0-based
  rank ``k = floor((1 - p) * (n - 1))``, evaluated in float64 as ``(n - 1) * (1.0 - p)``.
  This is ``numpy.quantile(A, 1 - p, method="lower")``. ``p = 1`` gives ``k = 0``, the
  minimum: the ordinary watermark (the in-flight minimum of
   :func:`theory.watermarks.holds.inflight_min`).
  A smaller ``p`` is a larger quantile of the event times: more aggressive.
- When ``A(t)`` is empty the computed value is the *fallback*: the stage's input
  watermark (a :class:`StepSeries`). Without one it is ``MIN_TIMESTAMP`` (no information),
  so the latched watermark holds where it is.
- The watermark is latched monotonic: ``W_p(t) = max(W_p(t-), computed(t))``, starting
  from ``initial`` (the fallback's initial value, ``MIN_TIMESTAMP`` by default).
- A *regression* is an evaluation whose set is non-empty and whose order statistic is
  below the latched value and differs from the previous evaluation's computed value (so
  re-evaluating an unchanged set does not count twice). Fallback values never count.

Three forms:

- :class:`PercentileWatermark`: exact and incremental, an :class:`OrderStatisticList`
  (O(log n) updates, O(1) amortised percentile lookups).
- :func:`percentile_curve` / :func:`percentile_details`: the whole curve of a trace,
  evaluated at every activation and completion time of an element with
  ``completion > activation`` and every change time of the fallback. It sorts with numpy
  and then runs one sweep over the 2n events with a cursor on a rank-space bitmap
  (see :func:`_sweep`; at the source level, activation = event time, it starts
  prefilled and runs over the completions and the activations that move the query).
  It equals the incremental form and, for ``p = 1``, :func:`~theory.watermarks.holds.inflight_min`
  with the fallback where nothing is active.
- :class:`SketchPercentileWatermark`: bounded memory, with KLL sketches
  (``datasketches``) for elements that stay active a long time; see its docstring for
  the rank-error bound.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import check_duration, check_timestamp, time_column
from theory.series import StepSeries
from theory.structures import OrderStatisticList
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, SECOND

__all__ = [
    "PercentileCurve",
    "PercentileWatermark",
    "SketchEvaluation",
    "SketchPercentileWatermark",
    "check_p",
    "percentile_curve",
    "percentile_details",
    "quantile_rank",
    "reference_percentile_values",
    "sketch_percentile_values",
]

#: Event times the sketch stores as float64 must be exact there: |t| <= 2**53 µs (±285 y).
SKETCH_LIMIT: Final[int] = 1 << 53
_NEVER: Final[int] = MAX_TIMESTAMP + 1  # after every valid processing time
#: :func:`percentile_details` sweeps the thinned source-level stream (:func:`_thin`) when
#: it keeps at most this fraction of the events (else the gathers cost more than the
#: skipped events: about 12 ns an event against 50 ns a skipped activation).
THIN_AT_MOST = 0.8


# --------------------------------------------------------------------------- convention


def check_p(p: object) -> float:
    """``p`` as a float in (0, 1]; ``ValueError`` naming ``p`` otherwise."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise ValueError(f"p must be a number in (0, 1], got {p!r}")
    v = float(p)
    if not 0.0 < v <= 1.0:  # also rejects NaN
        raise ValueError(f"p must be in (0, 1], got {p!r}")
    return v


def quantile_rank(n: int, p: float) -> int:
    """The 0-based rank ``floor((1 - p) * (n - 1))`` of ``W_p`` among ``n >= 1`` values."""
    if n < 1:
        raise ValueError(f"quantile_rank needs n >= 1, got {n}")
    return math.floor((n - 1) * (1.0 - check_p(p)))


def _latch_regressions(
    raw: np.ndarray, nonempty: np.ndarray, initial: int
) -> tuple[np.ndarray, int]:
    """Running max from ``initial``, and the regressions (module docstring) of ``raw``."""
    if raw.size == 0:
        return raw.astype(np.int64), 0
    latched = np.maximum(raw, np.int64(initial))
    np.maximum.accumulate(latched, out=latched)
    below = raw[1:] < latched[:-1]  # below the latched value before this evaluation
    below &= nonempty[1:]
    changed = raw[1:] != raw[:-1]
    changed |= ~nonempty[:-1]
    below &= changed
    first = bool(nonempty[0]) and int(raw[0]) < initial
    return latched, int(np.count_nonzero(below)) + first


# --------------------------------------------------------------------------- exact incremental


class PercentileWatermark:
    """Exact incremental ``W_p`` (module docstring), latched, with regressions counted.

    Elements are identified by event time (``complete(event_time)`` removes one active
    element with that event time) or by an ``item_id`` given at activation (then they must
    be completed by that id). The caller applies the updates of processing time ``t`` and
    then calls :meth:`current`, with the stage's input watermark at ``t`` as the fallback.
    Updates cost O(log n) (:class:`OrderStatisticList`); :meth:`current` is O(1) amortised
    while the rank moves by a few places between calls.
    """

    __slots__ = ("_by_id", "_id_values", "_last", "_p", "_q", "_set", "_value", "regressions")

    def __init__(self, p: float, *, initial: int = MIN_TIMESTAMP) -> None:
        self._p = check_p(p)
        self._q = 1.0 - self._p
        self._set = OrderStatisticList()
        self._by_id: dict[Hashable, int] = {}
        self._id_values: dict[int, int] = {}  # event time -> active elements with an id
        self._value = check_timestamp(initial, "initial")
        self._last: int | None = None
        self.regressions = 0

    @property
    def p(self) -> float:
        """The percentile in (0, 1]."""
        return self._p

    def __len__(self) -> int:
        """How many elements are active."""
        return len(self._set)

    @property
    def latched(self) -> int:
        """The latched watermark after the last :meth:`current` (µs)."""
        return self._value

    def activate(self, event_time: int, item_id: Hashable | None = None) -> None:
        """An element with ``event_time`` (µs) becomes active (optionally named)."""
        e = event_time
        if type(e) is not int or not MIN_TIMESTAMP <= e <= MAX_TIMESTAMP:
            e = check_timestamp(e, "event_time")
        if item_id is not None:
            if item_id in self._by_id:
                raise ValueError(f"item_id={item_id!r} is already active")
            self._by_id[item_id] = e
            self._id_values[e] = self._id_values.get(e, 0) + 1
        self._set.add(e)

    def complete(self, event_time: int | None = None, *, item_id: Hashable | None = None) -> None:
        """An active element completes: give its ``event_time`` or its ``item_id``.

        Raises ``ValueError`` (nothing changed) if no such element is active.
        """
        if item_id is None:
            e = event_time
            if type(e) is not int or not MIN_TIMESTAMP <= e <= MAX_TIMESTAMP:
                if e is None:
                    raise ValueError("complete() needs exactly one of event_time and item_id")
                e = check_timestamp(e, "event_time")
            if self._id_values and e in self._id_values:
                s = self._set
                if s.count_le(e) - s.count_lt(e) <= self._id_values[e]:
                    raise ValueError(
                        f"no anonymous active element has event_time={e}; "
                        "elements activated with an item_id complete by item_id"
                    )
            try:
                self._set.remove(e)
            except ValueError:
                raise ValueError(f"no active element has event_time={e}") from None
            return
        if event_time is not None:
            raise ValueError("complete() needs exactly one of event_time and item_id")
        e = self._by_id.get(item_id)
        if e is None:
            raise ValueError(f"item_id={item_id!r} is not active")
        del self._by_id[item_id]
        left = self._id_values[e] - 1
        if left:
            self._id_values[e] = left
        else:
            del self._id_values[e]
        self._set.remove(e)

    def computed(self) -> int | None:
        """The order statistic of the active set (not latched), or None when it is empty."""
        s = self._set
        n = len(s)
        if not n:
            return None
        return s.kth(int((n - 1) * self._q))

    def current(self, input_watermark: int | None = None) -> int:
        """Evaluate now: latch the order statistic (or ``input_watermark`` when nothing is
        active) and return the latched watermark (µs)."""
        s = self._set
        n = len(s)
        if n:
            v = s.kth(int((n - 1) * self._q))
            if v < self._value:
                if v != self._last:
                    self.regressions += 1
            else:
                self._value = v
            self._last = v
            return self._value
        self._last = None
        if input_watermark is not None:
            w = check_timestamp(input_watermark, "input_watermark")
            if w > self._value:
                self._value = w
        return self._value


# --------------------------------------------------------------------------- vectorised curve



def _elements(
    event_time: ArrayLike, activation: ArrayLike, completion: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated int64 columns; ``completion < activation`` raises naming the row."""
    e = time_column(event_time, "event_time")
    a = time_column(activation, "activation")
    c = time_column(completion, "completion")
    if not e.size == a.size == c.size:
        raise ValueError(
            f"event_time, activation and completion need one length, got "
            f"{e.size}, {a.size} and {c.size}"
        )
    bad = c < a
    if bool(np.any(bad)):
        i = int(np.argmax(bad))
        raise ValueError(
            f"row {i}: completion={int(c[i])} µs is before activation={int(a[i])} µs"
        )
    return e, a, c


def _fallback(fallback: StepSeries | None) -> StepSeries:
    if fallback is None:
        return StepSeries(np.zeros(0, np.int64), np.zeros(0, np.int64), MIN_TIMESTAMP)
    if not isinstance(fallback, StepSeries):
        raise ValueError(f"fallback must be a StepSeries or None, got {type(fallback).__name__}")
    return fallback


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


def _order(x: np.ndarray) -> np.ndarray | None:
    """A stable argsort of ``x``, or None when ``x`` is already sorted. (Stable is also
    the faster here: timsort profits from the partial order of trace columns.)"""
    if x.size < 2 or bool(np.all(x[1:] >= x[:-1])):
        return None
    return np.argsort(x, kind="stable")


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
    by_value = _order(e)
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
        order_a = _order(a)
        a_s, a_code = (a, rank) if order_a is None else (a[order_a], rank[order_a])
    order_c = _order(c)
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
    as a compressed :class:`StepSeries`; ``regressions``: as defined in the module
    docstring.
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
    ``completion < activation`` (naming the row), or columns that are not 1-d integer µs.
    Cost: O(n log n) numpy sorting, then :func:`_sweep` over the 2n events.
    """
    q = 1.0 - check_p(p)
    e, a, c = _elements(event_time, activation, completion)
    fb = _fallback(fallback)
    live = c > a
    if not bool(np.all(live)):
        same = a is e
        e, c = e[live], c[live]
        a = e if same else a[live]
    m = e.size
    if m == 0:
        times = fb.times
        raw = fb.values.copy()
        active = np.zeros(times.size, dtype=np.int64)
    else:
        ts, ev, values = _event_stream(e, a, c)
        step = (ev >= 0).view(np.int8) * np.int8(2)
        step -= 1
        count = np.cumsum(step, dtype=ev.dtype)  # n(t) after each event
        del step
        # a query after every event: k = floor((n - 1) q) by table, -1 when nothing is
        # active. Only the last event at each time is read back; a query inside a run of
        # ties moves the cursor no further than the run's last query would (and needs
        # no index arrays, which cost more than the few extra queries)
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
        full = n_ev > 0
        all_full = bool(full.all())
        asked: np.ndarray | None = None  # events read back: last at a time, n > 0
        if not (distinct and all_full):
            asked = full if distinct else last & (queries >= 0)
        del last
        # memoryviews iterate as Python ints without materialising 2m-element lists
        if a is e:
            # source level: ranks activate in increasing order, so the sweep starts
            # prefilled and may leave out the activations that change no query (near
            # p = 1 about half the events go, near p = 0.5 a quarter), when enough go
            thinned = _thin(ev, queries)
            kept = thinned if thinned.size <= THIN_AT_MOST * ts.size else None
            del thinned
            sweep_ev, sweep_q = (ev, queries) if kept is None else (ev[kept], queries[kept])
            changes = _sweep(sweep_ev.data, sweep_q.data, m, prefilled=True)
            del sweep_ev, sweep_q
            ranks = _answers(changes, queries, asked, kept)
        else:
            ranks = _answers(_sweep(ev.data, queries.data, m), queries, asked)
        del queries, asked
        if all_full:
            raw_ev = values[ranks]
        else:
            raw_ev = np.full(n_ev.size, fb.initial, dtype=np.int64)
            raw_ev[full] = values[ranks]
        if fb.times.size:
            times = np.union1d(ev_times, fb.times)
            at = np.searchsorted(ev_times, times, side="right") - 1
            active = np.where(at >= 0, n_ev[np.maximum(at, 0)], 0)
            raw = np.where(active > 0, raw_ev[np.maximum(at, 0)], fb.at(times))
        else:
            times, active, raw = ev_times, n_ev, raw_ev
    nonempty = active > 0
    latched, regressions = _latch_regressions(raw, nonempty, fb.initial)
    keep = np.empty(latched.size, dtype=bool)
    if latched.size:
        keep[0] = latched[0] != fb.initial
        np.not_equal(latched[1:], latched[:-1], out=keep[1:])
    curve = StepSeries(times[keep], latched[keep], fb.initial)
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
    q = 1.0 - check_p(p)
    e, a, c = _elements(event_time, activation, completion)
    fb = _fallback(fallback)
    ts = time_column(times, "times")
    out = np.empty(ts.size, dtype=np.int64)
    for i, t in enumerate(ts.tolist()):
        act = e[(a <= t) & (t < c)]
        out[i] = int(np.quantile(act, q, method="lower")) if act.size else int(fb.at(t))
    return out


# --------------------------------------------------------------------------- sketch


class _Frozen:
    """Sketched elements of the activation buckets ``lo_id..hi_id`` (processing time)."""

    __slots__ = ("active", "hi_id", "ins", "lo_id", "out")

    def __init__(self, lo_id: int, hi_id: int, ins: Any) -> None:
        self.lo_id = lo_id
        self.hi_id = hi_id
        self.ins = ins  # KLL of event times inserted into this bucket after it froze
        self.out: Any = None  # KLL of event times completed after it froze (lazy)
        self.active = int(ins.n)


class SketchPercentileWatermark:
    """Bounded-memory ``W_p``: exact while it fits, KLL sketches for the oldest elements.

    Elements are bucketed by activation time (``bucket_width`` µs of processing time).
    A bucket starts *young*: its active event times are kept exactly (a counter per
    bucket plus one :class:`OrderStatisticList` for all young elements), and completions
    remove them exactly. Whenever the young elements exceed ``exact_capacity`` the oldest
    young bucket *freezes* (and, if ``exact_age`` is set, every bucket that ended
    ``exact_age`` µs ago): its active event times go into a KLL sketch ``ins``
    (``datasketches.kll_doubles_sketch(k)``) and later completions of its elements into a
    second sketch ``out``; ``complete`` names the activation time to find the bucket. A
    bucket is dropped, exactly, once all its elements completed. Beyond ``max_sketches``
    frozen buckets the adjacent pair with the fewest sketched elements is merged (KLL
    merge). Memory is therefore at most ``exact_capacity`` exact values plus
    ``2 * max_sketches`` KLL sketches of O(k log(m / k)) retained items each (``m``: the
    elements the sketch saw), whatever the trace length.

    Query: ``n`` is known exactly; the estimated count of active event times ``<= y`` is
    ``exact(y) + sum_b (ins_b.rank(y) * ins_b.n - out_b.rank(y) * out_b.n)``, and integer
    bisection returns the smallest ``y`` at which it reaches ``k + 1`` with
    ``k = floor((1 - p)(n - 1))``.

    **Rank-error bound.** Let ``eps = kll_doubles_sketch.get_normalized_rank_error(k,
    False)`` (1.33 % for k = 200: datasketches' fit to the 99th percentile of the maximum
    rank error over all ranks of one sketch). A sketch ``s`` in estimation mode misstates
    its count at any ``y`` by at most ``eps * s.n``, and by nothing when ``y`` is below its
    minimum or at/above its maximum (KLL keeps both exactly); other sketches are exact.
    With ``E = sum of eps * s.n over the sketches in estimation mode whose [min, max]
    contains the answer v`` (:attr:`error_bound`, set by each evaluation), the estimate
    is within ``E`` of the true count at ``v`` and ``v - 1``, so the returned ``v``
    satisfies ``#{a in A : a < v} <= k + E`` and ``#{a in A : a <= v} >= k + 1 - E``:
    ``sorted(A)[max(0, k - floor(E))] <= v <= sorted(A)[min(n - 1, k + floor(E))]``, with
    the confidence of the sketches (99 % each). ``E = 0``, an exact answer, while nothing
    is sketched. ``E`` scales with the *sketched* elements of the live frozen buckets
    (completed ones included), not with ``n``: a straggler keeps its whole bucket's mass
    in ``E``. Size ``exact_capacity`` above the usual active set so that only backlogs
    are sketched.

    All updates carry a processing time ``at`` that must not decrease (``ValueError``
    naming it otherwise); the sketch needs ``|event_time| <= 2**53`` µs (float64-exact).
    """

    def __init__(
        self,
        p: float,
        *,
        k: int = 200,
        bucket_width: int = SECOND,
        exact_age: int | None = None,
        exact_capacity: int = 100_000,
        max_sketches: int = 64,
        initial: int = MIN_TIMESTAMP,
    ) -> None:
        from datasketches import kll_doubles_sketch

        self._kll = kll_doubles_sketch
        self._p = check_p(p)
        self._q = 1.0 - self._p
        if isinstance(k, bool) or not isinstance(k, int) or not 8 <= k <= 65535:
            raise ValueError(f"k must be an int in [8, 65535], got {k!r}")
        self._k = k
        self._eps = float(kll_doubles_sketch.get_normalized_rank_error(k, False))
        self._width = check_duration(bucket_width, "bucket_width", allow_zero=False)
        self._exact_age = None if exact_age is None else check_duration(exact_age, "exact_age")
        if isinstance(exact_capacity, bool) or not isinstance(exact_capacity, int):
            raise ValueError(f"exact_capacity must be an int >= 0, got {exact_capacity!r}")
        if exact_capacity < 0:
            raise ValueError(f"exact_capacity must be >= 0, got {exact_capacity}")
        self._capacity = exact_capacity
        if isinstance(max_sketches, bool) or not isinstance(max_sketches, int):
            raise ValueError(f"max_sketches must be an int >= 1, got {max_sketches!r}")
        if max_sketches < 1:
            raise ValueError(f"max_sketches must be >= 1, got {max_sketches}")
        self._max_sketches = max_sketches
        self._value = check_timestamp(initial, "initial")
        self._last: int | None = None
        self.regressions = 0
        self.error_bound = 0.0
        self._clock: int | None = None
        self._exact = OrderStatisticList()
        self._young: dict[int, dict[int, int]] = {}  # bucket id -> event time -> count
        self._young_n: dict[int, int] = {}  # bucket id -> active elements
        self._next_freeze: int = _NEVER
        self._frozen: list[_Frozen] = []
        self._frozen_lo: list[int] = []  # lo_id of each frozen bucket, for bisect
        self._frozen_active = 0

    # ------------------------------------------------------------------ state

    @property
    def p(self) -> float:
        """The percentile in (0, 1]."""
        return self._p

    def __len__(self) -> int:
        """How many elements are active (exact count)."""
        return len(self._exact) + self._frozen_active

    @property
    def latched(self) -> int:
        """The latched watermark after the last :meth:`current` (µs)."""
        return self._value

    @property
    def sketches(self) -> int:
        """How many frozen (sketched) buckets are live."""
        return len(self._frozen)

    @property
    def exact_size(self) -> int:
        """How many active elements are held exactly."""
        return len(self._exact)

    def memory_bytes(self) -> int:
        """Approximate footprint: serialized sketch sizes plus ~100 B per exact value."""
        total = 100 * len(self._exact)
        for f in self._frozen:
            total += len(f.ins.serialize())
            if f.out is not None:
                total += len(f.out.serialize())
        return total

    def rank_error_bound(self, value: int | None = None) -> float:
        """``E`` of the class docstring: for the answer ``value``, or for any value."""
        e = 0.0
        fv = None if value is None else float(value)
        for f in self._frozen:
            ins = f.ins
            if fv is not None and not ins.get_min_value() <= fv <= ins.get_max_value():
                continue  # ranks at fv and fv - 1 are exact: 0 below the min, n at the max
            if ins.is_estimation_mode():
                e += self._eps * ins.n
            if f.out is not None and f.out.is_estimation_mode():
                e += self._eps * f.out.n
        return e

    # ------------------------------------------------------------------ updates

    def _check_clock(self, at: int, name: str) -> int:
        t = at
        if type(t) is not int or not MIN_TIMESTAMP <= t <= MAX_TIMESTAMP:
            t = check_timestamp(t, name)
        if self._clock is not None and t < self._clock:
            raise ValueError(
                f"{name}={t} µs is before the previous update at {self._clock} µs: "
                "updates must come in processing-time order"
            )
        return t

    @staticmethod
    def _check_value(event_time: int) -> int:
        e = event_time
        if type(e) is not int or not -SKETCH_LIMIT <= e <= SKETCH_LIMIT:
            e = check_timestamp(e, "event_time")
            if not -SKETCH_LIMIT <= e <= SKETCH_LIMIT:
                raise ValueError(
                    f"event_time={e} µs is outside ±2**53 µs, which the sketch cannot hold "
                    "exactly"
                )
        return e

    def activate(self, event_time: int, at: int) -> None:
        """An element with ``event_time`` becomes active at processing time ``at`` (µs)."""
        e = self._check_value(event_time)
        t = self._check_clock(at, "at")
        self._clock = t
        b = t // self._width
        frozen = self._frozen
        if frozen and b <= frozen[-1].hi_id:  # the current bucket was frozen (capacity)
            f = frozen[-1]
            f.ins.update(float(e))
            f.active += 1
            self._frozen_active += 1
        else:
            bucket = self._young.get(b)
            if bucket is None:
                bucket = self._young[b] = {}
                self._young_n[b] = 0
                if len(self._young) == 1:
                    self._next_freeze = self._freeze_time(b)
            bucket[e] = bucket.get(e, 0) + 1
            self._young_n[b] += 1
            self._exact.add(e)
            if len(self._exact) > self._capacity:
                while len(self._exact) > self._capacity and self._young:
                    self._freeze_oldest()
        if t >= self._next_freeze:
            self._age(t)

    def complete(self, event_time: int, activated_at: int, at: int) -> None:
        """The element with ``event_time``, activated at ``activated_at``, completes at
        processing time ``at`` (µs). ``ValueError`` (nothing changed) if ``at`` is before
        ``activated_at`` or the previous update, or no such element can be active. For a
        sketched element only its bucket and the bucket's value range can be checked."""
        e = self._check_value(event_time)
        a = activated_at
        if type(a) is not int or not MIN_TIMESTAMP <= a <= MAX_TIMESTAMP:
            a = check_timestamp(a, "activated_at")
        if type(at) is int and at < a:
            raise ValueError(f"completion at={at} µs is before activation activated_at={a} µs")
        t = self._check_clock(at, "at")
        if t < a:
            raise ValueError(f"completion at={t} µs is before activation activated_at={a} µs")
        b = a // self._width
        bucket = self._young.get(b)
        if bucket is not None:
            left = bucket.get(e, 0)
            if left == 0:
                raise ValueError(
                    f"no active element with event_time={e} µs was activated at {a} µs"
                )
            self._clock = t
            if left == 1:
                del bucket[e]
            else:
                bucket[e] = left - 1
            self._exact.remove(e)
            n = self._young_n[b] - 1
            if n:
                self._young_n[b] = n
            else:
                oldest = next(iter(self._young)) == b
                del self._young[b], self._young_n[b]
                if oldest:
                    self._next_freeze = (
                        self._freeze_time(next(iter(self._young))) if self._young else _NEVER
                    )
        else:
            j = bisect_right(self._frozen_lo, b) - 1
            f = self._frozen[j] if j >= 0 else None
            if f is None or b > f.hi_id:
                raise ValueError(f"no element activated at {a} µs is active")
            fe = float(e)
            if not f.ins.get_min_value() <= fe <= f.ins.get_max_value():
                raise ValueError(
                    f"no active element with event_time={e} µs was activated at {a} µs"
                )
            self._clock = t
            if f.out is None:
                f.out = self._kll(self._k)
            f.out.update(fe)
            f.active -= 1
            self._frozen_active -= 1
            if f.active == 0:
                del self._frozen[j], self._frozen_lo[j]
        if t >= self._next_freeze:
            self._age(t)

    def advance_to(self, at: int) -> None:
        """Processing time reached ``at`` (µs): freeze buckets that aged out."""
        t = self._check_clock(at, "at")
        self._clock = t
        if t >= self._next_freeze:
            self._age(t)

    def _freeze_time(self, b: int) -> int:
        """When young bucket ``b`` freezes by age: its end plus ``exact_age`` (or never)."""
        if self._exact_age is None:
            return _NEVER
        return (b + 1) * self._width + self._exact_age

    def _age(self, t: int) -> None:
        while self._young and t >= self._next_freeze:
            self._freeze_oldest()

    def _freeze_oldest(self) -> None:
        b = next(iter(self._young))
        bucket = self._young.pop(b)
        del self._young_n[b]
        values = np.fromiter(bucket.keys(), dtype=np.int64, count=len(bucket))
        counts = np.fromiter(bucket.values(), dtype=np.int64, count=len(bucket))
        remove = self._exact.remove
        for v, cnt in bucket.items():
            for _ in range(cnt):
                remove(v)
        ins = self._kll(self._k)
        ins.update(np.repeat(values, counts).astype(np.float64))
        f = _Frozen(b, b, ins)
        self._frozen.append(f)
        self._frozen_lo.append(b)
        self._frozen_active += f.active
        self._next_freeze = (
            self._freeze_time(next(iter(self._young))) if self._young else _NEVER
        )
        if len(self._frozen) > self._max_sketches:
            self._merge_smallest_pair()

    def _merge_smallest_pair(self) -> None:
        """Merge the adjacent frozen buckets with the fewest sketched elements (in + out):
        sizes stay balanced, as in a log-structured merge."""
        fr = self._frozen

        def weight(f: _Frozen) -> int:
            return int(f.ins.n) + (int(f.out.n) if f.out is not None else 0)

        j = min(range(len(fr) - 1), key=lambda i: weight(fr[i]) + weight(fr[i + 1]))
        left, right = fr[j], fr[j + 1]
        left.ins.merge(right.ins)
        if right.out is not None:
            if left.out is None:
                left.out = self._kll(self._k)
            left.out.merge(right.out)
        left.hi_id = right.hi_id
        left.active += right.active
        del fr[j + 1], self._frozen_lo[j + 1]

    # ------------------------------------------------------------------ queries

    def _estimate_le(self, y: int, exact_le: Callable[[int], int]) -> float:
        fy = float(y)
        total = float(exact_le(y))
        for f in self._frozen:
            total += f.ins.get_rank(fy, True) * f.ins.n
            if f.out is not None:
                total -= f.out.get_rank(fy, True) * f.out.n
        return total

    def computed(self) -> int | None:
        """The estimated order statistic (not latched), or None when nothing is active.

        Sets :attr:`error_bound` to the ``E`` that bounds it (class docstring).
        """
        n = len(self)
        if n == 0:
            self.error_bound = 0.0
            return None
        k = int((n - 1) * self._q)
        if not self._frozen:
            self.error_bound = 0.0
            return self._exact.kth(k)
        lo = min(int(f.ins.get_min_value()) for f in self._frozen)
        hi = max(int(f.ins.get_max_value()) for f in self._frozen)
        if self._exact:
            lo = min(lo, self._exact.min())
            hi = max(hi, self._exact.max())
        lo -= 1
        target = k + 1 - 1e-6  # ranks come back as floats; counts are integers
        exact_le = self._exact.counter()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._estimate_le(mid, exact_le) >= target:
                hi = mid
            else:
                lo = mid
        self.error_bound = self.rank_error_bound(hi)
        return hi

    def current(self, input_watermark: int | None = None, at: int | None = None) -> int:
        """Evaluate (after :meth:`advance_to` when ``at`` is given): latch the estimate, or
        ``input_watermark`` when nothing is active; return the latched watermark (µs)."""
        if at is not None:
            self.advance_to(at)
        v = self.computed()
        if v is not None:
            if v < self._value:
                if v != self._last:
                    self.regressions += 1
            else:
                self._value = v
            self._last = v
            return self._value
        self._last = None
        if input_watermark is not None:
            w = check_timestamp(input_watermark, "input_watermark")
            if w > self._value:
                self._value = w
        return self._value


@dataclass(frozen=True)
class SketchEvaluation:
    """A sketch replayed over a trace: at each of ``times``, the computed estimate
    (``raw``, the fallback where nothing is active), ``bound`` (its ``E``), ``active``
    (``n(t)``), and the latched ``curve``; plus the final sketch and peak memory."""

    times: np.ndarray
    raw: np.ndarray
    bound: np.ndarray
    active: np.ndarray
    curve: StepSeries
    sketch: SketchPercentileWatermark
    peak_memory_bytes: int


def sketch_percentile_values(
    event_time: ArrayLike,
    activation: ArrayLike,
    completion: ArrayLike,
    p: float,
    times: ArrayLike,
    fallback: StepSeries | None = None,
    **params: Any,
) -> SketchEvaluation:
    """Replay a trace through :class:`SketchPercentileWatermark` (``params`` go to it) and
    evaluate at each of ``times``, which must be sorted (``ValueError`` naming the first
    index out of order). Updates at a time come before an evaluation at that time;
    activations before completions, so zero-length elements are never seen active."""
    check_p(p)
    e, a, c = _elements(event_time, activation, completion)
    fb = _fallback(fallback)
    ts = time_column(times, "times")
    if ts.size > 1 and bool(np.any(ts[1:] < ts[:-1])):
        i = int(np.argmax(ts[1:] < ts[:-1])) + 1
        raise ValueError(
            f"times must be sorted: times[{i}]={int(ts[i])} µs is before "
            f"times[{i - 1}]={int(ts[i - 1])} µs"
        )
    params.setdefault("initial", fb.initial)
    sk = SketchPercentileWatermark(p, **params)
    n = e.size
    when = np.concatenate((a, c))
    kind = np.concatenate((np.zeros(n, np.int8), np.ones(n, np.int8)))
    order = np.lexsort((kind, when))
    ev_t = when[order].tolist()
    ev_row = (order % n).tolist() if n else []
    ev_kind = kind[order].tolist()
    el = e.tolist()
    al = a.tolist()
    raw = np.empty(ts.size, dtype=np.int64)
    bound = np.zeros(ts.size, dtype=np.float64)
    active = np.empty(ts.size, dtype=np.int64)
    fb_at = fb.at(ts) if ts.size else ts
    peak = 0
    i = 0
    total = len(ev_t)
    for j, t in enumerate(ts.tolist()):
        while i < total and ev_t[i] <= t:
            r = ev_row[i]
            if ev_kind[i] == 0:
                sk.activate(el[r], ev_t[i])
            else:
                sk.complete(el[r], al[r], ev_t[i])
            i += 1
        sk.advance_to(t)
        v = sk.computed()
        active[j] = len(sk)
        raw[j] = int(fb_at[j]) if v is None else v
        bound[j] = sk.error_bound
        peak = max(peak, sk.memory_bytes())
    latched, _ = _latch_regressions(raw, active > 0, fb.initial)
    curve = StepSeries.from_events(ts, latched, fb.initial).compressed()
    return SketchEvaluation(ts, raw, bound, active, curve, sk, peak)
