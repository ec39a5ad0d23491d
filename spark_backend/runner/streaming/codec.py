"""The checkpoint's encoding of the runner's state objects: JSON that names data, never code.

:func:`encode` writes an object graph as one JSON document, :func:`decode` reads it back.
What it can hold is fixed here, nothing else:

- ``None``, ``bool``, ``int``, ``float``, ``str`` as JSON's own values;
- ``bytes`` (base64), ``tuple``, ``list``, ``dict`` (any keys, in order), ``set``,
  ``frozenset`` and ``defaultdict(list)``, each as a JSON array led by a type letter;
- instances of the classes of :data:`CLASSES` (the runner's summaries and per-partition
  state, theory's engine parts), as their named fields; theory's ``TimeDomain`` by its
  value;
- a :class:`~theory.windowing.engine.GroupByWindowEngine` or a
  :class:`~theory.pipeline.graph.WatermarkTracker` by its state only (:data:`RESTORABLE`):
  it decodes to :class:`Restorable`, which puts that state into an object the reader built
  from the pipeline (the windowing strategy, the stage graph), so a file never says how
  an engine decides.

A mutable object (a container, an instance) met again is written as a reference to its
first occurrence, so shared and cyclic structures (an engine's windows and the timers
naming them) come back shared. Decoding builds instances with ``object.__new__`` and
sets exactly the fields listed: no constructor, ``__setstate__`` or import runs.
Anything else in a file is a :class:`CodecError`.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Final

from spark_backend.runner.streaming import watermarks as _watermarks
from spark_backend.runner.streaming.grouping import GroupSummary
from spark_backend.runner.streaming.keyed_state import (
    PartitionState,
    PendingTimer,
    StatefulSummary,
)
from spark_backend.runner.streaming.positions import Position
from spark_backend.runner.streaming.pushback import PushbackSummary
from spark_backend.runner.streaming.side_views import SideView
from spark_backend.runner.streaming.unbounded import Residual, SourceSummary
from theory.pipeline import graph as _graph
from theory.structures import Frontier
from theory.watermarks.latch import Latch
from theory.windowing import engine as _engine
from theory.windowing.triggers import TimeDomain

__all__ = ["CLASSES", "RESTORABLE", "CodecError", "Restorable", "decode", "encode"]


class CodecError(ValueError):
    """A document :func:`decode` cannot read (the message says what is wrong)."""


def _fields(cls: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    slotted: Any = cls
    return tuple(slotted.__slots__)


#: The classes whose instances a document may hold, by the name it gives them, with the
#: fields written (every field of a dataclass, every slot of a slotted class).
CLASSES: Final[dict[str, tuple[type, tuple[str, ...]]]] = {
    cls.__name__: (cls, _fields(cls))
    for cls in (
        Position,
        GroupSummary,
        StatefulSummary,
        PartitionState,
        PendingTimer,
        PushbackSummary,
        Residual,
        SourceSummary,
        SideView,
        _watermarks._Snapshot,
        Frontier,
        Latch,
        _graph._StageHolds,
        _engine._KeyState,
        _engine._WinState,
        _engine._Id,
    )
}

#: Enumerations a document may name, by value.
_ENUMS: Final[dict[str, type[enum.Enum]]] = {"TimeDomain": TimeDomain}

#: Objects written by their state only (the fields listed), rebuilt by the reader: the
#: rest of them (an engine's strategy and what it derives, a tracker's graph) comes from
#: the pipeline.
RESTORABLE: Final[dict[str, tuple[type, tuple[str, ...]]]] = {
    "GroupByWindowEngine": (
        _engine.GroupByWindowEngine,
        (
            "input_watermark",
            "output_watermark",
            "processing_time",
            "external_hold",
            "_keys",
            "_seq",
            "_ranks",
            "_wm_timers",
            "_pt_timers",
            "_simple_timers",
            "_holds",
            "_gc_heap",
            "dropped",
            "late_elements",
        ),
    ),
    "WatermarkTracker": (
        _graph.WatermarkTracker,
        ("_source", "_holds", "_input", "_output", "_output_latch", "_source_regressions"),
    ),
}

_BY_TYPE: Final[dict[type, str]] = {cls: name for name, (cls, _) in CLASSES.items()}
_RESTORABLE_BY_TYPE: Final[dict[type, str]] = {cls: n for n, (cls, _) in RESTORABLE.items()}
_ENUM_BY_TYPE: Final[dict[type, str]] = {cls: name for name, cls in _ENUMS.items()}


@dataclasses.dataclass(frozen=True)
class Restorable:
    """The state of a :data:`RESTORABLE` object as a document held it."""

    kind: str
    state: Mapping[str, Any]

    def into(self, target: Any) -> Any:
        """Put the state into ``target`` (a fresh object of the kind, built by the
        reader); ``target``. :class:`CodecError` for another kind, or a field whose type
        is not the fresh object's (``target`` is then unchanged)."""
        cls, _ = RESTORABLE[self.kind]
        if type(target) is not cls:
            raise CodecError(f"holds a {self.kind} where a {type(target).__name__} belongs")
        for name, value in self.state.items():
            fresh = type(getattr(target, name))
            if type(value) is not fresh:
                raise CodecError(
                    f"holds a {type(value).__name__} where {self.kind}.{name}, "
                    f"a {fresh.__name__}, belongs"
                )
        for name, value in self.state.items():
            object.__setattr__(target, name, value)
        return target


def encode(value: Any) -> bytes:
    """``value`` as a JSON document (UTF-8); ``TypeError`` naming a type it cannot hold."""
    return json.dumps(_Encoder().node(value), separators=(",", ":")).encode("utf-8")


def decode(data: bytes) -> Any:
    """The value :func:`encode` wrote as ``data`` (:class:`Restorable` for an engine or a
    tracker); :class:`CodecError` when ``data`` is not such a document."""
    try:
        tree = json.loads(data)
        return _Decoder().node(tree)
    except CodecError:
        raise
    except RecursionError:
        raise CodecError("nests too deep") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise CodecError(f"is not a state document ({type(err).__name__}: {err})") from None


class _Encoder:
    def __init__(self) -> None:
        self._seen: dict[int, int] = {}
        self._kept: list[Any] = []  # keeps every memoised object alive: ids stay unique

    def _memo(self, value: Any) -> list[Any] | None:
        """A reference if ``value`` was written before, else None (it is numbered)."""
        number = self._seen.get(id(value))
        if number is not None:
            return ["r", number]
        self._seen[id(value)] = len(self._kept)
        self._kept.append(value)
        return None

    def node(self, value: Any) -> Any:
        kind = type(value)
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return value
        if kind is bytes:
            return ["b", base64.b64encode(value).decode("ascii")]
        if kind is tuple:
            return ["t", [self.node(v) for v in value]]
        if kind is frozenset:
            return ["f", [self.node(v) for v in value]]
        name = _ENUM_BY_TYPE.get(kind)
        if name is not None:
            return ["e", name, value.value]
        if kind.__module__ == "numpy" and hasattr(value, "item"):
            return self.node(value.item())  # a numpy scalar: its Python value
        ref = self._memo(value)
        if ref is not None:
            return ref
        if kind is list:
            return ["l", [self.node(v) for v in value]]
        if kind is set:
            return ["s", [self.node(v) for v in value]]
        if kind is dict:
            return ["d", [[self.node(k), self.node(v)] for k, v in value.items()]]
        if kind is defaultdict and value.default_factory is list:
            return ["dl", [[self.node(k), self.node(v)] for k, v in value.items()]]
        name = _BY_TYPE.get(kind)
        if name is not None:
            return ["o", name, [self.node(getattr(value, f)) for f in CLASSES[name][1]]]
        name = _RESTORABLE_BY_TYPE.get(kind)
        if name is not None:
            return ["R", name, [self.node(getattr(value, f)) for f in RESTORABLE[name][1]]]
        raise TypeError(f"a checkpoint cannot hold a {kind.__module__}.{kind.__qualname__}")


class _Decoder:
    def __init__(self) -> None:
        self._made: list[Any] = []

    def _new(self, value: Any) -> Any:
        self._made.append(value)
        return value

    def node(self, tree: Any) -> Any:
        if tree is None or type(tree) in (bool, int, str, float):
            return tree
        if type(tree) is not list or not tree or type(tree[0]) is not str:
            raise CodecError(f"holds {_short(tree)} where a value belongs")
        tag = tree[0]
        if tag == "b":
            (text,) = tree[1:]
            return base64.b64decode(_str(text), validate=True)
        if tag == "t":
            return tuple(self.node(v) for v in _items(tree))
        if tag == "f":
            return frozenset(self.node(v) for v in _items(tree))
        if tag == "e":
            _, name, value = tree
            return _ENUMS[_str(name)](value)
        if tag == "r":
            _, number = tree
            if type(number) is not int or not 0 <= number < len(self._made):
                raise CodecError(f"refers to object {_short(number)}, not written before it")
            return self._made[number]
        if tag == "l":
            out: list[Any] = self._new([])
            out.extend(self.node(v) for v in _items(tree))
            return out
        if tag == "s":
            found: set[Any] = self._new(set())
            found.update(self.node(v) for v in _items(tree))
            return found
        if tag in ("d", "dl"):
            table: dict[Any, Any] = self._new({} if tag == "d" else defaultdict(list))
            for pair in _items(tree):
                if type(pair) is not list or len(pair) != 2:
                    raise CodecError(f"holds {_short(pair)} where a key and value belong")
                key = self.node(pair[0])
                table[key] = self.node(pair[1])
            return table
        if tag == "o":
            name, fields, values = _fields_of(tree, CLASSES)
            cls = CLASSES[name][0]
            made = self._new(object.__new__(cls))
            for field, value in zip(fields, values, strict=True):
                object.__setattr__(made, field, self.node(value))
            return made
        if tag == "R":
            # nothing inside an engine or a tracker refers back to it: numbered when done
            name, fields, values = _fields_of(tree, RESTORABLE)
            number = len(self._made)
            self._new(None)
            state = {f: self.node(v) for f, v in zip(fields, values, strict=True)}
            self._made[number] = Restorable(name, state)
            return self._made[number]
        raise CodecError(f"holds an unknown type letter {_short(tag)}")


def _fields_of(
    tree: list[Any], table: Mapping[str, tuple[type, tuple[str, ...]]]
) -> tuple[str, tuple[str, ...], list[Any]]:
    """An instance node's class name (known to ``table``), its fields and their values."""
    _, name, values = tree
    if type(name) is not str or name not in table:
        raise CodecError(f"names an unknown class {_short(name)}")
    fields = table[name][1]
    if type(values) is not list or len(values) != len(fields):
        raise CodecError(f"holds a {name} without its {len(fields)} fields")
    return name, fields, values


def _items(tree: list[Any]) -> list[Any]:
    _, items = tree
    if type(items) is not list:
        raise CodecError(f"holds {_short(items)} where a list belongs")
    return items


def _str(value: Any) -> str:
    if type(value) is not str:
        raise CodecError(f"holds {_short(value)} where a string belongs")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
