"""``Count.PerElement`` on the lean path: its PairWithVoid ``Map`` fused into the count.

Beam expands ``Count.PerElement`` to ``Map(lambda x: (x, None))`` (PairWithVoid) and a
``CombinePerKey(CountCombineFn)``, whose lifted Precombine counts the pairs' keys. When
the PairWithVoid's only consumer is that Precombine counting in the default windowing,
:func:`fuse_count_per_element` makes the ParDo hand its input on unchanged and the
Precombine count the values themselves (:attr:`PrecombineOp.keys_only`), a C-level
``Counter`` over the batch: no pair is built. Metadata is the input's either way (a
``Map`` output keeps its input's timestamp, windows and pane), element counts are
unchanged, and any batch the Counter does not take is paired first, so the Precombine's
exact path sees what Beam's would.
"""

from __future__ import annotations

from typing import Any, Final

from apache_beam.transforms import core

from spark_backend.runner.stages.lean.batch import Batch
from spark_backend.runner.stages.lean.combine import PrecombineOp
from spark_backend.runner.stages.lean.pardo import Emit, ParDoOp

__all__ = ["PassThrough", "fuse_count_per_element", "is_pair_with_void"]

_PAIR_WITH_VOID: Final[tuple[str, str]] = (
    "apache_beam.transforms.combiners",
    "Count.PerElement.expand.<locals>.<lambda>",
)
_MAP_WRAPPER: Final[tuple[str, str]] = ("apache_beam.transforms.core", "Map.<locals>.<lambda>")


def _named(fn: Any, where: tuple[str, str]) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and (getattr(fn, "__module__", ""), code.co_qualname) == where


def is_pair_with_void(op: Any) -> bool:
    """Whether ``op`` is the lean ParDo of ``Count.PerElement``'s ``Map(lambda x: (x,
    None))``, as Beam builds it."""
    fn = getattr(op, "_fn", None) if isinstance(op, ParDoOp) else None
    if type(fn) is not core.CallableWrapperDoFn or not _named(fn._fn, _MAP_WRAPPER):
        return False
    cells: tuple[Any, ...] = fn._fn.__closure__ or ()
    if len(cells) != 1 or not _named(cells[0].cell_contents, _PAIR_WITH_VOID):
        return False
    marker = object()
    return bool(cells[0].cell_contents(marker) == (marker, None))


class PassThrough:
    """A fused PairWithVoid: hands each batch on as it is (the count takes values)."""

    def __init__(self, op: ParDoOp) -> None:
        self.label, self.transform_id, self._op = op.label, op.transform_id, op

    def setup(self) -> None:
        self._op.setup()

    def teardown(self) -> None:
        self._op.teardown()

    def process(self, batch: Batch, emit: Emit) -> None:
        emit(batch)

    def finish(self, emit: Emit) -> None:
        return None


def fuse_count_per_element(
    ops: dict[str, Any], consumers: dict[str, list[str]], produces: dict[str, str]
) -> None:
    """Fuse, in place, every PairWithVoid whose one consumer is a counting Precombine
    in the default windowing (see the module docstring)."""
    for tid, op in list(ops.items()):
        if not is_pair_with_void(op):
            continue
        readers = consumers.get(produces[tid], [])
        if len(readers) != 1:
            continue
        count = ops[readers[0]]
        if isinstance(count, PrecombineOp) and count.counts_in_default_windowing:
            count.keys_only = True
            ops[tid] = PassThrough(op)
