"""Encoding a lean batch with a stage's windowed coder, without a Beam object per
element.

Beam's ``WindowedValueCoderImpl`` writes, per element: the timestamp in milliseconds
(``sign * (|max(t, MIN_TIMESTAMP)| // 1000)``, shifted by 2^63 to sort as unsigned,
big-endian), the windows (an int32 count, then each window: an ``IntervalWindow`` as
its end in milliseconds, floored and shifted the same way, and the span in
milliseconds as a varint; the global window as nothing), the pane (one byte, plus
varints for later panes) and the value (the value coder, nested).
:func:`encode_batch` writes exactly those bytes from the batch's columns, the
millisecond arithmetic done with numpy, for batches in the global window or in one
interval window each; other batches (or other window coders) go through Beam's
``WindowedValue`` objects and Beam's coder. ``tests/spark_backend/runner`` checks the
bytes against Beam's coder.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from apache_beam.coders import coders
from apache_beam.coders.coder_impl import PaneInfoCoderImpl, create_OutputStream
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import PaneInfo

from spark_backend.runner.stages.lean.batch import GLOBAL, Batch, Intervals

__all__ = ["BatchEncoder", "element_millis", "ordered_millis"]

_SHIFT: Final = np.uint64(1 << 63)
_MIN_MICROS: Final[int] = MIN_TIMESTAMP.micros
_PANES: Final = PaneInfoCoderImpl()


def ordered_millis(millis: np.ndarray) -> list[int]:
    """Signed int64 milliseconds as Beam writes them: + 2^63, as unsigned ints."""
    return (millis.astype(np.uint64) + _SHIFT).tolist()


def element_millis(micros: np.ndarray) -> np.ndarray:
    """Beam's element timestamp in ms: rounded toward zero, MIN_TIMESTAMP-clamped."""
    clamped = np.maximum(micros, _MIN_MICROS)
    return np.sign(clamped) * (np.abs(clamped) // 1000)


class BatchEncoder:
    """Encodes batches with the windowed coder ``coder`` (a ``WindowedValueCoder``)."""

    def __init__(self, coder: Any) -> None:
        self._impl = coder.get_impl()
        self._columnar = isinstance(coder, coders.WindowedValueCoder) and type(
            coder.window_coder
        ) in (coders.GlobalWindowCoder, coders.IntervalWindowCoder)
        if self._columnar:
            self._value = coder.wrapped_value_coder.get_impl()
            self._interval = type(coder.window_coder) is coders.IntervalWindowCoder

    def encode(self, batch: Batch) -> bytes:
        """``batch``'s elements, encoded and concatenated (nested)."""
        windows = batch.windows
        fits = (windows is GLOBAL and not self._interval) or (
            isinstance(windows, Intervals) and self._interval
        )
        if not (self._columnar and fits):
            return bytes(self._impl.encode_all(list(batch.windowed_values())))
        out = create_OutputStream()
        stamps = ordered_millis(element_millis(batch.micros))
        panes = _pane_bytes(batch)
        value = self._value.encode_to_stream
        if isinstance(windows, Intervals):
            end = windows.end // 1000
            ends = ordered_millis(end)
            spans = (end - windows.start // 1000).tolist()
            for i, v in enumerate(batch.values):
                out.write_bigendian_uint64(stamps[i])
                out.write_bigendian_int32(1)
                out.write_bigendian_uint64(ends[i])
                out.write_var_int64(spans[i])
                out.write(panes[i])
                value(v, out, True)
        else:
            for i, v in enumerate(batch.values):
                out.write_bigendian_uint64(stamps[i])
                out.write_bigendian_int32(1)
                out.write(panes[i])
                value(v, out, True)
        return bytes(out.get())


def _pane_bytes(batch: Batch) -> list[bytes]:
    if isinstance(batch.panes, PaneInfo):
        return [_PANES.encode_nested(batch.panes)] * len(batch)
    cache: dict[Any, bytes] = {}
    result = []
    for pane in batch.panes:
        encoded = cache.get(pane)
        if encoded is None:
            encoded = cache[pane] = _PANES.encode_nested(pane)
        result.append(encoded)
    return result
