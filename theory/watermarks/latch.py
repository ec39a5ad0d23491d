"""The latch: every watermark here is monotonic, ``new = max(old, computed)``.

Why: a watermark ``W`` promises that no more non-late data with event time ``< W`` will
come, and downstream stages act on the promise (fire windows, drop state); a watermark
cannot take it back. A computed value below the latched one is therefore kept out and
counted in ``regressions``, a metric of how often the estimate was wrong, as Beam's
runners latch (docs/semantics.md, "Source watermarks"). Two counting rules, one home:

- :meth:`Latch._latch`: every computed value below the latched one counts (the source
  generators, recomputed after every element);
- :meth:`Latch._latch_estimate`: a percentile estimate counts only when it differs from
  the previous evaluation's, so re-evaluating an unchanged active set does not count
  twice, and the input watermark used when nothing is active never counts
  (:mod:`theory.watermarks.percentile`); :func:`latch_estimates` is its vectorised form.

Also here: the :class:`SourceWatermark` protocol and :class:`LatchedWatermark`, the base of
the incremental source generators (latch plus processing clock).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from theory.columns import check_timestamp
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = [
    "ArrivalClock","Latch", "LatchedWatermark", "SourceWatermark", "latch_estimates"]


class Latch:
    """A latched watermark value (µs) with its regression count (module docstring)."""

    __slots__ = ("_last", "_value", "regressions")

    def __init__(self, initial: int = MIN_TIMESTAMP) -> None:
        self._value: int = check_timestamp(initial, "initial")
        self.regressions: int = 0
        self._last: int | None = None  # the previous estimate (None: fallback or none)

    def _latch(self, computed: int) -> None:
        """Raise the value to ``computed``; a lower ``computed`` is a regression."""
        if computed < self._value:
            self.regressions += 1
        else:
            self._value = computed

    def _latch_estimate(self, estimate: int | None, fallback: int | None = None) -> int:
        """Latch an ``estimate`` (None: nothing active, then latch ``fallback`` if given,
        checked as ``input_watermark`` whether used or not, before any state changes);
        return the latched value (µs)."""
        if fallback is not None and (
            type(fallback) is not int or not MIN_TIMESTAMP <= fallback <= MAX_TIMESTAMP
        ):
            fallback = check_timestamp(fallback, "input_watermark")
        if estimate is not None:
            if estimate >= self._value:
                self._value = estimate
            elif estimate != self._last:
                self.regressions += 1
            self._last = estimate
            return self._value
        self._last = None
        if fallback is not None and fallback > self._value:
            self._value = fallback
        return self._value


def latch_estimates(
    raw: np.ndarray, estimated: np.ndarray, initial: int
) -> tuple[np.ndarray, int]:
    """:meth:`Latch._latch_estimate` over a sequence of evaluations (µs): ``raw[i]`` is the
    estimate where ``estimated[i]`` (something was active), else the fallback. Returns the
    running maximum from ``initial`` and the regressions."""
    if raw.size == 0:
        return raw.astype(np.int64), 0
    latched = np.maximum(raw, np.int64(initial))
    np.maximum.accumulate(latched, out=latched)
    below = raw[1:] < latched[:-1]  # below the latched value before this evaluation
    below &= estimated[1:]
    changed = raw[1:] != raw[:-1]
    changed |= ~estimated[:-1]  # after a fallback, any estimate is a new one
    below &= changed
    first = bool(estimated[0]) and int(raw[0]) < initial
    return latched, int(np.count_nonzero(below)) + first


# --------------------------------------------------------------------------- source generators


@runtime_checkable
class SourceWatermark(Protocol):
    """An incremental source watermark (event time, µs, Beam convention)."""

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        """Read one element (times in µs), in arrival order."""
        ...

    def current(self) -> int:
        """The latched watermark after everything observed so far (µs)."""
        ...

    @property
    def regressions(self) -> int:
        """How many computed values fell below the latched one (and were ignored)."""
        ...


class ArrivalClock:
    """The processing clock of an incremental reader: arrivals in order, and sealing.

    ``arrive(a)`` reads an element arriving at ``a`` (µs); ``advance(t)`` declares that
    every element arriving at or before ``t`` was read. Both are enforced because a value
    computed at ``t`` is only exact once everything up to ``t`` is in: an out-of-order
    arrival would silently give a watermark that claims more than was seen. Shared by the
    source generators and Flink's periodic emitter, which read elements the same way.
    """

    __slots__ = ("last_arrival", "sealed")

    def __init__(self) -> None:
        self.last_arrival: int | None = None
        self.sealed: int | None = None

    def arrive(self, arrival_time: int, *, commit: bool = True) -> int:
        """Check ``arrival_time`` against the order; record it when ``commit``."""
        a = check_timestamp(arrival_time, "arrival_time")
        if self.last_arrival is not None and a < self.last_arrival:
            raise ValueError(
                f"arrival_time={a} µs is before the previous arrival {self.last_arrival} µs: "
                "elements must be observed in arrival order"
            )
        if self.sealed is not None and a <= self.sealed:
            raise ValueError(
                f"arrival_time={a} µs is not after advance_to({self.sealed}): elements at or "
                "before that processing time were declared complete"
            )
        if commit:
            self.last_arrival = a
        return a

    def check_advance(self, processing_time: int) -> int:
        """Check that ``processing_time`` does not go back; does not seal (see advance)."""
        t = check_timestamp(processing_time, "processing_time")
        for prev, what in ((self.last_arrival, "an element arrived"), (self.sealed, "advanced")):
            if prev is not None and t < prev:
                raise ValueError(
                    f"processing_time={t} µs goes back in time: already {what} at {prev} µs"
                )
        return t

    def advance(self, processing_time: int) -> int:
        """Seal every arrival at or before ``processing_time``; return it as an int."""
        self.sealed = self.check_advance(processing_time)
        return self.sealed


class LatchedWatermark(Latch):
    """Base of the incremental source generators: the latch plus a processing clock.

    Elements are read in arrival order; ``advance_to(t)`` declares that every element
    arriving at or before ``t`` was read. Both are enforced because the value at ``t``
    is only exact once everything up to ``t`` is in: a late call would silently give a
    watermark that claims more than was seen. Subclasses implement :meth:`observe` and
    may override :meth:`_on_advance`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._clock = ArrivalClock()

    def current(self) -> int:
        """The latched watermark (µs); ``MIN_TIMESTAMP`` before any information."""
        return self._value

    def observe(self, event_time: int, arrival_time: int, partition: int = 0) -> None:
        """Read one element (µs) in arrival order."""
        raise NotImplementedError

    def advance_to(self, processing_time: int) -> None:
        """Processing time reached ``processing_time`` (µs) with every element at or before
        it observed. Only generators whose value moves with time alone change."""
        self._on_advance(self._clock.advance(processing_time))

    def _on_advance(self, t: int) -> None:
        """Hook for :meth:`advance_to`; the default changes nothing."""

    def _check_arrival(self, arrival_time: int, *, commit: bool = True) -> int:
        """Validate the arrival order; record it as the latest arrival when ``commit``."""
        return self._clock.arrive(arrival_time, commit=commit)

    def _commit_arrival(self, arrival_time: int) -> None:
        """Record an arrival checked earlier with ``commit=False``."""
        self._clock.last_arrival = arrival_time
