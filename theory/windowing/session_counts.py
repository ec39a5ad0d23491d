"""Count firings on sessions: ``AfterWatermark(early=AfterCount(n), late=AfterCount(m))``
(either side optional) and ``Repeatedly(AfterCount(n))`` on
:class:`~theory.windowing.windows.Sessions`, for :mod:`theory.windowing.session_path`.
All times are µs.

The session path takes no late data, so the ``late`` trigger never fires and every batch
(a session's rows of one event) comes before the session's ON_TIME pane. It also takes
here only sessions that are *one part at every event* (a single fresh part, see
``session_path._fresh_parts``): the rows arrived so far are then one window, which each
batch merges into, so the engine's trigger state is that of a single window:

- **Counting.** The early count adds each batch's size and fires an EARLY pane once it
  reaches n, then restarts (``count_path._count_fires``, one segment per session); the
  count survives merges (Beam sums ``AfterCount``'s state).
- **Window and pane index.** The pane's window is the part after its batch: from the
  smallest to the largest timestamp so far plus the gap. A batch that widens it merges
  the part into a new window, whose pane index starts again at 0; one inside it leaves
  the window, and its index, as they were. The ON_TIME pane's index counts the early
  panes of the final window.
- **Timestamp.** Early panes of ``AfterWatermark`` keep their holds (the trigger has an
  ON_TIME pane), so a pane's timestamp combines every hold so far: the window's
  ``max_timestamp`` under END_OF_WINDOW (holds only grow), the smallest or largest
  timestamp so far under EARLIEST or LATEST; the holds and watermarks are the
  watermark-only trigger's. ``Repeatedly(AfterCount)`` has no ON_TIME pane: each pane
  releases the holds, so its timestamp combines the holds of the batches since the last
  pane, and each batch holds (at its own window's ``max_timestamp``, or its smallest or
  largest timestamp) from its event until its session's next pane, or for ever (a
  stall: no pane closes a session).
- **Values.** Accumulating: every row so far; discarding: the rows since the last pane
  (the ON_TIME pane may then be empty).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from theory.windowing.count_path import CountTriggers, _count_fires, _repeated_count
from theory.windowing.fast_path import _run_starts
from theory.windowing.strategy import TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import AfterWatermark, Repeatedly

__all__ = ["EarlyPanes", "early_panes", "session_counts"]


def session_counts(strategy: WindowingStrategy) -> CountTriggers | None:
    """The counts of a trigger modelled on sessions (``early`` 0: none), or None: a
    watermark-only trigger, ``AfterWatermark`` with ``AfterCount`` sides, or
    ``Repeatedly(AfterCount)`` (``watermark`` False)."""
    trigger = strategy.trigger
    if trigger.watermark_only():
        return CountTriggers(True, 0, 0)
    if type(trigger) is Repeatedly:
        n = _repeated_count(trigger)
        return CountTriggers(False, n, 0) if n else None
    if type(trigger) is not AfterWatermark:
        return None
    early, late = _repeated_count(trigger.early), _repeated_count(trigger.late)
    if early is None or late is None:
        return None
    return CountTriggers(True, early, late)


class EarlyPanes(NamedTuple):
    """The early panes (by session, then event) and what they change in the ON_TIME
    panes (per session): values from ``on_lo`` (discarding), pane index ``on_index``.
    Values are positions in the rows by (session, arrival). ``holds``: under
    ``Repeatedly``, each batch's hold as an event interval ``[lo, hi]`` and its value
    (hold - 1 µs)."""

    sess: np.ndarray
    event: np.ndarray
    start: np.ndarray
    end: np.ndarray
    timestamp: np.ndarray
    pane_index: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    on_lo: np.ndarray
    on_index: np.ndarray
    holds: tuple[np.ndarray, np.ndarray, np.ndarray] | None


def early_panes(
    sess: np.ndarray,
    event: np.ndarray,
    ts: np.ndarray,
    s_first: np.ndarray,
    s_start: np.ndarray,
    n: int,
    gap: int,
    policy: TimestampCombiner,
    discarding: bool,
    repeated: bool,
    last_event: int,
) -> EarlyPanes | None:
    """The early panes of sessions that are one part at every event, given their rows by
    (session, arrival) (``sess``, ``event``, ``ts``; session ``s``'s rows start at
    ``s_first[s]``, its smallest timestamp is ``s_start[s]``), of an ``AfterWatermark``
    early count or (``repeated``) of ``Repeatedly(AfterCount(n))``; ``last_event``: the
    script's last event. None where the per-session offsets would overflow int64."""
    n_s = s_first.size
    b_lo = np.flatnonzero(_run_starts(sess, event))  # batches: runs of (session, event)
    b_hi = np.append(b_lo[1:], sess.size)
    b_sess = sess[b_lo]
    offset = ts - s_start[sess]  # since the session's start, >= 0
    span = int(offset.max()) + 1 if offset.size else 1
    if float(n_s) * float(span) >= 2.0**62:
        return None
    base = s_start[b_sess]
    b_min = np.minimum.reduceat(offset, b_lo)  # per batch, since the session's start
    b_max = np.maximum.reduceat(offset, b_lo)
    lift = b_sess * span  # later sessions above (cummax) or below (cummin) earlier ones
    lowest = np.minimum.accumulate(b_min - lift) + lift  # so far in the session
    highest = np.maximum.accumulate(b_max + lift) - lift
    start, end = base + lowest, base + highest + gap
    changed = _run_starts(b_sess, start, end)  # a new window: index from 0
    fires = _count_fires(b_sess, b_hi - b_lo, n)
    nb = b_lo.size
    at = np.arange(nb)
    before = np.cumsum(fires) - fires  # firings before each batch
    epoch = np.maximum.accumulate(np.where(changed, at, 0))  # the window's first batch
    last = np.append(np.flatnonzero(b_sess[1:] != b_sess[:-1]), nb - 1)  # per session
    on_index = (before + fires)[last] - before[epoch[last]]
    # discarding: values since the last pane before (the session's first row if none)
    after_fire = np.where(fires, b_hi, -1)
    prior = np.maximum(np.maximum.accumulate(np.append(-1, after_fire[:-1])), s_first[b_sess])
    on_lo = np.maximum(np.maximum.accumulate(after_fire)[last], s_first)
    if not discarding:
        prior, on_lo = s_first[b_sess], s_first
    b_min, b_max = b_min + base, b_max + base
    lo_ts, hi_ts = base + lowest, base + highest  # the smallest, largest timestamp so far
    holds = None
    if repeated:  # combine the holds since the last pane (released at each pane)
        seg_first = _run_starts(b_sess) | np.append(True, fires[:-1])
        seg = np.cumsum(seg_first) - 1
        starts = np.flatnonzero(seg_first)
        lo_ts, hi_ts = (
            np.minimum.reduceat(b_min, starts)[seg],
            np.maximum.reduceat(b_max, starts)[seg],
        )
        # each batch holds until its segment's pane (in the same event: not at all)
        seg_last = np.append(starts[1:], nb) - 1
        release = np.where(fires[seg_last], event[b_lo][seg_last] - 1, last_event)[seg]
        hold = {
            TimestampCombiner.OUTPUT_AT_EOW: end - 1,
            TimestampCombiner.OUTPUT_AT_LATEST: b_max,
        }.get(policy, b_min)
        holds = (event[b_lo], release, hold - 1)
    if policy is TimestampCombiner.OUTPUT_AT_EOW:
        stamp = end - 1
    elif policy is TimestampCombiner.OUTPUT_AT_LATEST:
        stamp = hi_ts
    else:
        stamp = lo_ts
    f = np.flatnonzero(fires)
    return EarlyPanes(
        b_sess[f],
        event[b_lo[f]],
        start[f],
        end[f],
        stamp[f],
        (before - before[epoch])[f],
        prior[f],
        b_hi[f],
        on_lo,
        on_index,
        holds,
    )
