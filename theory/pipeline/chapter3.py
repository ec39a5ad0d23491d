"""The *Streaming Systems* chapter-3 example pipeline.

Mobile and console game sessions are each windowed into sessions (gap 1 min, fire at the
watermark, discarding), reduced to their session length, flattened, and averaged in fixed
2-minute windows (``Mean.globally``)::

    mobile_in  -> mobile_sessions  --\\
                                      flatten -> average_session_length
    console_in -> console_sessions --/
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from theory.data.blocks import BlockedTrace, session_blocks
from theory.data.trace import Trace
from theory.pipeline.processing import INSTANT, Processing
from theory.pipeline.stages import Flatten, GroupByWindow, Pipeline, Source
from theory.time import MINUTE
from theory.windowing.strategy import (
    AccumulationMode,
    OutputPolicy,
    TimestampCombiner,
    WindowingStrategy,
)
from theory.windowing.triggers import AfterWatermark
from theory.windowing.windows import FixedWindows, Sessions

SESSION_GAP = 1 * MINUTE
AVERAGE_WINDOW = 2 * MINUTE
#: Users of each generated trace (the generators' default), so at most this many blocks.
USERS = 100


def pipeline(
    watermark: str = "perfect",
    processing: Processing = INSTANT,
    timestamp_combiner: OutputPolicy = TimestampCombiner.OUTPUT_AT_EOW,
) -> Pipeline:
    """The chapter-3 pipeline with the given source-watermark spec on both inputs.

    ``timestamp_combiner`` is the session stages' output-timestamp policy: the book's
    figure 3.7 (end of window) against figure 3.8 (earliest element).
    """
    sessions = WindowingStrategy(
        Sessions(SESSION_GAP),
        AfterWatermark(),
        AccumulationMode.DISCARDING,
        timestamp_combiner=timestamp_combiner,
    )
    fixed = WindowingStrategy(FixedWindows(AVERAGE_WINDOW), AfterWatermark())
    return Pipeline(
        [
            Source("mobile_in", watermark, processing),
            Source("console_in", watermark, processing),
            GroupByWindow(
                "mobile_sessions", "mobile_in", sessions, "window_length", processing=processing
            ),
            GroupByWindow(
                "console_sessions", "console_in", sessions, "window_length", processing=processing
            ),
            Flatten("flatten", ("mobile_sessions", "console_sessions"), processing),
            GroupByWindow(
                "average_session_length",
                "flatten",
                fixed,
                "mean",
                rekey="global",
                processing=processing,
            ),
        ]
    )


def traces(events: int, seed: int = 0, **params: Any) -> dict[str, Trace]:
    """Seeded mobile and console traces, ``events`` in all, split evenly; ``params`` go
    to both generators (:class:`~theory.data.specs.SessionSpec`'s fields, e.g. ``users``)."""
    return {name: make() for name, make in trace_makers(events, seed, **params).items()}


def trace_makers(events: int, seed: int = 0, **params: Any) -> dict[str, Callable[[], Trace]]:
    """How to make each of :func:`traces`' traces, one at a time (the same traces)."""
    # here: the generators import scipy.stats (about a second), which the pipeline's
    # users (the command line's analyze) need not pay for
    from theory.data.generators import game_sessions_trace

    half = events // 2
    return {
        "mobile_in": partial(
            game_sessions_trace, events - half, seed=seed, platform="mobile", **params
        ),
        "console_in": partial(
            game_sessions_trace, half, seed=seed + 1, platform="console", **params
        ),
    }


def block_traces(
    events: int, seed: int = 0, *, blocks: int, **params: Any
) -> dict[str, BlockedTrace]:
    """Seeded mobile and console traces as :func:`traces` splits them, each made in
    ``blocks`` blocks of users (:func:`theory.data.blocks.session_blocks`: a different
    trace from :func:`traces`' of the same seed); ``.whole()`` gives a whole one."""
    half = events // 2
    return {
        "mobile_in": session_blocks(events - half, seed=seed, blocks=blocks,
                                    platform="mobile", **params),
        "console_in": session_blocks(half, seed=seed + 1, blocks=blocks,
                                     platform="console", **params),
    }  # fmt: skip
