"""The lean path's partial combine (a lifted CombinePerKey's Precombine).

Beam's ``PGBKCVOperation`` keeps one accumulator per (window, key), or per key in the
default windowing, adds each value with ``add_input``, and at the end of the bundle
emits ``(key, compact(accumulator))`` at the window's ``max_timestamp()`` (the global
one at ``MIN_TIMESTAMP``) with the default pane; a full table is flushed early, and
the GroupByKey after it merges the partial accumulators.

:class:`PrecombineOp` does the same. For the built-in CombineFns on ``int`` values
(``sum``/``min``/``max`` wrapped by Beam, ``CountCombineFn`` on any values,
``MeanCombineFn``) under the end-of-window timestamp, it groups a batch with numpy
(one sort, ``reduceat``) and keeps per-group partials as Python ints, which gives the
very accumulators Beam's would hold: ``[total]``, ``count``, ``(sum, count)``; integer
addition is exact in any order, and each group keeps the key object Beam's table would
(its first occurrence). Any other CombineFn, value type or timestamp combiner runs
Beam's own algorithm per element (:meth:`PrecombineOp._add_exact`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.transforms import combiners, core
from apache_beam.transforms import window as beam_window
from apache_beam.utils import proto_utils
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue

from spark_backend.runner.stages.lean.batch import GLOBAL, Batch, Intervals
from spark_backend.runner.stages.lean.pardo import Emit, augmented

__all__ = ["CombinePhaseOp", "PrecombineOp", "combine_phase_op", "precombine_op"]

#: The table size at which partial accumulators are flushed (Beam's for these fns).
MAX_KEYS: Final[int] = 1_000_000
_INT64: Final[int] = 1 << 63


def precombine_op(transform: pb.PTransform, transform_id: str, stage: Any) -> PrecombineOp:
    """The lean op for a COMBINE_PER_KEY_PRECOMBINE ``transform``."""
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.CombinePayload)
    fn = core.CombineFn.from_runner_api(payload.combine_fn, stage.context)
    (pcoll,) = transform.inputs.values()
    return PrecombineOp(transform.unique_name, transform_id, fn, stage.windowing_of(pcoll))


def _kernel(fn: Any) -> str:
    """Which vectorised kernel computes ``fn``'s accumulators ('' for none)."""
    if type(fn) is combiners.CountCombineFn:
        return "count"
    if type(fn) is combiners.MeanCombineFn:
        return "mean"
    wrappers = (core.CallableWrapperCombineFn, core.NoSideInputsCallableWrapperCombineFn)
    if type(fn) in wrappers and fn._fn in (sum, min, max):
        return fn._fn.__name__
    return ""


_MERGE: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "count": lambda a, b: a + b,
    "sum": lambda a, b: a + b,
    "min": min,
    "max": max,
    "mean": lambda a, b: (a[0] + b[0], a[1] + b[1]),
}
_ACCUMULATOR: Final[dict[str, Callable[[Any], Any]]] = {
    "count": lambda p: p,
    "sum": lambda p: [p],
    "min": lambda p: [p],
    "max": lambda p: [p],
    "mean": lambda p: p,
}


class PrecombineOp:
    """A lifted combine's partial combine over batches (see the module docstring)."""

    def __init__(self, label: str, transform_id: str, fn: Any, windowing: Any) -> None:
        self.label = label
        self.transform_id = transform_id
        self._fn = fn
        self._default = windowing.is_default()
        eow = windowing.timestamp_combiner == beam_window.TimestampCombiner.OUTPUT_AT_EOW
        self._tsc = (
            None
            if eow
            else beam_window.TimestampCombiner.get_impl(
                windowing.timestamp_combiner, windowing.windowfn
            )
        )
        self._kernel = _kernel(fn) if eow else ""
        self._compact = None if type(fn).compact is core.CombineFn.compact else fn.compact
        self._table: dict[Any, list[Any]] = {}  # Beam's: (window, key) or key -> [acc, ts]
        self._fast: dict[tuple[int, int, Any], Any] = {}  # (start, end, key) -> partial
        self.path = self._kernel or "per-element"
        #: Batches carry the keys alone (a fused PairWithVoid, :mod:`.count`).
        self.keys_only = False

    @property
    def counts_in_default_windowing(self) -> bool:
        """Whether this is a CountCombineFn's Precombine in the default windowing."""
        return self._kernel == "count" and self._default

    def setup(self) -> None:
        self._fn.setup()

    def teardown(self) -> None:
        self._fn.teardown()

    def process(self, batch: Batch, emit: Emit) -> None:
        try:
            if self.keys_only:
                if batch.windows is GLOBAL:
                    self._count_global(batch, emit)
                    return
                pairs = [(k, None) for k in batch.values]
                batch = Batch(pairs, batch.micros, batch.windows, batch.panes)
            if not (self._kernel and self._add_vectorised(batch, emit)):
                self._add_exact(batch, emit)
        except Exception as exn:
            raise augmented(exn, self.label) from exn

    def finish(self, emit: Emit) -> None:
        self._flush_fast(emit)
        self._flush_exact(emit)

    # --- the vectorised kernels ----------------------------------------------------

    def _add_vectorised(self, batch: Batch, emit: Emit) -> bool:
        """Fold ``batch`` into the int partials; False (nothing done) if it does not fit."""
        windows = batch.windows
        if not (isinstance(windows, Intervals) or (windows is GLOBAL and self._default)):
            return False
        if self._kernel == "count" and windows is GLOBAL:
            self._count_global(batch, emit)
            return True
        keys = [k for k, _ in batch.values]
        column = None
        if self._kernel != "count":
            values = [v for _, v in batch.values]
            if not all(type(v) is int for v in values):
                return False
            try:
                column = np.array(values, dtype=np.int64)
            except OverflowError:
                return False
            if len(column) and int(np.abs(column).max()) * len(column) >= _INT64:
                return False
        index: dict[Any, int] = {}
        codes = np.fromiter((index.setdefault(k, len(index)) for k in keys), np.int64, len(keys))
        n = len(keys)
        if isinstance(windows, Intervals):  # dense codes of (start, end), then of (key, window)
            _, starts = np.unique(windows.start, return_inverse=True)
            _, ends = np.unique(windows.end, return_inverse=True)
            pairs = starts.reshape(-1) * n + ends.reshape(-1)
            _, dense = np.unique(pairs, return_inverse=True)
            codes = codes * n + dense.reshape(-1)
        _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        partials = self._reduce(inverse.reshape(-1), len(first), column)
        merge = _MERGE[self._kernel]
        if isinstance(windows, Intervals):
            starts_at, ends_at = windows.start[first].tolist(), windows.end[first].tolist()
        else:
            starts_at = ends_at = [0] * len(first)
        for g, at in enumerate(first.tolist()):
            slot = (starts_at[g], ends_at[g], keys[at])
            old = self._fast.get(slot)
            self._fast[slot] = partials[g] if old is None else merge(old, partials[g])
        if len(self._fast) >= MAX_KEYS:
            self._flush_fast(emit)
        return True

    def _count_global(self, batch: Batch, emit: Emit) -> None:
        """Count per key in the default windowing: a C-level ``Counter`` over the keys
        (it keeps each key's first object, as Beam's table does)."""
        fast = self._fast
        keys = batch.values if self.keys_only else [key for key, _ in batch.values]
        for key, count in Counter(keys).items():
            slot = (0, 0, key)
            fast[slot] = fast.get(slot, 0) + count
        if len(fast) >= MAX_KEYS:
            self._flush_fast(emit)

    def _reduce(self, inverse: np.ndarray, n: int, column: np.ndarray | None) -> list[Any]:
        counts = np.bincount(inverse, minlength=n)
        if self._kernel == "count":
            return counts.tolist()
        assert column is not None
        order = np.argsort(inverse, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        ordered = column[order]
        if self._kernel == "min":
            return np.minimum.reduceat(ordered, starts).tolist()
        if self._kernel == "max":
            return np.maximum.reduceat(ordered, starts).tolist()
        sums = np.add.reduceat(ordered, starts).tolist()
        if self._kernel == "sum":
            return sums
        return list(zip(sums, counts.tolist(), strict=True))

    def _flush_fast(self, emit: Emit) -> None:
        if not self._fast:
            return
        accumulator = _ACCUMULATOR[self._kernel]
        slots = list(self._fast)
        values = [(key, accumulator(self._fast[s])) for s in slots for key in (s[2],)]
        if self._default:
            micros = np.full(len(slots), MIN_TIMESTAMP.micros, dtype=np.int64)
            emit(Batch(values, micros, GLOBAL, PANE_INFO_UNKNOWN))
        else:
            start = np.array([s[0] for s in slots], dtype=np.int64)
            end = np.array([s[1] for s in slots], dtype=np.int64)
            emit(Batch(values, end - 1, Intervals(start, end), PANE_INFO_UNKNOWN))
        self._fast = {}

    # --- Beam's own algorithm (PGBKCVOperation), per element --------------------------

    def _add_exact(self, batch: Batch, emit: Emit) -> None:
        table, fn, tsc = self._table, self._fn, self._tsc
        windows = batch.window_lists()
        for i, (key, value) in enumerate(batch.values):
            slots: list[tuple[Any, Any]]
            if self._default:
                slots = [(key, None)]
            else:
                stamp = Timestamp(micros=int(batch.micros[i])) if tsc else None
                slots = [((w, key), stamp) for w in windows[i]]
            for wkey, stamp in slots:
                entry = table.get(wkey)
                if entry is None:
                    if len(table) >= MAX_KEYS:
                        self._evict(emit)
                    entry = table[wkey] = [fn.create_accumulator(), stamp]
                entry[0] = fn.add_input(entry[0], value)
                if not self._default and tsc:
                    entry[1] = tsc.combine(entry[1], stamp)

    def _evict(self, emit: Emit) -> None:
        """Flush the oldest tenth of the table, as Beam does when it is full."""
        target = len(self._table) * 9 // 10
        old = []
        for wkey in self._table:
            old.append(wkey)
            if len(self._table) - len(old) <= target:
                break
        emit(Batch.of([self._output(w, *self._table.pop(w)) for w in old]))

    def _flush_exact(self, emit: Emit) -> None:
        if self._table:
            emit(Batch.of([self._output(w, *entry) for w, entry in self._table.items()]))
            self._table = {}

    def _output(self, wkey: Any, accumulator: Any, stamp: Any) -> Any:
        value = accumulator if self._compact is None else self._compact(accumulator)
        if self._default:
            return beam_window.GlobalWindows.windowed_value(None).with_value((wkey, value))
        window, key = wkey
        if self._tsc is None:
            stamp = window.max_timestamp()
        return WindowedValue((key, value), stamp, (window,))


def combine_phase_op(transform: pb.PTransform, transform_id: str, stage: Any) -> CombinePhaseOp:
    """The lean op for a lifted combine's MERGE_ACCUMULATORS, EXTRACT_OUTPUTS or
    CONVERT_TO_ACCUMULATORS ``transform``."""
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.CombinePayload)
    fn = core.CombineFn.from_runner_api(payload.combine_fn, stage.context)
    return CombinePhaseOp(transform.unique_name, transform_id, fn, _PHASES[transform.spec.urn])


_PHASES: Final[dict[str, str]] = {
    common_urns.combine_components.COMBINE_PER_KEY_MERGE_ACCUMULATORS.urn: "merge",
    common_urns.combine_components.COMBINE_PER_KEY_EXTRACT_OUTPUTS.urn: "extract",
    common_urns.combine_components.COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS.urn: "convert",
}


class CombinePhaseOp:
    """Beam's ``CombineOperation``: each ``(key, x)`` becomes ``(key, phase(x))`` with
    the element's timestamp, windows and pane."""

    def __init__(self, label: str, transform_id: str, fn: Any, phase: str) -> None:
        self.label = label
        self.transform_id = transform_id
        self._fn = fn
        self._apply: Callable[[Any], Any] = {
            "merge": fn.merge_accumulators,
            "extract": fn.extract_output,
            "convert": lambda v: fn.add_input(fn.create_accumulator(), v),
        }[phase]

    def setup(self) -> None:
        self._fn.setup()

    def teardown(self) -> None:
        self._fn.teardown()

    def process(self, batch: Batch, emit: Emit) -> None:
        apply = self._apply
        try:
            values = [(key, apply(x)) for key, x in batch.values]
        except Exception as exn:
            raise augmented(exn, self.label) from exn
        emit(Batch(values, batch.micros, batch.windows, batch.panes))

    def finish(self, emit: Emit) -> None:
        return None
