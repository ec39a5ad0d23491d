"""Dataflow-style out-of-band watermark aggregation with leased key ranges.

Workers do not send watermarks downstream with the data. Each key range is leased to one
worker, which reports the range's watermark to a :class:`CentralAggregator`; the global
watermark is the minimum over ranges. Leases make sure only the owner is believed:

- every (re)assignment of a range bumps its **epoch**, the fencing token; a report must
  carry the range's current epoch, come from the current holder, and arrive before the
  lease expires (``now < expiry``), else it is rejected and counted by reason;
- per-range watermarks are latched monotonic (a lower report is accepted but does not
  lower the range; it is counted in ``regressions``), and so is the global watermark;
- an expired or released lease leaves the range **unowned**: it keeps its last accepted
  watermark, so it holds the global watermark until a new holder advances it;
- :meth:`CentralAggregator.snapshot` is the persisted per-range state (watermark, epoch);
  a new aggregator restored from it starts no lower and fences every pre-crash lease.

Times are int µs: watermarks in ``[MIN_TIMESTAMP, MAX_TIMESTAMP]`` (the aggregator only
compares them, in the caller's convention), ``now`` the aggregator's processing time,
which must not go backwards. Bad input (unknown worker or range, an epoch from the future,
non-int times or epochs, ``now`` going backwards) raises and leaves the state unchanged.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from theory.columns import as_int, check_count, check_duration, check_timestamp
from theory.structures import IndexedMinHeap
from theory.time import MIN_TIMESTAMP

__all__ = ["REJECT_REASONS", "CentralAggregator", "Lease", "WatermarkHolder"]

#: The reasons a report is rejected, the keys of ``CentralAggregator.rejected``.
REJECT_REASONS = ("stale_epoch", "not_holder", "expired")


@dataclass(frozen=True)
class Lease:
    """A range's lease: its holder, epoch and expiry (µs, processing time, exclusive)."""

    holder: Hashable
    epoch: int
    expiry: int


@dataclass(frozen=True)
class WatermarkHolder:
    """What :meth:`CentralAggregator.why` returns: the range holding the global watermark.

    ``owned`` is False when the range has no lease (never assigned, expired, released or
    restored); ``lease_expired`` is True when it has a lease whose expiry has passed at
    the aggregator's latest ``now`` but :meth:`CentralAggregator.expire` has not yet run.
    """

    range_id: Hashable
    watermark: int
    owned: bool
    holder: Hashable | None
    epoch: int
    lease_expired: bool

    def __str__(self) -> str:
        if not self.owned:
            who = "unowned"
        elif self.lease_expired:
            who = f"held by {self.holder!r} (lease expired, epoch {self.epoch})"
        else:
            who = f"held by {self.holder!r} (epoch {self.epoch})"
        return f"range {self.range_id!r} at {self.watermark}, {who}"


class CentralAggregator:
    """The central watermark aggregator over a fixed set of key ranges.

    ``ranges`` are hashable ids (strings, ``(lo, hi)`` tuples, ...), in a fixed order
    used to break ties in :meth:`why`. ``workers`` are the known worker ids; more can be
    added with :meth:`add_worker`. Every range starts unowned, at epoch 0 and watermark
    ``MIN_TIMESTAMP``.

    The global watermark is the minimum of the range watermarks, kept in an
    :class:`~theory.structures.IndexedMinHeap` of the ranges keyed by watermark rather than
    a :class:`~theory.structures.Frontier`: a report moves one range's key in place, where
    the frontier retracts and adds a count and reports the minimum twice, which measured
    slower; its cheap path (``move``, no report) is still slower than the heap on the same
    pattern of moves (``bench/frontier.py``).
    """

    def __init__(self, ranges: Iterable[Hashable], workers: Iterable[Hashable] = ()) -> None:
        ids = list(ranges)
        if not ids:
            raise ValueError("an aggregator needs at least one key range")
        index: dict[Hashable, int] = {}
        for r in ids:
            if r in index:
                raise ValueError(f"duplicate key range {r!r}")
            index[r] = len(index)
        self._ranges: tuple[Hashable, ...] = tuple(ids)
        self._index = index
        self._workers: set[Hashable] = set(workers)
        n = len(ids)
        self._wm: list[int] = [MIN_TIMESTAMP] * n  # latched per-range watermark
        self._epoch: list[int] = [0] * n
        self._lease: list[Lease | None] = [None] * n
        self._last_holder: list[Hashable | None] = [None] * n  # holder of the last lease
        self._heap = IndexedMinHeap.from_keys(self._wm)  # every range, keyed by watermark
        self._global = MIN_TIMESTAMP
        self._now = MIN_TIMESTAMP
        #: Rejected reports by reason (see ``REJECT_REASONS``).
        self.rejected: dict[str, int] = dict.fromkeys(REJECT_REASONS, 0)
        #: Accepted reports whose watermark was below the range's (latched, not lowered).
        self.regressions = 0
        #: Accepted reports.
        self.accepted = 0

    # -- validation (raises, never mutates) ---------------------------------------------

    def _range(self, range_id: Hashable) -> int:
        try:
            return self._index[range_id]
        except (KeyError, TypeError):
            raise KeyError(f"unknown key range {range_id!r}") from None

    def _worker(self, worker: Hashable) -> Hashable:
        try:
            known = worker in self._workers
        except TypeError:
            known = False
        if not known:
            raise KeyError(f"unknown worker {worker!r}; add it with add_worker()")
        return worker

    def _clock(self, now: int) -> int:
        t = check_timestamp(now, "now")
        if t < self._now:
            raise ValueError(f"now={t} µs is before the aggregator's latest now={self._now} µs")
        return t

    # -- leases -------------------------------------------------------------------------

    def add_worker(self, worker: Hashable) -> None:
        """Make ``worker`` known (idempotent)."""
        hash(worker)
        self._workers.add(worker)

    def assign(self, *, range_id: Hashable, worker: Hashable, now: int, lease_duration: int) -> int:
        """Lease ``range_id`` to ``worker`` until ``now + lease_duration`` (µs, exclusive);
        return the new epoch. Every assignment, to a new or the same worker, bumps the
        epoch, which fences reports made under earlier leases; an unexpired lease of
        another worker is preempted."""
        i = self._range(range_id)
        self._worker(worker)
        t = self._clock(now)
        d = check_duration(lease_duration, "lease_duration", allow_zero=False)
        self._now = t
        epoch = self._epoch[i] + 1
        self._epoch[i] = epoch
        self._lease[i] = Lease(worker, epoch, t + d)
        self._last_holder[i] = worker
        return epoch

    def renew(
        self, *, range_id: Hashable, worker: Hashable, epoch: int, now: int, lease_duration: int
    ) -> bool:
        """Extend the current holder's unexpired lease to ``now + lease_duration`` without a
        new epoch. False (counted like a report) if the lease is not the caller's."""
        i, e, t = self._check_report(worker, range_id, epoch, now)
        d = check_duration(lease_duration, "lease_duration", allow_zero=False)
        self._now = t
        reason = self._fence(i, worker, e, t)
        if reason is not None:
            self.rejected[reason] += 1
            return False
        lease = self._lease[i]
        assert lease is not None
        self._lease[i] = Lease(worker, e, max(lease.expiry, t + d))
        return True

    def release(self, *, range_id: Hashable, worker: Hashable, epoch: int, now: int) -> bool:
        """The holder gives the range up; it becomes unowned and holds its watermark.
        False (counted like a report) if the lease is not the caller's."""
        i, e, t = self._check_report(worker, range_id, epoch, now)
        self._now = t
        reason = self._fence(i, worker, e, t)
        if reason is not None:
            self.rejected[reason] += 1
            return False
        self._lease[i] = None
        return True

    def expire(self, now: int) -> list[Hashable]:
        """Release every lease with ``expiry <= now``; return those ranges, in range order.
        Each becomes unowned and keeps (holds the global watermark at) its watermark."""
        t = self._clock(now)
        self._now = t
        gone = []
        for i, lease in enumerate(self._lease):
            if lease is not None and lease.expiry <= t:
                self._lease[i] = None
                gone.append(self._ranges[i])
        return gone

    # -- reports ------------------------------------------------------------------------

    def _check_report(
        self, worker: Hashable, range_id: Hashable, epoch: int, now: int
    ) -> tuple[int, int, int]:
        i = self._range(range_id)
        self._worker(worker)
        e = check_count(epoch, "epoch", minimum=1)  # the first assignment is epoch 1
        if e > self._epoch[i]:
            # no lease was ever granted under it: a bug in the caller, not a stale report
            raise ValueError(
                f"epoch {e} for range {range_id!r} is from the future: "
                f"the range's current epoch is {self._epoch[i]}"
            )
        return i, e, self._clock(now)

    def _fence(self, i: int, worker: Hashable, epoch: int, now: int) -> str | None:
        """The reason a call under (worker, epoch) at ``now`` is not the lease holder's,
        or None. Checked in order: stale epoch, not the holder, lease expired."""
        if epoch < self._epoch[i]:
            # made under an earlier lease: whoever sent it, it has been fenced off
            return "stale_epoch"
        lease = self._lease[i]
        if lease is None:
            # the current epoch's lease is gone: expired/released if this was its holder
            return "expired" if worker == self._last_holder[i] else "not_holder"
        if worker != lease.holder:
            return "not_holder"
        if now >= lease.expiry:
            # the lease ran out, even if expire() has not released it yet
            return "expired"
        return None

    def report(
        self, *, worker: Hashable, range_id: Hashable, epoch: int, watermark: int, now: int
    ) -> bool:
        """``worker`` reports ``watermark`` (µs) for ``range_id`` under lease ``epoch`` at
        processing time ``now``. True if accepted; False if rejected (counted in
        ``rejected`` by reason). Raises for an unknown worker or range, or an epoch from
        the future (above the range's current epoch)."""
        i, e, t = self._check_report(worker, range_id, epoch, now)
        w = check_timestamp(watermark, "watermark")
        self._now = t
        reason = self._fence(i, worker, e, t)
        if reason is not None:
            self.rejected[reason] += 1
            return False
        self.accepted += 1
        if w < self._wm[i]:
            self.regressions += 1  # latched: a range's watermark never goes back
        elif w > self._wm[i]:
            self._raise(i, w)
        return True

    def _raise(self, i: int, w: int) -> None:
        """Move range ``i``'s watermark up to ``w`` and the global watermark with it."""
        self._wm[i] = w
        self._heap.update(i, w)
        low = self._heap.keys[0]
        if low > self._global:
            self._global = low

    # -- queries ------------------------------------------------------------------------

    def global_watermark(self) -> int:
        """The minimum over ranges of their watermarks (latched monotonic), µs."""
        return self._global

    @property
    def ranges(self) -> tuple[Hashable, ...]:
        """The key range ids, in order."""
        return self._ranges

    @property
    def now(self) -> int:
        """The latest processing time seen (``MIN_TIMESTAMP`` before any), µs."""
        return self._now

    def range_watermark(self, range_id: Hashable) -> int:
        """The range's latched watermark, µs."""
        return self._wm[self._range(range_id)]

    def epoch(self, range_id: Hashable) -> int:
        """The range's current epoch (0 before its first assignment)."""
        return self._epoch[self._range(range_id)]

    def lease(self, range_id: Hashable) -> Lease | None:
        """The range's lease, or None if it is unowned."""
        return self._lease[self._range(range_id)]

    def why(self) -> WatermarkHolder:
        """The range holding the global watermark (the first in range order on ties)."""
        low = self._heap.keys[0]
        i = self._wm.index(low)
        lease = self._lease[i]
        return WatermarkHolder(
            range_id=self._ranges[i],
            watermark=low,
            owned=lease is not None,
            holder=None if lease is None else lease.holder,
            epoch=self._epoch[i],
            lease_expired=lease is not None and self._now >= lease.expiry,
        )

    # -- persistence --------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The persisted state, plain data: ``{"ranges": [(range_id, watermark, epoch),
        ...]}`` in range order. Leases are not persisted: a restored range is unowned
        until it is assigned again, at a higher epoch than any it had before."""
        return {"ranges": [(r, self._wm[i], self._epoch[i]) for i, r in enumerate(self._ranges)]}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Merge a snapshot into this aggregator without regressing: each range takes the
        max of its and the snapshot's watermark and epoch. A range whose epoch moves up
        loses its lease (it was granted under an older epoch). Validated as a whole
        first: an unknown range or malformed entry raises and changes nothing."""
        try:
            entries = list(snapshot["ranges"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed aggregator snapshot: {exc}") from None
        parsed: list[tuple[int, int, int]] = []
        for entry in entries:
            try:
                r, w, e = entry
            except (TypeError, ValueError):
                raise ValueError(f"malformed snapshot entry {entry!r}") from None
            e = as_int(e, "snapshot epoch")
            if e < 0:
                raise ValueError(f"snapshot epoch for range {r!r} is negative: {e}")
            parsed.append((self._range(r), check_timestamp(w, "snapshot watermark"), e))
        for i, w, e in parsed:
            if e > self._epoch[i]:
                self._epoch[i] = e
                self._lease[i] = None
            if w > self._wm[i]:
                self._raise(i, w)

    @classmethod
    def from_snapshot(
        cls, snapshot: Mapping[str, Any], workers: Iterable[Hashable] = ()
    ) -> CentralAggregator:
        """A new aggregator (after a crash) over the snapshot's ranges, restored from it:
        every range unowned, at its persisted watermark and epoch."""
        try:
            ranges = [entry[0] for entry in snapshot["ranges"]]
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"malformed aggregator snapshot: {exc}") from None
        agg = cls(ranges, workers)
        agg.restore(snapshot)
        return agg
