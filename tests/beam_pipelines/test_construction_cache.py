"""cached_construction: Beam's DoFn state/timer introspection answered once per DoFn
shape and option views parsed once per (class, flags), with Beam's answers and Beam's
sharing of option values; Beam's own functions back after the block."""

# Beam declares DoFn state and timers as default arguments (StateParam, TimerParam).
# ruff: noqa: B008

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions, StandardOptions
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain

from beam_pipelines.construction_cache import cached_construction

BAG = userstate.BagStateSpec("seen", VarIntCoder())
TIMER = userstate.TimerSpec("flush", TimeDomain.WATERMARK)


class Stateful(beam.DoFn):
    def process(
        self,
        element: Any,
        seen: Any = beam.DoFn.StateParam(BAG),
        t: Any = beam.DoFn.TimerParam(TIMER),
    ) -> Iterator[Any]:
        yield element

    @userstate.on_timer(TIMER)
    def flush(self) -> Iterator[Any]:
        yield 0


class Methods:
    def counted(self, element: Any, seen: Any = beam.DoFn.StateParam(BAG)) -> Any:
        return element

    def plain(self, element: Any) -> Any:
        return element


class Twice(beam.DoFn):
    def process(
        self, a: Any, w: Any = beam.DoFn.WindowParam, v: Any = beam.DoFn.WindowParam
    ) -> Any:
        return [a]


def _dofn(transform: Any) -> Any:
    return transform.fn


def test_answers_are_beams_and_each_shape_is_asked_once() -> None:
    original = userstate.get_dofn_specs
    fns = [
        Stateful(),
        _dofn(beam.FlatMap(Methods().counted)),
        _dofn(beam.FlatMap(Methods().plain)),
        _dofn(beam.Map(lambda x: x)),
    ]
    expected = [original(fn) for fn in fns]
    assert expected[1] != expected[2]  # one class, two bound methods: two shapes
    with cached_construction():
        assert userstate.get_dofn_specs is not original
        first = [userstate.get_dofn_specs(fn) for fn in fns]
        again = [userstate.get_dofn_specs(fn) for fn in [Stateful(), *fns[1:]]]
        assert first == expected
        assert all(a is b for a, b in zip(first, again, strict=True))
        assert userstate.is_stateful_dofn(fns[1]) and not userstate.is_stateful_dofn(fns[2])
    assert userstate.get_dofn_specs is original


def test_blocks_nest_and_an_introspection_error_comes_each_time() -> None:
    original = userstate.get_dofn_specs
    with cached_construction():
        with cached_construction():
            pass
        assert userstate.get_dofn_specs is not original
        for _ in range(2):
            with pytest.raises(ValueError, match="duplicate"):
                userstate.get_dofn_specs(Twice())
    assert userstate.get_dofn_specs is original


def test_option_views_share_values_within_options_and_nothing_across() -> None:
    original = PipelineOptions.view_as
    with cached_construction():
        assert PipelineOptions.view_as is not original
        first = PipelineOptions(["--streaming", "--experiments=a"])
        assert first.view_as(StandardOptions).streaming is True
        first.view_as(DebugOptions).add_experiment("b")
        assert first.view_as(DebugOptions).experiments == ["a", "b"]
        first.view_as(StandardOptions).streaming = False
        assert first.view_as(StandardOptions).streaming is False
        again = PipelineOptions(["--streaming", "--experiments=a"])
        assert again.view_as(StandardOptions).streaming is True
        assert again.view_as(DebugOptions).experiments == ["a"]
        assert PipelineOptions([]).view_as(DebugOptions).experiments is None
    assert PipelineOptions.view_as is original
    after = PipelineOptions(["--streaming", "--experiments=a"])
    assert after.view_as(DebugOptions).experiments == ["a"]
