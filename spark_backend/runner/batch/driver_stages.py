"""Driver side: small stages run in the driver process, without a Spark job.

A Spark job costs a fixed 0.2-0.5 s (scheduling, task start, py4j, the JVM's CPU) however
little it computes, and a Beam pipeline has many tiny stages: a ``Create``'s impulse, the
stages after a combine (a few accumulators per key), ``CombineGlobally``'s default,
``assert_that``. A stage whose every input is already held by the driver and small (at
most :data:`LOCAL_BYTES` encoded) runs here, on the very task function a Spark task
runs: the same code, so the same output; one partition, as FnApiRunner runs one bundle.
A driver stage's outputs stay on the driver (a Spark stage that reads them gets them
parallelized) up to a cap, :data:`DRIVER_OUTPUT_BYTES` by default: a small input may
make a huge output (``Create(reshuffle=False) | FlatMap(generate millions)``), so past
the cap the attempt is stopped (its outputs and metrics dropped, its DoFns torn down)
and the stage runs again as a Spark job (:func:`run_on_driver` returns None), so the
driver never holds more. A Spark stage's outputs come back with its metrics when small
(:mod:`.reported`), so the next small stage needs no job either.

Two kinds of stage stay on Spark whatever their size: one that reads a GroupByKey with
Beam's ``Always`` trigger (``Reshuffle``'s: the pipeline asks for its elements to be
spread, as ``Create`` does before the user's first ``FlatMap``), and one with a
splittable DoFn's restrictions (spread over tasks). A GroupByKey whose input the driver
holds is grouped here, into the partitions Spark's shuffle would give
(:func:`group_locally`), and a Spark stage reads them without a shuffle.

A driver stage is attempted as often as Spark would attempt a task
(:func:`task_attempts`); a failed attempt's outputs and metrics are dropped, as Spark
drops a failed task's.
"""

from __future__ import annotations

import os
import re
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from apache_beam.transforms import trigger

from spark_backend.runner.batch.spark_errors import python_error_message
from spark_backend.runner.batch.spill import chunk_bytes
from spark_backend.runner.batch.summary import METRICS
from spark_backend.runner.errors import PipelineFailedError
from spark_backend.runner.grouping.group_by_key import (
    columns_partition,
    engine_partition,
    group_partition,
    key_hash,
    keyed_elements,
    split_columns,
)
from spark_backend.runner.plan.plan import THEORY_ENGINE, GroupSpec, StageSpec
from spark_backend.runner.stages.task_context import windowing

__all__ = [
    "DRIVER_OUTPUT_BYTES",
    "LOCAL_BYTES",
    "Held",
    "group_locally",
    "redistributes",
    "run_on_driver",
    "task_attempts",
    "task_slots",
]

#: A buffer of at most this many encoded bytes may be held by the driver, and a stage
#: whose inputs total at most this many runs there.
LOCAL_BYTES: Final[int] = 4 << 20

#: A driver stage whose outputs pass this many bytes is stopped and run on Spark.
DRIVER_OUTPUT_BYTES: Final[int] = 64 << 20


@dataclass(frozen=True)
class Held:
    """A value held by the driver, read as a Spark broadcast is (``.value``)."""

    value: Any


def redistributes(group: GroupSpec, job_id: str, components: bytes) -> bool:
    """Whether ``group`` has Beam's ``Always`` trigger (a ``Reshuffle``): its readers
    stay on Spark, spread over tasks."""
    strategy = windowing(job_id, components, group.windowing_strategy_id)
    return isinstance(strategy.triggerfn, trigger.Always)


def group_locally(
    chunks: Iterable[Any], group: GroupSpec, job_id: str, components: bytes, partitions: int
) -> list[list[bytes]]:
    """``group``'s output chunks from its input ``chunks``, per partition: keys dealt by
    :func:`~spark_backend.runner.grouping.group_by_key.key_hash` as the executor's shuffle
    deals them, each partition grouped on the group's path (theory's engine or Beam's); a columnar
    group's chunks (columns or Beam's bytes) are dealt and sorted as its shuffle does."""
    if group.columnar:
        pieces: list[list[tuple[int, Any]]] = [[] for _ in range(max(1, partitions))]
        for chunk in chunks:
            for part, columns in split_columns(chunk, group, job_id, components, len(pieces)):
                pieces[part].append((part, columns))
        return [list(columns_partition(p, group, job_id, components)) for p in pieces]
    parts: list[list[tuple[bytes, bytes]]] = [[] for _ in range(max(1, partitions))]
    for chunk in chunks:
        for key, element in keyed_elements(chunk, group, job_id, components):
            parts[key_hash(key) % len(parts)].append((key, element))
    grouped = []
    for pairs in parts:
        if group.path == THEORY_ENGINE:
            grouped.append(list(engine_partition(pairs, group, job_id, components)))
            continue
        by_key: dict[bytes, list[bytes]] = defaultdict(list)
        for key, element in pairs:
            by_key[key].append(element)
        grouped.append(list(group_partition(by_key.items(), group, job_id, components)))
    return grouped


_LOCAL_MASTER = re.compile(r"^local(\[\s*(\*|\d+)\s*(,\s*(\d+)\s*)?\])?$")


def task_attempts(master: str, conf: Mapping[str, str]) -> int:
    """How many times Spark attempts a task under ``master``: ``local[N, F]`` F times,
    ``local``/``local[N]`` once, a cluster ``spark.task.maxFailures`` times (4)."""
    found = _LOCAL_MASTER.match(master.strip())
    if found:
        return int(found.group(4)) if found.group(4) else 1
    return max(1, int(conf.get("spark.task.maxFailures", "4")))


def task_slots(master: str, default: int) -> int:
    """How many tasks run at once under ``master``: ``local[N]`` N, ``local[*]`` the
    machine's cores, ``local`` one; a cluster ``default`` (its default parallelism)."""
    found = _LOCAL_MASTER.match(master.strip())
    if not found:
        return max(1, default)
    if found.group(2) is None:
        return 1
    if found.group(2) == "*":
        return os.cpu_count() or 1
    return max(1, int(found.group(2)))


def run_on_driver(
    spec: StageSpec,
    task: Callable[[], Iterable[tuple[bytes, bytes]]],
    attempts: int = 1,
    cap: int = DRIVER_OUTPUT_BYTES,
) -> tuple[dict[bytes, list[bytes]], bytes] | None:
    """Run ``spec``'s ``task`` (the stage's Spark task function over all its input as one
    partition) in this process: its output chunks per buffer (every output buffer
    present) and its pickled summary; None, the attempt stopped and dropped, as soon as
    the outputs pass ``cap`` bytes (the caller runs the stage on Spark). Raise
    :class:`PipelineFailedError` with the user code's error when the last of
    ``attempts`` fails."""
    for attempt in range(1, max(1, attempts) + 1):
        outputs: dict[bytes, list[bytes]] = {b: [] for b in spec.outputs.values()}
        summary = b""
        size = 0
        records = iter(task())
        try:
            for buffer, chunk in records:
                if buffer == METRICS:
                    summary = chunk
                    continue
                outputs[buffer].append(chunk)
                size += chunk_bytes(chunk)
                if size > cap:
                    return None
        except Exception as err:
            if attempt >= attempts:
                text = Exception("".join(traceback.format_exception(err)))
                raise PipelineFailedError(spec.label, python_error_message(text)) from err
            continue
        finally:
            close = getattr(records, "close", None)
            if close is not None:
                close()  # (a stopped attempt's DoFns are torn down now)
        return outputs, summary
    raise AssertionError("unreachable")  # (the loop returns or raises)
