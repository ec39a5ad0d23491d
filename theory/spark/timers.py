"""Spark's event-time timers in the state APIs, in µs (Spark keeps them in ms).

The two APIs compare a timer with the batch's watermark differently (measured on Spark
4.3, ``tests/structured_oracle/test_structured_timers.py``):

- ``applyInPandasWithState`` (``GroupStateTimeout.EventTimeTimeout``): a key's timeout
  fires when ``watermark > timeout``, so not in the batch whose watermark equals it;
- ``transformWithState`` (``timeMode="EventTime"``, which needs the RocksDB state store
  provider): a timer fires when ``timer <= watermark``.

:func:`timer_fires` and :func:`fired_timers` state the rule; :func:`run_timers` runs it
over micro-batches (the batches and watermarks of :func:`theory.spark.batch_watermarks`)
for the usual pattern: each key's rows set its one timer to ``max(event ms) + timeout``,
replacing the previous one, and a fired timer is cleared. In a batch the new rows are
handled first, then the timers that fire under the batch's watermark. Rows whose event
time is ``<=`` the previous batch's watermark are late and dropped, as Spark's late-event
filter on the event-time column does.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from theory.columns import check_duration, check_timestamp
from theory.spark.conventions import spark_millis
from theory.spark.microbatch import Row, batch_watermarks, check_inputs

__all__ = ["STATE_APIS", "TimerBatch", "fired_timers", "run_timers", "timer_fires"]

#: The state APIs whose event-time timers this module models.
STATE_APIS: Final[tuple[str, ...]] = ("applyInPandasWithState", "transformWithState")


def _check_api(api: object) -> str:
    if not isinstance(api, str):
        raise TypeError(f"api must be a str, got {api!r}")
    if api not in STATE_APIS:
        raise ValueError(f"unknown state api {api!r}: expected one of {STATE_APIS}")
    return api


def timer_fires(timer: int, watermark: int, api: str) -> bool:
    """Whether a timer at ``timer`` µs fires in a batch whose watermark is ``watermark``
    µs: ``watermark > timer`` for ``applyInPandasWithState``, ``timer <= watermark`` for
    ``transformWithState``."""
    t = check_timestamp(timer, "timer")
    w = check_timestamp(watermark, "watermark")
    return w > t if _check_api(api) == "applyInPandasWithState" else t <= w


def fired_timers(
    timers: Mapping[Hashable, int], watermark: int, api: str
) -> list[tuple[Hashable, int]]:
    """The ``(key, timer)`` of ``timers`` (one per key, µs) that fire in a batch with this
    watermark (µs), in timer order, then key order."""
    return sorted(
        ((k, t) for k, t in timers.items() if timer_fires(t, watermark, api)),
        key=lambda kt: (kt[1], repr(kt[0])),
    )


@dataclass(frozen=True)
class TimerBatch:
    """One micro-batch: its ``watermark`` (µs) and the ``(key, timer_µs)`` that fired."""

    batch_id: int
    watermark: int
    fired: tuple[tuple[Hashable, int], ...]


def run_timers(
    inputs: Sequence[Sequence[Sequence[Row]]],
    *,
    delay: int,
    timeout: int,
    api: str,
    multiple_watermark_policy: str = "min",
    no_data_batches: bool = True,
) -> list[TimerBatch]:
    """The timers that fire in each micro-batch (see the module docstring): each key's
    timer is its latest batch's ``max(event ms) + timeout`` (µs in, ms inside)."""
    _check_api(api)
    timeout_ms = spark_millis(check_duration(timeout, "timeout"))
    data = check_inputs(inputs)
    clocks = batch_watermarks(
        data,
        delay=delay,
        multiple_watermark_policy=multiple_watermark_policy,
        no_data_batches=no_data_batches,
    )
    timers: dict[Hashable, int] = {}
    out: list[TimerBatch] = []
    for clock in clocks:
        latest: dict[Hashable, int] = {}
        for batches in data:
            rows = batches[clock.batch_id] if clock.batch_id < len(batches) else []
            for key, ts in rows:
                if ts > clock.late_watermark:
                    latest[key] = max(latest.get(key, 0), spark_millis(ts))
        for key, ms in latest.items():
            timers[key] = (ms + timeout_ms) * 1000
        fired = fired_timers(timers, clock.watermark, api)
        for key, _ in fired:
            del timers[key]
        out.append(TimerBatch(clock.batch_id, clock.watermark, tuple(fired)))
    return out
