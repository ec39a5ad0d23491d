"""Spark's ``ProcessingTime`` trigger through a real streaming query, to check the batch
timing of :func:`theory.spark.trace.trigger_schedule`.

:func:`run_processing_time` starts a query on an empty directory (a JSON file source,
``withWatermark(delay)``, a count per fixed window and key in append mode, a
``foreachBatch`` sink) with ``trigger(processingTime=interval)``, then drops files into
the directory at given wall-clock offsets from an interval boundary (each written aside
and renamed in, so a listing sees it whole) and records when each became visible. It
returns, per batch Spark ran, the trigger time Spark reports (``progress.timestamp``, ms),
the rows it read and its watermark, with the files' visible times (µs): what the model
takes as arrivals. Wall-clock driven, so the offsets must leave Spark time to run each
batch within its interval.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tests.structured_oracle.structured import progress_watermark
from theory.columns import check_duration
from theory.spark.microbatch import Row

__all__ = ["TriggerRun", "run_processing_time"]


@dataclass(frozen=True)
class TriggerRun:
    """What a :func:`run_processing_time` query did: per batch ``(batch_id, trigger
    time µs, rows read, watermark µs)``, and per row dropped in, its visible time (µs)
    and event time (µs), in drop order."""

    batches: list[tuple[int, int, int, int]]
    arrivals: list[int]
    event_times: list[int]


def _drop(directory: str, staging: str, n: int, rows: Sequence[Row]) -> int:
    """Write ``rows`` as a JSON-lines file aside and rename it into ``directory``; the
    time (µs) it became visible."""
    path = os.path.join(staging, f"drop-{n:03d}.json")
    with open(path, "w", encoding="utf-8") as f:
        for key, ts in rows:
            f.write(json.dumps({"key": key, "ts": ts}) + "\n")
    os.replace(path, os.path.join(directory, f"drop-{n:03d}.json"))
    return time.time_ns() // 1000


def run_processing_time(
    spark: Any,
    drops: Sequence[tuple[float, Sequence[Row]]],
    *,
    interval: int,
    delay: int,
    window_size: int,
    tail: int = 3,
    workdir: str | None = None,
) -> TriggerRun:
    """The query of the module docstring with a ``ProcessingTime(interval)`` trigger
    (µs, whole seconds), ``withWatermark(delay)`` (µs) and ``window_size`` (µs) windows.
    ``drops``: ``(seconds after an interval boundary, rows)``, ascending; the query runs
    ``tail`` intervals past the last drop (room for the no-data batch), then stops.
    Progress events without an ``addBatch`` step (Spark's idle reports) are left out."""
    from pyspark.sql import functions as F

    step = check_duration(interval, "interval", allow_zero=False)
    if step % 1_000_000:
        raise ValueError(f"interval must be whole seconds, got {step} µs")
    root = tempfile.mkdtemp(prefix="structured-trigger-", dir=workdir)
    directory, staging = os.path.join(root, "in"), os.path.join(root, "staging")
    os.makedirs(directory)
    os.makedirs(staging)
    arrivals: list[int] = []
    events: list[int] = []
    query = None
    try:
        session = spark.newSession()
        session.conf.set("spark.sql.shuffle.partitions", "1")
        stream = (
            session.readStream.schema("key STRING, ts LONG")
            .json(directory)
            .withColumn("event_time", F.timestamp_micros("ts"))
            .withWatermark("event_time", f"{delay} microseconds")
        )
        counts = stream.groupBy(
            F.window("event_time", f"{window_size} microseconds"), "key"
        ).count()
        query = (
            counts.writeStream.outputMode("append")
            .foreachBatch(lambda frame, batch_id: frame.count())
            .trigger(processingTime=f"{step // 1_000_000} seconds")
            .option("checkpointLocation", os.path.join(root, "checkpoint"))
            .start()
        )
        secs = step / 1e6
        boundary = (time.time() // secs + 1) * secs
        for n, (offset, rows) in enumerate(drops):
            time.sleep(max(0.0, boundary + offset - time.time()))
            seen = _drop(directory, staging, n, rows)
            arrivals += [seen] * len(rows)
            events += [int(ts) for _, ts in rows]
        last = boundary + (drops[-1][0] if drops else 0.0)
        time.sleep(max(0.0, last + tail * secs - time.time()))
        query.stop()
        batches = []
        for p in query.recentProgress:
            if "addBatch" not in (p.durationMs or {}):
                continue
            started = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00"))
            batches.append(
                (
                    int(p.batchId),
                    int(started.timestamp() * 1000) * 1000,
                    int(p.numInputRows),
                    progress_watermark(p),
                )
            )
        return TriggerRun(batches, arrivals, events)
    finally:
        if query is not None and query.isActive:
            query.stop()
        shutil.rmtree(root, ignore_errors=True)
