"""Hypothesis strategies for a Beam author's property tests (needs ``hypothesis``).

Everything drawn here is something Beam can run (whole milliseconds of event time, whole
seconds of processing time and ``AfterProcessingTime`` delay), so a drawn strategy goes
through :func:`beam_pipelines.convert.to_beam` and a drawn script through a TestStream:

- :func:`windowing_strategies`: theory ``WindowingStrategy``s (fixed, sliding, sessions,
  global windows; Beam's trigger language; both accumulation modes; lateness; the
  timestamp combiners);
- :func:`traces`: ``theory.Trace``s in arrival order whose event times lag their arrival
  by at most ``max_disorder`` µs, except a fraction of stragglers lagging up to
  ``straggler_delay`` µs;
- :func:`scripts`: TestStream scripts (element, watermark and processing-time events,
  watermarks never moving back), ending with a processing-time step past every trigger
  delay drawn here so nothing is left pending;
- :func:`scripts_for`: TestStream scripts scaled to the windowing under test: element
  times ahead of the watermark, behind it within the allowed lateness and beyond it,
  watermark steps of about a window, processing-time steps across the trigger's delays,
  skewed keys and values from a realistic range;
- :func:`skewed_keys`: keys drawn with Zipf-like skew (the first most often).

This module imports neither Beam nor Spark (a Beam windowing given to
:func:`scripts_for` is converted with :func:`beam_pipelines.convert.to_theory`, which
imports Beam then).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from hypothesis import Phase, settings
from hypothesis import strategies as st

from theory.columns import as_duration, check_count, check_fraction
from theory.data.trace import Trace
from theory.time import MICROS_PER_MILLI, MICROS_PER_SECOND
from theory.windowing import triggers as tt
from theory.windowing.script import ElementEvent, Event, ProcessingTimeEvent, Script, WatermarkEvent
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows

__all__ = [
    "FLUSH",
    "KEYS",
    "PROPERTY_SETTINGS",
    "VALUES",
    "scripts",
    "scripts_for",
    "skewed_keys",
    "traces",
    "triggers",
    "window_fns",
    "windowing_strategies",
]

SEC = MICROS_PER_SECOND
#: The last processing-time step of every drawn script (µs): past every drawn delay.
FLUSH = 1000 * SEC
#: The keys :func:`scripts_for` draws by default, the first most often.
KEYS: tuple[str, ...] = ("alice", "bob", "carol", "dave")
#: The values :func:`scripts` and :func:`scripts_for` draw by default: counts or scores.
VALUES: st.SearchStrategy[int] = st.integers(1, 1000)
#: Settings for a property that runs Beam: no deadline, and no explain phase (which
#: reruns the failing example once per choice and can take minutes on a runner).
PROPERTY_SETTINGS = settings(
    deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)
)
#: The window scale (µs) of :func:`scripts_for` under global windows.
GLOBAL_SCALE = 60 * SEC


def window_fns(unit: Any = "1s", *, max_units: int = 12) -> st.SearchStrategy[object]:
    """Fixed (with offset), sliding (with offset), session and global window fns whose
    sizes are multiples of ``unit`` (µs, ``timedelta`` or ``"1s"``; whole ms)."""
    u = as_duration(unit, "unit", allow_zero=False)
    if u % MICROS_PER_MILLI:
        raise ValueError(f"unit must be whole milliseconds for Beam, got {u} µs")
    sizes = st.integers(1, max_units)

    @st.composite
    def sliding(draw: st.DrawFn) -> SlidingWindows:
        period = draw(sizes)
        size = draw(st.integers(period, 3 * period))
        return SlidingWindows(size * u, period * u, draw(st.integers(0, period - 1)) * u)

    return st.one_of(
        st.builds(lambda n, o: FixedWindows(n * u, o * u), sizes, st.integers(0, max_units)),
        sliding(),
        st.builds(lambda n: Sessions(n * u), sizes),
        st.just(GlobalWindows()),
    )


def triggers(*, max_delay_seconds: int = 3, max_depth: int = 2) -> st.SearchStrategy[tt.Trigger]:
    """Beam's trigger language (composites at most ``max_depth`` deep); processing-time
    delays in whole seconds up to ``max_delay_seconds``."""
    leaves: st.SearchStrategy[tt.Trigger] = st.one_of(
        st.builds(tt.AfterCount, st.integers(1, 3)),
        st.builds(lambda s: tt.AfterProcessingTime(s * SEC), st.integers(0, max_delay_seconds)),
        st.just(tt.AfterWatermark()),
        st.just(tt.DefaultTrigger()),
        st.just(tt.Never()),
        st.just(tt.Always()),
    )

    def extend(inner: st.SearchStrategy[tt.Trigger]) -> st.SearchStrategy[tt.Trigger]:
        optional = st.none() | inner
        return st.one_of(
            st.builds(tt.AfterWatermark, early=optional, late=optional),
            st.builds(tt.Repeatedly, inner),
            st.builds(lambda a, b: tt.AfterAny(a, b), inner, inner),
            st.builds(lambda a, b: tt.AfterAll(a, b), inner, inner),
            st.builds(lambda a, b: tt.AfterEach(a, b), inner, inner),
            st.builds(tt.OrFinally, inner, inner),
        )

    return st.recursive(leaves, extend, max_leaves=2 ** max(0, max_depth))


@st.composite
def windowing_strategies(
    draw: st.DrawFn,
    unit: Any = "1s",
    *,
    trigger: st.SearchStrategy[tt.Trigger] | None = None,
    allow_unsafe_triggers: bool = True,
) -> WindowingStrategy:
    """A windowing strategy Beam can run: window sizes and lateness in multiples of
    ``unit``, any trigger of :func:`triggers` (or of ``trigger``). With
    ``allow_unsafe_triggers=False`` only strategies Beam accepts without the flag."""
    u = as_duration(unit, "unit", allow_zero=False)
    fn = draw(window_fns(u))
    trig = draw(trigger if trigger is not None else triggers())
    if isinstance(fn, GlobalWindows) and isinstance(trig, tt.DefaultTrigger):
        trig = tt.Repeatedly(tt.AfterCount(2))
    lateness = draw(st.sampled_from([0, 0, 1, 5, 20])) * u
    if not allow_unsafe_triggers and trig.may_finish(lateness):
        trig = tt.AfterWatermark(late=tt.AfterCount(1)) if lateness else tt.DefaultTrigger()
        if isinstance(fn, GlobalWindows):
            trig = tt.Repeatedly(tt.AfterCount(2))
    return WindowingStrategy(
        fn,
        trig,
        draw(st.sampled_from(list(AccumulationMode))),
        lateness,
        draw(st.sampled_from(list(TimestampCombiner))),
        allow_unsafe_triggers=allow_unsafe_triggers,
    )


@st.composite
def traces(
    draw: st.DrawFn,
    *,
    min_size: int = 0,
    max_size: int = 40,
    max_disorder: Any = "5s",
    straggler_fraction: float = 0.1,
    straggler_delay: Any = "1m",
    keys: int = 3,
    unit: Any = "1ms",
) -> Trace:
    """A trace in arrival order: arrivals every 0..2 s; each event happened at most
    ``max_disorder`` before it arrived, a straggler (drawn with probability
    ``straggler_fraction``) up to ``straggler_delay`` before. Times are multiples of
    ``unit`` (whole ms by default, as Beam needs); keys are ``"k0"``, ``"k1"``, ..."""
    n_min = check_count(min_size, "min_size")
    n_max = check_count(max_size, "max_size", minimum=n_min)
    disorder = as_duration(max_disorder, "max_disorder")
    straggle = as_duration(straggler_delay, "straggler_delay")
    frac = check_fraction(straggler_fraction, "straggler_fraction")
    u = as_duration(unit, "unit", allow_zero=False)
    n_keys = check_count(keys, "keys", minimum=1)
    n = draw(st.integers(n_min, n_max))
    gaps = draw(st.lists(st.integers(0, 2 * SEC // u), min_size=n, max_size=n))
    arrival = SEC + np.cumsum(np.asarray(gaps, dtype=np.int64) * u)
    lags = []
    for _ in range(n):
        bound = straggle if frac and draw(st.floats(0, 1)) < frac else disorder
        lags.append(draw(st.integers(0, bound // u)) * u)
    event = arrival - np.asarray(lags, dtype=np.int64).reshape(n)
    key = np.array([f"k{draw(st.integers(0, n_keys - 1))}" for _ in range(n)], dtype=object)
    return Trace(
        event_time=event,
        arrival_time=arrival,
        key=key.reshape(n),
        value=np.arange(n, dtype=np.float64),
    )


@st.composite
def scripts(
    draw: st.DrawFn,
    unit: Any = "1s",
    *,
    max_events: int = 8,
    keys: tuple[str, ...] = ("a", "b"),
    flush: bool = True,
    values: st.SearchStrategy[Any] | None = None,
) -> Script:
    """A TestStream script: element events (1-3 elements, keys from ``keys``, values from
    ``values``, by default :data:`VALUES`, timestamps multiples of ``unit`` near the
    watermark, some late), advancing watermarks and whole-second processing-time steps;
    with ``flush`` it ends with a :data:`FLUSH` processing-time step. Lateness here is at
    most 3 ``unit``s: to find a wrong allowed lateness, use :func:`scripts_for`."""
    u = as_duration(unit, "unit", allow_zero=False)
    value_strategy = VALUES if values is None else values
    events: list[Event] = []
    watermark = 0
    for _ in range(draw(st.integers(1, max_events))):
        kind = draw(st.sampled_from(["elements", "elements", "watermark", "ptime"]))
        if kind == "elements":
            elements = []
            for _ in range(draw(st.integers(1, 3))):
                ts = max(0, watermark // u + draw(st.integers(-3, 8))) * u
                elements.append((draw(st.sampled_from(keys)), draw(value_strategy), ts))
            events.append(ElementEvent(elements))
        elif kind == "watermark":
            watermark += draw(st.integers(1, 6)) * u
            events.append(WatermarkEvent(watermark))
        else:
            events.append(ProcessingTimeEvent(draw(st.integers(1, 3)) * SEC))
    if flush:
        events.append(ProcessingTimeEvent(FLUSH))
    return Script(events)


def skewed_keys(keys: Sequence[Hashable] = KEYS) -> st.SearchStrategy[Hashable]:
    """One of ``keys``, the ``i``-th with weight ``1/(i+1)`` (Zipf-like: a few hot keys);
    shrinks towards the first."""
    pool = tuple(keys)
    if not pool:
        raise ValueError("keys must name at least one key")
    scale = math.lcm(*range(1, len(pool) + 1))
    bounds = list(np.cumsum([scale // (i + 1) for i in range(len(pool))]))
    return st.integers(0, int(bounds[-1]) - 1).map(lambda r: pool[bisect_right(bounds, r)])


def _trigger_delays(trigger: tt.Trigger) -> list[int]:
    """Every ``AfterProcessingTime`` delay (µs) inside ``trigger``."""
    if isinstance(trigger, tt.AfterProcessingTime):
        return [trigger.delay]
    children: list[Any] = list(getattr(trigger, "triggers", ()))
    children += [getattr(trigger, name, None) for name in ("underlying", "early", "late")]
    return [d for c in children if isinstance(c, tt.Trigger) for d in _trigger_delays(c)]


def _window_scale(fn: object) -> int:
    """The window length (µs) that element times and watermark steps are scaled to."""
    if isinstance(fn, (FixedWindows, SlidingWindows)):
        return int(fn.size)
    if isinstance(fn, Sessions):
        return int(fn.gap)
    return GLOBAL_SCALE


def _as_theory(windowing: Any) -> WindowingStrategy:
    if isinstance(windowing, WindowingStrategy):
        return windowing
    from beam_pipelines.convert import to_theory  # imports Beam

    try:
        return to_theory(windowing, allow_unsafe_triggers=True)
    except TypeError:
        raise TypeError(
            "windowing must be a theory WindowingStrategy, a beam.WindowInto or a Beam "
            f"Windowing, got {windowing!r}"
        ) from None


def scripts_for(
    windowing: Any,
    *,
    max_steps: int = 6,
    keys: Sequence[Hashable] = KEYS,
    values: st.SearchStrategy[Any] | None = None,
    flush: bool = True,
) -> st.SearchStrategy[Script]:
    """TestStream scripts for a transform under ``windowing`` (a theory
    ``WindowingStrategy``, or a ``beam.WindowInto`` / ``Windowing``), with times scaled
    to its window length ``W`` (fixed and sliding: the size; sessions: the gap; global:
    one minute), its allowed lateness ``L`` and its trigger's processing-time delays.

    A script starts with the watermark at ``L + 2W`` and takes 1 to ``max_steps`` steps:
    1-3 elements (keys from :func:`skewed_keys` of ``keys``, values from ``values``, by
    default :data:`VALUES`), each up to ``W`` ahead of the watermark, up to ``W`` behind
    it, ``W`` to ``W + L`` behind it (late, kept) or ``W + L`` to ``2W + L`` behind it
    (beyond the lateness); a watermark step of up to ``W``, or of ``W + L``; a
    processing-time step 1 s past the longest delay, or of 1 s up to that. With ``flush`` it ends
    with the watermark past every window's lateness and a :data:`FLUSH` processing-time
    step. Times are multiples of ``gcd(W, L, 1 s)`` (whole ms, as Beam needs, when ``W``
    and ``L`` are). Bad arguments raise here, not when drawing."""
    strategy = _as_theory(windowing)
    n_steps = check_count(max_steps, "max_steps", minimum=1)
    key_strategy = skewed_keys(keys)
    value_strategy = VALUES if values is None else values
    if not isinstance(value_strategy, st.SearchStrategy):
        raise TypeError(f"values must be a Hypothesis strategy, got {values!r}")
    w = _window_scale(strategy.window_fn)
    lateness = int(strategy.allowed_lateness)
    grain = math.gcd(w, lateness, SEC)
    delay_s = -(-max(_trigger_delays(strategy.trigger), default=0) // SEC)
    # [low, high] behind the watermark (µs) of each element class; negative: ahead of it
    lags = [(-w, 0), (0, w), (w, w + lateness), (w + lateness, 2 * w + lateness)]
    element = st.tuples(key_strategy, value_strategy, st.integers(0, 3), st.integers(0, 100))
    step = st.one_of(
        st.tuples(st.just("elements"), st.lists(element, min_size=1, max_size=3)),
        st.tuples(st.just("watermark"), st.integers(0, 1), st.integers(1, max(1, w // grain))),
        st.tuples(st.just("ptime"), st.just(delay_s + 1) | st.integers(1, delay_s + 1)),
    )

    def build(steps: list[tuple[Any, ...]]) -> Script:
        watermark = latest = lateness + 2 * w
        events: list[Event] = [WatermarkEvent(watermark)]
        for kind, *args in steps:
            if kind == "elements":
                rows = []
                for key, value, klass, percent in args[0]:
                    low, high = lags[klass]
                    ts = max(0, watermark - low - (high - low) // grain * percent // 100 * grain)
                    latest = max(latest, ts)
                    rows.append((key, value, ts))
                events.append(ElementEvent(rows))
            elif kind == "watermark":
                jump, size = args
                watermark += w + lateness if jump else size * grain
                events.append(WatermarkEvent(watermark))
            else:
                events.append(ProcessingTimeEvent(args[0] * SEC))
        if flush:
            events.append(WatermarkEvent(max(watermark, latest) + 2 * w + lateness + grain))
            events.append(ProcessingTimeEvent(FLUSH))
        return Script(events)

    return st.lists(step, min_size=1, max_size=n_steps).map(build)
