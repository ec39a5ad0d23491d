"""PySparkRunner against FnApiRunner: same pipelines, identical outputs.

Outputs are compared as multisets of (value, timestamp, window, pane info); inputs are
seeded random data with random window sizes, under the default trigger.
"""

# Beam declares DoFn state and timers as default arguments (StateParam, TimerParam).
# ruff: noqa: B008

from __future__ import annotations

import random
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.transforms import window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.trigger import AccumulationMode, AfterWatermark
from apache_beam.transforms.userstate import (
    BagStateSpec,
    CombiningValueStateSpec,
    ReadModifyWriteStateSpec,
    SetStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.utils.timestamp import Timestamp

from spark_backend.runner import PipelineFailedError
from spark_backend.runner.plan.plan import BUNDLE_PROCESSOR, LEAN, THEORY_ENGINE, TRIGGER_DRIVER

pytestmark = pytest.mark.slow

SUM: Any = sum  # Beam's type stubs reject the builtin


def stamp(element: tuple[str, int, int]) -> Any:
    key, value, micros = element
    return window.TimestampedValue((key, value), Timestamp(micros=micros))


class Events(beam.PTransform):
    """``n`` seeded ``(key, value)`` elements, timestamped over ``span_s`` seconds."""

    def __init__(self, seed: int, n: int = 200, keys: int = 5, span_s: int = 600) -> None:
        super().__init__()
        rng = random.Random(seed)
        self._rows = [
            (f"k{rng.randrange(keys)}", rng.randrange(100), rng.randrange(span_s * 1_000_000))
            for _ in range(n)
        ]

    def expand(self, p: Any) -> Any:
        return p | beam.Create(self._rows) | beam.Map(stamp)


def random_window_fn(seed: int) -> Any:
    rng = random.Random(seed)
    kind = rng.choice(["fixed", "sliding", "sessions"])
    if kind == "fixed":
        return window.FixedWindows(rng.randint(10, 120), offset=rng.randint(0, 9))
    if kind == "sliding":
        size = rng.randint(20, 120)
        return window.SlidingWindows(size, rng.randint(5, size), offset=rng.randint(0, 4))
    return window.Sessions(rng.randint(5, 60))


def _grouped_in_random_windows(p: beam.Pipeline, seeds: list[int]) -> dict[str, Any]:
    out = {}
    for seed in seeds:
        windowed = (
            p
            | f"Events{seed}" >> Events(seed, n=120)
            | f"W{seed}" >> beam.WindowInto(random_window_fn(seed))
        )
        out.update(
            {
                f"gbk{seed}": windowed | f"Group{seed}" >> beam.GroupByKey(),
                f"sum{seed}": windowed | f"Sum{seed}" >> beam.CombinePerKey(sum),
                f"mean{seed}": windowed | f"Mean{seed}" >> beam.combiners.Mean.PerKey(),
                f"count{seed}": windowed
                | f"Count{seed}" >> beam.combiners.Count.Globally().without_defaults(),
            }
        )
    return out


SEEDS = [5, 7, 1]  # sessions, sliding with an offset, fixed with an offset (as drawn)


def test_group_by_key_and_combine_in_random_windows(differential: Any) -> None:
    """Each seed's four outputs are compared separately (one pipeline runs them all);
    every GroupByKey and lifted Combine shuffles columns and is grouped by the sort
    (:mod:`spark_backend.runner.grouping.columns`), on theory's engine's path."""
    assert [type(random_window_fn(s)).__name__ for s in SEEDS] == [
        "Sessions",
        "SlidingWindows",
        "FixedWindows",
    ]
    result = differential(lambda p: _grouped_in_random_windows(p, SEEDS))
    for seed in SEEDS:
        assert result.paths[f"Group{seed}"] == THEORY_ENGINE
        assert result.paths[f"Sum{seed}/Group"] == THEORY_ENGINE
        assert {f"Group{seed}", f"Sum{seed}/Group"} <= result.columnar  # shuffled as columns
        # the stage that stamps, windows and partially combines the events ran lean
        (first,) = [n for n in result.stage_paths if f"W{seed}" in n and "Precombine" in n]
        assert result.stage_paths[first] == LEAN


def test_the_generic_path_gives_the_same_output(differential: Any) -> None:
    """With fast paths off every GroupByKey runs on Beam's trigger driver: the reference
    the engine path is compared with, itself compared with FnApiRunner here."""
    from spark_backend.runner import PySparkRunner

    result = differential(lambda p: _grouped_in_random_windows(p, [5]), on=PySparkRunner(False))
    assert result.paths["Group5"] == TRIGGER_DRIVER  # sessions: merging on Beam's driver
    assert result.paths["Sum5/Group"] == TRIGGER_DRIVER
    assert not result.columnar
    assert set(result.stage_paths.values()) == {BUNDLE_PROCESSOR}  # and no lean stage


class _Bundled(beam.DoFn):
    """Asks for its timestamp and overrides ``start_bundle``: a stage on Beam's bundle
    processor (the lean ParDo takes no bundle methods)."""

    def start_bundle(self) -> None:
        self.offset = 0

    def process(self, kv: Any, ts: Any = beam.DoFn.TimestampParam) -> Any:
        yield kv[0], kv[1] + ts.micros % 7 + self.offset


def test_timestamp_combiners(differential: Any) -> None:
    combiners = {
        "eow": window.TimestampCombiner.OUTPUT_AT_EOW,
        "earliest": window.TimestampCombiner.OUTPUT_AT_EARLIEST,
        "latest": window.TimestampCombiner.OUTPUT_AT_LATEST,
    }

    def build(p: beam.Pipeline) -> dict[str, Any]:
        events = p | Events(7, n=120)
        out = {
            name: events
            | f"W {name}" >> beam.WindowInto(window.Sessions(30), timestamp_combiner=combiner)
            | f"G {name}" >> beam.GroupByKey()
            for name, combiner in combiners.items()
        }
        # one GroupByKey fed by a lean stage (columns) and a bundle stage (Beam's bytes,
        # decoded once into columns), sliding windows under a bare AfterWatermark()
        sliding = {
            "windowfn": window.SlidingWindows(40, 15, offset=4),
            "trigger": AfterWatermark(),
            "accumulation_mode": AccumulationMode.DISCARDING,
            "timestamp_combiner": window.TimestampCombiner.OUTPUT_AT_LATEST,
        }
        bundled = (
            p
            | "Other" >> Events(8, n=60)
            | "Observed" >> beam.ParDo(_Bundled())
            | "W observed" >> beam.WindowInto(**sliding)
        )
        plain = (
            events
            | "Plain" >> beam.Map(lambda kv: (kv[0], -kv[1]))
            | "W plain" >> beam.WindowInto(**sliding)
        )
        out["mixed"] = (bundled, plain) | "Both" >> beam.Flatten() | "G mixed" >> beam.GroupByKey()
        return out

    result = differential(build)
    names = [*combiners, "mixed"]
    assert {result.paths[f"G {name}"] for name in names} == {THEORY_ENGINE}
    assert {f"G {name}" for name in names} <= result.columnar
    (observed,) = [path for n, path in result.stage_paths.items() if "Observed" in n]
    (plain,) = [path for n, path in result.stage_paths.items() if "Plain" in n]
    assert (observed, plain) == (BUNDLE_PROCESSOR, LEAN)  # both kinds of writer


def test_pardo_params_tagged_outputs_flatten_partition(differential: Any) -> None:
    class Split(beam.DoFn):
        def process(
            self, kv: Any, ts: Any = beam.DoFn.TimestampParam, w: Any = beam.DoFn.WindowParam
        ) -> Any:
            key, value = kv
            if value % 2:
                yield beam.pvalue.TaggedOutput("odd", (key, value, int(ts.micros), repr(w)))
            else:
                yield (key, value)

    def build(p: beam.Pipeline) -> dict[str, Any]:
        base = p | Events(11) | beam.WindowInto(window.FixedWindows(60))
        split = base | beam.ParDo(Split()).with_outputs("odd", main="even")
        by_value: Any = lambda kv, n: kv[1] % n  # noqa: E731  (Beam's stubs want Any)
        parts = base | beam.Partition(by_value, 3)
        flat = (parts[0], parts[2], split.even) | beam.Flatten()
        return {
            "even": split.even | beam.Map(lambda kv: kv[1]),
            "odd": split.odd,
            "flat": flat,
            "filtered": base | beam.Filter(lambda kv: kv[1] > 50),
            "flatmap": base | beam.FlatMap(lambda kv: [kv[0]] * (kv[1] % 3)),
            "reshuffled": base | beam.Reshuffle(),
        }

    differential(build)


def test_side_inputs(differential: Any) -> None:
    def build(p: beam.Pipeline) -> dict[str, Any]:
        main = p | "Main" >> Events(5, n=60)
        pairs = p | "Pairs" >> beam.Create([("k0", 1), ("k1", 2), ("k1", 3)])
        total = p | "Total" >> beam.Create([10])
        windowed_main = main | "WMain" >> beam.WindowInto(window.FixedWindows(120))
        windowed_side = (
            p
            | "Side" >> Events(6, n=40)
            | "WSide" >> beam.WindowInto(window.FixedWindows(120))
            | beam.Map(lambda kv: kv[1])
        )
        return {
            "singleton": main
            | "S" >> beam.Map(lambda kv, t: kv[1] + t, beam.pvalue.AsSingleton(total)),
            "list": main
            | "L" >> beam.Map(lambda kv, xs: (kv[0], sorted(xs)), beam.pvalue.AsList(pairs)),
            "iter": main
            | "I" >> beam.Map(lambda kv, xs: sum(x for _, x in xs), beam.pvalue.AsIter(pairs)),
            "dict": main
            | "D"
            >> beam.Map(
                lambda kv, d: d.get(kv[0], -1),
                beam.pvalue.AsDict(p | "DictSrc" >> beam.Create([("k0", 7), ("k2", 9)])),
            ),
            "multimap": main
            | "M" >> beam.Map(lambda kv, m: sorted(m[kv[0]]), beam.pvalue.AsMultiMap(pairs)),
            "windowed": windowed_main
            | "W" >> beam.Map(lambda kv, xs: (kv[0], sum(xs)), beam.pvalue.AsList(windowed_side)),
        }

    differential(build)


def test_combine_globally_with_and_without_defaults_and_combine_values(differential: Any) -> None:
    def build(p: beam.Pipeline) -> dict[str, Any]:
        nums = p | beam.Create([3, 1, 4, 1, 5, 9, 2, 6])
        empty = p | "Empty" >> beam.Create([]).with_output_types(int)
        grouped = p | "G" >> beam.Create([("a", [1, 2]), ("b", [3])])
        return {
            "sum": nums | "Sum" >> beam.CombineGlobally(sum),
            "empty_default": empty | "EmptySum" >> beam.CombineGlobally(sum),
            "top": nums | beam.combiners.Top.Of(3),
            "values": grouped | beam.CombineValues(SUM),
        }

    differential(build)


def test_dofn_lifecycle_and_finish_bundle_output(differential: Any) -> None:
    class Lifecycle(beam.DoFn):
        """Buffers a bundle's elements and emits them again from finish_bundle, so the
        output does not depend on how a runner cuts bundles (which Beam leaves open)."""

        def setup(self) -> None:
            self.ready = True

        def start_bundle(self) -> None:
            self.buffered: list[Any] = []

        def process(self, x: Any) -> Any:
            assert self.ready
            self.buffered.append(x)
            yield x

        def finish_bundle(self) -> Any:
            for x in self.buffered:
                yield window.GlobalWindows.windowed_value(("finished", x))

    def build(p: beam.Pipeline) -> Any:
        return p | beam.Create([1, 2, 3]) | beam.ParDo(Lifecycle())

    differential(build)


class _AllStates(beam.DoFn):
    """Every kind of user state, flushed by an event-time timer at the window's end."""

    COUNT = ReadModifyWriteStateSpec("count", VarIntCoder())
    BAG = BagStateSpec("bag", VarIntCoder())
    TOTAL = CombiningValueStateSpec("total", combine_fn=sum)
    SEEN = SetStateSpec("seen", VarIntCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(
        self,
        kv: Any,
        w: Any = beam.DoFn.WindowParam,
        count: Any = beam.DoFn.StateParam(COUNT),
        bag: Any = beam.DoFn.StateParam(BAG),
        total: Any = beam.DoFn.StateParam(TOTAL),
        seen: Any = beam.DoFn.StateParam(SEEN),
        end: Any = beam.DoFn.TimerParam(END),
    ) -> Any:
        count.write((count.read() or 0) + 1)
        bag.add(kv[1])
        total.add(kv[1])
        seen.add(kv[1] % 5)
        end.set(w.max_timestamp())
        if kv[1] > 95:
            yield ("early", kv[0], kv[1])

    @on_timer(END)
    def flush(
        self,
        key: Any = beam.DoFn.KeyParam,
        ts: Any = beam.DoFn.TimestampParam,
        count: Any = beam.DoFn.StateParam(COUNT),
        bag: Any = beam.DoFn.StateParam(BAG),
        total: Any = beam.DoFn.StateParam(TOTAL),
        seen: Any = beam.DoFn.StateParam(SEEN),
    ) -> Any:
        yield (
            key,
            int(ts.micros),
            count.read(),
            sorted(bag.read()),
            total.read(),
            sorted(seen.read()),
        )
        bag.clear()


def test_stateful_dofn_with_every_state_kind_and_event_time_timers(differential: Any) -> None:
    def build(p: beam.Pipeline) -> Any:
        return (
            p
            | Events(21, n=150)
            | beam.WindowInto(window.FixedWindows(90))
            | beam.ParDo(_AllStates())
        )

    differential(build)


class _EvenOddWindows(window.NonMergingWindowFn):
    """A custom WindowFn: 40 s windows for even values, 70 s for odd ones."""

    def assign(self, context: Any) -> list[Any]:
        size = 40 if context.element[1] % 2 == 0 else 70
        start = context.timestamp - (context.timestamp % size)
        return [window.IntervalWindow(start, start + size)]

    def get_window_coder(self) -> Any:
        return IntervalWindowCoder()


def test_custom_window_fn(differential: Any) -> None:
    """A WindowFn the engine does not know stays on Beam's trigger driver."""

    def build(p: beam.Pipeline) -> dict[str, Any]:
        windowed = p | Events(31, n=120) | beam.WindowInto(_EvenOddWindows())
        return {
            "gbk": windowed | "Group" >> beam.GroupByKey(),
            "sum": windowed | "Sum" >> beam.CombinePerKey(sum),
        }

    result = differential(build)
    assert result.paths["Group"] == result.paths["Sum/Group"] == TRIGGER_DRIVER


def test_the_harness_fails_on_a_different_window(differential: Any) -> None:
    """The comparison can fail: a pipeline whose windows differ by one second."""

    def build(size: int) -> Any:
        def pipeline(p: beam.Pipeline) -> Any:
            windowed = p | Events(41, n=40) | beam.WindowInto(window.FixedWindows(size))
            return windowed | beam.GroupByKey()

        return pipeline

    with pytest.raises(PipelineFailedError, match="Failed assert"):
        differential(build(60), build(61))
