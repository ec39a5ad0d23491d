"""The :class:`Trace`: one trace in memory, as numpy columns (timestamps in µs).

Construction coerces dtypes but does not validate values; untrusted input goes through
:func:`theory.data.validate.validate_columns` (or :func:`theory.data.io.read_trace`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from theory.columns import int_column, same_length
from theory.data.schema import COLUMNS, OnBadRows

if TYPE_CHECKING:
    from theory.data.report import BadRowReport

__all__ = ["Trace"]


def _ints(name: str, a: Any) -> np.ndarray:
    return int_column(a, f"Trace.{name}")


def _keys(a: Any) -> np.ndarray:
    """int64 keys, or str keys as an object array."""
    arr = np.asarray(a)
    if arr.dtype.kind in "USO":
        if arr.ndim != 1:
            raise ValueError(f"Trace.key must be a 1-d array, got shape {arr.shape}")
        return arr.astype(object, copy=False)
    if arr.dtype.kind in "iu" or arr.size == 0:
        return _ints("key", arr)
    raise TypeError(f"Trace.key must be int64 or str, got dtype {arr.dtype}")


def _floats(name: str, a: Any) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"Trace.{name} must be a 1-d array, got shape {arr.shape}")
    return arr


@dataclass(frozen=True, eq=False)
class Trace:
    """A columnar trace; every timestamp is int64 µs since the epoch.

    ``key`` is an int64 array or an object array of ``str``; ``value`` is float64;
    ``partition`` and ``publish_time`` are int64 arrays or None. All columns have one
    length. Construction coerces dtypes but does not validate values: use
    :func:`~theory.data.validate.validate_columns` (or :func:`~theory.data.io.read_trace`)
    for untrusted input.
    """

    event_time: np.ndarray
    arrival_time: np.ndarray
    key: np.ndarray
    value: np.ndarray
    partition: np.ndarray | None = None
    publish_time: np.ndarray | None = None

    def __post_init__(self) -> None:
        event_time = _ints("event_time", self.event_time)
        cols: dict[str, np.ndarray | None] = {
            "event_time": event_time,
            "arrival_time": _ints("arrival_time", self.arrival_time),
            "key": _keys(self.key),
            "value": _floats("value", self.value),
            "partition": None if self.partition is None else _ints("partition", self.partition),
            "publish_time": (
                None if self.publish_time is None else _ints("publish_time", self.publish_time)
            ),
        }
        same_length("event_time", event_time.shape[0], **cols)
        for name, arr in cols.items():
            object.__setattr__(self, name, arr)

    # construction ------------------------------------------------------------------

    @classmethod
    def empty(cls, *, string_keys: bool = False) -> Trace:
        """A trace with no rows."""
        e = np.zeros(0, dtype=np.int64)
        key = np.zeros(0, dtype=object) if string_keys else e
        return cls(e, e, key, np.zeros(0, dtype=np.float64))

    @staticmethod
    def concat(traces: Iterable[Trace]) -> Trace:
        """Rows of ``traces`` one after the other.

        Keys must all be int64 or all str, and ``partition``/``publish_time`` present in
        all or none; otherwise ValueError names the column.
        """
        ts = list(traces)
        if not ts:
            return Trace.empty()
        if len(ts) == 1:
            return ts[0]
        kinds = {t.key.dtype.kind for t in ts if len(t)} or {ts[0].key.dtype.kind}
        if len(kinds) > 1:
            raise ValueError("Trace.concat: column 'key' mixes int64 and str keys")
        out: dict[str, np.ndarray | None] = {}
        for f in fields(Trace):
            parts = [getattr(t, f.name) for t in ts]
            present = [p is not None for p in parts]
            if any(present) and not all(present):
                raise ValueError(f"Trace.concat: column {f.name!r} is present in some traces only")
            if not all(present):
                out[f.name] = None
                continue
            if f.name == "key":
                nonempty = [p for p in parts if p.size] or parts[:1]
                out[f.name] = np.concatenate(nonempty)
            else:
                out[f.name] = np.concatenate(parts)
        return Trace(**out)  # type: ignore[arg-type]

    @staticmethod
    def from_arrow(
        table: pa.Table,
        *,
        on_bad_rows: OnBadRows = "fail",
        require_causal: bool = False,
    ) -> tuple[Trace, BadRowReport]:
        """Validate an Arrow table into a trace (see
        :func:`~theory.data.validate.validate_columns`)."""
        # validate builds Traces, so it is imported here rather than at the top (a cycle)
        from theory.data.validate import validate_columns

        cols = {name: table.column(name) for name in table.column_names if name in COLUMNS}
        return validate_columns(cols, on_bad_rows=on_bad_rows, require_causal=require_causal)

    # access ------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.event_time.shape[0])

    @property
    def has_string_keys(self) -> bool:
        """True when keys are str (object array), False for int64 keys."""
        return bool(self.key.dtype.kind == "O")

    def take(self, indices: np.ndarray | Sequence[int]) -> Trace:
        """The rows at integer ``indices``, in that order."""
        idx = np.asarray(indices)
        if idx.dtype.kind == "b":
            raise TypeError("Trace.take needs integer indices; use select() for a boolean mask")
        idx = idx.astype(np.intp, copy=False)
        return Trace(
            self.event_time[idx],
            self.arrival_time[idx],
            self.key[idx],
            self.value[idx],
            None if self.partition is None else self.partition[idx],
            None if self.publish_time is None else self.publish_time[idx],
        )

    def select(self, mask: np.ndarray | Sequence[bool]) -> Trace:
        """The rows where the boolean ``mask`` is True, in order."""
        m = np.asarray(mask)
        if m.dtype != np.bool_:
            raise TypeError(f"Trace.select needs a boolean mask, got dtype {m.dtype}")
        if m.shape != (len(self),):
            raise ValueError(f"Trace.select needs a mask of shape ({len(self)},), got {m.shape}")
        return self.take(np.flatnonzero(m))

    def sorted_by_arrival(self) -> Trace:
        """Rows in arrival order; ties by event time, then by original position (stable)."""
        et, at = self.event_time, self.arrival_time
        if et.size > 1 and bool(np.all(et[1:] >= et[:-1])):
            order = np.argsort(at, kind="stable")
        else:
            order = np.lexsort((et, at))
        return self.take(order)

    def with_columns(self, **columns: Any) -> Trace:
        """A copy with some columns replaced (``partition=None`` drops that column)."""
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise TypeError(f"Trace.with_columns: unknown column(s) {sorted(unknown)}")
        return replace(self, **columns)

    def to_arrow(self) -> pa.Table:
        """An Arrow table: int64 µs timestamps, int64 or string keys, float64 values."""
        arrays: dict[str, pa.Array] = {
            "event_time": pa.array(self.event_time, type=pa.int64()),
            "arrival_time": pa.array(self.arrival_time, type=pa.int64()),
            "key": pa.array(self.key, type=pa.string() if self.has_string_keys else pa.int64()),
            "value": pa.array(self.value, type=pa.float64()),
        }
        if self.partition is not None:
            arrays["partition"] = pa.array(self.partition, type=pa.int64())
        if self.publish_time is not None:
            arrays["publish_time"] = pa.array(self.publish_time, type=pa.int64())
        return pa.table(arrays)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        for f in fields(Trace):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if (a is None) != (b is None):
                return False
            if a is not None and (a.dtype.kind != b.dtype.kind or not np.array_equal(a, b)):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]
