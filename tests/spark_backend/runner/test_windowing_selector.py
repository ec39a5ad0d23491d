"""The runner asks :mod:`theory.windowing.select` which path a strategy takes: the batch
GroupByKey's engine path (``engine_strategy``) and the streaming Combine's lifting
(``liftable``) are Beam's rules' answers (recorded in BEAMS_RULES), for Beam's window fns under
every kind of trigger, output at the end of the window or at the earliest."""

from __future__ import annotations

from typing import Any

import pytest
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.runners import pipeline_context
from apache_beam.transforms import trigger as bt
from apache_beam.transforms import window as bw
from apache_beam.transforms.core import Windowing

from spark_backend.runner.grouping.engine import engine_strategy
from spark_backend.runner.streaming.lifting import liftable
from theory import WindowingStrategy


class _Custom(bw.NonMergingWindowFn):
    def assign(self, context: Any) -> list[Any]:
        return [bw.GlobalWindow()]

    def get_window_coder(self) -> Any:
        return bw.GlobalWindows().get_window_coder()


WINDOW_FNS = {
    "fixed": bw.FixedWindows(60),
    "sliding": bw.SlidingWindows(60, 30),
    "sessions": bw.Sessions(10),
    "global": bw.GlobalWindows(),
    "custom": _Custom(),
}
TRIGGERS = {
    "default": bt.DefaultTrigger(),
    "watermark": bt.AfterWatermark(),
    "early count 1": bt.AfterWatermark(early=bt.AfterCount(1)),
    "late count 1": bt.AfterWatermark(late=bt.AfterCount(1)),
    "early time, late count 1": bt.AfterWatermark(
        early=bt.AfterProcessingTime(5), late=bt.AfterCount(1)
    ),
    "count 2": bt.AfterCount(2),
    "repeated count 1": bt.Repeatedly(bt.AfterCount(1)),
    "repeated count 3": bt.Repeatedly(bt.AfterCount(3)),
    "any": bt.Repeatedly(bt.AfterAny(bt.AfterCount(1), bt.AfterProcessingTime(3))),
    "all": bt.Repeatedly(bt.AfterAll(bt.AfterCount(1), bt.AfterProcessingTime(3))),
    "or finally": bt.Repeatedly(bt.OrFinally(bt.AfterCount(1), bt.AfterCount(5))),
    "each": bt.AfterEach(bt.AfterCount(1), bt.AfterCount(2)),
    "always": bt.Always(),
}
#: The answers of the rules on Beam's windowings and protos (Fixed, Sliding, Sessions
#: under a watermark-only trigger; Beam's ``lift_combiners`` trigger rule), per trigger,
#: for the window fns in WINDOW_FNS' order, output at the end of the window: "engine"
#: (the batch GroupByKey runs on theory's engine), "lift" (the streaming Combine is
#: lifted). Output at the earliest: the same engine answers, never lifted.
BEAMS_RULES = {
    "default": ("engine lift", "engine lift", "engine", "lift", "lift"),
    "watermark": ("engine", "engine", "engine", "", ""),
    "early count 1": ("", "", "", "", ""),
    "late count 1": ("", "", "", "", ""),
    "early time, late count 1": ("lift", "lift", "", "lift", "lift"),
    "count 2": ("", "", "", "", ""),
    "repeated count 1": ("lift", "lift", "", "lift", "lift"),
    "repeated count 3": ("", "", "", "", ""),
    "any": ("lift", "lift", "", "lift", "lift"),
    "all": ("", "", "", "", ""),
    "or finally": ("", "", "", "", ""),
    "each": ("", "", "", "", ""),
    "always": ("lift", "lift", "", "lift", "lift"),
}
COMBINERS = {
    "end of window": bw.TimestampCombiner.OUTPUT_AT_EOW,
    "earliest": bw.TimestampCombiner.OUTPUT_AT_EARLIEST,
}


def _combine_over(windowing: Windowing) -> tuple[pb.Pipeline, pb.PTransform]:
    """A pipeline proto holding one PCollection of ``windowing``, and a ``Combine.PerKey``
    reading it (all ``liftable`` reads)."""
    context = pipeline_context.PipelineContext()
    strategy = windowing.to_runner_api(context)
    components = context.to_runner_api()
    components.windowing_strategies["w"].CopyFrom(strategy)
    components.pcollections["in"].CopyFrom(pb.PCollection(windowing_strategy_id="w"))
    combine = pb.PTransform(inputs={"in": "in"})
    return pb.Pipeline(components=components), combine


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("trigger", TRIGGERS)
def test_the_runner_gives_beams_rules_answers(trigger: str, combiner: str) -> None:
    for (name, fn), expected in zip(WINDOW_FNS.items(), BEAMS_RULES[trigger], strict=True):
        windowing = Windowing(
            fn,
            triggerfn=TRIGGERS[trigger],
            accumulation_mode=bt.AccumulationMode.DISCARDING,
            timestamp_combiner=COMBINERS[combiner],
        )
        engine = engine_strategy(windowing)
        on_engine = isinstance(engine, WindowingStrategy)
        assert on_engine == ("engine" in expected.split()), (name, engine)
        lifted = liftable(*_combine_over(windowing))
        assert lifted == ("lift" in expected.split() and combiner == "end of window"), name
