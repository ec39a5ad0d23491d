"""The checkpoint codec: what it writes comes back equal (types, sharing and cycles
kept), an engine restored mid-script fires the same panes as one that never stopped, and
any other input is a CodecError, never an object of another class or code run."""

from __future__ import annotations

import json
import pickle
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_pipelines.differential import random_group
from spark_backend.runner.streaming import codec
from spark_backend.runner.streaming.keyed_state import PartitionState, PendingTimer
from spark_backend.runner.streaming.positions import Position
from theory.windowing.engine import GroupByWindowEngine
from theory.windowing.script import ElementEvent, WatermarkEvent

_hashable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.binary(max_size=8)
    | st.floats(allow_nan=False),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=8,
)
_values = st.recursive(
    _hashable,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_hashable, inner, max_size=4)
        | st.sets(_hashable, max_size=4)
        | st.tuples(inner, inner)
        | st.builds(
            Position, st.integers(0, 9), st.dictionaries(st.text(max_size=3), inner), st.booleans()
        )
    ),
    max_leaves=12,
)


def _typed(value: Any) -> Any:
    """``value`` with every type spelled out (``==`` takes True for 1 and 1.0)."""
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(repr(_typed(v)) for v in value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_typed(v) for v in value])
    if isinstance(value, Position):
        return ("Position", value.number, _typed(dict(value.sources)), value.finished)
    return (type(value).__name__, value)


@settings(max_examples=40, deadline=None)
@given(_values)
def test_what_is_encoded_decodes_equal_with_its_types(value: Any) -> None:
    assert _typed(codec.decode(codec.encode(value))) == _typed(value)


def test_sharing_cycles_and_default_dicts_come_back_as_they_were() -> None:
    shared = [b"x"]
    state = PartitionState({b"k": shared}, {b"o": [1]}, {}, 3)
    timer = PendingTimer(5, 4, True, b"t", 0)
    state.timers[("t", "f", b"id")] = timer
    cycle: list[Any] = []
    cycle.append(cycle)
    table: defaultdict[tuple[int, int], list[bytes]] = defaultdict(list)
    table[(0, 1)].append(b"v")
    back = codec.decode(codec.encode([state, shared, state, cycle, table]))
    assert back[0] is back[2] and back[0].user_state[b"k"] is back[1]
    assert back[0].timers == {("t", "f", b"id"): timer} and back[0].next_order == 3
    assert back[3][0] is back[3]
    assert type(back[4]) is defaultdict and back[4][(9, 9)] == [] and back[4][(0, 1)] == [b"v"]


def test_what_it_cannot_hold_is_refused_when_written() -> None:
    with pytest.raises(TypeError, match=r"cannot hold a builtins\.function"):
        codec.encode([lambda: 0])
    with pytest.raises(TypeError, match=r"cannot hold a .*_Payload"):
        codec.encode(_Payload())


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return print, ("ran",)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_any_other_bytes_are_a_codec_error(data: bytes) -> None:
    try:
        codec.decode(data)
    except codec.CodecError as err:
        assert "\n" not in str(err)


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=4) | st.booleans(),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=3).map(lambda v: ["o", "PartitionState", v])
            | st.tuples(st.sampled_from([*"btfelsdroR", "dl"]), inner).map(list)
        ),
        max_leaves=15,
    )
)
def test_any_other_document_is_a_codec_error_or_plain_data(tree: Any) -> None:
    """Crafted JSON gives a CodecError, or values of the allowed types only."""
    try:
        value = codec.decode(json.dumps(tree).encode())
    except codec.CodecError:
        return
    allowed = (type(None), bool, int, float, str, bytes, tuple, list, dict, set, frozenset)
    kinds = (*allowed, defaultdict, codec.Restorable, *(c for c, _ in codec.CLASSES.values()))
    assert isinstance(value, kinds)


def test_a_pickle_is_no_document() -> None:
    with pytest.raises(codec.CodecError, match="is not a state document"):
        codec.decode(pickle.dumps(_Payload()))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 40))
def test_an_engine_restored_mid_script_fires_the_panes_of_one_that_never_stopped(
    seed: int, cut: int
) -> None:
    case = random_group(seed, scripts=1)[0]
    events = case.script.events
    cut = min(cut, len(events))
    engine = GroupByWindowEngine(case.strategy)
    for event in events[:cut]:
        _step(engine, event)
    state = codec.decode(codec.encode(engine))
    assert isinstance(state, codec.Restorable) and state.kind == "GroupByWindowEngine"
    restored = state.into(GroupByWindowEngine(case.strategy))
    for event in events[cut:]:
        assert _step(restored, event) == _step(engine, event), case.label
    assert restored.min_hold_value() == engine.min_hold_value()
    assert restored.pending_timers() == engine.pending_timers()


def _step(engine: GroupByWindowEngine, event: Any) -> list[Any]:
    if isinstance(event, ElementEvent):
        return engine.add_elements(event.elements)
    if isinstance(event, WatermarkEvent):
        return engine.advance_watermark_to(event.watermark)
    return engine.advance_processing_time(event.delta)


def test_a_restorable_goes_only_into_its_own_kind() -> None:
    case = random_group(1, scripts=1)[0]
    state = codec.decode(codec.encode(GroupByWindowEngine(case.strategy)))
    with pytest.raises(codec.CodecError, match="GroupByWindowEngine where a list belongs"):
        state.into([])


def test_a_restorable_with_a_field_of_another_type_changes_nothing() -> None:
    case = random_group(2, scripts=1)[0]
    state = codec.decode(codec.encode(GroupByWindowEngine(case.strategy)))
    forged = codec.Restorable(state.kind, {**state.state, "_keys": []})
    target = GroupByWindowEngine(case.strategy)
    with pytest.raises(codec.CodecError, match=r"list where GroupByWindowEngine\._keys, a dict"):
        forged.into(target)
    assert target._keys == {}
