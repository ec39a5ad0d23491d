"""Flink's job watermark over several inputs with ``withIdleness``: each input a source
with ``BoundedOutOfOrdernessWatermarks`` wrapped in ``WatermarksWithIdleness``, emitting
periodically, all combined by the ``StatusWatermarkValve`` (all times µs).

Each input's outputs come from :func:`theory.flink.periodic_watermarks` (timers at the
multiples of ``interval``, checked against the Flink jars), run until the timer that
reads the last row of the whole trace, so an input that stopped, or has not started, is
declared idle once more than ``idle_timeout`` passed without a row. The valve
(:class:`theory.flink.valve.StatusWatermarkValve`) then leaves it out of the minimum
until it emits again, and realigns it once it catches up. At one timer the inputs'
outputs go through the valve in input order.

This is the ``idle_timeout`` convention of :mod:`theory.experiments.systems`; without it
(Beam's bounded estimator behind a Flatten, Spark's ``multipleWatermarkPolicy=min``,
Flink without ``withIdleness``) an input that stops holds the job's watermark forever.
"""

from __future__ import annotations

import numpy as np

from theory.flink.conventions import flink_to_core
from theory.flink.generation import KIND_IDLE, KIND_WATERMARK, periodic_watermarks
from theory.flink.valve import StatusWatermarkValve, StreamStatus

__all__ = ["flink_idle_watermarks"]


def flink_idle_watermarks(
    event_time: np.ndarray,
    arrival_time: np.ndarray,
    codes: np.ndarray,
    *,
    bound: int,
    interval: int,
    idle_timeout: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The valve's output watermarks as ``(times, watermarks)`` (processing µs; core
    convention: no more event times ``< W``), in order, strictly increasing. Rows are in
    arrival order, ``codes`` their input ``0..k-1``; ``bound``, ``interval`` and
    ``idle_timeout`` are checked by :func:`periodic_watermarks`."""
    n = int(arrival_time.size)
    if n == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e
    until = max(interval, -(-int(arrival_time[-1]) // interval) * interval)
    times, channels, kinds, values = [], [], [], []
    for p in range(int(codes.max()) + 1):
        mine = codes == p
        out = periodic_watermarks(
            event_time[mine],
            arrival_time[mine],
            bound=bound,
            interval=interval,
            until=until,
            idle_timeout=idle_timeout,
        )
        times.append(out.times)
        channels.append(np.full(out.times.size, p, dtype=np.int64))
        kinds.append(out.kinds)
        values.append(out.values)
    t, c, k, v = (np.concatenate(x) for x in (times, channels, kinds, values))
    seq = np.arange(t.size)
    order = np.lexsort((seq, c, t))  # by time, then input, each input's outputs in order
    valve = StatusWatermarkValve(len(times))
    on_watermark, on_status = valve.input_watermark, valve.input_status
    idle, active = StreamStatus.IDLE, StreamStatus.ACTIVE
    out_t: list[int] = []
    out_w: list[int] = []
    for ti, ci, ki, vi in zip(
        t[order].tolist(), c[order].tolist(), k[order].tolist(), v[order].tolist(), strict=True
    ):
        if ki == KIND_WATERMARK:
            emitted = on_watermark(ci, vi)
        else:
            emitted = on_status(ci, idle if ki == KIND_IDLE else active)
        for w in emitted:  # usually none
            if isinstance(w, int):
                out_t.append(ti)
                out_w.append(w)
    return (
        np.asarray(out_t, dtype=np.int64),
        flink_to_core(np.asarray(out_w, dtype=np.int64)),
    )
