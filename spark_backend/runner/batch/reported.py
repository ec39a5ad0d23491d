"""Task side: a Spark stage's metrics and small outputs sent to the driver in the same
Python pass that computes them.

A Spark stage's output RDD is persisted and computed by one JVM-side action (a count:
no second Python pass reads the cache back). Each task hands its partition's metrics
summary, and its output chunks when they total at most ``limit`` bytes, to the driver
through a Spark accumulator (:class:`PartitionReports`, one entry per partition index);
only a partition past the limit writes its output records to the cache, for the later
stages to read there. Spark merges a result task's accumulator updates once per
partition (a failed attempt sends none), so a retried task's metrics count once, as
the records did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pyspark.accumulators import AccumulatorParam

from spark_backend.runner.batch.spill import chunk_bytes
from spark_backend.runner.batch.summary import METRICS

__all__ = ["PartitionReports", "Report", "reported_outputs"]

#: A partition's report: its pickled metrics summary, and its output records
#: ``(buffer, chunk)`` if they total at most the limit (else None: they are in the cache).
Report = tuple[bytes, list[tuple[bytes, Any]] | None]


class PartitionReports(AccumulatorParam[dict[int, "Report"]]):
    """Accumulates ``{partition index: Report}``; a later report of a partition (a
    recomputed cache block) replaces the earlier."""

    def zero(self, value: dict[int, Report]) -> dict[int, Report]:
        return {}

    def addInPlace(self, value1: dict[int, Report], value2: dict[int, Report]) -> dict[int, Report]:
        value1.update(value2)
        return value1


def reported_outputs(
    report: Any,
    limit: int,
    task: Callable[[Iterable[Any]], Iterable[tuple[bytes, Any]]],
    index: int,
    records: Iterable[Any],
) -> Iterator[tuple[bytes, Any]]:
    """Run ``task`` over partition ``index``'s ``records``; add its :data:`Report` to
    the accumulator ``report``; yield its output records only if they pass ``limit``
    bytes (every record is read, so the partition is computed whole)."""
    kept: list[tuple[bytes, Any]] | None = []
    size = 0
    summary = b""
    for buffer, chunk in task(records):
        if buffer == METRICS:
            summary = chunk
        elif kept is None:
            yield buffer, chunk
        else:
            kept.append((buffer, chunk))
            size += chunk_bytes(chunk)
            if size > limit:
                yield from kept
                kept = None
    report.add({index: (summary, kept)})
