"""Spark Structured Streaming's conventions, in µs: names, checks and time arithmetic.

- Spark's watermark is whole **milliseconds**: ``EventTimeWatermarkExec`` keeps each
  row's event time as ``µs / 1000`` (Java's ``long`` division, truncating towards zero)
  and the delay of ``withWatermark`` is truncated to ms the same way
  (:func:`spark_millis`). Windows themselves keep µs.
- A row or window is late when its window's end is ``<= watermark``; a window is
  emitted (append mode) or evicted when its end is ``<= watermark``.
- The windows Spark's ``window()`` and ``session_window()`` express (:func:`check_window`):
  tumbling, sliding with ``slide <= size``, sessions with a static gap, all over event
  times ``>= 0`` (Spark's own window arithmetic is only exact after the epoch).

Each check raises ``ValueError`` (``TypeError`` for a wrong type) naming the parameter
and, where Spark itself refuses, Spark's reason.
"""

from __future__ import annotations

from typing import Final

from theory.columns import check_duration
from theory.windowing.windows import FixedWindows, Sessions, SlidingWindows, WindowFn

__all__ = [
    "MULTIPLE_WATERMARK_POLICIES",
    "OUTPUT_MODES",
    "SESSION_UPDATE_REFUSAL",
    "SparkWindow",
    "check_delay",
    "check_output_mode",
    "check_policy",
    "check_window",
    "spark_millis",
]

#: The output modes this profile runs (Spark's ``complete`` keeps every window forever
#: and never uses the watermark, so it is refused).
OUTPUT_MODES: Final[tuple[str, ...]] = ("append", "update")
#: ``spark.sql.streaming.multipleWatermarkPolicy`` values.
MULTIPLE_WATERMARK_POLICIES: Final[tuple[str, ...]] = ("min", "max")
#: Spark 4.3's reason for refusing session windows in update mode (its
#: ``STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION`` message).
SESSION_UPDATE_REFUSAL: Final[str] = (
    "Invalid streaming output mode: update. This output mode is not supported for session "
    "window streaming aggregations on streaming DataFrames/DataSets."
)

SparkWindow = FixedWindows | SlidingWindows | Sessions


def spark_millis(micros: int) -> int:
    """µs to Spark's ms as Java's ``long`` division does: truncating towards zero."""
    return micros // 1000 if micros >= 0 else -((-micros) // 1000)


def check_delay(delay: object) -> int:
    """The ``withWatermark`` delay threshold, µs, ``>= 0`` (Spark: "delay threshold should
    not be negative")."""
    return check_duration(delay, "delay")


def check_output_mode(output_mode: object) -> str:
    """``"append"`` or ``"update"``."""
    if not isinstance(output_mode, str):
        raise TypeError(f"output_mode must be a str, got {output_mode!r}")
    if output_mode not in OUTPUT_MODES:
        if output_mode == "complete":
            raise ValueError(
                "output_mode='complete' keeps every window and ignores the watermark; the "
                f"spark profile models {OUTPUT_MODES}"
            )
        raise ValueError(f"unknown output_mode {output_mode!r}: expected one of {OUTPUT_MODES}")
    return output_mode


def check_policy(policy: object) -> str:
    """``"min"`` or ``"max"`` (``spark.sql.streaming.multipleWatermarkPolicy``)."""
    if not isinstance(policy, str):
        raise TypeError(f"multiple_watermark_policy must be a str, got {policy!r}")
    if policy not in MULTIPLE_WATERMARK_POLICIES:
        raise ValueError(
            f"unknown multiple_watermark_policy {policy!r}: expected one of "
            f"{MULTIPLE_WATERMARK_POLICIES}"
        )
    return policy


def check_window(window: object, output_mode: str = "append") -> SparkWindow:
    """``window`` if Spark's ``window()``/``session_window()`` can express it under
    ``output_mode``: ``FixedWindows``, ``SlidingWindows`` with ``period <= size`` (Spark:
    "The slide duration must be less than or equal to the windowDuration"), or
    ``Sessions`` (refused in update mode, with Spark's reason). Offsets are Spark's
    ``startTime``, already normalised into ``[0, slide)``."""
    if isinstance(window, SlidingWindows):
        if window.period > window.size:
            raise ValueError(
                f"window: SlidingWindows(size={window.size}, period={window.period}) µs has "
                "period > size, which Spark cannot express (its window() requires the slide "
                "duration to be less than or equal to the window duration)"
            )
        return window
    if isinstance(window, FixedWindows):
        return window
    if isinstance(window, Sessions):
        if output_mode == "update":
            raise ValueError(
                f"window: Sessions in update mode: Spark refuses: {SESSION_UPDATE_REFUSAL}"
            )
        return window
    if isinstance(window, WindowFn):
        raise ValueError(
            f"window: {window!r} cannot be expressed in Spark's event-time windows (the spark "
            "profile takes FixedWindows, SlidingWindows or Sessions)"
        )
    raise TypeError(
        f"window must be a theory FixedWindows, SlidingWindows or Sessions, got {window!r}"
    )
