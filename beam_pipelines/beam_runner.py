"""Run a script and a windowing strategy through a real Beam pipeline and collect its panes.

The pipeline is ``TestStream -> WindowInto(strategy) -> GroupByKey -> collect`` on
``BundleBasedDirectRunner`` in streaming mode (constructed explicitly: passing the runner by
name silently produced no output here). Each pane comes back as a
:class:`theory.windowing.engine.Pane` (key, window, values, timestamp µs, timing, index,
nonspeculative index, first/last), so it compares directly with
:func:`theory.windowing.runner.run_script`.

:func:`run_beam_packed` runs several scripts that share their watermark and
processing-time events in one pipeline: one ``Filter -> WindowInto -> GroupByKey`` branch
per script, keys namespaced by branch. Each branch is its own GroupByKey with its own
keyed state, holds, timers and output watermark, and an event with no elements for a
branch reaches it as an empty bundle, which the runner drops; so a branch sees exactly its
own script (``tests/beam_pipelines/test_beam_runner.py`` checks packed against separate
runs).

Beam's own limits apply: times in whole milliseconds (see :mod:`beam_pipelines.teststream`),
``AfterProcessingTime`` delays in whole seconds, processing time starting at 0. Beam's
TestClock hands processing time to triggers as float seconds, and a float turns back into
a Timestamp by truncation, so processing times that are not exact binary fractions of a
second (e.g. 0.3 s) can compare 1 µs off from the engine's exact µs; whole seconds are
exact (the differential suite uses them). A script
that leaves a hold and a processing-time timer behind never finishes on the direct runner;
:func:`run_beam` gives up after ``timeout`` seconds with ``TimeoutError``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.transforms import window as bw
from apache_beam.utils.windowed_value import PaneInfoTiming

from beam_pipelines.convert import beam_trigger, beam_window_fn, beam_windowing
from beam_pipelines.teststream import to_test_stream
from theory.time import MIN_TIMESTAMP
from theory.windowing.engine import Pane, Timing
from theory.windowing.script import ElementEvent, Event, ProcessingTimeEvent, Script, WatermarkEvent
from theory.windowing.strategy import TimestampCombiner, WindowingStrategy
from theory.windowing.windows import GLOBAL_WINDOW, IntervalWindow

__all__ = [
    "BeamRun",
    "beam_trigger",
    "beam_window_fn",
    "beam_windowing",
    "build_packed",
    "canonical_panes",
    "group_by_window_label",
    "packed_options",
    "quiet",
    "run_and_wait",
    "run_beam",
    "run_beam_packed",
    "skeleton",
    "theory_pane",
]

_TIMING = {
    PaneInfoTiming.EARLY: Timing.EARLY,
    PaneInfoTiming.ON_TIME: Timing.ON_TIME,
    PaneInfoTiming.LATE: Timing.LATE,
    PaneInfoTiming.UNKNOWN: Timing.UNKNOWN,
}


# ------------------------------------------------------------------------ running


def group_by_window_label(branch: int = 0) -> str:
    """The full label of a branch's GroupByWindow step, as the streaming direct runner
    expands the GroupByKey (for :mod:`beam_pipelines.tracing`)."""
    return f"group{branch}/GroupByWindow"


def skeleton(script: Script | Iterable[Event]) -> tuple[Event, ...]:
    """The watermark and processing-time events of ``script`` as Beam sees them
    (non-advancing watermarks and zero steps left out)."""
    events = script.events if isinstance(script, Script) else Script(list(script)).events
    out: list[Event] = []
    watermark = MIN_TIMESTAMP
    for ev in events:
        if isinstance(ev, WatermarkEvent) and ev.watermark > watermark:
            watermark = ev.watermark
            out.append(ev)
        elif isinstance(ev, ProcessingTimeEvent) and ev.delta > 0:
            out.append(ev)
    return tuple(out)


def canonical_panes(panes: Iterable[Pane]) -> list[tuple[Any, ...]]:
    """Panes as sorted tuples with values as a sorted multiset, for comparison."""
    out = []
    for p in panes:
        try:
            values = tuple(sorted(p.values))
        except TypeError:
            values = tuple(sorted(p.values, key=repr))
        w = p.window
        window = (w.start, w.end)
        out.append(
            (
                repr(p.key),
                window,
                values,
                p.timestamp,
                p.timing.value,
                p.index,
                p.nonspeculative_index,
                p.is_first,
                p.is_last,
            )
        )
    return sorted(out, key=repr)


# ------------------------------------------------------------------------ running

_SINK: dict[str, list[tuple[int, Pane]]] = {}


def theory_pane(
    key: Hashable, values: Iterable[Any], window: Any, timestamp: Any, pane: Any
) -> Pane:
    """A Beam GroupByKey output (its key, values, window, timestamp and PaneInfo) as a
    theory :class:`~theory.windowing.engine.Pane` (times in µs)."""
    if isinstance(window, bw.GlobalWindow):
        win: Any = GLOBAL_WINDOW
    else:
        win = IntervalWindow(int(window.start.micros), int(window.end.micros))
    return Pane(
        key,
        win,
        tuple(values),
        int(timestamp.micros),
        _TIMING[pane.timing],
        int(pane.index),
        int(pane.nonspeculative_index),
        bool(pane.is_first),
        bool(pane.is_last),
    )


class _Collect(beam.DoFn):
    """Appends each pane to ``_SINK[run_id]`` (the direct runner runs in this process)."""

    def __init__(self, run_id: str, branch: int) -> None:
        self.run_id = run_id
        self.branch = branch

    def process(
        self,
        kv: tuple[tuple[int, Hashable], Iterable[Any]],
        window: Any = beam.DoFn.WindowParam,
        timestamp: Any = beam.DoFn.TimestampParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[None]:
        (_, key), values = kv
        sink = _SINK.get(self.run_id)
        if sink is None:  # the run was given up (timeout)
            return iter(())
        sink.append((self.branch, theory_pane(key, values, window, timestamp, pane)))
        return iter(())


@dataclass(frozen=True)
class BeamRun:
    """Panes per script (in output order), whether the runner reported a pipeline stall
    (some output watermark never reached infinity), and the wall time (s)."""

    panes: list[list[Pane]]
    stalled: bool
    seconds: float


@contextmanager
def quiet() -> Iterator[None]:
    """Beam's loggers at ERROR only inside the block."""
    log = logging.getLogger("apache_beam")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _is_stall(exc: BaseException) -> bool:
    # The monitor reports a stall as a tuple, which ``raise`` turns into this TypeError.
    text = str(exc)
    return "pipeline stall" in text or (
        isinstance(exc, TypeError) and "must derive from BaseException" in text
    )


def run_and_wait(pipeline: beam.Pipeline, *, timeout: float, test_runner_api: bool = True) -> bool:
    """Run ``pipeline`` and wait at most ``timeout`` s (``TimeoutError`` after, the run
    cancelled); whether the runner reported a pipeline stall (some output watermark never
    reached infinity: the direct runner raises, PySparkRunner's result has ``stalled``).
    Any other failure of the pipeline is raised."""
    result = pipeline.run(test_runner_api=test_runner_api)
    box: list[BaseException] = []

    def wait() -> None:
        try:
            result.wait_until_finish()
        except BaseException as e:
            box.append(e)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(timeout)
    if waiter.is_alive():
        result.cancel()
        raise TimeoutError(
            f"Beam did not finish within {timeout} s (a hold and a pending "
            "processing-time timer keep the direct runner waiting forever)"
        )
    if box:
        if not _is_stall(box[0]):
            raise box[0]
        return True
    return bool(getattr(result, "stalled", False))  # a runner that reports it on the result


Cases = Sequence[tuple[Script | Iterable[Event], WindowingStrategy]]


def build_packed(pipeline: Any, cases: Cases, collect: Callable[[int], beam.DoFn]) -> None:
    """Add to ``pipeline`` the scripts of ``cases`` (sharing one skeleton, see
    :func:`skeleton`): one TestStream of all their elements, keys ``(i, key)``, and per
    script ``i`` a ``Filter -> WindowInto -> GroupByKey -> ParDo(collect(i))`` branch. The
    collecting DoFn gets ``((i, key), values)`` with the pane's window, timestamp and
    PaneInfo (:func:`theory_pane` converts them)."""
    if not cases:
        raise ValueError("no scripts to run")
    scripts = [s if isinstance(s, Script) else Script(list(s)) for s, _ in cases]
    base = skeleton(scripts[0])
    for i, s in enumerate(scripts[1:], 1):
        if skeleton(s) != base:
            raise ValueError(f"script {i} does not share script 0's watermark/processing events")
    source = pipeline | "events" >> to_test_stream(_interleave(scripts))
    for i, (_, strategy) in enumerate(cases):
        branch = source
        if len(cases) > 1:
            branch = branch | f"only{i}" >> beam.Filter(lambda kv, i=i: kv[0][0] == i)
        _ = (
            branch
            | f"window{i}" >> beam.WindowInto(**beam_windowing(strategy))
            | f"group{i}" >> beam.GroupByKey()
            | f"collect{i}" >> beam.ParDo(collect(i))
        )


def packed_options(cases: Cases) -> PipelineOptions:
    """Streaming options for :func:`build_packed`'s pipeline (unsafe triggers allowed
    where a case's strategy allows them)."""
    opts = PipelineOptions(
        allow_unsafe_triggers=any(st.allow_unsafe_triggers for _, st in cases),
    )
    opts.view_as(StandardOptions).streaming = True
    return opts


def run_beam_packed(cases: Cases, *, timeout: float = 120.0) -> BeamRun:
    """Run scripts sharing one skeleton (see :func:`skeleton`) in one Beam pipeline."""
    if not cases:
        raise ValueError("no scripts to run")
    run_id = uuid.uuid4().hex
    _SINK[run_id] = []
    opts = packed_options(cases)
    # the runner-API round trip cannot carry OUTPUT_AT_EARLIEST_TRANSFORMED
    test_runner_api = not any(
        st.timestamp_combiner is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED for _, st in cases
    )
    t0 = time.perf_counter()
    with quiet():
        pipeline = beam.Pipeline(runner=BundleBasedDirectRunner(), options=opts)
        build_packed(pipeline, cases, lambda i: _Collect(run_id, i))
        try:
            stalled = run_and_wait(pipeline, timeout=timeout, test_runner_api=test_runner_api)
        finally:
            collected = _SINK.pop(run_id, [])
    seconds = time.perf_counter() - t0
    panes: list[list[Pane]] = [[] for _ in cases]
    for branch_index, pane in collected:
        panes[branch_index].append(pane)
    return BeamRun(panes, stalled, seconds)


def run_beam(
    script: Script | Iterable[Event], strategy: WindowingStrategy, *, timeout: float = 120.0
) -> BeamRun:
    """Run one script through Beam; ``BeamRun.panes[0]`` are its panes."""
    return run_beam_packed([(script, strategy)], timeout=timeout)


def _interleave(scripts: list[Script]) -> Script:
    """One script with every script's elements (keys ``(i, key)``), in the shared skeleton:
    between two skeleton events, script 0's element events, then script 1's, and so on."""
    gaps: list[list[list[ElementEvent]]] = []
    base = skeleton(scripts[0])
    for i, s in enumerate(scripts):
        per_gap: list[list[ElementEvent]] = [[] for _ in range(len(base) + 1)]
        g = 0
        watermark = MIN_TIMESTAMP
        for ev in s.events:
            if isinstance(ev, ElementEvent):
                if ev.elements:
                    per_gap[g].append(ElementEvent([((i, k), v, t) for k, v, t in ev.elements]))
            elif isinstance(ev, WatermarkEvent):
                if ev.watermark > watermark:
                    watermark = ev.watermark
                    g += 1
            elif ev.delta > 0:
                g += 1
        gaps.append(per_gap)
    out: list[Event] = []
    for g in range(len(base) + 1):
        for per_gap in gaps:
            out.extend(per_gap[g])
        if g < len(base):
            out.append(base[g])
    return Script(out)
