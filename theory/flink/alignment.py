"""Flink's watermark alignment (``WatermarkStrategy.withWatermarkAlignment``), in µs.

Sources whose watermark runs ahead of the group's minimum by more than
``max_allowed_drift`` are paused: :func:`simulate_alignment` is a small deterministic model
of Flink 2.3's ``SourceOperator`` and ``SourceCoordinator``. Watermarks are in Flink's
convention (``W``: no more elements with timestamp ``<= W``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import ArrayLike

from theory.columns import check_count, check_duration, time_column
from theory.flink.conventions import flink_bounded_watermark
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["DEFAULT_ALIGNMENT_BUFFER", "AlignmentResult", "simulate_alignment"]

#: Flink's default ``pipeline.watermark-alignment.buffer-size`` (2.3).
DEFAULT_ALIGNMENT_BUFFER: Final[int] = 3


@dataclass(frozen=True, eq=False)
class AlignmentResult:
    """What :func:`simulate_alignment` records (all µs).

    - ``read_time[s][i]``: processing time at which source ``s`` read its record ``i``.
    - ``watermark[s]``: a step series of source ``s``'s emitted watermark (Flink convention).
    - ``paused[s]``: the ``(from, to)`` processing-time intervals in which source ``s`` was
      paused (``to`` is when it resumed, or the end of the run).
    - ``announce_times`` / ``max_desired``: each coordinator announcement
      (``group minimum + max_allowed_drift``).
    - ``order``: ``(source, index)`` of every record in the order read (by read time, then
      source, then index).
    """

    read_time: list[np.ndarray]
    watermark: list[StepSeries]
    paused: list[list[tuple[int, int]]]
    announce_times: np.ndarray
    max_desired: np.ndarray
    order: list[tuple[int, int]] = field(repr=False)
    end_time: int = 0


def simulate_alignment(
    sources: Sequence[ArrayLike],
    *,
    bound: int,
    max_allowed_drift: int,
    update_interval: int,
    tick: int,
    records_per_tick: int = 1,
    buffer_size: int = DEFAULT_ALIGNMENT_BUFFER,
    max_ticks: int = 10_000_000,
) -> AlignmentResult:
    """Watermark alignment (``WatermarkStrategy.withWatermarkAlignment``): sources whose
    watermark runs ahead of the group's minimum by more than ``max_allowed_drift`` are paused.

    ``sources[s]`` lists source ``s``'s record event times (µs) in the order it reads them. A
    small deterministic model of Flink 2.3's ``SourceOperator`` and ``SourceCoordinator``:

    - Processing time advances in ticks: ``t_n = n * tick`` µs, ``n = 1, 2, ...``. In each
      tick every source that is not paused and not exhausted reads its next
      ``records_per_tick`` records, stamped ``t_n``; then it emits its bounded
      out-of-orderness watermark ``max - bound - 1`` if that is higher (a periodic emit per
      tick). A source has no watermark (``UNINITIALIZED``) before its first record.
    - At every ``t_n`` that is a multiple of ``update_interval`` (which must be a multiple of
      ``tick``), after reading: each source pushes its latest watermark into a ring of
      ``buffer_size`` samples (initially ``UNINITIALIZED``) and reports the latest to the
      coordinator (exhausted sources report ``MAX``, as idle ones do; uninitialized ones report
      nothing); the coordinator announces ``max_desired = min(last report of every source) +
      max_allowed_drift``; every source is then paused iff ``max_desired`` is below the oldest
      sample in its ring (``buffer_size = 0``: the latest watermark, Flink's pre-2.3 rule). The
      announcement reaches sources with no delay (Flink's takes up to two update intervals;
      the ring absorbs that).
    - The run ends when every source is exhausted.

    The source holding the group minimum is never paused, so the run always ends.
    """
    b = check_duration(bound, "bound")
    drift = check_duration(max_allowed_drift, "max_allowed_drift")
    dt = check_duration(tick, "tick", allow_zero=False)
    upd = check_duration(update_interval, "update_interval", allow_zero=False)
    if upd % dt:
        raise ValueError(f"update_interval={upd} µs must be a multiple of tick={dt} µs")
    per_tick = check_count(records_per_tick, "records_per_tick", minimum=1)
    ring_size = check_count(buffer_size, "buffer_size")
    logs = [time_column(s, f"sources[{i}]") for i, s in enumerate(sources)]
    if not logs:
        raise ValueError("simulate_alignment needs at least one source")
    readers = [_Reader(log, ring_size) for log in logs]
    coordinator = _Coordinator(drift)
    n = 0
    while not all(r.exhausted for r in readers):
        n += 1
        if n > max_ticks:
            raise RuntimeError(f"simulate_alignment did not finish within {max_ticks} ticks")
        now = n * dt
        for r in readers:
            if r.paused_since is None and not r.exhausted:
                r.read(now, per_tick, b)
        if n % (upd // dt) == 0:
            coordinator.update(readers, now)
    return _result(readers, coordinator, n * dt)


class _Reader:
    """One source in :func:`simulate_alignment`: its records, what it has read, its emitted
    watermarks, the ring of sampled watermarks and its pauses (all µs)."""

    def __init__(self, log: np.ndarray, ring_size: int) -> None:
        self.log = log
        self.pos = 0  # records read
        self.exhausted = log.size == 0  # every record read
        self.max_seen: int | None = None
        self.latest: int | None = None  # last emitted watermark; None = UNINITIALIZED
        self.ring: list[int | None] = [None] * ring_size  # oldest first
        self.paused_since: int | None = None
        self.pauses: list[tuple[int, int]] = []
        self.reads = np.zeros(log.size, dtype=np.int64)
        self.wm_t: list[int] = []
        self.wm_v: list[int] = []

    def read(self, now: int, count: int, bound: int) -> None:
        """Read up to ``count`` records at ``now``, then the periodic emit: the bounded
        out-of-orderness watermark if it rose."""
        hi = min(self.pos + count, self.log.size)
        self.reads[self.pos : hi] = now
        top = int(self.log[self.pos : hi].max())
        self.max_seen = top if self.max_seen is None else max(self.max_seen, top)
        self.pos = hi
        self.exhausted = hi == self.log.size
        w = flink_bounded_watermark(self.max_seen, bound)
        if w > MIN_TIMESTAMP and (self.latest is None or w > self.latest):
            self.latest = w
            self.wm_t.append(now)
            self.wm_v.append(w)

    def sample(self) -> None:
        """Push the latest watermark into the ring, dropping the oldest sample."""
        if self.ring:
            self.ring.append(self.latest)
            self.ring.pop(0)

    def report(self) -> int | None:
        """What the source reports: ``MAX`` once exhausted, else its latest watermark (None:
        nothing, it is uninitialized)."""
        return MAX_TIMESTAMP if self.exhausted else self.latest

    def obey(self, max_desired: int, now: int) -> None:
        """Pause iff ``max_desired`` is below the oldest sample (the latest watermark without a
        ring); an exhausted source is never paused."""
        oldest = self.ring[0] if self.ring else self.latest
        pause = oldest is not None and max_desired < oldest and not self.exhausted
        if pause and self.paused_since is None:
            self.paused_since = now
        elif not pause and self.paused_since is not None:
            self.pauses.append((self.paused_since, now))
            self.paused_since = None


class _Coordinator:
    """The ``SourceCoordinator``: announces ``min(reports) + max_allowed_drift`` (µs)."""

    def __init__(self, drift: int) -> None:
        self.drift = drift
        self.times: list[int] = []
        self.max_desired: list[int] = []

    def update(self, readers: list[_Reader], now: int) -> None:
        """One update interval at ``now``: sample, report, announce, pause or resume. No
        announcement while no source has reported (all uninitialized)."""
        for r in readers:
            r.sample()
        reports = [x for x in (r.report() for r in readers) if x is not None]
        if not reports:
            return
        desired = min(min(reports) + self.drift, MAX_TIMESTAMP)
        self.times.append(now)
        self.max_desired.append(desired)
        for r in readers:
            r.obey(desired, now)


def _result(readers: list[_Reader], coordinator: _Coordinator, end: int) -> AlignmentResult:
    """The run's record; a source still paused at ``end`` gets a pause ending there."""
    for r in readers:
        if r.paused_since is not None:
            r.pauses.append((r.paused_since, end))
    order = sorted(
        (int(t), s, i) for s, r in enumerate(readers) for i, t in enumerate(r.reads.tolist())
    )
    return AlignmentResult(
        read_time=[r.reads for r in readers],
        watermark=[
            StepSeries(np.array(r.wm_t, np.int64), np.array(r.wm_v, np.int64), MIN_TIMESTAMP)
            for r in readers
        ],
        paused=[r.pauses for r in readers],
        announce_times=np.array(coordinator.times, dtype=np.int64),
        max_desired=np.array(coordinator.max_desired, dtype=np.int64),
        order=[(s, i) for _, s, i in order],
        end_time=end,
    )
