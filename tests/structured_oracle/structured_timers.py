"""Event-time timers of Spark's state APIs, through real streaming queries, to check
:mod:`theory.spark.timers`.

:func:`run_structured_timers` reads the batches as :mod:`tests.structured_oracle.structured` does
(one file per trigger, ``Trigger.AvailableNow``, ``withWatermark(delay)``), groups by key
and, with ``api="applyInPandasWithState"`` (``EventTimeTimeout``) or
``api="transformWithState"`` (``timeMode="EventTime"``, RocksDB state store), sets each
key's one timer to ``max(event ms) + timeout`` on new rows; a fired timer emits
``(key, timer)`` and is cleared. It returns, per batch, the progress watermark and the
timers that fired, as :func:`theory.spark.timers.run_timers` does.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, Final

from tests.structured_oracle.structured import key_type, progress_watermark, watermarked_union
from theory.columns import check_duration
from theory.spark.microbatch import Row, check_inputs
from theory.spark.timers import STATE_APIS

__all__ = ["ROCKSDB_PROVIDER", "TimerObserved", "bytecode_python", "run_structured_timers"]

#: The state store ``transformWithState`` needs.
ROCKSDB_PROVIDER: Final[str] = (
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
)

#: One batch: ``(batch_id, watermark_µs, ((key, timer_µs), ...))`` in timer, key order.
TimerObserved = tuple[int, int, tuple[tuple[Hashable, int], ...]]


def _apply_in_pandas(timeout_ms: int) -> Any:
    """The ``applyInPandasWithState`` function: on rows, set the timeout (kept in the
    state too); on a timeout, emit ``(key, timer ms)`` and remove the state."""
    import pandas as pd

    def fn(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        if state.hasTimedOut:
            (timer,) = state.get
            state.remove()
            yield pd.DataFrame({"key": [key[0]], "timer": [int(timer)]})
            return
        latest = max(int(f["ts"].max()) for f in frames) // 1000
        timer = latest + timeout_ms
        state.update((timer,))
        state.setTimeoutTimestamp(timer)
        yield pd.DataFrame(
            {"key": pd.Series([], dtype=object), "timer": pd.Series([], dtype="int64")}
        )

    return fn


def _processor(timeout_ms: int) -> Any:
    """A ``transformWithState`` processor: on rows, replace the key's timer; on expiry,
    emit ``(key, timer ms)``."""
    from pyspark.sql import Row as SparkRow
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class KeyTimer(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            latest = max(int(r.ts) for r in rows) // 1000
            for t in list(self.handle.listTimers()):
                self.handle.deleteTimer(t)
            self.handle.registerTimer(latest + timeout_ms)
            yield from ()

        def handleExpiredTimer(
            self, key: Any, timerValues: Any, expiredTimerInfo: Any
        ) -> Iterator[Any]:
            yield SparkRow(key=key[0], timer=int(expiredTimerInfo.getExpiryTimeInMs()))

        def close(self) -> None:
            pass

    return KeyTimer()


def bytecode_python(workdir: str) -> str | None:
    """A Python launcher (a script in ``workdir``) for Spark's Python workers that imports
    pyspark from its installed package rather than from ``pyspark.zip``, or None when
    pyspark is not a pip install (no zip inside it).

    Why: Spark starts ``transformWithState``'s driver-side worker (its pre-init runner) as
    a *simple* worker, a fresh ``python -m ...`` that must connect back within a
    hard-coded 10 s (``PythonWorkerFactory.createSimpleWorker``), and it puts
    ``pyspark.zip`` first on that worker's ``PYTHONPATH``. Modules in a zip have no
    bytecode cache, so every start compiles pyspark's modules again: 0.54 s of CPU for the
    worker's imports against 0.12 s from the installed package (measured at load 2), about
    11 s against 2.4 s at load 40 on 2 cores, where the connect-back failed. The
    installed package is the zip's own source (the zip sits inside it), so the code run is
    the same."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    lib = os.path.join(home, "python", "lib")
    if not os.path.exists(os.path.join(lib, "pyspark.zip")):
        return None
    path = os.path.join(workdir, "python-bytecode")
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            "#!/bin/sh\n"
            "# pyspark from its installed package, not pyspark.zip (no bytecode cache)\n"
            f"PYTHONPATH=$(printf %s \"$PYTHONPATH\" | tr ':' '\\n' | grep -v '^{lib}/' "
            "| paste -sd: -)\n"
            "export PYTHONPATH\n"
            f"exec '{sys.executable}' \"$@\"\n"
        )
    os.chmod(path, 0o755)
    return path


def run_structured_timers(
    spark: Any,
    inputs: Sequence[Sequence[Sequence[Row]]],
    *,
    delay: int,
    timeout: int,
    api: str,
    workdir: str | None = None,
) -> list[TimerObserved]:
    """One query per the module docstring; per batch, what Spark reported and fired.
    The ``transformWithState`` query's Python workers run through
    :func:`bytecode_python` (Spark's 10 s connect-back limit)."""

    if api not in STATE_APIS:
        raise ValueError(f"unknown state api {api!r}: expected one of {STATE_APIS}")
    timeout_ms = check_duration(timeout, "timeout") // 1000
    data = check_inputs(inputs)
    kind = key_type(data)
    root = tempfile.mkdtemp(prefix="structured-timers-", dir=workdir)
    try:
        session = spark.newSession()
        session.conf.set("spark.sql.shuffle.partitions", "1")
        if api == "transformWithState":
            session.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        union = watermarked_union(session, data, delay, root)
        grouped = union.groupBy("key")
        schema = f"key {kind}, timer LONG"
        if api == "applyInPandasWithState":
            out = grouped.applyInPandasWithState(
                _apply_in_pandas(timeout_ms), schema, "timer LONG", "update", "EventTimeTimeout"
            )
        else:
            sc = session.sparkContext
            launcher, exec_before = bytecode_python(root), sc.pythonExec
            try:  # the UDF takes the launcher as it is made
                sc.pythonExec = launcher or exec_before
                out = grouped.transformWithState(
                    _processor(timeout_ms), schema, "Update", "EventTime"
                )
            finally:
                sc.pythonExec = exec_before
        fired: dict[int, list[tuple[Hashable, int]]] = {}

        def collect(frame: Any, batch_id: int) -> None:
            fired[batch_id] = [(r["key"], int(r["timer"]) * 1000) for r in frame.collect()]

        query = (
            out.writeStream.outputMode("update")
            .foreachBatch(collect)
            .trigger(availableNow=True)
            .option("checkpointLocation", os.path.join(root, "checkpoint"))
            .start()
        )
        query.awaitTermination()
        result: list[TimerObserved] = []
        for p in query.recentProgress:
            b = int(p.batchId)
            timers = sorted(fired.get(b, []), key=lambda kt: (kt[1], repr(kt[0])))
            result.append((b, progress_watermark(p), tuple(timers)))
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)
