"""``simulate --engine spark``: each grouping stage of the simulator on Spark,
partitioned by key. All times are µs.

:class:`SparkGrouping` is a :data:`theory.pipeline.simulator.GroupRunner`. For each
grouping stage it splits the stage's script by key
(:func:`theory.windowing.partitioned.split_by_key`), caches the partitions as an RDD
with one partition each, and runs theory's engine (:func:`theory.windowing.runner.run_columns`,
on its vectorised paths where they model the stage) per partition in Spark tasks. The
driver computes the stage's watermarks globally: each round broadcasts every partition's
external hold (the minimum of the others' holds from the last round) and the rounds
stop when they settle (:func:`theory.windowing.partitioned.run_partitioned`); holds are
reduced by minimum, panes concatenated. The result equals the local simulator's (tested
on a small trace, every stage's series; ``bench/simulate_spark.py`` at 1M events).

The driver still builds the streams between stages (the simulator's numpy columns), so
what moves to the executors is the grouping state: the engine's windows, panes and
holds. Spark Connect has no RDDs: a classic session is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from theory.columns import check_count
from theory.windowing.fast_path import ScriptColumns
from theory.windowing.partitioned import PartResult, run_part, run_partitioned, split_by_key
from theory.windowing.script import ScriptResult
from theory.windowing.strategy import WindowingStrategy

__all__ = ["SparkGrouping"]


class SparkGrouping:
    """Runs a grouping stage on Spark, ``partitions`` key partitions (default: the
    context's default parallelism); records each stage's rounds in :attr:`rounds`."""

    def __init__(self, session: Any, partitions: int | None = None) -> None:
        sc = getattr(session, "sparkContext", None)
        if sc is None:
            raise ValueError(
                "simulate --engine spark needs a classic Spark session (RDDs); Spark "
                "Connect has none: unset SPARK_REMOTE or use --master local[*]"
            )
        self._sc = sc
        self.partitions = check_count(
            sc.defaultParallelism if partitions is None else partitions, "partitions", minimum=1
        )
        #: Rounds each stage took, in the order the stages ran.
        self.rounds: list[int] = []

    def __call__(
        self, columns: ScriptColumns, strategy: WindowingStrategy, fast: bool
    ) -> ScriptResult:
        parts = split_by_key(columns, self.partitions)
        rdd = self._sc.parallelize(list(enumerate(parts)), len(parts)).cache()
        rounds = 0

        def map_parts(external: Sequence[np.ndarray | None]) -> list[PartResult]:
            nonlocal rounds
            rounds += 1
            held = self._sc.broadcast(list(external))
            try:
                done = rdd.map(partial(_run_task, strategy, fast, held)).collect()
            finally:
                held.unpersist()
            return [r for _, r in sorted(done, key=lambda pr: pr[0])]

        try:
            return run_partitioned(columns, map_parts, len(parts))
        finally:
            rdd.unpersist()
            self.rounds.append(rounds)


def _run_task(
    strategy: WindowingStrategy, fast: bool, held: Any, item: tuple[int, ScriptColumns]
) -> tuple[int, PartResult]:
    """A Spark task: partition ``item`` under its external hold from ``held``."""
    p, columns = item
    return p, run_part(columns, strategy, fast, held.value[p])
