"""PySparkRunner --streaming: the life of user state, in one pipeline of three branches.

- **gc**: a window's state is dropped once the input watermark passes the window's end
  plus the allowed lateness (Beam's rule), not before: a late element within the
  lateness still sees it. The state checkpointed mid-run holds the open windows only;
  the outputs equal BundleBasedDirectRunner's (which never drops state), but for an
  element arriving after its window's state was dropped (a deliberate divergence).
- **pending**: a processing-time timer still pending when the TestStream ends is
  dropped, as BundleBasedDirectRunner drops it: the run ends DONE, not stalled, and the
  transform's output watermark reaches the end.
- **ordered**: OrderedListState (add, read, read_range, clear_range) against Beam's
  FnApiRunner, since BundleBasedDirectRunner refuses the state kind (tested).
"""

# ruff: noqa: B008

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate, window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.utils.timestamp import Duration, Timestamp

from spark_backend.runner.streaming import codec
from spark_backend.runner.streaming.keyed_state import TIMER_HOLD
from tests.spark_backend.runner.streaming.conftest import CaptureValues, read_values
from theory.time import MAX_TIMESTAMP

pytestmark = pytest.mark.slow

S = 1_000_000
WINDOWS = 6
LATENESS = 2  # seconds
#: The first run stops after this many batches (one per window, under instant batches).
FIRST_RUN = 4
#: A value sent to window 0 after its state expired: the tested divergence.
DROPPED = 99


class WindowState(beam.DoFn):
    """Per key and 1 s window: the values seen so far on each element, and all of them
    at the window's end; for one element also after the window's expiry (dynamic
    event-time timers tagged ``end`` and ``later``)."""

    BAG = userstate.BagStateSpec("bag", VarIntCoder())
    AT = userstate.TimerSpec("at", TimeDomain.WATERMARK)

    def process(
        self,
        kv: Any,
        w: Any = beam.DoFn.WindowParam,
        bag: Any = beam.DoFn.StateParam(BAG),
        at: Any = beam.DoFn.TimerParam(AT),
    ) -> Any:
        bag.add(kv[1])
        at.set(w.max_timestamp(), dynamic_timer_tag="end")
        if kv == ("b", 12):  # a timer past its window's expiry keeps the window's state
            at.set(w.end + Duration(seconds=LATENESS + 2), dynamic_timer_tag="later")
        yield ("gc", kv[0], int(w.start), "seen", sorted(bag.read()))

    @userstate.on_timer(AT)
    def fired(
        self,
        key: Any = beam.DoFn.KeyParam,
        w: Any = beam.DoFn.WindowParam,
        tag: Any = beam.DoFn.DynamicTimerTagParam,
        bag: Any = beam.DoFn.StateParam(BAG),
    ) -> Any:
        yield ("gc", key, int(w.start), tag, sorted(bag.read()))


class Pending(beam.DoFn):
    """A processing-time timer per key: key ``soon`` due at 1 s of the test clock (which
    gets there), key ``never`` at 1000 s (which it does not)."""

    BAG = userstate.BagStateSpec("bag", VarIntCoder())
    TICK = userstate.TimerSpec("tick", TimeDomain.REAL_TIME)

    def process(
        self,
        kv: Any,
        bag: Any = beam.DoFn.StateParam(BAG),
        tick: Any = beam.DoFn.TimerParam(TICK),
    ) -> Any:
        bag.add(kv[1])
        tick.set(Timestamp(seconds=1 if kv[0] == "soon" else 1000))
        return iter(())

    @userstate.on_timer(TICK)
    def ticked(self, key: Any = beam.DoFn.KeyParam, bag: Any = beam.DoFn.StateParam(BAG)) -> Any:
        yield ("pending", key, sorted(bag.read()))


class Ordered(beam.DoFn):
    """OrderedListState: each value at its own second; at 5 s the whole list, a range,
    then a range cleared; at 100 s what is left."""

    LIST = userstate.OrderedListStateSpec("list", VarIntCoder())
    AT5 = userstate.TimerSpec("at5", TimeDomain.WATERMARK)
    AT100 = userstate.TimerSpec("at100", TimeDomain.WATERMARK)

    def process(
        self,
        kv: Any,
        items: Any = beam.DoFn.StateParam(LIST),
        at5: Any = beam.DoFn.TimerParam(AT5),
    ) -> Any:
        items.add((Timestamp(seconds=kv[1]), kv[1]))
        at5.set(Timestamp(seconds=5))
        return iter(())

    @userstate.on_timer(AT5)
    def five(
        self,
        key: Any = beam.DoFn.KeyParam,
        items: Any = beam.DoFn.StateParam(LIST),
        at100: Any = beam.DoFn.TimerParam(AT100),
    ) -> Any:
        whole = [(int(t.micros), v) for t, v in items.read()]
        part = [v for _, v in items.read_range(Timestamp(seconds=1), Timestamp(seconds=3))]
        items.clear_range(Timestamp(seconds=0), Timestamp(seconds=2))
        at100.set(Timestamp(seconds=100))  # set here: it fires after this on every runner
        yield ("ordered", key, "at5", whole, part)

    @userstate.on_timer(AT100)
    def hundred(
        self, key: Any = beam.DoFn.KeyParam, items: Any = beam.DoFn.StateParam(LIST)
    ) -> Any:
        yield ("ordered", key, "at100", [v for _, v in items.read()])


ORDERED_INPUT = [("x", 3), ("x", 0), ("y", 4), ("x", 1), ("y", 2), ("x", 2), ("x", 4)]


def events() -> TestStream:
    """One batch per window under instant batches: a clock step, the window's elements
    (and one element late but within the lateness), then the watermark past it."""
    stream = TestStream()
    for w in range(WINDOWS):
        elements = [("gc", ("a", 10 * w + 1), w), ("gc", ("b", 10 * w + 2), w)]
        if w >= 1:
            elements.append(("gc", ("a", 10 * (w - 1) + 5), w - 1))  # late, kept state
        if w == WINDOWS - 1:
            elements.append(("gc", ("a", DROPPED), 0))  # after window 0's state was dropped
        if w == 0:
            elements += [("pending", ("soon", 1), 0), ("pending", ("never", 2), 0)]
        if w < 2:
            elements += [("ordered", kv, w) for kv in ORDERED_INPUT[w::2]]
        stream = (
            stream.advance_processing_time(1)
            .add_elements(
                [
                    window.TimestampedValue((branch, kv), Timestamp(seconds=sec) + Duration(0.5))
                    for branch, kv, sec in elements
                ]
            )
            .advance_watermark_to(Timestamp(seconds=w + 1))
        )
    return stream.advance_watermark_to_infinity()


def branch(name: str) -> Any:
    return beam.Filter(lambda e: e[0] == name) | beam.Map(lambda e: e[1])


def gc_and_pending(p: beam.Pipeline, source: Any, capture: Any) -> list[Any]:
    windowed = (
        source
        | "gc" >> branch("gc")
        | "fixed"
        >> beam.WindowInto(window.FixedWindows(1), allowed_lateness=Duration(seconds=LATENESS))
        | "state" >> beam.ParDo(WindowState())
        | "unwindow" >> beam.WindowInto(window.GlobalWindows())
    )
    pending = source | "pending" >> branch("pending") | "timers" >> beam.ParDo(Pending())
    return [windowed, pending]


def ordered(source: Any) -> Any:
    return source | "ordered" >> branch("ordered") | "list" >> beam.ParDo(Ordered())


def streaming_pipeline(p: beam.Pipeline, capture: Any, with_ordered: bool = True) -> None:
    source = p | "events" >> events()
    outs = gc_and_pending(p, source, capture)
    if with_ordered:
        outs.append(ordered(source))
    tuple(outs) | beam.Flatten() | "capture" >> beam.ParDo(capture)


def run_ours(directory: Path, checkpoint: Path, **flags: Any) -> Any:
    from spark_backend.runner import PySparkRunner

    options = PipelineOptions(
        streaming=True,
        key_partitions=2,
        test_stream_batches="instant",
        checkpoint_dir=str(checkpoint),
        **flags,
    )
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    streaming_pipeline(p, CaptureValues(str(directory)))
    result = p.run()
    result.wait_until_finish()
    return result


def state_windows(checkpoint: Path) -> set[int]:
    """The window starts (µs) of every bag cell of the gc branch's state in the
    checkpoint's latest state files."""
    starts: set[int] = set()
    for path in checkpoint.glob("state/*/*/part-*.json"):
        state = codec.decode(path.read_bytes().partition(b"\n")[2])
        for raw in getattr(state, "user_state", {}):
            key = beam_fn_api_pb2.StateKey.FromString(raw)
            cell = getattr(key, str(key.WhichOneof("type")))
            if cell.user_state_id == "bag" and len(cell.window) > 1:  # not the global window
                starts.add(int(IntervalWindowCoder().decode(cell.window).start.micros))
    return starts


@pytest.fixture(scope="module")
def ours(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The pipeline run in two parts: stopped after ``FIRST_RUN`` batches, then resumed
    from its checkpoint to the end."""
    root = tmp_path_factory.mktemp("lifecycle")
    out, checkpoint = root / "out", root / "ckpt"
    out.mkdir()
    first = run_ours(out, checkpoint, max_batches=FIRST_RUN)
    mid_run = state_windows(checkpoint)
    result = run_ours(out, checkpoint)
    return {"values": read_values(out), "first": first, "result": result, "mid_run": mid_run}


@pytest.fixture(scope="module")
def beams(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The gc and pending branches on BundleBasedDirectRunner."""
    return beam_values(
        tmp_path_factory.mktemp("beam"),
        lambda p, c: streaming_pipeline(p, c, with_ordered=False),
        BundleBasedDirectRunner(),
        streaming=True,
    )


def beam_values(directory: Path, build: Any, runner: Any, streaming: bool) -> list[Any]:
    """``build(pipeline, capture)`` run on ``runner``; the captured values."""
    p = beam.Pipeline(runner=runner, options=PipelineOptions(streaming=streaming))
    build(p, CaptureValues(str(directory)))
    p.run().wait_until_finish()
    return read_values(directory)


def of(values: list[Any], name: str) -> list[Any]:
    return sorted((v for v in values if v[0] == name), key=repr)


def test_window_state_is_dropped_after_its_lateness_and_outputs_equal_the_direct_runner(
    ours: dict[str, Any], beams: list[Any]
) -> None:
    # after 4 batches the watermark is at 4 s: windows [0, 1) and [1, 2) expired (end +
    # 2 s lateness passed), [2, 3) and [3, 4) are open: only their state is kept, and
    # [1, 2)'s, whose "later" timer (at 5 s) is pending
    assert ours["mid_run"] == {S, 2 * S, 3 * S}
    assert ("gc", "b", 1, "later", [12]) in ours["values"]  # (window starts in s)
    expected = beams
    ours_gc, beams_gc = of(ours["values"], "gc"), of(expected, "gc")
    after = [v for v in ours_gc if DROPPED in v[-1]]
    assert [v for v in ours_gc if v not in after] == [v for v in beams_gc if DROPPED not in v[-1]]
    # the late element within the lateness saw its window's state (not yet dropped)
    assert ("gc", "a", 0, "seen", [1, 5]) in ours["values"]
    # Deliberate divergence: an element arriving after its window's state was dropped
    # starts from empty state here; BundleBasedDirectRunner keeps every window's state
    # for ever, so there it sees the old values
    assert after == [("gc", "a", 0, "end", [DROPPED]), ("gc", "a", 0, "seen", [DROPPED])]
    assert [v for v in beams_gc if DROPPED in v[-1]] == [
        ("gc", "a", 0, "end", [1, 5, DROPPED]),
        ("gc", "a", 0, "seen", [1, 5, DROPPED]),
    ]


def test_a_processing_time_timer_pending_at_the_end_is_dropped_as_beam_does(
    ours: dict[str, Any], beams: list[Any]
) -> None:
    expected = beams
    assert of(ours["values"], "pending") == of(expected, "pending") == [("pending", "soon", [1])]
    result = ours["result"]
    assert result.state == "DONE" and not result.stalled
    marks = result.watermarks()["timers"]
    assert marks["output"].values[-1] == MAX_TIMESTAMP
    assert marks[TIMER_HOLD].values[-1] == MAX_TIMESTAMP  # released at the end
    assert (marks[TIMER_HOLD].values[:-1] < MAX_TIMESTAMP).any()  # held while pending


def test_ordered_list_state_equals_fnapirunner_and_the_direct_runner_refuses_it(
    ours: dict[str, Any], tmp_path: Path
) -> None:
    def batch(p: beam.Pipeline, capture: Any) -> None:
        stamped = [
            window.TimestampedValue(("ordered", kv), Timestamp(seconds=0.5)) for kv in ORDERED_INPUT
        ]
        ordered(p | beam.Create(stamped)) | "capture" >> beam.ParDo(capture)

    expected = beam_values(tmp_path, batch, FnApiRunner(), streaming=False)
    got = of(ours["values"], "ordered")
    assert got == of(expected, "ordered")
    assert (
        "ordered",
        "x",
        "at5",
        [(0, 0), (S, 1), (2 * S, 2), (3 * S, 3), (4 * S, 4)],
        [1, 2],
    ) in got
    with pytest.raises(Exception, match="Invalid state spec: OrderedListStateSpec"):
        beam_values(
            tmp_path,
            lambda p, c: ordered(p | events()) | beam.ParDo(c),
            BundleBasedDirectRunner(),
            streaming=True,
        )


def test_a_stateful_step_with_no_input_runs_once_a_window_state_expires() -> None:
    from spark_backend.runner.streaming.driver import _StepState
    from spark_backend.runner.streaming.keyed_state import StatefulSummary

    idle = StatefulSummary(None, None, None, timers=0, fired=0, next_expiry=5 * S)
    step = _StepState(("state",), TIMER_HOLD, summaries=[idle])
    assert not step.due(5 * S, 0)  # the watermark at the expiry: not yet past it
    assert step.due(5 * S + 1, 0)  # past it: the step runs to drop the state
