"""A key partition's own event grid for a grouping stage (``simulate --engine spark``):
the instants of the stage's global grid at which anything can happen to the partition's
keys, so a task holds arrays as long as its partition, not as the stage's whole input.
All times are µs.

The local simulator runs a grouping stage over one event per instant of the whole stage
(every element's arrival and every input-watermark step). For one partition, an instant
with none of its elements where the watermark crosses none of its windows' ends or
garbage-collection times changes nothing: no element arrives, nothing fires, no hold
moves. :func:`partition_grid` keeps every other instant:

- the partition's element instants;
- each instant where the input watermark first reaches ``end - 1``, ``end`` or
  ``end + 1`` of a window of its elements, or that plus the allowed lateness (for
  sessions: each element's own window, whose ends include every merged session's);
- before each of those, the last watermark step (so the watermark and the other
  partitions' hold just before it are as in the whole grid).

The output watermark before an event reads the other partitions' hold after the event
before it; :func:`external_after` gives each kept instant the hold just before the next
one, which is the whole grid's. The run over these instants gives the same panes, fire
instants and own hold changes as over the whole grid (a test checks it on random
strategies and traces).
"""

from __future__ import annotations

import numpy as np

from theory.arrays import sorted_union
from theory.pipeline.simulator import Stream
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from theory.windowing.fast_path import ScriptColumns
from theory.windowing.strategy import WindowingStrategy

__all__ = ["external_after", "grid_columns", "partition_grid"]

_CAP = MAX_TIMESTAMP + 2  # (thresholds past the end of time cross no watermark step)


def _thresholds(strategy: WindowingStrategy, ts: np.ndarray) -> np.ndarray:
    """Watermark values at which a window of these timestamps may fire or be collected."""
    end = np.minimum(strategy.window_fn.assign_array(ts).end, _CAP)  # type: ignore[attr-defined]
    lateness = min(int(strategy.allowed_lateness), _CAP)
    ends = sorted_union([end])
    near = [ends - 1, ends, ends + 1]
    if lateness:
        near += [e + lateness for e in near]
    return sorted_union(near)


def partition_grid(strategy: WindowingStrategy, stream: Stream, iw: StepSeries) -> np.ndarray:
    """The partition's instants (sorted, unique, µs) of the stage's grid (``stream``: its
    elements; ``iw``: the stage's latched input watermark)."""
    steps = iw.times
    cross = np.searchsorted(iw.values, _thresholds(strategy, stream.timestamp), side="left")
    crossing = steps[cross[cross < steps.size]]
    needed = sorted_union([stream.time, crossing])
    before = np.searchsorted(steps, needed, side="left") - 1
    return sorted_union([needed, steps[before[before >= 0]]])


def grid_columns(
    key: list, stream: Stream, iw: StepSeries, instants: np.ndarray
) -> ScriptColumns:
    """The partition's script in columns over its ``instants`` (as
    :func:`theory.pipeline.simulator.script_columns` over the whole grid): the watermark
    after each instant, then the final ``MAX_TIMESTAMP`` step."""
    n_ev = instants.size + 1
    iw_after = np.empty(n_ev, np.int64)
    idx = np.searchsorted(iw.times, instants, side="right") - 1
    iw_after[:-1] = np.where(idx >= 0, iw.values[np.maximum(idx, 0)] if iw.values.size else 0,
                             MIN_TIMESTAMP)  # fmt: skip
    iw_after[-1] = MAX_TIMESTAMP
    return ScriptColumns(
        iw_after,
        np.zeros(n_ev, np.int64),
        key,
        stream.value.astype(object),
        stream.timestamp,
        np.searchsorted(instants, stream.time),
    )


def external_after(external: StepSeries, instants: np.ndarray) -> np.ndarray:
    """The other partitions' hold (µs) after each of the partition's events as the whole
    grid has it where it is read: just before the next kept instant (the last instant
    and the final step: the hold at the end)."""
    out = np.empty(instants.size + 1, np.int64)
    out[: instants.size - 1] = external.before(instants[1:])
    out[max(instants.size - 1, 0):] = external.final()
    return out
