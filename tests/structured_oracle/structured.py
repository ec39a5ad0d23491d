"""Micro-batches through real Spark Structured Streaming, to check the spark profile.

:func:`run_structured` runs what :func:`theory.spark.run_microbatches` models: each input
is a directory of JSON files, one file per batch (an empty batch is an empty file), read
by a file source with ``maxFilesPerTrigger=1`` under ``Trigger.AvailableNow``, so trigger
``i`` reads batch ``i`` of every input that still has one. The file source orders files by
modification time, not by name, so each file's time is set explicitly (one second apart).
Each input gets ``withWatermark(delay)``; the inputs are unioned and counted per (window,
key) in the given output mode; a ``foreachBatch`` sink collects each batch's rows, and the
query's progress gives each batch's watermark and ``numRowsDroppedByWatermark``.

:func:`run_structured_many` starts several queries at once (each on its own
``SparkSession.newSession()``, so each has its own policy and settings) and waits for all:
a streaming query spends most of its time in driver round trips, which overlap.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from theory.spark.conventions import check_output_mode, check_policy, check_window
from theory.spark.microbatch import Emitted, Row, check_inputs, sort_emitted
from theory.windowing.windows import FixedWindows, Sessions

__all__ = [
    "Observed",
    "StructuredCase",
    "key_type",
    "progress_watermark",
    "run_structured",
    "run_structured_many",
    "watermarked_union",
    "write_batches",
]

#: What Spark reports of one batch: ``(batch_id, watermark_µs, dropped, emitted)``, the
#: same shape as :meth:`theory.spark.MicroBatch.observed`.
Observed = tuple[int, int, int, tuple[Emitted, ...]]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class StructuredCase:
    """One query: the arguments of :func:`theory.spark.run_microbatches`."""

    inputs: Sequence[Sequence[Sequence[Row]]]
    delay: int
    window: Any
    output_mode: str = "append"
    multiple_watermark_policy: str = "min"
    no_data_batches: bool = True
    extra_conf: dict[str, str] = field(default_factory=dict)


def key_type(inputs: list[list[list[Row]]]) -> str:
    """The Spark type of the keys: ``STRING`` or ``LONG`` (``TypeError`` for a mix)."""
    keys = {type(k) for batches in inputs for rows in batches for k, _ in rows}
    if keys <= {str}:
        return "STRING"
    if keys <= {int}:
        return "LONG"
    raise TypeError(
        "tests.structured_oracle.structured needs all keys str or all int, "
        f"got {sorted(map(str, keys))}"
    )


def write_batches(directory: str, batches: list[list[Row]], base: float) -> None:
    """One JSON-lines file per batch, modification times one second apart from ``base``."""
    os.makedirs(directory)
    for i, rows in enumerate(batches):
        path = os.path.join(directory, f"batch-{i:05d}.json")
        with open(path, "w", encoding="utf-8") as f:
            for key, ts in rows:
                f.write(json.dumps({"key": key, "ts": ts}) + "\n")
        os.utime(path, (base + i, base + i))


def watermarked_union(session: Any, data: list[list[list[Row]]], delay: int, workdir: str) -> Any:
    """Each input written as files under ``workdir`` and read as a stream (one file per
    trigger) with ``event_time`` (from the µs ``ts``) and ``withWatermark(delay)``; the
    inputs unioned. Columns: ``key``, ``ts``, ``event_time``."""
    from pyspark.sql import functions as F

    kind = key_type(data)
    base = time.time() - 3600
    frames = []
    for j, batches in enumerate(data):
        directory = os.path.join(workdir, f"input-{j}")
        write_batches(directory, batches, base)
        frames.append(
            session.readStream.schema(f"key {kind}, ts LONG")
            .option("maxFilesPerTrigger", 1)
            .json(directory)
            .withColumn("event_time", F.timestamp_micros("ts"))
            .withWatermark("event_time", f"{delay} microseconds")
        )
    union = frames[0]
    for other in frames[1:]:
        union = union.unionByName(other)
    return union


def _window_column(F: Any, window: Any) -> Any:
    if isinstance(window, Sessions):
        return F.session_window("event_time", f"{window.gap} microseconds")
    if isinstance(window, FixedWindows):
        size, slide = window.size, window.size
    else:
        size, slide = window.size, window.period
    return F.window(
        "event_time",
        f"{size} microseconds",
        f"{slide} microseconds",
        f"{window.offset} microseconds",
    )


def progress_watermark(progress: Any) -> int:
    """The watermark (µs) a batch's ``StreamingQueryProgress`` reports; 0 if none."""
    text = (progress.eventTime or {}).get("watermark")
    if text is None:
        return 0
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (dt - _EPOCH) // _ONE_MICRO


_ONE_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


class _Query:
    """One started query and what its sink collected."""

    def __init__(self, spark: Any, case: StructuredCase, workdir: str) -> None:
        from pyspark.sql import functions as F

        check_output_mode(case.output_mode)
        policy = check_policy(case.multiple_watermark_policy)
        window = check_window(case.window, "append")  # Spark itself refuses the rest
        data = check_inputs(case.inputs)
        session = spark.newSession()
        conf = {
            "spark.sql.shuffle.partitions": "1",
            "spark.sql.streaming.multipleWatermarkPolicy": policy,
            "spark.sql.streaming.noDataMicroBatches.enabled": str(case.no_data_batches).lower(),
            **case.extra_conf,
        }
        for k, v in conf.items():
            session.conf.set(k, v)
        union = watermarked_union(session, data, case.delay, workdir)
        counts = union.groupBy(_window_column(F, window).alias("w"), "key").count()
        out = counts.select(
            F.unix_micros("w.start").alias("start"),
            F.unix_micros("w.end").alias("end"),
            "key",
            "count",
        )
        self.rows: dict[int, list[Emitted]] = {}
        self._lock = threading.Lock()
        self.query = (
            out.writeStream.outputMode(case.output_mode)
            .foreachBatch(self._collect)
            .trigger(availableNow=True)
            .option("checkpointLocation", os.path.join(workdir, "checkpoint"))
            .start()
        )

    def _collect(self, frame: Any, batch_id: int) -> None:
        rows = [(int(r[0]), int(r[1]), r[2], int(r[3])) for r in frame.collect()]
        with self._lock:
            self.rows[batch_id] = rows

    def result(self) -> list[Observed]:
        self.query.awaitTermination()
        out: list[Observed] = []
        for p in self.query.recentProgress:
            dropped = sum(int(s.numRowsDroppedByWatermark) for s in p.stateOperators)
            emitted = sort_emitted(self.rows.get(int(p.batchId), []))
            out.append((int(p.batchId), progress_watermark(p), dropped, emitted))
        return out


def run_structured_many(
    spark: Any, cases: Sequence[StructuredCase], *, workdir: str | None = None
) -> list[list[Observed]]:
    """Run every case as its own streaming query, all at once; per case, what Spark
    reported of each batch, in batch order. Files and checkpoints go to a temporary
    directory (under ``workdir`` if given), removed afterwards."""
    root = tempfile.mkdtemp(prefix="structured-", dir=workdir)
    try:
        queries = [_Query(spark, c, os.path.join(root, f"case-{n}")) for n, c in enumerate(cases)]
        return [q.result() for q in queries]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_structured(
    spark: Any,
    inputs: Sequence[Sequence[Sequence[Row]]],
    *,
    delay: int,
    window: Any,
    output_mode: str = "append",
    multiple_watermark_policy: str = "min",
    no_data_batches: bool = True,
) -> list[Observed]:
    """One query (see the module docstring); what Spark reported of each batch."""
    case = StructuredCase(
        inputs, delay, window, output_mode, multiple_watermark_policy, no_data_batches
    )
    return run_structured_many(spark, [case])[0]
