"""Triggers: when a window's pane fires.

This module holds the watermark triggers the foundation needs; the full Beam trigger
language (early and late firings, counts, processing time, composites) extends it.

- :class:`DefaultTrigger`: Beam's default, ``Repeatedly(AfterWatermark())``: one ON_TIME
  pane when the input watermark passes ``window.max_timestamp``, then one LATE pane each
  time late data arrives for the window, until it is garbage-collected. Never finishes.
- :class:`AfterWatermark`: the book's ``AtWatermark()``: one pane when the watermark
  passes the end of the window, then the trigger is finished and the window closed; later
  data for it is dropped and counted as ``closed``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DefaultTrigger:
    """Fire at the watermark, then once per arrival of late data; never finishes."""

    def finishes_after_watermark(self) -> bool:
        """False: the window stays open for late panes until garbage collection."""
        return False


@dataclass(frozen=True)
class AfterWatermark:
    """Fire once when the watermark passes the end of the window, then close it."""

    def finishes_after_watermark(self) -> bool:
        """True: the first watermark pane is the last one."""
        return True


Trigger = DefaultTrigger | AfterWatermark
