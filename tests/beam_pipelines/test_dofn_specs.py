"""cached_dofn_specs: Beam's DoFn state/timer introspection answered once per DoFn shape,
the same answers as Beam's, and Beam's own function back after the block."""

# Beam declares DoFn state and timers as default arguments (StateParam, TimerParam).
# ruff: noqa: B008

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain

from beam_pipelines.dofn_specs import cached_dofn_specs

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
    with cached_dofn_specs():
        assert userstate.get_dofn_specs is not original
        first = [userstate.get_dofn_specs(fn) for fn in fns]
        again = [userstate.get_dofn_specs(fn) for fn in [Stateful(), *fns[1:]]]
        assert first == expected
        assert all(a is b for a, b in zip(first, again, strict=True))
        assert userstate.is_stateful_dofn(fns[1]) and not userstate.is_stateful_dofn(fns[2])
    assert userstate.get_dofn_specs is original


def test_blocks_nest_and_an_introspection_error_comes_each_time() -> None:
    original = userstate.get_dofn_specs
    with cached_dofn_specs():
        with cached_dofn_specs():
            pass
        assert userstate.get_dofn_specs is not original
        for _ in range(2):
            with pytest.raises(ValueError, match="duplicate"):
                userstate.get_dofn_specs(Twice())
    assert userstate.get_dofn_specs is original
