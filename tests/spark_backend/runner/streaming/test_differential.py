"""PySparkRunner --streaming against Beam's BundleBasedDirectRunner, on seeded random
TestStream pipelines (the engine's differential generator,
:func:`beam_pipelines.differential.random_group`): per script one branch
``WindowInto -> GroupByKey``, all scripts of a group in one pipeline on each runner.

Panes must be identical (key, window, values as a multiset, timestamp, timing, index,
nonspeculative index, first and last, and their order per (key, window)), and so must
the stall flag, with one deliberate divergence (tested on its own in test_streaming.py):
a pane's timestamp crosses Beam's windowed-value coder, which keeps whole milliseconds,
so Beam's panes are compared with their timestamps as that coder rounds them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from beam_pipelines.beam_runner import run_beam_packed
from beam_pipelines.differential import Case, pane_differences, random_group
from theory.time import MAX_TIMESTAMP, MICROS_PER_MILLI
from theory.windowing.engine import Pane
from theory.windowing.strategy import TimestampCombiner

pytestmark = pytest.mark.slow

#: Seeds of the random groups (each: SCRIPTS scripts sharing a skeleton).
SEEDS = (1, 2)
SCRIPTS = 2
STEPS = 4


def coder_micros(micros: int) -> int:
    """A timestamp (µs) as Beam's windowed-value coder carries it: whole milliseconds,
    truncated toward zero."""
    sign = -1 if micros < 0 else 1
    return sign * (abs(micros) // MICROS_PER_MILLI) * MICROS_PER_MILLI


def through_coder(panes: list[Pane]) -> list[Pane]:
    return [p._replace(timestamp=coder_micros(p.timestamp)) for p in panes]


def portable(case: Case) -> Case:
    """The case as a portable runner can run it: OUTPUT_AT_EARLIEST_TRANSFORMED cannot
    cross Beam's runner API, and Beam Python runs it as OUTPUT_AT_EARLIEST."""
    if case.strategy.timestamp_combiner is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED:
        strategy = replace(case.strategy, timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
        return replace(case, strategy=strategy)
    return case


@pytest.mark.parametrize("seed", SEEDS)
def test_random_teststream_pipelines_match_bundle_based_direct_runner(
    run_packed: Any, seed: int
) -> None:
    cases = [portable(c) for c in random_group(seed, SCRIPTS, steps=STEPS)]
    pairs = [(c.script, c.strategy) for c in cases]
    beam = run_beam_packed(pairs)
    ours, result = run_packed(pairs, key_partitions=2)
    assert any(beam.panes), "Beam fired no pane: the comparison would say nothing"
    problems = []
    for i, case in enumerate(cases):
        problems += pane_differences(case.label, ours[i], through_coder(beam.panes[i]))
    stalled = [
        int(result.watermarks()[f"group{i}"]["output"].values[-1]) < MAX_TIMESTAMP
        for i in range(len(cases))
    ]
    assert result.stalled == any(stalled)
    if any(stalled) != beam.stalled:
        problems.append(f"stalled: ours {stalled}, beam {beam.stalled}")
    assert not problems, "\n".join(problems)
