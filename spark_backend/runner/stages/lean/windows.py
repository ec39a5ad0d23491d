"""The lean path's WindowInto: window assignment on the timestamp column.

Beam's ``WindowIntoDoFn`` asks for the window, so it runs once per (element, window)
and yields ``WindowedValue(value, timestamp, windowfn.assign(...))`` with the default
pane (``PANE_INFO_UNKNOWN``). For Beam's own ``GlobalWindows``, ``FixedWindows`` and
``Sessions`` the new windows are computed on the int64 µs column with numpy (the same
integer arithmetic as ``assign``: Python's floor modulo, which numpy's ``%`` matches),
when every timestamp is within ±2^62 µs so nothing overflows; ``SlidingWindows`` builds
its window lists in Python (one ``IntervalWindow`` object per window); any other
WindowFn, or a timestamp near the int64 edge, calls ``assign`` itself per element.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from apache_beam.portability.api import beam_runner_api_pb2 as pb
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.core import Windowing
from apache_beam.utils import proto_utils
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN

from spark_backend.runner.stages.lean.batch import GLOBAL, Batch, Intervals, interval_window
from spark_backend.runner.stages.lean.pardo import Emit, augmented

__all__ = ["WindowIntoOp", "assign_windows", "window_into_op"]

_SAFE: Final[int] = 1 << 62  # |timestamp| and window sizes below this cannot overflow


def window_into_op(transform: pb.PTransform, transform_id: str, stage: Any) -> WindowIntoOp:
    """The lean op for an ASSIGN_WINDOWS ``transform`` (any WindowFn: unknown ones are
    assigned per element with Beam's own ``assign``)."""
    payload = proto_utils.parse_Bytes(transform.spec.payload, pb.WindowingStrategy)
    windowing = Windowing.from_runner_api(payload, stage.context)
    return WindowIntoOp(transform.unique_name, transform_id, windowing.windowfn)


class WindowIntoOp:
    """WindowInto over batches."""

    def __init__(self, label: str, transform_id: str, window_fn: Any) -> None:
        self.label = label
        self.transform_id = transform_id
        self.window_fn = window_fn

    def setup(self) -> None:
        return None

    def teardown(self) -> None:
        return None

    def process(self, batch: Batch, emit: Emit) -> None:
        try:
            emit(assign_windows(self.window_fn, batch))
        except Exception as exn:
            raise augmented(exn, self.label) from exn

    def finish(self, emit: Emit) -> None:
        return None


def assign_windows(window_fn: Any, batch: Batch) -> Batch:
    """``batch`` windowed by ``window_fn`` as Beam's WindowInto windows it."""
    if isinstance(batch.windows, list):  # several windows per element: one output each
        counts = [len(ws) for ws in batch.windows]
        if any(c != 1 for c in counts):
            return _per_element(window_fn, batch)
    micros = batch.micros
    kind = type(window_fn)
    in_range = not len(micros) or (int(micros.min()) > -_SAFE and int(micros.max()) < _SAFE)
    windows: Any
    if kind is beam_window.GlobalWindows:
        windows = GLOBAL
    elif kind is beam_window.FixedWindows and in_range and window_fn.size.micros < _SAFE:
        size, offset = window_fn.size.micros, window_fn.offset.micros
        start = micros - (micros - offset) % size
        windows = Intervals(start, start + size)
    elif kind is beam_window.Sessions and in_range and window_fn.gap_size.micros < _SAFE:
        windows = Intervals(micros.copy(), micros + window_fn.gap_size.micros)
    elif kind is beam_window.SlidingWindows and in_range and window_fn.size.micros < _SAFE:
        windows = _sliding(window_fn, micros)
    else:
        return _per_element(window_fn, batch)
    return Batch(batch.values, micros, windows, PANE_INFO_UNKNOWN)


def _sliding(window_fn: Any, micros: np.ndarray) -> list[Any]:
    size, period = window_fn.size.micros, window_fn.period.micros
    starts = (micros - (micros - window_fn.offset.micros) % period).tolist()
    cache: dict[tuple[int, int], Any] = {}
    return [
        [interval_window(s, s + size, cache) for s in range(start, m - size, -period)]
        for start, m in zip(starts, micros.tolist(), strict=True)
    ]


def _per_element(window_fn: Any, batch: Batch) -> Batch:
    """Beam's own ``assign`` for every (element, window)."""
    values, micros, windows = [], [], []
    for value, m, ws in zip(batch.values, batch.micros.tolist(), batch.window_lists(), strict=True):
        timestamp = Timestamp(micros=m)
        for w in ws:
            context = beam_window.WindowFn.AssignContext(timestamp, element=value, window=w)
            values.append(value)
            micros.append(m)
            windows.append(window_fn.assign(context))
    return Batch(values, np.array(micros, dtype=np.int64), windows, PANE_INFO_UNKNOWN)
