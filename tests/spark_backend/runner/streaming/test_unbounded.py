"""PySparkRunner --streaming: unbounded splittable DoFns as sources, their
``WatermarkEstimatorProvider`` driving the source watermark.

One pipeline (real clock, no TestStream) reads six sources, each a splittable DoFn that
emits one element per micro-batch and checkpoints (``defer_remainder``): Beam's
Monotonic, Walltime and Manual estimators and the project's BoundedOutOfOrderness,
ProcessingTimeLag and Percentile providers. After every batch the transform's
``source:watermark-estimator`` hold must be what Beam's estimator API gives for the
elements emitted so far (the estimator rebuilt from its state at every resume, as the SDK
does); the clock-based ones lie between the batch's start and the next one's, minus their
lag. A windowed GroupByKey after the Manual source fires while the read goes on; a source
deferring by 1 s resumes no sooner.
"""

# ruff: noqa: B008

from __future__ import annotations

import itertools
import time
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import (
    ManualWatermarkEstimator,
    MonotonicWatermarkEstimator,
    WalltimeWatermarkEstimator,
)
from apache_beam.transforms import window
from apache_beam.transforms.core import RestrictionProvider, WatermarkEstimatorProvider
from apache_beam.utils.timestamp import Duration, Timestamp

from beam_pipelines.estimators import (
    BoundedOutOfOrdernessEstimatorProvider,
    PercentileEstimatorProvider,
    ProcessingTimeLagEstimatorProvider,
)
from spark_backend.runner.streaming.unbounded import ESTIMATOR_HOLD
from tests.helpers.streaming import stamped_pane
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

pytestmark = pytest.mark.slow

S = 1_000_000
#: Event times (s) the sources emit, one per batch: out of order on purpose.
STAMPS = (3, 1, 8, 9)
LAG = 5 * S


class Offsets(RestrictionProvider):
    def __init__(self, n: int) -> None:
        self.n = n

    def initial_restriction(self, element: Any) -> OffsetRange:
        return OffsetRange(0, self.n)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element: Any, restriction: OffsetRange) -> int:
        return int(restriction.size())


def source(name: str, provider: Any, stamps: tuple[int, ...], delay: float = 0.0) -> Any:
    """A splittable DoFn emitting ``(name, position, wall µs)`` at ``stamps[position]``
    seconds, one per bundle, then checkpointing (after ``delay`` seconds)."""

    class Source(beam.DoFn):
        def process(
            self,
            element: Any,
            tracker: Any = beam.DoFn.RestrictionParam(Offsets(len(stamps))),
            estimator: Any = beam.DoFn.WatermarkEstimatorParam(provider),
        ) -> Any:
            position = tracker.current_restriction().start
            if not tracker.try_claim(position):
                return
            stamp = Timestamp(seconds=stamps[position])
            if name == "manual":  # the largest so far: a Manual watermark must not go back
                estimator.set_watermark(Timestamp(seconds=max(stamps[: position + 1])))
            yield window.TimestampedValue((name, position, time.time_ns() // 1000), stamp)
            tracker.defer_remainder(Duration(seconds=delay) if delay else None)

    return Source()


class MonotonicFromMin(WatermarkEstimatorProvider):
    """Beam's MonotonicWatermarkEstimator from MIN_TIMESTAMP: its default provider starts
    it from None, and its ``current_watermark`` then raises TypeError (Beam 2.77 compares
    the first observed timestamp with None)."""

    def initial_estimator_state(self, element: Any, restriction: Any) -> Timestamp:
        return Timestamp(micros=MIN_TIMESTAMP)

    def create_watermark_estimator(self, state: Timestamp) -> MonotonicWatermarkEstimator:
        return MonotonicWatermarkEstimator(state)


def providers() -> dict[str, Any]:
    return {
        "monotonic": MonotonicFromMin(),
        "walltime": WalltimeWatermarkEstimator.default_provider(),
        "manual": ManualWatermarkEstimator.default_provider(),
        "bounded": BoundedOutOfOrdernessEstimatorProvider("2s"),
        "lag": ProcessingTimeLagEstimatorProvider(LAG),
        "percentile": PercentileEstimatorProvider(0.5, "1h"),
    }


def expected_holds(name: str) -> list[int]:
    """The estimator's watermark after each element, through Beam's estimator API: the
    estimator made from the last state, fed the element's timestamp, asked for its
    watermark and its state (the SDK's steps at every resume)."""
    provider = providers()[name]
    state = provider.initial_estimator_state(None, None)
    out = []
    for i, stamp in enumerate(STAMPS):
        estimator = provider.create_watermark_estimator(state)
        if name == "manual":
            estimator.set_watermark(Timestamp(seconds=max(STAMPS[: i + 1])))
        else:
            estimator.observe_timestamp(Timestamp(seconds=stamp))
        out.append(estimator.current_watermark().micros)
        state = estimator.get_estimator_state()
    return out


def sources(p: beam.Pipeline, capture: Any) -> None:
    start = p | "start" >> beam.Impulse()
    outputs = [
        start | name >> beam.ParDo(source(name, provider, STAMPS))
        for name, provider in providers().items()
    ]
    delayed = start | "delayed" >> beam.ParDo(
        source("delayed", MonotonicFromMin(), (1, 2, 3), delay=1.0)
    )
    panes = (
        outputs[2]
        | "window" >> beam.WindowInto(window.FixedWindows(2))
        | "key" >> beam.Map(lambda e: ("manual", e[1]))
        | "group" >> beam.GroupByKey()
        | "pane" >> beam.MapTuple(stamped_pane)
        | "unwindow" >> beam.WindowInto(window.GlobalWindows())  # one coder into Flatten
    )
    (*outputs, delayed, panes) | beam.Flatten() | "capture" >> beam.ParDo(capture)


def test_estimators_drive_the_source_watermark(run_pipeline: Any) -> None:
    values, result = run_pipeline(sources)
    marks = result.watermarks()
    emitted = sorted((v[0], v[1]) for v in values if v[0] != "pane")
    names = [*providers(), "delayed"]
    assert emitted == sorted(
        (n, i) for n in names for i in range(3 if n == "delayed" else len(STAMPS))
    )
    problems = []
    for name in providers():
        hold = marks[name][ESTIMATOR_HOLD]
        # one element per batch from batch 0: the hold after batch b is the estimator's
        # watermark after element b; with the last element the restriction is done (no
        # residual), and the hold is released
        last = len(STAMPS) - 1
        got = hold.values[:last].tolist()
        if name in ("walltime", "lag"):
            lag = LAG if name == "lag" else 0
            starts = hold.times[: last + 1]
            low, high = starts[:-1] - lag, starts[1:] - lag
            if not ((low <= np.asarray(got)) & (np.asarray(got) <= high)).all():
                problems.append(f"{name}: {got} outside {low.tolist()}..{high.tolist()}")
        elif got != expected_holds(name)[:last]:
            problems.append(f"{name}: holds {got}, Beam's estimator {expected_holds(name)}")
        released = hold.values[last:].tolist() + marks[name]["output"].values[last:].tolist()
        if set(released) != {MAX_TIMESTAMP}:
            problems.append(f"{name}: not released with its last element: {released}")
    assert not problems, "\n".join(problems)
    # the Manual source's windows fire as its watermark passes them, during the read
    panes = sorted(v for v in values if v[0] == "pane")
    # 1 s came after the watermark had passed 3 s: dropped
    assert [(p[1], p[2]) for p in panes] == [(4 * S, [0]), (10 * S, [2, 3])]
    read_ended = max(v[2] for v in values if v[0] == "manual")
    assert panes[0][3] < read_ended
    # defer_remainder(1 s) is honoured on the runner's own clock: the batches that ran the
    # delayed source (where its hold moves: 1 s, 2 s, then released) are >= 1 s apart
    delayed = marks["delayed"][ESTIMATOR_HOLD]
    steps = list(zip(delayed.times.tolist(), delayed.values.tolist(), strict=True))
    runs = [(t, v) for i, (t, v) in enumerate(steps) if i == 0 or v != steps[i - 1][1]]
    assert [v for _, v in runs] == [S, 2 * S, MAX_TIMESTAMP], runs
    assert all(b - a >= S for (a, _), (b, _) in itertools.pairwise(runs)), runs
