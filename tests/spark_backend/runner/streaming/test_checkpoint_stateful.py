"""Checkpoints keep a stateful DoFn's user state and pending timers: a run stopped after
two batches (``--max_batches 2``) and restarted from its checkpoint writes, batch by
batch, what one uninterrupted run writes, and its watermark and hold history (the
``state:timers`` hold among them) equals that run's."""

# ruff: noqa: B008

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate, window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.utils.timestamp import Timestamp

from beam_pipelines.sinks import WriteBatchesToText
from spark_backend.runner import PySparkRunner
from spark_backend.runner.streaming.keyed_state import TIMER_HOLD
from tests.spark_backend.runner.streaming.ckpt_pipeline import outputs
from tests.spark_backend.runner.streaming.test_faults import watermark_series

pytestmark = pytest.mark.slow

S = 1_000_000


class SumUntilFlush(beam.DoFn):
    """Per key: values in a bag; an event-time timer 5 s after the first element's time
    emits their sum at the timer (the state spans batches, the timer holds the output)."""

    BAG = userstate.BagStateSpec("bag", VarIntCoder())
    FLUSH = userstate.TimerSpec("flush", TimeDomain.WATERMARK)

    def process(
        self,
        kv: Any,
        ts: Any = beam.DoFn.TimestampParam,
        bag: Any = beam.DoFn.StateParam(BAG),
        flush: Any = beam.DoFn.TimerParam(FLUSH),
    ) -> Any:
        if not list(bag.read()):
            flush.set(ts + 5)
        bag.add(kv[1])
        return []

    @userstate.on_timer(FLUSH)
    def on_flush(
        self,
        key: Any = beam.DoFn.KeyParam,
        ts: Any = beam.DoFn.TimestampParam,
        bag: Any = beam.DoFn.StateParam(BAG),
    ) -> Any:
        yield json.dumps([key, sum(bag.read()), int(ts.micros)])
        bag.clear()


def events() -> TestStream:
    def tv(key: str, value: int, seconds: int) -> window.TimestampedValue:
        return window.TimestampedValue((key, value), Timestamp(micros=seconds * S))

    return (
        TestStream()
        .add_elements([tv("a", 1, 1), tv("b", 10, 2)])
        .add_elements([tv("a", 2, 3)])
        .advance_watermark_to(Timestamp(micros=4 * S))
        .add_elements([tv("a", 4, 5), tv("b", 20, 6)])
        .advance_watermark_to(Timestamp(micros=7 * S))
        .add_elements([tv("a", 8, 9)])
        .advance_watermark_to_infinity()
    )


def run(out: Path, checkpoint: Path, *extra: str) -> Any:
    options = PipelineOptions(
        ["--streaming", "--checkpoint_dir", str(checkpoint), "--key_partitions", "2", *extra]
    )
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    (
        p
        | "events" >> events()
        | "window" >> beam.WindowInto(window.GlobalWindows())
        | "flush" >> beam.ParDo(SumUntilFlush())
        | "write" >> WriteBatchesToText(str(out))
    )
    result = p.run()
    result.wait_until_finish()
    return result


def test_a_restart_keeps_user_state_and_timers(spark: Any, tmp_path: Path) -> None:
    whole = run(tmp_path / "whole", tmp_path / "whole-ckpt")
    assert whole.state == PipelineState.DONE and not whole.stalled
    expected = outputs(tmp_path / "whole")
    lines = sorted(json.loads(line) for batch in expected.values() for line in batch)
    # a fires at 6 s with 1+2+4 (4 arrived after the first batches), again at 14 s with 8;
    # b at 7 s with 10+20: sums only state kept across batches can give
    assert lines == [["a", 7, 6 * S], ["a", 8, 14 * S], ["b", 30, 7 * S]]
    marks = watermark_series(whole)
    assert any(TIMER_HOLD in series for series in marks.values())

    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    first = run(out, checkpoint, "--max_batches", "2")
    assert first.batches == 2
    rest = run(out, checkpoint)
    assert rest.state == PipelineState.DONE
    assert first.batches + rest.batches == whole.batches
    assert outputs(out) == expected
    assert watermark_series(rest) == marks
