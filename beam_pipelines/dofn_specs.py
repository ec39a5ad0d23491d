"""Beam's DoFn state and timer introspection, computed once per DoFn shape.

Beam asks ``apache_beam.transforms.userstate.get_dofn_specs`` for the state and timer
specs of a DoFn many times while it builds and runs a pipeline (each ParDo's checks, the
direct runner's overrides, every bundle's invoker: about a third of a test-sized
pipeline's time), and each answer walks ``dir(dofn)`` and every method's signature.
The answer depends only on the DoFn's class and on the methods bound on the instance
itself (Beam reads bound methods only), so inside :func:`cached_dofn_specs` it is
computed once per (class, instance-bound methods) and reused: the same sets of the same
spec objects. A DoFn whose introspection fails is not cached (the error comes each
time). The blocks may nest and overlap across threads; Beam's own function is back in
place when the last one ends.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from apache_beam.transforms import userstate

__all__ = ["cached_dofn_specs"]

_LOCK = threading.Lock()
_ACTIVE = 0
_ORIGINAL = userstate.get_dofn_specs
_CACHE: dict[Hashable, tuple[set[Any], set[Any]]] = {}
#: Shapes kept at most (the cache starts again past it: classes made per test call).
_MAX_SHAPES = 1000


def _shape(dofn: Any) -> Hashable:
    """The DoFn's class and the functions of the methods bound on the instance."""
    bound = tuple(
        sorted(
            (name, value.__func__)
            for name, value in getattr(dofn, "__dict__", {}).items()
            if isinstance(value, types.MethodType)
        )
    )
    return type(dofn), bound


def _cached(dofn: Any) -> tuple[set[Any], set[Any]]:
    try:
        shape = _shape(dofn)
        found = _CACHE.get(shape)
    except TypeError:  # an unhashable bound function: ask Beam
        return _ORIGINAL(dofn)
    if found is None:
        found = _ORIGINAL(dofn)
        if len(_CACHE) >= _MAX_SHAPES:
            _CACHE.clear()
        _CACHE[shape] = found
    return found


@contextmanager
def cached_dofn_specs() -> Iterator[None]:
    """Inside the block, Beam's ``get_dofn_specs`` answers each DoFn shape once
    (module docstring)."""
    global _ACTIVE
    with _LOCK:
        if _ACTIVE == 0:
            userstate.get_dofn_specs = _cached
        _ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                userstate.get_dofn_specs = _ORIGINAL
