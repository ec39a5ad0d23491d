"""What :func:`theory.simulate` says the chapter-3 module outputs: its panes as
:class:`~beam_pipelines.pane_files.PaneRow` and every stage's watermark series.

The simulation runs :func:`theory.pipeline.chapter3.pipeline` with instant processing
(a stage takes no processing time) on the same traces and source watermark; its
processing time is ``arrival_time``, as the module's TestStream replays it. A pane's
``is_first``/``is_last`` are not in the simulation's pane table; under the chapter-3
triggers (one on-time pane per window) they are ``index == 0`` and True.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from beam_pipelines.chapter3.pipeline import GROUP_STAGES
from beam_pipelines.pane_files import PaneRow
from theory.data.trace import Trace
from theory.pipeline import chapter3 as model
from theory.pipeline.processing import INSTANT
from theory.pipeline.simulator import SimulationResult, simulate
from theory.series import StepSeries
from theory.time import MICROS_PER_MILLI
from theory.windowing.strategy import OutputPolicy, TimestampCombiner

__all__ = ["Simulated", "simulate_chapter3"]


@dataclass(frozen=True)
class Simulated:
    """The simulation's result, its panes per grouping stage, and per stage its input
    and output watermark series (µs over processing time)."""

    result: SimulationResult
    panes: dict[str, list[PaneRow]]

    def watermarks(self, stage: str) -> tuple[StepSeries, StepSeries]:
        """``stage``'s input and output watermark (latched step series)."""
        r = self.result.stages[stage]
        return r.input_watermark, r.output_watermark


def _key(key: object) -> object:
    return int(key) if isinstance(key, np.integer) else key


def simulate_chapter3(
    traces: Mapping[str, Trace],
    watermark: str,
    timestamp_combiner: OutputPolicy = TimestampCombiner.OUTPUT_AT_EOW,
    *,
    whole_ms: bool = False,
) -> Simulated:
    """Simulate the module's pipeline on ``traces`` (by source stage) under the source
    watermark spec ``watermark``; with ``whole_ms`` pane timestamps are floored to whole
    milliseconds, as Beam's coders carry them between a portable runner's stages."""
    result = simulate(model.pipeline(watermark, INSTANT, timestamp_combiner), traces)
    panes = {}
    for stage in GROUP_STAGES:
        table = result.stages[stage].panes
        assert table is not None
        stamps = (
            table.timestamp - table.timestamp % MICROS_PER_MILLI if whole_ms else table.timestamp
        )
        panes[stage] = [
            PaneRow(
                _key(table.key[i]),
                int(table.window_start[i]),
                int(table.window_end[i]),
                int(stamps[i]),
                str(table.timing[i]),
                int(table.index[i]),
                int(table.index[i]) == 0,
                True,
                float(table.value[i]),
            )
            for i in range(len(table))
        ]
    return Simulated(result, panes)
