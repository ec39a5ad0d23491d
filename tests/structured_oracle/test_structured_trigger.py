"""The whole-trace spark profile's batch timing (``theory.spark.trace.trigger_schedule``)
against a real ``ProcessingTime`` trigger (pyspark 4.3, local mode): batches start at
the interval boundaries since the epoch, a batch reads the files visible by then, a batch
that moved the watermark is followed one interval later by a no-data batch, and nothing
runs while no data arrives and the watermark stands still. One query, real time (about
25 s): 3 s intervals leave a loaded machine time to finish each batch within one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.structured_oracle.structured_trigger import run_processing_time
from theory.spark.trace import trigger_schedule

pytestmark = pytest.mark.slow

S = 1_000_000
INTERVAL = 3 * S
DELAY = 5 * S
# seconds after a boundary: two files in the first interval, then one 6.5 s later
DROPS = [(0.3, [("a", 10 * S)]), (0.9, [("b", 12 * S), ("a", 11 * S)]), (6.5, [("c", 40 * S)])]


def test_processing_time_batches_equal_the_model(spark: Any) -> None:
    run = run_processing_time(spark, DROPS, interval=INTERVAL, delay=DELAY, window_size=10 * S)
    arrival = np.array(run.arrivals, dtype=np.int64)
    prefix_max = np.maximum.accumulate(np.array(run.event_times, dtype=np.int64) // 1000)
    starts, cuts, wms, _, data = trigger_schedule(
        arrival, prefix_max, INTERVAL, 0, DELAY // 1000, True, 1000
    )
    rows = np.diff([0, *cuts]).tolist()
    model = [(i, s, r if d else 0, w) for i, (s, r, w, d) in
             enumerate(zip(starts, rows, wms, data, strict=True))]
    real = [(b, t - t % INTERVAL, n, w) for b, t, n, w in run.batches]
    assert real == model, (run.batches, run.arrivals)
    # the shape the model claims: data, no-data one interval later, idle, data, no-data
    assert [n > 0 for _, _, n, _ in real] == [True, False, True, False]
    assert real[1][1] - real[0][1] == INTERVAL and real[2][1] - real[1][1] == INTERVAL
