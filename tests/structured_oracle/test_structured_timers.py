"""The state APIs' event-time timer rules against real Spark (pyspark 4.3, local mode):
``applyInPandasWithState`` timeouts fire when watermark > timeout, ``transformWithState``
timers when timer <= watermark (RocksDB state store). One query per API; each key's timer
is its rows' max event ms + 10 s, and batch 3's watermark (20 s) equals key a's timer.
Batch 3 also brings three late-or-not rows: f at 10 s (equal to the previous batch's
watermark: late), h at 5 s (late) and g at 15 s (behind batch 3's own watermark, 20 s,
but after the previous one: kept, so its timer, 25 s, fires)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.structured_oracle.structured_timers import run_structured_timers
from theory.spark.timers import run_timers

S = 1_000_000
# watermarks (delay 5 s): 0, 5, 10, 20, 25, then a no-data batch at 30 s
INPUTS = [[
    [("a", 10 * S)],
    [("b", 15 * S)],
    [("c", 25 * S)],
    [("d", 30 * S), ("f", 10 * S), ("g", 15 * S), ("h", 5 * S)],
    [("e", 35 * S)],
]]


@pytest.fixture(scope="module")
def timers(spark: Any) -> dict[str, list[Any]]:
    return {
        api: run_structured_timers(spark, INPUTS, delay=5 * S, timeout=10 * S, api=api)
        for api in ("applyInPandasWithState", "transformWithState")
    }


def model(api: str) -> list[Any]:
    return [
        (b.batch_id, b.watermark, b.fired)
        for b in run_timers(INPUTS, delay=5 * S, timeout=10 * S, api=api)
    ]


def test_apply_in_pandas_with_state_times_out_when_watermark_passes_the_timeout(timers):
    real = timers["applyInPandasWithState"]
    assert real[3][1] == 20 * S and real[3][2] == ()  # watermark == timeout: no timeout
    assert real[4][1] == 25 * S and ("a", 20 * S) in real[4][2]
    assert model("applyInPandasWithState") == real


def test_transform_with_state_fires_timers_at_or_below_the_watermark(timers):
    real = timers["transformWithState"]
    assert real[3][1] == 20 * S and real[3][2] == (("a", 20 * S),)  # timer == watermark
    assert model("transformWithState") == real


def test_late_rows_are_dropped_against_the_previous_batch_watermark(timers):
    """The model's late filter (event time <= the previous batch's watermark) against real
    Spark, in both APIs: f (at it) and h never set a timer; g (past it, behind the batch's
    own) does, and it fires by each API's rule."""
    for api, g_fires_in in (("applyInPandasWithState", 5), ("transformWithState", 4)):
        real = timers[api]
        fired = {k: b for b, _, timers_ in real for k, _ in timers_}
        assert "f" not in fired and "h" not in fired, api
        assert fired["g"] == g_fires_in, api
        assert model(api) == real, api
