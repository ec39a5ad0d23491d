"""Pub/Sub event-time watermarks: Dataflow's base/tracking estimator and Beam's rule.

Google Cloud Pub/Sub delivers in no guaranteed order and only reports the oldest
*unacknowledged publish time* of a subscription. *Streaming Systems* ch. 3 estimates an
event-time watermark with two subscriptions on one topic (docs/semantics.md,
"Dataflow"):

- the **base** subscription carries the data; ``pt_base`` is its oldest unacked publish
  time (``None`` when nothing is unacked);
- the **tracking** subscription is pulled fast; each message's (publish time, event time)
  goes to :meth:`TrackingEstimator.on_tracked`, then it is acked.

All times are int µs (:mod:`theory.time`); a watermark ``W`` asserts that no more non-late
data with event time ``< W`` will arrive. Every estimator here is latched monotonic
(``new = max(old, computed)``) and counts the computed values it kept out.

The exact rule of :meth:`TrackingEstimator.estimate` (``newest`` = the newest publish time
tracked so far; all comparisons exact, in µs), applied in this order:

1. **No data**: before any tracked message, the idle rule (4) may apply; otherwise hold
   (``"no data yet"``).
2. **Band**: the tracked messages with ``publish_time >= L``, where
   ``L = min(pt_base, newest - band)`` (``L = newest - band`` when ``pt_base`` is None;
   clamped at MIN_TIMESTAMP). Buckets entirely below ``L`` are pruned. If ``L`` falls
   below an earlier pruning point (``pt_base`` went back, e.g. lost acks), that history is
   gone: hold (``"held: band reaches pruned history"``).
3. **Sufficiency**: the band minimum is taken (``"band minimum"``) only when the tracking
   subscription is **ahead** of the base by at least ``band`` (``newest - pt_base >=
   band``; never when ``pt_base`` is None) or has **no backlog**; otherwise hold
   (``"held: tracking not far enough ahead"``).
4. **Idle**: when neither subscription has a backlog (``pt_base`` None and no tracking
   backlog) and nothing was published for ``idle_advance_after`` (``now - skew - newest
   >= idle_advance_after``; before any data, since the first ``estimate`` call), the
   value is ``now - skew - idle_lag`` (``"idle: advanced to near real time"``); checked
   before 3.
5. **Cap** (``cap_at_idle_lag``, on by default; off is the book's bare rule): a band
   minimum above ``now - skew - idle_lag`` is lowered to it (``"capped: ..."``).

**Clock skew.** ``now`` is the reader's clock, the publish times are Pub/Sub's; they may
differ by up to ``max_clock_skew`` (``skew`` above) either way. Rules 4 and 5 take the
earliest Pub/Sub time ``now`` may stand for, ``now - skew``, so a reader clock ahead of
Pub/Sub's never advances the watermark past data still to be published; a reader clock
behind only delays them, and never stops them. ``now`` may step back by up to ``skew``
(the reader's clock is corrected; the estimator keeps the latest ``now``) and may lie up
to ``skew`` before the newest publish time; beyond either bound ``estimate`` raises a
ValueError naming ``max_clock_skew``, since no rule is safe on such a clock.
6. **Latch**: a value below the watermark is kept out and counted
   (``"latched: ..."``).

Assumptions, made explicit. Safe = the watermark never passes a message the base has yet
to process. The base owes the messages with publish time ``>= pt_base``; ahead/no-backlog
says the tracking subscription has seen them (ahead relies on delivery disorder ``<
band``). Messages not yet seen are assumed no earlier in event time than some message
published within ``band`` before them, which the band's trailing ``band`` covers. That
assumption has no witness at the start of a stream or of a burst after a gap: the first
messages seen set the minimum, and a message a moment later with an older event time
would be late (the simulator shows it). The idle rule already assumes ``publish_time -
event_time <= idle_lag`` for new data; the cap applies the same assumption to the band,
so the estimator never claims more than that, which closes the gap. With the cap it is
safe when every message has ``publish_time - event_time <= D`` with ``D <= idle_lag``
and, for the ahead branch, ``D`` plus the tracking delivery disorder ``<= band``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import cover_min, minus_clamped
from theory.columns import (
    as_int,
    bool_column,
    check_bool,
    check_count,
    check_duration,
    check_timestamp,
    int_column,
    same_length,
    time_column,
)
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, MINUTE, SECOND

__all__ = [
    "REASONS",
    "REASON_BAND_MIN",
    "REASON_BEAM_HELD",
    "REASON_BEAM_IDLE",
    "REASON_BEAM_MIN",
    "REASON_CAPPED",
    "REASON_HELD_NOT_AHEAD",
    "REASON_HELD_PRUNED",
    "REASON_IDLE",
    "REASON_LATCHED",
    "REASON_NO_DATA",
    "BeamPubsubRule",
    "Estimate",
    "EstimateSeries",
    "TrackingEstimator",
    "tracking_estimate_series",
]

REASON_NO_DATA: Final[str] = "no data yet"
REASON_BAND_MIN: Final[str] = "band minimum"
REASON_HELD_NOT_AHEAD: Final[str] = "held: tracking not far enough ahead"
REASON_IDLE: Final[str] = "idle: advanced to near real time"
REASON_HELD_PRUNED: Final[str] = "held: band reaches pruned history"
REASON_LATCHED: Final[str] = "latched: computed value below the watermark"
REASON_CAPPED: Final[str] = "capped: band minimum above now - idle_lag"
REASON_BEAM_MIN: Final[str] = "beam: minimum read timestamp over the sample period"
REASON_BEAM_IDLE: Final[str] = "beam: idle, jumped to wall time"
REASON_BEAM_HELD: Final[str] = "beam: too few samples, held"
#: The reason codes of :class:`EstimateSeries` index this tuple.
REASONS: Final[tuple[str, ...]] = (
    REASON_NO_DATA,
    REASON_BAND_MIN,
    REASON_HELD_NOT_AHEAD,
    REASON_IDLE,
    REASON_HELD_PRUNED,
    REASON_LATCHED,
    REASON_CAPPED,
)
_CODE: Final[dict[str, int]] = {r: i for i, r in enumerate(REASONS)}
_I64_MIN: Final[int] = int(np.iinfo(np.int64).min)
_MIN: Final[int] = MIN_TIMESTAMP
_MAX: Final[int] = MAX_TIMESTAMP
_push = heapq.heappush
_STATE_VERSION: Final[int] = 2

#: The default ``max_clock_skew`` (µs): 1 s. NTP keeps a synchronised host within tens of
#: milliseconds of UTC, and Pub/Sub stamps publish times from Google's servers; 1 s also
#: covers a host whose synchronisation lapsed for a while (the fault measured on the
#: emulator: a reader 1 s ahead made records late without it). It costs 1 s of watermark
#: lag on the idle jump and the cap. Set the bound you can vouch for.
DEFAULT_MAX_CLOCK_SKEW: Final[int] = SECOND


@dataclass(frozen=True)
class Estimate:
    """A watermark (µs, latched) and why it has that value.

    ``computed`` is the rule's value before latching, ``None`` when the rule held.
    """

    watermark: int
    reason: str
    computed: int | None = None


# --------------------------------------------------------------------------- estimator


class TrackingEstimator:
    """The book's base/tracking estimator over a sparse publish-time histogram.

    Parameters (µs): ``band`` (>= 0) the assumed out-of-order bound;
    ``idle_advance_after`` (>= 0) the quiet time before the idle jump; ``idle_lag`` (>= 0)
    how far below ``now`` the idle jump lands (the assumed bound on ``publish_time -
    event_time`` after a quiet period); ``bucket_width`` (> 0) the histogram's bucket;
    ``max_clock_skew`` (>= 0, default :data:`DEFAULT_MAX_CLOCK_SKEW`) the bound on the
    difference between the reader's clock and Pub/Sub's (module docstring).

    Bucket ``k`` holds the tracked messages with ``k * bucket_width <= publish_time <
    (k + 1) * bucket_width``: their minimum event time and count. The band query takes
    every bucket that *intersects* ``[L, +inf)``, i.e. the whole bucket holding ``L`` too:
    a superset of the band, so its minimum is ``<=`` the exact band minimum. Bucketing can
    only lower the estimate (never over-estimate, never make data late); it is exact when
    ``bucket_width`` is 1 µs and otherwise may also count messages published up to
    ``bucket_width`` before ``L``. The ahead/idle decisions use exact publish times.

    Memory: the buckets from the pruned frontier (the last ``L``'s bucket) up to the newest,
    i.e. ``(newest - L) / bucket_width + 1`` plus buckets created since the last
    ``estimate``; never the message count. A message in the band is never pruned.

    The band minimum is the minimum of the bucket minima, kept in a lazy heap of
    ``(bucket minimum, bucket)`` rather than a :class:`~theory.structures.Frontier`: a
    bucket's minimum only moves down and leaves with its bucket, so a stale entry is
    recognised by comparing it with its bucket, and each change costs one ``heappush``.
    The frontier's counted updates (two minima per update) made one ``estimate`` per
    100 ms bucket at 100 messages/s slower. Its cheap path (``add``/``move``/``retract``,
    no report) ties with this heap on the pattern (``bench/frontier.py``'s ``down``),
    which is no reason to switch.

    The durations are at most ``MAX_TIMESTAMP``: the rule subtracts them from timestamps
    (``now - idle_lag``, ``newest - band``), in int64 arrays in
    :func:`tracking_estimate_series`, which must not overflow.

    Snapshot the state (:meth:`state`) *before* acking tracked messages: a restart from
    that snapshot (:meth:`from_state`) keeps the watermark and every in-band message.
    """

    def __init__(
        self,
        band: int = 10 * SECOND,
        idle_advance_after: int = 2 * MINUTE,
        idle_lag: int = 10 * SECOND,
        bucket_width: int = SECOND // 10,
        *,
        cap_at_idle_lag: bool = True,
        max_clock_skew: int | None = None,
    ) -> None:
        self.cap_at_idle_lag = check_bool(cap_at_idle_lag, "cap_at_idle_lag")
        longest = MAX_TIMESTAMP
        self.max_clock_skew = check_duration(
            DEFAULT_MAX_CLOCK_SKEW if max_clock_skew is None else max_clock_skew,
            "max_clock_skew",
            maximum=longest,
        )
        self.band = check_duration(band, "band", maximum=longest)
        self.idle_advance_after = check_duration(
            idle_advance_after, "idle_advance_after", maximum=longest
        )
        self.idle_lag = check_duration(idle_lag, "idle_lag", maximum=longest)
        self.bucket_width = check_duration(
            bucket_width, "bucket_width", allow_zero=False, maximum=longest
        )
        self._buckets: dict[int, list[int]] = {}  # bucket -> [min event time, count]
        self._keys: list[int] = []  # heap of bucket indices, to prune from the oldest
        self._mins: list[tuple[int, int]] = []  # lazy heap of (bucket min, bucket)
        self._frontier: int | None = None  # buckets below it are pruned
        self._floor: int = _I64_MIN  # the frontier, or below every bucket before one
        self._newest: int | None = None
        self._first_now: int | None = None
        self._last_now: int | None = None  # ``now`` of the last estimate (never goes back)
        self._watermark: int = MIN_TIMESTAMP
        #: Computed values below the watermark (kept out by latching).
        self.regressions: int = 0
        #: Tracked messages whose bucket was pruned (publish time below an ``L``, so
        #: before that ``pt_base``: already acked by the base).
        self.dropped: int = 0
        #: Every tracked message, duplicates included.
        self.tracked: int = 0

    # ------------------------------------------------------------------ observing

    @property
    def watermark(self) -> int:
        """The latched watermark (µs); ``MIN_TIMESTAMP`` until a rule yields a value."""
        return self._watermark

    @property
    def newest_publish_time(self) -> int | None:
        """The newest tracked publish time (µs), or None before any data."""
        return self._newest

    @property
    def bucket_count(self) -> int:
        """Buckets held now (the memory bound)."""
        return len(self._buckets)

    def in_band_counts(self) -> tuple[int, int]:
        """``(buckets, messages)`` held, duplicates counted as tracked."""
        return len(self._buckets), sum(b[1] for b in self._buckets.values())

    def on_tracked(self, publish_time: int, event_time: int) -> None:
        """Record one tracked message (µs). Duplicates are harmless (only counted)."""
        pt = publish_time
        if type(pt) is not int or not _MIN <= pt <= _MAX:
            pt = check_timestamp(publish_time, "publish_time")
        et = event_time
        if type(et) is not int or not _MIN <= et <= _MAX:
            et = check_timestamp(event_time, "event_time")
        self.tracked += 1
        newest = self._newest
        if newest is None or pt > newest:
            self._newest = pt
        k = pt // self.bucket_width
        if k < self._floor:
            self.dropped += 1
            return
        b = self._buckets.get(k)
        if b is None:
            self._buckets[k] = [et, 1]
            _push(self._keys, k)
            _push(self._mins, (et, k))
        else:
            b[1] += 1
            if et < b[0]:
                b[0] = et
                _push(self._mins, (et, k))

    def on_tracked_batch(self, publish_times: ArrayLike, event_times: ArrayLike) -> None:
        """Record many tracked messages (µs arrays); same result as :meth:`on_tracked` on
        each pair in turn. Validated as a whole before any change."""
        pt = time_column(publish_times, "publish_times")
        et = time_column(event_times, "event_times")
        same_length("publish_times", pt.size, event_times=et)
        if pt.size == 0:
            return
        self.tracked += int(pt.size)
        top = int(pt.max())
        if self._newest is None or top > self._newest:
            self._newest = top
        k = pt // self.bucket_width
        if self._frontier is not None:
            keep = k >= self._frontier
            self.dropped += int(k.size - np.count_nonzero(keep))
            k, et = k[keep], et[keep]
        if k.size:
            self._merge_buckets(*_per_bucket(k, et))

    def _merge_buckets(self, k: np.ndarray, mins: np.ndarray, counts: np.ndarray) -> None:
        """Add per-bucket (index, minimum event time, count) columns to the histogram."""
        buckets, keys, heap = self._buckets, self._keys, self._mins
        for kk, mn, c in zip(k.tolist(), mins.tolist(), counts.tolist(), strict=True):
            b = buckets.get(kk)
            if b is None:
                buckets[kk] = [mn, c]
                heapq.heappush(keys, kk)
                heapq.heappush(heap, (mn, kk))
            else:
                b[1] += c
                if mn < b[0]:
                    b[0] = mn
                    heapq.heappush(heap, (mn, kk))

    # ------------------------------------------------------------------ estimating

    def estimate(
        self,
        now: int,
        base_oldest_unacked_publish_time: int | None,
        tracking_has_backlog: bool,
    ) -> Estimate:
        """Apply the rule (module docstring) at processing time ``now`` (µs).

        ``base_oldest_unacked_publish_time`` is ``pt_base`` (µs) or None when the base
        subscription has nothing unacked; ``tracking_has_backlog`` says whether the
        tracking subscription still has unacked messages (Cloud Monitoring's
        ``num_undelivered_messages > 0``). Inputs are validated before any change: a
        ``now`` earlier than the previous call's is a ValueError.
        Returns the latched watermark and its reason.
        """
        t = check_timestamp(now, "now")
        base = None
        if base_oldest_unacked_publish_time is not None:
            base = check_timestamp(
                base_oldest_unacked_publish_time, "base_oldest_unacked_publish_time"
            )
        backlog = check_bool(tracking_has_backlog, "tracking_has_backlog")
        t = self._check_clock(t)
        self._last_now = t
        if self._first_now is None:
            self._first_now = t
        # rule 4's precondition: neither subscription has anything outstanding
        quiet = base is None and not backlog
        newest = self._newest
        # the earliest Pub/Sub time ``now`` may stand for (rules 4 and 5)
        earliest = max(t - self.max_clock_skew, MIN_TIMESTAMP)
        if newest is None:  # rule 1, or rule 4 counted from the first query
            if quiet and earliest - self._first_now >= self.idle_advance_after:
                return self._latch(self._near_now(t), REASON_IDLE)
            return Estimate(self._watermark, REASON_NO_DATA)
        lower = max(newest - self.band, MIN_TIMESTAMP)  # rule 2: the band is [L, +inf)
        if base is not None:
            lower = min(lower, base)
        kl = lower // self.bucket_width
        if self._frontier is not None and kl < self._frontier:
            return Estimate(self._watermark, REASON_HELD_PRUNED)
        self._prune(kl)
        if quiet and earliest - newest >= self.idle_advance_after:  # rule 4
            return self._latch(self._near_now(t), REASON_IDLE)
        if (base is not None and newest - base >= self.band) or not backlog:  # rule 3
            return self._band_estimate(t)
        return Estimate(self._watermark, REASON_HELD_NOT_AHEAD)

    def _check_clock(self, t: int) -> int:
        """``now`` (µs) as the rules use it: the latest ``now`` so far. ValueError when the
        reader's clock stepped back, or lies behind the newest publish time, by more than
        ``max_clock_skew``; nothing is changed then."""
        skew = self.max_clock_skew
        last, newest = self._last_now, self._newest
        if last is not None and t < last - skew:
            raise ValueError(
                f"now={t} µs is {last - t} µs before the previous estimate's now={last} µs: "
                f"the reader's clock went back by more than max_clock_skew ({skew} µs)"
            )
        if newest is not None and t < newest - skew:
            raise ValueError(_behind_newest(t, newest, skew))
        return t if last is None else max(t, last)

    def _near_now(self, t: int) -> int:
        """``now - skew - idle_lag``: the idle jump's value and the cap (rules 4 and 5),
        at the earliest Pub/Sub time ``now`` may stand for."""
        return max(t - self.max_clock_skew - self.idle_lag, MIN_TIMESTAMP)

    def _band_estimate(self, t: int) -> Estimate:
        """Rules 3, 5 and 6: the band minimum, capped at ``now - idle_lag``, latched. The
        band is never empty here: the newest tracked message is in it."""
        value = self._band_min()
        cap = self._near_now(t)
        if self.cap_at_idle_lag and cap < value:
            return self._latch(cap, REASON_CAPPED)
        return self._latch(value, REASON_BAND_MIN)

    def _latch(self, computed: int, reason: str) -> Estimate:
        if computed < self._watermark:
            self.regressions += 1
            return Estimate(self._watermark, REASON_LATCHED, computed)
        self._watermark = computed
        return Estimate(computed, reason, computed)

    def _prune(self, kl: int) -> None:
        """Drop the buckets below ``kl``: below the band, so acked by the base already."""
        keys, buckets = self._keys, self._buckets
        while keys and keys[0] < kl:
            del buckets[heapq.heappop(keys)]
        self._frontier = self._floor = kl
        if len(self._mins) > 2 * len(buckets) + 64:  # bound the stale entries
            self._mins = [(b[0], k) for k, b in buckets.items()]
            heapq.heapify(self._mins)

    def _band_min(self) -> int:
        """Minimum event time over the held buckets (non-empty: the newest is held). An
        entry is stale when its bucket is gone or has a lower minimum now."""
        heap, buckets = self._mins, self._buckets
        while True:
            v, k = heap[0]
            b = buckets.get(k)
            if b is not None and b[0] == v:
                return v
            heapq.heappop(heap)

    # ------------------------------------------------------------------ snapshot

    def state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot (plain ints and lists) of everything."""
        return {
            "version": _STATE_VERSION,
            "band": self.band,
            "idle_advance_after": self.idle_advance_after,
            "idle_lag": self.idle_lag,
            "bucket_width": self.bucket_width,
            "cap_at_idle_lag": self.cap_at_idle_lag,
            "max_clock_skew": self.max_clock_skew,
            "last_now": self._last_now,
            "watermark": self._watermark,
            "regressions": self.regressions,
            "dropped": self.dropped,
            "tracked": self.tracked,
            "newest_publish_time": self._newest,
            "first_now": self._first_now,
            "frontier": self._frontier,
            "buckets": [[k, b[0], b[1]] for k, b in sorted(self._buckets.items())],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TrackingEstimator:
        """Rebuild from :meth:`state`: ``TypeError`` when ``state`` is not a dict, and a bad
        snapshot raises ``ValueError`` naming the key."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict, got {type(state).__name__}")
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"state: expected a dict with version {_STATE_VERSION}")
        try:
            est = cls(
                state["band"],
                state["idle_advance_after"],
                state["idle_lag"],
                state["bucket_width"],
                cap_at_idle_lag=state["cap_at_idle_lag"],
                max_clock_skew=state["max_clock_skew"],
            )
            est._restore_scalars(state)
            est._restore_buckets(state["buckets"])
        except KeyError as err:
            raise ValueError(f"state: missing key {err.args[0]!r}") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"state: {err}") from None
        if est._buckets and est._newest is None:
            raise ValueError("state['newest_publish_time'] is None but buckets are held")
        return est

    def _restore_scalars(self, state: dict[str, Any]) -> None:
        """The snapshot's watermark, counters, times (µs) and pruning frontier."""
        self._watermark = check_timestamp(state["watermark"], "state['watermark']")
        for key in ("regressions", "dropped", "tracked"):
            setattr(self, key, check_count(state[key], f"state[{key!r}]"))
        for key, attr in (
            ("newest_publish_time", "_newest"),
            ("first_now", "_first_now"),
            ("last_now", "_last_now"),
        ):
            v = state[key]
            setattr(self, attr, None if v is None else check_timestamp(v, f"state[{key!r}]"))
        frontier = state["frontier"]
        self._frontier = None if frontier is None else as_int(frontier, "state['frontier']")
        self._floor = _I64_MIN if self._frontier is None else self._frontier

    def _restore_buckets(self, entries: list[list[int]]) -> None:
        """The snapshot's ``[bucket, minimum event time, count]`` entries, each bucket once
        and none below the pruning frontier."""
        for k, mn, count in entries:
            k = as_int(k, "state['buckets'] bucket index")
            check_timestamp(mn, "state['buckets'] minimum event time")
            check_count(count, "state['buckets'] count", minimum=1)
            if k < self._floor:
                raise ValueError(f"state['buckets']: bucket {k} is below the frontier")
            if k in self._buckets:
                raise ValueError(f"state['buckets']: bucket {k} appears twice")
            self._buckets[k] = [int(mn), int(count)]
        self._keys = sorted(self._buckets)
        self._mins = [(b[0], k) for k, b in self._buckets.items()]
        heapq.heapify(self._mins)


def _behind_newest(now: int, newest: int, skew: int) -> str:
    """The error for a reader's clock behind Pub/Sub's by more than ``skew`` (µs)."""
    return (
        f"now={now} µs is {newest - now} µs before the newest publish time ({newest} µs): "
        f"the reader's clock is behind Pub/Sub's by more than max_clock_skew ({skew} µs)"
    )


def _per_bucket(k: np.ndarray, et: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch grouped by bucket index ``k``: (indices, minimum event times, counts),
    ascending by index."""
    if k.size > 1 and not bool(np.all(k[1:] >= k[:-1])):
        order = np.argsort(k, kind="stable")
        k, et = k[order], et[order]
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    return k[starts], np.minimum.reduceat(et, starts), np.diff(np.append(starts, k.size))


# --------------------------------------------------------------------------- vectorised


@dataclass(frozen=True)
class EstimateSeries:
    """:func:`tracking_estimate_series`'s answer, one entry per query (all µs).

    ``computed`` is the rule's value (``MIN_TIMESTAMP`` where ``held``); ``reason`` codes
    index :data:`REASONS`; ``regressions`` counts computed values below the watermark.
    """

    now: np.ndarray
    watermark: np.ndarray
    computed: np.ndarray
    held: np.ndarray
    reason: np.ndarray
    regressions: int

    def reasons(self) -> list[str]:
        """The reason of each query as text."""
        return [REASONS[c] for c in self.reason.tolist()]

    def step_series(self) -> StepSeries:
        """The watermark over processing time (the last query at each ``now`` wins)."""
        return StepSeries.from_events(self.now, self.watermark, MIN_TIMESTAMP)


@dataclass(frozen=True)
class _Queries:
    """Recorded ``estimate`` calls as columns: ``now`` (non-decreasing), ``base`` (``pt_base``
    where ``base_has``, else 0; µs) and the two backlog flags."""

    now: np.ndarray
    base: np.ndarray
    base_has: np.ndarray
    tracking_has: np.ndarray

    @classmethod
    def of(cls, now: ArrayLike, base: ArrayLike, base_has: ArrayLike, trk: ArrayLike) -> _Queries:
        """The checked columns; each error names its parameter."""
        q_now = time_column(now, "now")
        q = q_now.size
        if q > 1 and not bool(np.all(q_now[1:] >= q_now[:-1])):
            raise ValueError("now must not decrease")
        has = bool_column(base_has, "base_has_backlog", q)
        raw = int_column(base, "base_oldest_unacked_publish_time")
        same_length("now", q, base_oldest_unacked_publish_time=raw)
        # entries without a backlog are not pt_base values: they are not checked
        pt_base = time_column(np.where(has, raw, 0), "base_oldest_unacked_publish_time")
        return cls(q_now, pt_base, has, bool_column(trk, "tracking_has_backlog", q))


@dataclass(frozen=True)
class _Band:
    """Per query: whether any message was tracked, the newest publish time, and whether
    the band reaches pruned history (rule 2); the band minimum (MAX_TIMESTAMP if empty)."""

    has: np.ndarray
    newest: np.ndarray
    pruned: np.ndarray
    minimum: np.ndarray


def tracking_estimate_series(
    tracked_publish_time: ArrayLike,
    tracked_event_time: ArrayLike,
    tracked_at: ArrayLike,
    now: ArrayLike,
    base_oldest_unacked_publish_time: ArrayLike,
    base_has_backlog: ArrayLike,
    tracking_has_backlog: ArrayLike,
    *,
    band: int = 10 * SECOND,
    idle_advance_after: int = 2 * MINUTE,
    idle_lag: int = 10 * SECOND,
    bucket_width: int = SECOND // 10,
    cap_at_idle_lag: bool = True,
    max_clock_skew: int | None = None,
) -> EstimateSeries:
    """A fresh :class:`TrackingEstimator`'s answers over a recorded stream, vectorised.

    Message ``i`` (publish/event time) is tracked at processing time ``tracked_at[i]``;
    query ``j`` calls ``estimate(now[j], pt_base, tracking_has_backlog[j])`` with
    ``pt_base = base_oldest_unacked_publish_time[j]`` where ``base_has_backlog[j]``, else
    None. Messages tracked at or before ``now[j]`` come before query ``j`` (in their given
    order among equal times). ``now`` must not decrease (a recorded clock; the incremental
    estimator also takes a step back within ``max_clock_skew``). Identical to the
    incremental estimator; O((n + q) log(n + q)) numpy work.
    """
    # the parameters are checked by the estimator itself, so both paths accept the same
    rule = TrackingEstimator(
        band,
        idle_advance_after,
        idle_lag,
        bucket_width,
        cap_at_idle_lag=cap_at_idle_lag,
        max_clock_skew=max_clock_skew,
    )
    pt = time_column(tracked_publish_time, "tracked_publish_time")
    et = time_column(tracked_event_time, "tracked_event_time")
    at = time_column(tracked_at, "tracked_at")
    same_length("tracked_publish_time", pt.size, tracked_event_time=et, tracked_at=at)
    queries = _Queries.of(
        now, base_oldest_unacked_publish_time, base_has_backlog, tracking_has_backlog
    )
    if queries.now.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return EstimateSeries(empty, empty, empty, np.empty(0, bool), empty.astype(np.int8), 0)
    order = np.argsort(at, kind="stable")
    band_ = _band_series(pt[order], et[order], at[order], queries, rule)
    return _rule_series(band_, queries, rule)


def _band_series(
    pt: np.ndarray, et: np.ndarray, at: np.ndarray, q: _Queries, rule: TrackingEstimator
) -> _Band:
    """Rule 2 at every query, for messages sorted by ``tracked_at``: the band's lower end
    ``L``, its pruning (the frontier is the running maximum of ``L``'s bucket) and the
    minimum event time over the buckets from the frontier up."""
    m = q.now.size
    w = rule.bucket_width
    seen = np.searchsorted(at, q.now, side="right")  # messages tracked by each query
    has = seen > 0
    if pt.size:
        newest = np.maximum.accumulate(pt)[np.maximum(seen - 1, 0)]
    else:
        newest = np.zeros(m, dtype=np.int64)
    lower = minus_clamped(newest, rule.band)
    lower = np.where(q.base_has, np.minimum(lower, q.base), lower)
    kl = np.where(has, lower // w, _I64_MIN)
    kf = np.maximum.accumulate(kl)
    pruned = has & (kl < np.concatenate(([_I64_MIN], kf[:-1])))
    minimum = np.full(m, MAX_TIMESTAMP, dtype=np.int64)
    if pt.size:
        # message i is in the band from the first query that sees it until the query
        # whose frontier passes its bucket
        lo = np.searchsorted(seen, np.arange(pt.size), side="right")
        hi = np.searchsorted(kf, pt // w, side="right")
        minimum = cover_min(lo.astype(np.int64), hi.astype(np.int64), et, m)
    return _Band(has, newest, pruned, minimum)


def _rule_series(band: _Band, q: _Queries, rule: TrackingEstimator) -> EstimateSeries:
    """Rules 1 and 3 to 6 at every query, from the band (the module docstring's order)."""
    m = q.now.size
    has, newest, pruned = band.has, band.newest, band.pruned
    skew = rule.max_clock_skew
    behind = has & (q.now < minus_clamped(newest, skew))
    if behind.any():
        j = int(np.argmax(behind))
        raise ValueError(f"now[{j}]: " + _behind_newest(int(q.now[j]), int(newest[j]), skew))
    idle = rule.idle_advance_after
    earliest = minus_clamped(q.now, skew)  # the earliest Pub/Sub time now may stand for
    ref = np.where(has, newest, q.now[0])  # quiet since the newest message, or the start
    floor = MIN_TIMESTAMP + idle
    quiet = (earliest >= floor) & (ref <= np.maximum(earliest, floor) - idle)
    is_idle = ~q.base_has & ~q.tracking_has & quiet & ~pruned
    ahead = (
        has
        & q.base_has
        & (newest >= MIN_TIMESTAMP + rule.band)
        & (q.base <= minus_clamped(newest, rule.band))
    )
    is_band = has & ~pruned & ~is_idle & (ahead | ~q.tracking_has)
    valid = is_idle | is_band
    cap = minus_clamped(earliest, rule.idle_lag)
    capped = is_band & (cap < band.minimum) if rule.cap_at_idle_lag else np.zeros(m, bool)
    computed = np.where(is_idle | capped, cap, band.minimum)
    computed = np.where(valid, computed, MIN_TIMESTAMP)
    wm = np.maximum.accumulate(computed)
    regress = valid & (computed < np.concatenate(([MIN_TIMESTAMP], wm[:-1])))
    reason = np.full(m, _CODE[REASON_HELD_NOT_AHEAD], dtype=np.int8)
    for mask, why in (
        (~has, REASON_NO_DATA),
        (pruned, REASON_HELD_PRUNED),
        (is_band, REASON_BAND_MIN),
        (capped, REASON_CAPPED),
        (is_idle, REASON_IDLE),
        (regress, REASON_LATCHED),
    ):  # a later mask wins: the rule's precedence (no data < held < ... < latched)
        reason[mask] = _CODE[why]
    return EstimateSeries(q.now, wm, computed, ~valid, reason, int(np.count_nonzero(regress)))


# --------------------------------------------------------------------------- Beam's rule


class BeamPubsubRule:
    """Beam's ``PubsubUnboundedSource`` reader watermark (µs), latched as its runner does.

    Facts carried over from Beam (``PubsubReader.getWatermark`` with ``MovingFunction``):
    every message the reader emits adds its event time to a moving minimum over
    ``sample_period`` (1 min) kept in ``sample_period / sample_update`` buckets (5 s each,
    aligned to multiples of ``sample_update``). At each query:

    - if no message was read in the window and the last pull that received messages is
      more than ``sample_period`` ago, the watermark jumps to ``now`` (no lag);
    - else if the window is *significant* (``>= min_spread`` non-empty buckets or
      ``>= min_messages`` samples) it is the window minimum;
    - else the previous value is kept.

    Beam also folds in the minimum over messages pulled but not yet emitted; the simulated
    reader emits on pull, so that term is empty here. Beam reports unlatched values and
    lets the runner latch; this class latches and counts the regressions.
    """

    def __init__(
        self,
        sample_period: int = MINUTE,
        sample_update: int = 5 * SECOND,
        min_messages: int = 10,
        min_spread: int = 2,
    ) -> None:
        self.sample_update = check_duration(
            sample_update, "sample_update", allow_zero=False, maximum=MAX_TIMESTAMP
        )
        self.sample_period = check_duration(sample_period, "sample_period", maximum=MAX_TIMESTAMP)
        if self.sample_period < self.sample_update:
            raise ValueError(
                f"sample_period={sample_period} µs must be >= sample_update={sample_update} µs"
            )
        self.min_messages = check_duration(min_messages, "min_messages")
        self.min_spread = check_duration(min_spread, "min_spread")
        n = self.sample_period // self.sample_update
        self._mins = [MAX_TIMESTAMP] * n
        self._counts = [0] * n
        self._start: int | None = None  # start of the current bucket
        self._cur = 0
        self._last_received: int | None = None
        self._last = MIN_TIMESTAMP  # Beam's lastWatermark (unlatched)
        self._watermark = MIN_TIMESTAMP
        self.regressions = 0

    @property
    def watermark(self) -> int:
        """The latched watermark (µs)."""
        return self._watermark

    def _flush(self, now: int) -> None:
        if self._start is None:
            self._start = now - now % self.sample_update
            self._cur = 0
        steps = min((now - self._start) // self.sample_update, len(self._mins))
        if steps <= 0:
            return
        n = len(self._mins)
        for _ in range(steps):
            self._cur = (self._cur + 1) % n
            self._mins[self._cur] = MAX_TIMESTAMP
            self._counts[self._cur] = 0
        self._start += ((now - self._start) // self.sample_update) * self.sample_update

    def on_received(self, now: int) -> None:
        """A pull at ``now`` (µs) returned messages (Beam's ``lastReceivedMsSinceEpoch``)."""
        self._last_received = check_timestamp(now, "now")

    def on_read(self, now: int, event_time: int) -> None:
        """The reader emitted a message with ``event_time`` at ``now`` (µs)."""
        t = check_timestamp(now, "now")
        e = check_timestamp(event_time, "event_time")
        self._flush(t)
        if e < self._mins[self._cur]:
            self._mins[self._cur] = e
        self._counts[self._cur] += 1

    def estimate(self, now: int) -> Estimate:
        """The rule at ``now`` (µs); ``now`` must not go back before the last sample."""
        t = check_timestamp(now, "now")
        self._flush(t)
        read_min = min(self._mins)
        if (
            read_min == MAX_TIMESTAMP
            and self._last_received is not None
            and t > self._last_received + self.sample_period
        ):
            self._last, reason = t, REASON_BEAM_IDLE
        elif (
            sum(1 for c in self._counts if c) >= self.min_spread
            or sum(self._counts) >= self.min_messages
        ):
            self._last, reason = read_min, REASON_BEAM_MIN
        else:
            return Estimate(self._watermark, REASON_BEAM_HELD)
        if self._last < self._watermark:
            self.regressions += 1
            return Estimate(self._watermark, REASON_LATCHED, self._last)
        self._watermark = self._last
        return Estimate(self._watermark, reason, self._last)
