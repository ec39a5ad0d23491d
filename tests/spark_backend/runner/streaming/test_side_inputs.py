"""PySparkRunner --streaming: side inputs. Against BundleBasedDirectRunner(streaming) on
seeded random TestStreams (a main stream and a side stream, every access pattern,
windowed sides mapped by window, sliding main windows, late sides, empty side windows);
the pushed-back elements' ``side input`` hold; a triggered global side input updated
mid-stream (a divergence: BundleBasedDirectRunner waits for the side input's end); the
views in a checkpoint."""

from __future__ import annotations

import random
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Timestamp

from spark_backend.runner.streaming.side_views import SIDE_HOLD
from theory.time import MAX_TIMESTAMP

pytestmark = pytest.mark.slow

S = 1_000_000
SEED = 16


def random_stream(seed: int, events: int = 10) -> TestStream:
    """One TestStream of two output tags, ``main`` and ``side``, in whole seconds, each
    tag with its own watermark. Side elements are always on time (ahead of the side
    watermark), so every side window is complete when its watermark passes it and
    BundleBasedDirectRunner's view is defined; main elements come before, between and
    after the side data of their windows (some wait), and some 10 s windows get no side
    element (empty views)."""
    rng = random.Random(seed)
    stream = TestStream(output_tags={"main", "side"})
    main_mark = side_mark = 0
    key = 0
    for _ in range(events):
        kind = rng.choice(("main", "main", "side", "side", "main-mark", "side-mark"))
        if kind == "main":
            stamps = [main_mark + rng.randint(0, 25) for _ in range(rng.randint(1, 3))]
            batch = [window.TimestampedValue(s, Timestamp(s)) for s in stamps]
            stream = stream.add_elements(batch, tag="main")
        elif kind == "side":
            batch = []
            for _ in range(rng.randint(1, 3)):
                key += 1
                stamp = side_mark + rng.choice((0, 1, 2, 3, 4, 25))
                batch.append(window.TimestampedValue((key, stamp % 3), Timestamp(stamp)))
            stream = stream.add_elements(batch, tag="side")
        elif kind == "main-mark":
            main_mark += rng.randint(3, 12)
            stream = stream.advance_watermark_to(Timestamp(main_mark), tag="main")
        else:
            side_mark += rng.randint(3, 12)
            stream = stream.advance_watermark_to(Timestamp(side_mark), tag="side")
    end = Timestamp(micros=MAX_TIMESTAMP)
    return stream.advance_watermark_to(end, tag="main").advance_watermark_to(end, tag="side")


def windowed_sides(p: beam.Pipeline, capture: Any) -> None:
    """Every access pattern over 10 s side windows read from 10 s main windows, a global
    side read from them, and 10 s side windows read from 10 s sliding main windows."""
    streams = p | "stream" >> random_stream(SEED)
    side = streams["side"]
    fixed = side | "side windows" >> beam.WindowInto(window.FixedWindows(10))
    total = (
        fixed
        | "values" >> beam.Map(lambda kv: kv[1])
        | "sum" >> beam.CombineGlobally(sum).without_defaults()
    )
    glob = side | "global values" >> beam.Map(lambda kv: kv[0])
    main = streams["main"]

    def read(value: Any, single: Any, it: Any, lst: Any, dct: Any, multi: Any, g: Any) -> Any:
        return (
            value,
            single,
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
    for name, pcoll in (("fixed", reads), ("sliding", sliding)):
        _ = pcoll | f"stamp {name}" >> beam.ParDo(Stamp(name)) | f"capture {name}" >> beam.ParDo(
            capture
        )


class Stamp(beam.DoFn):
    """Each output with its branch, window and timestamp (µs)."""

    def __init__(self, branch: str) -> None:
        self._branch = branch

    def process(
        self,
        value: Any,
        w: Any = beam.DoFn.WindowParam,  # noqa: B008
        ts: Any = beam.DoFn.TimestampParam,  # noqa: B008
    ) -> Any:
        yield self._branch, repr(w), int(ts.micros), value


@pytest.fixture(scope="module")
def direct_windowed() -> list[Any]:
    """BundleBasedDirectRunner's outputs of :func:`windowed_sides` (run once)."""
    import tempfile
    from pathlib import Path

    from tests.spark_backend.runner.streaming.conftest import CaptureValues, read_values

    with tempfile.TemporaryDirectory() as directory:
        opts = beam.options.pipeline_options.PipelineOptions([], streaming=True)
        pipeline = beam.Pipeline(runner=BundleBasedDirectRunner(), options=opts)
        windowed_sides(pipeline, CaptureValues(directory))
        pipeline.run().wait_until_finish()
        return read_values(Path(directory))


def test_windowed_side_inputs_match_bundle_based_direct_runner(
    run_pipeline: Any, direct_windowed: list[Any]
) -> None:
    ours, result = run_pipeline(windowed_sides, key_partitions=2)
    assert sorted(ours) == sorted(direct_windowed)
    fixed = [o for o in ours if o[0] == "fixed"]
    # the stream exercises what it should: empty side windows and non-empty ones
    assert any(o[3][1] == -1 for o in fixed) and any(o[3][1] != -1 for o in fixed)
    assert any(o[3][3] == [] for o in fixed) and any(o[3][3] for o in fixed)
    # elements waited for their side windows: the hold was set and held the output
    marks = result.watermarks()["read"]
    hold = marks[SIDE_HOLD]
    assert hold.values.min() < MAX_TIMESTAMP, "no main element ever waited"
    times = hold.times
    assert (marks["output"].at(times) <= hold.at(times)).all()
    waited = int(times[hold.values < MAX_TIMESTAMP][0])
    chain = result.why("read", waited)
    assert ("read", SIDE_HOLD) in chain, chain
