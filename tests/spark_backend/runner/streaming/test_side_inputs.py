"""PySparkRunner --streaming: side inputs. Against BundleBasedDirectRunner(streaming) on
seeded random TestStreams (a main stream and a side stream, every access pattern,
windowed sides mapped by window, sliding main windows, late sides, empty side windows);
the pushed-back elements' ``side input`` hold; a triggered global side input updated
mid-stream (a divergence: BundleBasedDirectRunner waits for the side input's end); the
views in a checkpoint."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Timestamp

from spark_backend.runner.streaming.side_views import SIDE_HOLD
from tests.spark_backend.runner.streaming.conftest import CaptureValues, read_values
from theory.time import MAX_TIMESTAMP

pytestmark = pytest.mark.slow

S = 1_000_000
SEED = 16


Event = tuple[str, Any]


def random_script(seed: int, events: int = 10) -> list[Event]:
    """A main and a side script in whole seconds (each with its own watermark), and
    processing-time steps. Side elements are always on time (ahead of the side
    watermark), so every side window is complete when its watermark passes it and
    BundleBasedDirectRunner's view is defined; main elements come before, between and
    after the side data of their windows (some wait), and some 10 s windows get no side
    element (empty views)."""
    rng = random.Random(seed)
    # first, a main element whose side window waits while the main watermark passes it
    # (at processing times of their own: the hold shows in the series over time)
    script: list[Event] = [("main", [2]), ("clock", 1), ("main-mark", 15), ("clock", 1)]
    main_mark, side_mark = 15, 0
    key = 0
    for _ in range(events):
        kind = rng.choice(("main", "main", "side", "side", "main-mark", "side-mark"))
        if kind == "main":
            script.append(
                ("main", [main_mark + rng.randint(0, 25) for _ in range(rng.randint(1, 3))])
            )
        elif kind == "side":
            batch = []
            for _ in range(rng.randint(1, 3)):
                key += 1
                stamp = side_mark + rng.choice((0, 1, 2, 3, 4, 25))
                batch.append((stamp, (key, stamp % 3)))
            script.append(("side", batch))
        elif kind == "main-mark":
            main_mark += rng.randint(3, 12)
            script.append(("main-mark", main_mark))
        else:
            side_mark += rng.randint(3, 12)
            script.append(("side-mark", side_mark))
    return script


def to_stream(script: list[Event]) -> TestStream:
    """``script`` as one TestStream of two output tags, ``main`` and ``side``."""
    stream = TestStream(output_tags={"main", "side"})
    for kind, payload in script:
        if kind == "main":
            batch = [window.TimestampedValue(s, Timestamp(s)) for s in payload]
            stream = stream.add_elements(batch, tag="main")
        elif kind == "side":
            batch = [window.TimestampedValue(v, Timestamp(s)) for s, v in payload]
            stream = stream.add_elements(batch, tag="side")
        elif kind == "clock":
            stream = stream.advance_processing_time(payload)
        else:
            tag = kind.removesuffix("-mark")
            stream = stream.advance_watermark_to(Timestamp(payload), tag=tag)
    end = Timestamp(micros=MAX_TIMESTAMP)
    return stream.advance_watermark_to(end, tag="main").advance_watermark_to(end, tag="side")


SCRIPT = random_script(SEED)


def triggered_views(script: list[Event], accumulating: bool) -> dict[int, list[Any]]:
    """What each main value reads from the triggered global side input as Beam defines
    it: a main element waits for the first pane (or the side's end), and each pane (one
    per side batch: ``Repeatedly(AfterCount(1))``) replaces the view."""
    latest: list[Any] | None = None
    seen: list[Any] = []
    waiting: list[int] = []
    out: dict[int, list[Any]] = {}
    for kind, payload in script:
        if kind == "side":
            seen += [v for _, v in payload]
            latest = sorted(seen if accumulating else [v for _, v in payload])
            out.update((m, latest) for m in waiting)
            waiting = []
        elif kind == "main":
            for m in payload:
                if latest is None:
                    waiting.append(m)
                else:
                    out[m] = latest
    out.update((m, latest or []) for m in waiting)
    return out


def side_pipeline(p: beam.Pipeline, capture: Any) -> None:
    """Every access pattern over 10 s side windows read from 10 s main windows, a global
    side read from them, 10 s side windows read from 10 s sliding main windows, and a
    triggered global side input (discarding and accumulating) read from 10 s windows."""
    streams = p | "stream" >> to_stream(SCRIPT)
    side = streams["side"]
    fixed = side | "side windows" >> beam.WindowInto(window.FixedWindows(10))
    total = (
        fixed
        | "values" >> beam.Map(lambda kv: kv[1])
        | "sum" >> beam.CombineGlobally(sum).without_defaults()
    )
    glob = side | "global values" >> beam.Map(lambda kv: kv[0])
    main = streams["main"]

    def read(
        value: Any, single: Any, bare: Any, it: Any, lst: Any, dct: Any, multi: Any, g: Any
    ) -> Any:
        return (
            value,
            single,
            "empty" if isinstance(bare, beam.pvalue.EmptySideInput) else bare,
            sorted(it),
            sorted(lst),
            sorted(dct.items()),
            [(k, sorted(multi[k])) for k in (0, 1, 2)],
            sorted(g),
        )

    fixed_main = main | "main windows" >> beam.WindowInto(window.FixedWindows(10))
    reads = fixed_main | "read" >> beam.Map(
        read,
        beam.pvalue.AsSingleton(total, default_value=-1),
        beam.pvalue.AsSingleton(total),  # no default: Beam's EmptySideInput when empty
        beam.pvalue.AsIter(fixed),
        beam.pvalue.AsList(fixed),
        beam.pvalue.AsDict(fixed),
        beam.pvalue.AsMultiMap(fixed | "by value" >> beam.Map(lambda kv: (kv[1], kv[0]))),
        beam.pvalue.AsList(glob),
    )
    sliding = (
        main
        | "sliding" >> beam.WindowInto(window.SlidingWindows(10, 5))
        | "read sliding" >> beam.Map(lambda v, lst: (v, sorted(lst)), beam.pvalue.AsList(fixed))
    )
    branches = {"fixed": reads, "sliding": sliding}
    modes = {
        "discarding": trigger.AccumulationMode.DISCARDING,
        "accumulating": trigger.AccumulationMode.ACCUMULATING,
    }
    for mode_name, mode in modes.items():
        name = f"triggered-{mode_name}"
        triggered = side | f"{name} side" >> beam.WindowInto(
            window.GlobalWindows(),
            trigger=trigger.Repeatedly(trigger.AfterCount(1)),
            accumulation_mode=mode,
        )
        branches[name] = fixed_main | f"read {name}" >> beam.Map(
            lambda v, lst: (v, sorted(lst)), beam.pvalue.AsList(triggered)
        )
    for name, pcoll in branches.items():
        _ = (
            pcoll
            | f"stamp {name}" >> beam.ParDo(Stamp(name))
            | f"capture {name}" >> beam.ParDo(capture)
        )


class Stamp(beam.DoFn):
    """Each output with its branch, window and timestamp (µs)."""

    def __init__(self, branch: str) -> None:
        self._branch = branch

    def process(
        self,
        value: Any,
        w: Any = beam.DoFn.WindowParam,
        ts: Any = beam.DoFn.TimestampParam,
    ) -> Any:
        yield self._branch, repr(w), int(ts.micros), value


@pytest.fixture(scope="module")
def direct_outputs() -> list[Any]:
    """BundleBasedDirectRunner's outputs of :func:`side_pipeline` (run once)."""
    with tempfile.TemporaryDirectory() as directory:
        opts = beam.options.pipeline_options.PipelineOptions([], streaming=True)
        pipeline = beam.Pipeline(runner=BundleBasedDirectRunner(), options=opts)
        side_pipeline(pipeline, CaptureValues(directory))
        pipeline.run().wait_until_finish()
        return read_values(Path(directory))


def test_side_inputs_match_bundle_based_direct_runner_across_a_restart(
    run_pipeline: Any, direct_outputs: list[Any], tmp_path: Path
) -> None:
    """One run stopped after 9 batches and resumed from its checkpoint (the views and the
    waiting elements are in it) gives BundleBasedDirectRunner's outputs; a triggered
    global side input gives Beam's model (first pane, then each pane replaces the view)
    where BundleBasedDirectRunner waits for the side input's end and reads everything."""
    checkpoint = str(tmp_path / "checkpoint")
    first, stopped = run_pipeline(
        side_pipeline, key_partitions=2, checkpoint_dir=checkpoint, max_batches=9
    )
    assert stopped.batches == 9
    rest, result = run_pipeline(side_pipeline, key_partitions=2, checkpoint_dir=checkpoint)
    ours = first + rest

    def branch(outputs: list[Any], *names: str) -> list[Any]:
        return sorted(o for o in outputs if o[0] in names)

    assert branch(ours, "fixed", "sliding") == branch(direct_outputs, "fixed", "sliding")
    fixed = branch(ours, "fixed")
    # the script exercises what it should: empty side windows and non-empty ones
    assert any(o[3][1] == -1 for o in fixed) and any(o[3][1] != -1 for o in fixed)
    assert all((o[3][2] == "empty") == (o[3][1] == -1) for o in fixed)
    assert any(o[3][4] == [] for o in fixed) and any(o[3][4] for o in fixed)
    everything = sorted(v for kind, batch in SCRIPT if kind == "side" for _, v in batch)
    for mode, accumulating in (("discarding", False), ("accumulating", True)):
        name = f"triggered-{mode}"
        views = triggered_views(SCRIPT, accumulating)
        assert {o[3][0]: o[3][1] for o in branch(ours, name)} == views, name
        assert {o[3][0]: o[3][1] for o in branch(direct_outputs, name)} == dict.fromkeys(
            views, everything
        ), "BundleBasedDirectRunner reads the whole side input at its end"
    assert len(set(map(repr, triggered_views(SCRIPT, False).values()))) > 2, (
        "the view must change mid-stream"
    )
    # elements waited for their side windows: the hold was set and held the output
    marks = result.watermarks()["read"]
    hold = marks[SIDE_HOLD]
    assert hold.values.min() < MAX_TIMESTAMP, "no main element ever waited"
    times = hold.times
    assert (marks["output"].at(times) <= hold.at(times)).all()
    # a side input does not hold the ParDo's input watermark (Beam's runners): its
    # waiting elements hold the output, and why() names that hold
    binding = times[hold.at(times) < marks["input"].at(times)]
    assert len(binding), "the side-input hold never held the output below the input"
    assert result.why("read", int(binding[0]))[0] == ("read", SIDE_HOLD)
