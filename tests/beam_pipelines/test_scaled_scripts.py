"""strategies.scripts_for: scripts scaled to the windowing under test, so that a property
with the defaults tells a wrong allowed lateness from the right one, on Beam's
BundleBasedDirectRunner (assert_panes' default) and on the model."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from beam_pipelines.convert import to_beam
from beam_pipelines.testing import assert_panes
from beam_pipelines.testing.panes import check_beam_limits
from beam_pipelines.testing.strategies import (
    KEYS,
    PROPERTY_SETTINGS,
    scripts,
    scripts_for,
    skewed_keys,
    windowing_strategies,
)
from theory import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    FixedWindows,
    Sessions,
    SlidingWindows,
    WindowingStrategy,
)
from theory.time import SECOND
from theory.windowing.runner import run_script
from theory.windowing.script import ElementEvent, Script, WatermarkEvent
from theory.windowing.strategy import AccumulationMode

EARLY_LATE = AfterWatermark(early=AfterProcessingTime("10s"), late=AfterCount(1))


def clicks(lateness: str, window_fn: Any = None) -> WindowingStrategy:
    """Clicks per user in 1-minute windows, early firings every 10 s, accumulating."""
    return WindowingStrategy(
        window_fn or FixedWindows("1m"), EARLY_LATE, AccumulationMode.ACCUMULATING, lateness
    )


SPEC = clicks("2m")
PLANTED = clicks("5s")

# deterministic: the same examples on every run, nothing remembered between runs
FIND = settings(
    PROPERTY_SETTINGS,
    derandomize=True,
    database=None,
    max_examples=30,
    suppress_health_check=list(HealthCheck),
)


class ClicksPerUser(beam.PTransform):
    def __init__(self, strategy: WindowingStrategy) -> None:
        super().__init__()
        self.strategy = strategy

    def expand(self, clicks: Any) -> Any:
        return clicks | to_beam(self.strategy) | beam.CombinePerKey(sum)


def test_the_default_property_finds_a_planted_wrong_lateness_on_beam() -> None:
    """The pipeline keeps 5 s of lateness where 2 min are meant: found, shrunk, named."""

    @FIND
    @given(scripts_for(SPEC))
    def property_(script: Script) -> None:
        assert_panes(ClicksPerUser(PLANTED), script, SPEC, combine=sum)

    with pytest.raises(AssertionError, match=r"(?s)Beam and the model differ.*- model .* LATE"):
        property_()


def test_the_same_property_passes_on_the_right_pipeline() -> None:
    @settings(FIND, max_examples=2)
    @given(scripts_for(SPEC))
    def property_(script: Script) -> None:
        assert_panes(ClicksPerUser(SPEC), script, SPEC, combine=sum)

    property_()


def _differ(meant: WindowingStrategy, run: WindowingStrategy) -> Any:
    return lambda script: (
        list(run_script(script, meant).panes) != list(run_script(script, run).panes)
    )


@pytest.mark.parametrize(
    ("meant", "run"),
    [
        (SPEC, PLANTED),
        (PLANTED, SPEC),
        (clicks("2m", Sessions("30s")), clicks("5s", Sessions("30s"))),
        (clicks("5s", SlidingWindows("1m", "20s")), clicks("2m", SlidingWindows("1m", "20s"))),
    ],
    ids=["fixed-2m-run-5s", "fixed-5s-run-2m", "sessions-2m-run-5s", "sliding-5s-run-2m"],
)
def test_the_model_tells_the_lateness_apart(
    meant: WindowingStrategy, run: WindowingStrategy
) -> None:
    """Too little lateness and too much are both found within 30 examples."""
    find(scripts_for(meant), _differ(meant, run), settings=FIND)


def _classes(script: Script, strategy: WindowingStrategy) -> set[str]:
    """Where each element lands against its window (fixed windows, no offset)."""
    size, lateness = strategy.window_fn.size, strategy.allowed_lateness  # type: ignore[attr-defined]
    watermark, out = 0, set()
    for ev in script.events:
        if isinstance(ev, WatermarkEvent):
            watermark = ev.watermark
        elif isinstance(ev, ElementEvent):
            for _, _, ts in ev.elements:
                end = (ts // size + 1) * size
                out.add(
                    "on time"
                    if end > watermark
                    else "late, kept"
                    if end + lateness > watermark
                    else "dropped"
                )
    return out


@pytest.mark.parametrize("where", ["on time", "late, kept", "dropped"])
def test_elements_land_before_inside_and_beyond_the_lateness(where: str) -> None:
    find(scripts_for(SPEC), lambda s: where in _classes(s, SPEC), settings=FIND)


def test_early_firings_happen() -> None:
    """A processing-time step past the 10 s delay after an element: an EARLY pane."""

    def early(script: Script) -> bool:
        return any(p.timing.value == "EARLY" for p in run_script(script, SPEC).panes)

    find(scripts_for(SPEC), early, settings=FIND)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data(), windowing_strategies("1s"))
def test_scripts_for_any_strategy_run_on_beam(data: st.DataObject, strategy: Any) -> None:
    """Within Beam's limits, whole grains of gcd(W, L, 1 s), watermarks never back."""
    script = data.draw(scripts_for(strategy))
    check_beam_limits(script, strategy)
    marks = [ev.watermark for ev in script.events if isinstance(ev, WatermarkEvent)]
    assert marks == sorted(marks)
    assert all(
        ts >= 0 and value >= 1
        for ev in script.events
        if isinstance(ev, ElementEvent)
        for _, value, ts in ev.elements
    )


def test_a_beam_windowing_is_scaled_as_its_theory_strategy() -> None:
    first = find(scripts_for(to_beam(SPEC)), lambda s: True, settings=FIND)
    assert first.events[0] == WatermarkEvent(240 * SECOND)  # L + 2W


def test_keys_shrink_to_the_hot_one_and_every_one_is_drawn() -> None:
    assert find(skewed_keys(), lambda k: True, settings=FIND) == KEYS[0]
    for key in KEYS:

        def drawn(k: object, key: str = key) -> bool:
            return k == key

        find(skewed_keys(), drawn, settings=FIND)


def test_values_are_realistic_not_a_counter() -> None:
    """The smallest value drawn is 1: a sum that drops it shows."""
    for strategy in (scripts("1s"), scripts_for(SPEC)):
        script = find(
            strategy, lambda s: any(isinstance(e, ElementEvent) for e in s.events), settings=FIND
        )
        values = [v for e in script.events if isinstance(e, ElementEvent) for _, v, _ in e.elements]
        assert values and min(values) == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: scripts_for(SPEC, max_steps=0), "max_steps"),
        (lambda: scripts_for(SPEC, keys=()), "keys must name at least one key"),
        (
            lambda: scripts_for(SPEC, values=[1, 2]),  # type: ignore[arg-type]
            "values must be a Hypothesis strategy",
        ),
        (lambda: scripts_for(42), "windowing must be a theory WindowingStrategy, a beam.Wi"),
    ],
)
def test_bad_arguments_raise_when_called(call: Any, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call()
