"""Beam's repeated introspection while it builds and runs a pipeline, answered once.

A test-sized pipeline on Beam's direct runner spends most of its time asking two things
again and again (measured in ``bench/property_examples.py``):

- **a DoFn's state and timer specs** (``apache_beam.transforms.userstate.get_dofn_specs``,
  asked by each ParDo's checks, the runner's overrides and every bundle's invoker), each
  answer walking ``dir(dofn)`` and every method's signature. The answer depends only on
  the DoFn's class and on the methods bound on the instance itself (Beam reads bound
  methods only), so it is computed once per (class, instance-bound methods) and reused:
  the same sets of the same spec objects. A DoFn whose introspection fails is not cached
  (the error comes each time).
- **a view of the pipeline options** (``PipelineOptions.view_as(cls)``, about a hundred
  times per pipeline), each building an argparse parser of ``cls``'s options and parsing
  the flags again. The parsed defaults depend only on ``cls`` and the flags, so they are
  parsed once per (class, flags) and each view gets its own deep copy of them; the view
  shares its options' values as Beam's does. Options whose flags are not a list or tuple
  (``sys.argv``), and option classes with an ``__init__`` of their own, go to Beam.

Inside :func:`cached_construction` both are answered this way; blocks may nest and
overlap across threads, and when the last one ends Beam's own functions are back in
place and the cache is emptied (so environment-dependent defaults are read again).
"""

from __future__ import annotations

import copy
import threading
import types
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import userstate

__all__ = ["cached_construction"]

_LOCK = threading.Lock()
_ACTIVE = 0
_SPECS = userstate.get_dofn_specs
_VIEW_AS = PipelineOptions.view_as
_SPEC_CACHE: dict[Hashable, tuple[set[Any], set[Any]]] = {}
_PARSED: dict[Hashable, Any] = {}


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


def _cached_specs(dofn: Any) -> tuple[set[Any], set[Any]]:
    try:
        shape = _shape(dofn)
        found = _SPEC_CACHE.get(shape)
    except TypeError:  # an unhashable bound function: ask Beam
        return _SPECS(dofn)
    if found is None:
        found = _SPECS(dofn)
        _SPEC_CACHE[shape] = found
    return found


def _cached_view_as(self: PipelineOptions, cls: Any) -> Any:
    flags = self._flags
    own_init = "__init__" in vars(cls) and cls is not PipelineOptions
    if own_init or not isinstance(flags, (list, tuple)):
        return _VIEW_AS(self, cls)
    key = (cls, tuple(flags))
    parsed = _PARSED.get(key)
    if parsed is None:
        view = cls(flags)  # Beam's parse, once
        _PARSED[key] = copy.deepcopy(view._visible_options)
    else:
        view = cls.__new__(cls)
        view._flags = flags
        view._visible_options = copy.deepcopy(parsed)
    for name in view._visible_option_list():
        if name not in self._all_options:
            self._all_options[name] = getattr(view._visible_options, name)
    view._all_options = self._all_options
    return view


@contextmanager
def cached_construction() -> Iterator[None]:
    """Inside the block, Beam's DoFn specs and option views are answered once per shape
    (module docstring)."""
    global _ACTIVE
    with _LOCK:
        if _ACTIVE == 0:
            userstate.get_dofn_specs = _cached_specs
            PipelineOptions.view_as = _cached_view_as  # type: ignore[method-assign]
        _ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                userstate.get_dofn_specs = _SPECS
                PipelineOptions.view_as = _VIEW_AS  # type: ignore[method-assign]
                _SPEC_CACHE.clear()
                _PARSED.clear()
