"""Seeded random scripts and windowing strategies, for differential runs against Beam.

:func:`random_group` draws a *group*: scripts that share one skeleton of watermark and
processing-time events (so :func:`beam_pipelines.beam_runner.run_beam_packed` can run them
in one pipeline), each with its own elements and strategy. Everything is whole
milliseconds (event time) and whole seconds (processing time, trigger delays), as Beam
needs; event-time units are 1 ms or 1 s so that processing time (which starts at 0) lands
both before and after window ends. Fixed and sliding windows get random offsets. The
skeleton ends with a long processing-time step, so no processing-time timer is left
pending (Beam's runner would then never finish).

:func:`random_case` draws one script with its own skeleton. :func:`compare` (and
:func:`run_both`, for a script and a strategy) runs a case through the engine and through
Beam and returns the differences, empty when these agree:

- the panes, values as multisets (the runner's bundles do not keep element order);
- the order of the panes of each (key, window);
- the stall flag;
- the output watermark of the GroupByKey after every script event. Beam's pipeline output
  does not carry it: a downstream stage sees it only through its own latched input
  watermark, held back by the panes still in flight, and Beam Python has no watermark
  parameter for a DoFn. So it is read from the direct runner's watermark manager each time
  the TestStream reads its next event (:mod:`beam_pipelines.tracing`), which the runner
  schedules only when no other work is pending (``_add_work_if_necessary``): then the
  previous event and every timer it made due have been processed, which is what the
  engine's "after the event" means. The final
  step to infinity is compared through the stall flag only: Beam's TestStream tears down
  through watermarks of its own (``MAX_TIMESTAMP - 1 µs``) that a script does not have.

(Packing a group into one pipeline is correct but slower per script on the direct runner
than one pipeline each.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beam_pipelines.beam_runner import BeamRun, canonical_panes, group_by_window_label, run_beam
from beam_pipelines.tracing import trace_watermarks
from theory.time import MICROS_PER_MILLI, MICROS_PER_SECOND, MIN_TIMESTAMP
from theory.windowing import triggers as tt
from theory.windowing.engine import Pane
from theory.windowing.runner import run_script
from theory.windowing.script import (
    ElementEvent,
    Event,
    ProcessingTimeEvent,
    Script,
    ScriptResult,
    WatermarkEvent,
)
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows

__all__ = [
    "BeamObservation",
    "Case",
    "beam_events",
    "compare",
    "differences",
    "observe_beam",
    "pane_differences",
    "random_case",
    "random_group",
    "random_strategy",
    "random_trigger",
    "run_both",
]

SEC = MICROS_PER_SECOND
#: The final processing-time step of every skeleton: past every trigger delay drawn here.
FLUSH = 1000 * SEC


@dataclass(frozen=True)
class Case:
    """One script and its strategy, with a label saying what was drawn."""

    script: Script
    strategy: WindowingStrategy
    label: str


def random_trigger(rng: np.random.Generator, depth: int = 0) -> tt.Trigger:
    """A random trigger of Beam's language, at most two composites deep."""
    leaves = ["count", "ptime", "watermark", "default", "never", "always"]
    kinds = leaves + (
        ["early_late", "repeat", "any", "all", "each", "or_finally"] if depth < 2 else []
    )
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "count":
        return tt.AfterCount(int(rng.integers(1, 4)))
    if kind == "ptime":
        return tt.AfterProcessingTime(int(rng.integers(0, 4)) * SEC)
    if kind == "watermark":
        return tt.AfterWatermark()
    if kind == "default":
        return tt.DefaultTrigger()
    if kind == "never":
        return tt.Never()
    if kind == "always":
        return tt.Always()
    if kind == "early_late":
        early = random_trigger(rng, depth + 1) if rng.random() < 0.7 else None
        late = random_trigger(rng, depth + 1) if rng.random() < 0.6 else None
        return tt.AfterWatermark(early=early, late=late)
    if kind == "repeat":
        return tt.Repeatedly(random_trigger(rng, depth + 1))
    a, b = random_trigger(rng, depth + 1), random_trigger(rng, depth + 1)
    if kind == "any":
        return tt.AfterAny(a, b)
    if kind == "all":
        return tt.AfterAll(a, b)
    if kind == "each":
        return tt.AfterEach(a, b)
    return tt.OrFinally(a, b)


def random_strategy(rng: np.random.Generator, unit: int) -> WindowingStrategy:
    """A random strategy; window sizes and lateness in multiples of ``unit`` µs."""
    kind = ["fixed", "sliding", "sessions", "global"][int(rng.choice(4, p=[0.35, 0.3, 0.3, 0.05]))]
    if kind == "fixed":
        size = int(rng.integers(3, 16))
        fn: object = FixedWindows(size * unit, int(rng.integers(0, size)) * unit)
    elif kind == "sliding":
        period = int(rng.integers(2, 8))
        size = int(rng.integers(period, 3 * period + 1))
        fn = SlidingWindows(size * unit, period * unit, int(rng.integers(0, period)) * unit)
    elif kind == "sessions":
        fn = Sessions(int(rng.integers(2, 9)) * unit)
    else:
        fn = GlobalWindows()
    r = rng.random()
    if r < 0.2:
        trigger: tt.Trigger = tt.DefaultTrigger()
    elif r < 0.35:
        trigger = tt.AfterWatermark(
            early=tt.AfterCount(int(rng.integers(1, 3))) if rng.random() < 0.5 else None,
            late=tt.AfterCount(1) if rng.random() < 0.5 else None,
        )
    else:
        trigger = random_trigger(rng)
    if isinstance(fn, GlobalWindows) and isinstance(trigger, tt.DefaultTrigger):
        trigger = tt.Repeatedly(tt.AfterCount(2))
    combiners = list(TimestampCombiner)
    combiner = combiners[int(rng.choice(len(combiners), p=[0.3, 0.3, 0.3, 0.1]))]
    lateness = 0 if rng.random() < 0.4 else int(rng.integers(1, 25)) * unit
    return WindowingStrategy(
        fn,
        trigger,
        AccumulationMode.ACCUMULATING if rng.random() < 0.5 else AccumulationMode.DISCARDING,
        lateness,
        combiner,
        allow_unsafe_triggers=True,
    )


def random_group(seed: int, scripts: int = 6, *, steps: int | None = None) -> list[Case]:
    """``scripts`` cases sharing one skeleton, reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    unit = MICROS_PER_MILLI if rng.random() < 0.6 else SEC
    n_steps = int(rng.integers(3, 11)) if steps is None else steps
    skel: list[Event] = []
    watermark = int(rng.integers(-3, 6)) * unit
    for _ in range(n_steps):
        if rng.random() < 0.65:
            watermark += int(rng.integers(1, 9)) * unit
            skel.append(WatermarkEvent(watermark))
        else:
            skel.append(ProcessingTimeEvent(int(rng.integers(1, 5)) * SEC))
    skel.append(ProcessingTimeEvent(FLUSH))
    cases = []
    for s in range(scripts):
        strategy = random_strategy(rng, unit)
        events: list[Event] = []
        current = -(10**6)
        value = 0
        keys = ["a", "b", "c"][: int(rng.integers(1, 4))]
        for g in range(len(skel) + 1):
            # no elements after the final flush: their processing-time timers could never fire
            if g < len(skel) and rng.random() < 0.5:
                for _ in range(int(rng.integers(1, 3))):
                    elements = []
                    for _ in range(int(rng.integers(1, 5))):
                        base = max(current, 0)
                        ts = max(0, base // unit + int(rng.integers(-12, 20))) * unit
                        elements.append((keys[int(rng.integers(len(keys)))], value, ts))
                        value += 1
                    events.append(ElementEvent(elements))
            if g < len(skel):
                ev = skel[g]
                if isinstance(ev, WatermarkEvent):
                    current = ev.watermark
                events.append(ev)
        label = (
            f"seed={seed}/{s} {type(strategy.window_fn).__name__} {strategy.trigger!r} "
            f"{strategy.accumulation_mode.value} {strategy.timestamp_combiner.name} "
            f"lateness={strategy.allowed_lateness}"
        )
        cases.append(Case(Script(events), strategy, label))
    return cases


def random_case(seed: int) -> Case:
    """One random script and strategy (its own skeleton), reproducible from ``seed``."""
    return random_group(seed, scripts=1)[0]


@dataclass(frozen=True)
class BeamObservation:
    """What a Beam run shows: its panes in output order, the stall flag, the GroupByKey's
    output watermark (µs) after each event of the TestStream as Beam sees the script (see
    :func:`beam_events`), and Beam's wall time (s)."""

    panes: list[Pane]
    stalled: bool
    output_watermark: list[int]
    seconds: float


def observe_beam(
    script: Script, strategy: WindowingStrategy, *, timeout: float = 120.0
) -> BeamObservation:
    """Run ``script`` through Beam (one pipeline), watching its output watermark."""
    with trace_watermarks() as trace:
        run: BeamRun = run_beam(script, strategy, timeout=timeout)
    after = trace.after_each_event(group_by_window_label(), len(beam_events(script)))
    return BeamObservation(run.panes[0], run.stalled, [out for _, out in after], run.seconds)


def beam_events(script: Script) -> list[int]:
    """The indexes of the script's events that reach Beam's TestStream: non-empty element
    events, watermarks that advance, processing-time steps > 0 (the others change nothing
    in the engine either)."""
    kept = []
    watermark = MIN_TIMESTAMP
    for i, ev in enumerate(script.events):
        if isinstance(ev, ElementEvent):
            if ev.elements:
                kept.append(i)
        elif isinstance(ev, WatermarkEvent):
            if ev.watermark > watermark:
                watermark = ev.watermark
                kept.append(i)
        elif ev.delta > 0:
            kept.append(i)
    return kept


def differences(case: Case, beam: BeamObservation, ours: ScriptResult | None = None) -> list[str]:
    """What differs between the engine's run of ``case`` (``ours``, run here if None) and
    Beam's observation: panes, their order per (key, window), the stall flag, the output
    watermark after each event."""
    if ours is None:
        ours = run_script(case.script, case.strategy)
    problems = pane_differences(case.label, ours.panes, beam.panes)
    if ours.stalled != beam.stalled:
        problems.append(f"{case.label}: stalled: engine {ours.stalled}, beam {beam.stalled}")
    events = beam_events(case.script)
    engine_ow = [int(ours.output_watermark[i]) for i in events]
    pairs = zip(events, engine_ow, beam.output_watermark, strict=True)
    wrong = [(i, e, b) for i, e, b in pairs if e != b]
    if wrong:
        problems.append(
            f"{case.label}: output watermark after (event, engine µs, beam µs): {wrong}"
        )
    return problems


def pane_differences(label: str, ours: Sequence[Pane], beam: Sequence[Pane]) -> list[str]:
    """What differs between two runs' panes: the panes (values as multisets), else the
    order of the panes of each (key, window); empty when they agree."""
    a, b = canonical_panes(ours), canonical_panes(beam)
    if a != b:
        only_ours = [p for p in a if p not in b]
        only_beam = [p for p in b if p not in a]
        return [f"{label}\n  engine only: {only_ours}\n  beam only:   {only_beam}"]
    return _order_problems(label, ours, beam)


def _order_problems(label: str, ours: Sequence[Pane], beam: Sequence[Pane]) -> list[str]:
    """The (key, window)s whose panes come in another order (at most three shown)."""
    a, b = _order_per_window(ours), _order_per_window(beam)
    wrong = [w for w in a if a[w] != b[w]]
    if not wrong:
        return []
    shown = "\n".join(f"  {w}:\n    engine {a[w]}\n    beam   {b[w]}" for w in wrong[:3])
    return [f"{label}: pane order differs in {len(wrong)} (key, window)s\n{shown}"]


def _order_per_window(panes: Sequence[Pane]) -> dict[tuple[str, Any], list[tuple[Any, ...]]]:
    """Each (key, window)'s panes in output order, as canonical tuples."""
    out: dict[tuple[str, Any], list[tuple[Any, ...]]] = {}
    for pane in panes:
        (canonical,) = canonical_panes([pane])
        out.setdefault((canonical[0], canonical[1]), []).append(canonical)
    return out


def run_both(
    script: Script, strategy: WindowingStrategy, *, label: str = "", timeout: float = 120.0
) -> tuple[ScriptResult, list[str], float]:
    """Run a script through the engine and through Beam: the engine's result, the
    differences (see :func:`differences`) and Beam's wall time (s)."""
    case = Case(script, strategy, label or repr(strategy))
    beam = observe_beam(script, strategy, timeout=timeout)
    ours = run_script(script, strategy)
    return ours, differences(case, beam, ours), beam.seconds


def compare(case: Case, *, timeout: float = 120.0) -> tuple[list[str], float]:
    """Run ``case`` through the engine and through Beam (one pipeline); the differences
    (empty when they agree, see :func:`differences`) and Beam's wall time (s)."""
    _, problems, seconds = run_both(case.script, case.strategy, label=case.label, timeout=timeout)
    return problems, seconds
