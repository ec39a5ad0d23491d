"""Source watermark curves of one arrival-time bucket, given its carry (µs).

:func:`bucket_curves` is the per-bucket scan of a parallel scan over processing time
(:mod:`theory.watermarks.buckets`): for the bucket's rows in arrival order and a
:class:`~theory.watermarks.buckets.BucketCarry`, it gives every strategy's curve at the
bucket's arrival times and the elements late under it, exactly as the whole-trace curves
of :mod:`theory.watermarks` do on the same rows:

- ``perfect``: the minimum event time arriving after ``t``, capped at ``t``
  (:func:`perfect_curve`); ``oracle``: uncapped (:func:`perfect_oracle_curve`);
- ``bounded``: the maximum event time seen minus ``bound``, at least MIN_TIMESTAMP
  (:func:`bounded_out_of_orderness_curve`); ``flink-bounded``: Flink's ``max - bound - 1``
  converted to the core convention (MIN_TIMESTAMP where Flink's is at or below it);
- ``percentile``: :func:`percentile_source_curve`, evaluated also at the activation
  (event) times inside the bucket (:class:`~theory.watermarks.backlog.SourceBacklog`)
  and latched. Its latch needs the value before the bucket, known only once every
  earlier bucket ran: without ``carry.latched[i]`` the curve is latched from
  MIN_TIMESTAMP, and the rows that carry could make late are listed as candidates.

An element is late when ``event_time < W.before(arrival_time)``, the watermark just
before it arrived (:meth:`theory.series.StepSeries.before`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import ArrayLike

from theory.arrays import minus_clamped
from theory.columns import check_duration, same_length, time_column
from theory.series import StepSeries
from theory.time import MIN_TIMESTAMP
from theory.watermarks.backlog import SourceBacklog
from theory.watermarks.buckets import BucketCarry, SortedBucket
from theory.watermarks.percentile import check_p

__all__ = ["BucketCurves", "CurveSpec", "backlog_percentile_curve", "bucket_curves"]

_EMPTY = np.empty(0, dtype=np.int64)


class CurveSpec(Protocol):
    """A strategy :func:`bucket_curves` computes: ``kind`` ``perfect``, ``oracle``, ``bounded``
    or ``flink-bounded`` (``bound`` µs) or ``percentile`` (``p``; ``hold``: no perfect
    fallback), as
    :class:`theory.watermarks.spec.SourceWatermarkSpec` has them."""

    @property
    def kind(self) -> str: ...

    @property
    def bound(self) -> int | None: ...

    @property
    def p(self) -> float | None: ...

    @property
    def hold(self) -> bool: ...


class _Spec(NamedTuple):
    kind: str
    bound: int
    p: float
    hold: bool


@dataclass
class BucketCurves:
    """One bucket's curves, by strategy index ``i``.

    ``values[i]`` is the curve at the arrival times ``times``; a percentile curve is
    also at the activation times ``extra`` (``extra_values[i]``). ``late[i]`` counts the
    bucket's late elements (a percentile's: given the carry it had), ``local_max[i]`` is
    a percentile curve's last value (MIN_TIMESTAMP for the others). ``candidates[i]``:
    for a percentile without its carry, the ``(event times, value just before their
    arrival)`` of the rows not late within the bucket; such a row is late iff its event
    time is below ``max(value, carry)``.
    """

    times: np.ndarray
    values: list[np.ndarray] = field(default_factory=list)
    extra: np.ndarray = field(default_factory=lambda: _EMPTY)
    extra_values: dict[int, np.ndarray] = field(default_factory=dict)
    late: list[int] = field(default_factory=list)
    local_max: list[int] = field(default_factory=list)
    candidates: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def steps(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """A percentile curve's ``(times, values)`` at every evaluation time, by time."""
        times = np.concatenate((self.times, self.extra))
        vals = np.concatenate((self.values[i], self.extra_values[i]))
        order = np.argsort(times, kind="stable")
        return times[order], vals[order]


def bucket_curves(
    arrival_time: ArrayLike,
    event_time: ArrayLike,
    replica_arrival_time: ArrayLike,
    replica_event_time: ArrayLike,
    strategies: Sequence[CurveSpec],
    carry: BucketCarry,
) -> BucketCurves:
    """The curves of one bucket (see :class:`BucketCurves` and the module docstring).

    ``arrival_time``/``event_time`` are the bucket's rows sorted by arrival time; the
    replicas are the rows arriving in later buckets that happened before this bucket's
    end (only percentile strategies read them). A percentile's values are final when
    ``carry.latched`` holds its index.
    """
    specs = [_checked(s, i) for i, s in enumerate(strategies)]
    bucket = SortedBucket.of(arrival_time, event_time, carry.perfect_after)
    out = BucketCurves(bucket.times)
    backlog: SourceBacklog | None = None
    for i, s in enumerate(specs):
        if s.kind == "percentile":
            if backlog is None:
                backlog = SourceBacklog(
                    bucket, replica_arrival_time, replica_event_time, lo=carry.lo, hi=carry.hi
                )
                out.extra = backlog.times[~backlog.is_arrival]
            _add_percentile(out, i, s, bucket, backlog, carry)
            continue
        if s.kind in ("perfect", "oracle"):
            # the oracle's value before each arrival bounds the capped one: late counts
            # are the same (none), capped or not
            at_end, at_start = bucket.perfect[bucket.ends], bucket.perfect[bucket.starts]
            if s.kind == "perfect":
                at_end = np.minimum(at_end, bucket.times)
        else:
            flink = s.kind == "flink-bounded"
            at_end, at_start = _bounded(bucket, s.bound, carry.max_before, flink)
        out.values.append(at_end)
        out.late.append(_late(bucket.event_time, bucket.before_each_row(at_start)))
        out.local_max.append(MIN_TIMESTAMP)
    return out


def _checked(s: CurveSpec, i: int) -> _Spec:
    """A strategy's fields, checked (``ValueError`` names strategy ``i``)."""
    if s.kind in ("perfect", "oracle"):
        return _Spec(s.kind, 0, 1.0, False)
    if s.kind in ("bounded", "flink-bounded") and s.bound is not None:
        return _Spec(s.kind, check_duration(s.bound, f"strategies[{i}].bound"), 1.0, False)
    if s.kind == "percentile" and s.p is not None:
        return _Spec("percentile", 0, check_p(s.p), bool(s.hold))
    raise ValueError(
        f"strategies[{i}] must be perfect, oracle, bounded or flink-bounded (with a bound) "
        "or percentile (with a p), "
        f"got kind {s.kind!r}"
    )


def _late(e: np.ndarray, before: np.ndarray) -> int:
    """Elements whose event time is below the watermark just before their arrival."""
    return int(np.count_nonzero(e < before))


def _bounded(
    bucket: SortedBucket, bound: int, max_before: int, flink: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The bounded curve after and before each arrival time: the running maximum event
    time (from the earlier buckets' ``max_before``) minus ``bound``; with ``flink``,
    Flink's ``max - bound - 1`` converted (``+ 1``, MIN_TIMESTAMP at or below it)."""
    e = bucket.event_time
    seen = np.empty(e.size + 1, dtype=np.int64)  # max event time of the first i rows
    seen[0] = max_before
    if e.size:
        np.maximum.accumulate(np.maximum(e, max_before), out=seen[1:])
    if not flink:
        return minus_clamped(seen[bucket.ends], bound), minus_clamped(seen[bucket.starts], bound)
    return _flink_core(seen[bucket.ends], bound), _flink_core(seen[bucket.starts], bound)


def _flink_core(seen: np.ndarray, bound: int) -> np.ndarray:
    """Flink's bounded watermark ``seen - bound - 1`` (clamped) in the core convention."""
    w = minus_clamped(seen, bound + 1)
    return np.where(w <= MIN_TIMESTAMP, MIN_TIMESTAMP, w + 1)


def _add_percentile(
    out: BucketCurves,
    i: int,
    s: _Spec,
    bucket: SortedBucket,
    backlog: SourceBacklog,
    carry: BucketCarry,
) -> None:
    """Strategy ``i``'s latched percentile curve, late count and carry candidates."""
    c = carry.latched.get(i)
    latched = _latch(backlog.values(s.p, hold=s.hold), c)
    out.values.append(latched[backlog.is_arrival])
    out.extra_values[i] = latched[~backlog.is_arrival]
    before = bucket.before_each_row(_just_before(latched, backlog.arrival_pos, c))
    is_late = bucket.event_time < before
    out.late.append(int(np.count_nonzero(is_late)))
    out.local_max.append(int(latched[-1]) if latched.size else MIN_TIMESTAMP)
    if c is None and carry.lo > MIN_TIMESTAMP:
        cand = ~is_late & (bucket.event_time < carry.lo)
        out.candidates[i] = (bucket.event_time[cand], before[cand])


def _latch(raw: np.ndarray, carry: int | None) -> np.ndarray:
    """The running maximum of ``raw``, from ``carry`` when it is known."""
    latched = raw.copy()
    if latched.size:
        np.maximum.accumulate(latched, out=latched)
        if carry is not None:
            np.maximum(latched, carry, out=latched)
    return latched


def _just_before(latched: np.ndarray, arrival_pos: np.ndarray, carry: int | None) -> np.ndarray:
    """The latched value just before each arrival time: at the last evaluation strictly
    before it, else the carry (MIN_TIMESTAMP when unknown). ``latched`` already includes
    the carry (:func:`_latch`)."""
    at = arrival_pos - 1
    start = MIN_TIMESTAMP if carry is None else carry
    return np.where(at >= 0, latched[np.maximum(at, 0)], start)


def backlog_percentile_curve(
    event_time: ArrayLike, arrival_time: ArrayLike, p: float, *, hold: bool = False
) -> StepSeries:
    """:func:`theory.watermarks.percentile_source.percentile_source_curve` of a whole trace through
    the bucket kernel (one bucket, no carries), as a compressed :class:`StepSeries`:
    ``percentile_curve(e, e, max(a, e), p, fallback=perfect_curve(e, a))`` (``hold``:
    ``fallback=None``). Checks the Spark path's kernel against theory's sweep."""
    if not isinstance(hold, bool):
        raise TypeError(f"hold must be a bool, got {hold!r}")
    e = time_column(event_time, "event_time")
    a = time_column(arrival_time, "arrival_time")
    same_length("event_time", e.size, arrival_time=a)
    order = np.lexsort((e, a))
    spec = _Spec("percentile", 0, check_p(p), hold)
    r = bucket_curves(a[order], e[order], _EMPTY, _EMPTY, [spec], BucketCarry())
    times, vals = r.steps(0)
    return StepSeries(times, vals, MIN_TIMESTAMP).compressed()
