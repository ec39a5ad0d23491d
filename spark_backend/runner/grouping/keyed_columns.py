"""A GroupByKey's shuffle as columns: each element encoded once, never decoded again.

The byte-pair shuffle (:mod:`spark_backend.runner.grouping.group_by_key`) writes each element with
Beam's windowed coder, decodes it to find its key, and decodes it again after the
shuffle. :class:`KeyedColumns` carries the same elements as columns instead, one row
per (element, window): the key as the key coder writes it (nested; distinct keys once,
rows by code), the value as the value coder writes it (nested; an Arrow binary column),
and the element timestamp and window bounds in int64 µs *as Beam's coders leave them*
(whole milliseconds, :func:`coded_micros`), so that grouping them is grouping what
Beam's runners group. Panes are dropped: a GroupByKey ignores its input's panes.

A lean stage writes these columns straight from its batches (:class:`ColumnsWriter`);
an encoded chunk from another stage is decoded once into them (:func:`columns_of`).
:func:`split_by_partition` deals rows to shuffle partitions by key (``crc32`` of the
key bytes), :func:`concat` joins a partition's pieces.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.coders import coders
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

from spark_backend.runner.stages.lean.batch import GLOBAL, Batch, Intervals, decode
from spark_backend.runner.stages.lean.encode import element_millis

__all__ = [
    "POOL",
    "ColumnsWriter",
    "KeyedColumns",
    "coded_micros",
    "columnar_coders",
    "columns_of",
    "concat",
    "split_by_partition",
]

_MIN_MILLIS: Final[int] = -(abs(MIN_TIMESTAMP.micros) // 1000)
_MAX_MILLIS: Final[int] = MAX_TIMESTAMP.micros // 1000
_EXACT_KEYS: Final = (str, bytes, int)  # types whose equal values encode alike
#: Arrow allocates with malloc here: its default (mimalloc) reserves virtual memory by
#: the GiB, which a Python worker under ``spark.executor.pyspark.memory`` (an address
#: space limit) cannot afford.
POOL: Final = pa.system_memory_pool()


@dataclass(frozen=True)
class KeyedColumns:
    """Rows of windowed KVs (see the module docstring); all columns of one length."""

    keys: list[bytes]  # distinct encoded keys (nested)
    codes: np.ndarray  # int64: each row's key, an index into ``keys``
    values: pa.Array  # large_binary: each row's value, encoded nested
    micros: np.ndarray  # int64 µs: each row's element timestamp, as decoded by Beam
    starts: np.ndarray  # int64 µs: each row's window start (whole ms)
    ends: np.ndarray  # int64 µs: each row's window end (whole ms)

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def nbytes(self) -> int:
        """About the bytes this holds (for the shuffle's partition count)."""
        return int(self.values.nbytes + 24 * len(self.codes) + sum(map(len, self.keys)))

    def take(self, rows: np.ndarray) -> KeyedColumns:
        """The rows ``rows`` (int64 indices), keeping only the keys they use."""
        used, codes = np.unique(self.codes[rows], return_inverse=True)
        return KeyedColumns(
            [self.keys[k] for k in used.tolist()],
            codes.reshape(-1).astype(np.int64),
            pc.take(self.values, pa.array(rows), memory_pool=POOL),
            self.micros[rows],
            self.starts[rows],
            self.ends[rows],
        )


def coded_micros(micros: np.ndarray) -> np.ndarray:
    """Element timestamps (int64 µs) as Beam's windowed coder gives them back: whole
    milliseconds toward zero after clamping at MIN_TIMESTAMP, and MIN/MAX_TIMESTAMP
    restored at the edges (``WindowedValueCoderImpl``)."""
    millis = element_millis(micros)
    out = millis * 1000
    out[millis <= _MIN_MILLIS] = MIN_TIMESTAMP.micros
    out[millis >= _MAX_MILLIS] = MAX_TIMESTAMP.micros
    return out


def columnar_coders(input_coder: Any, output_coder: Any) -> str:
    """Empty when a GroupByKey from ``input_coder`` (windowed KV<K, V>) to
    ``output_coder`` (windowed KV<K, Iterable<V>>) can shuffle as columns: interval
    windows, and K and V written the same on both sides; else why not."""
    for c in (input_coder, output_coder):
        if not isinstance(c, coders.WindowedValueCoder):
            return "not a windowed coder"
        if type(c.window_coder) is not coders.IntervalWindowCoder:
            return "windows are not interval windows"
        kv = c.wrapped_value_coder
        if not (isinstance(kv, coders.TupleCoder) and len(kv._coders) == 2):
            return "not a KV coder"
    key, value = input_coder.wrapped_value_coder._coders
    out_key, out_values = output_coder.wrapped_value_coder._coders
    if out_key != key or not (
        type(out_values) is coders.IterableCoder and out_values._elem_coder == value
    ):
        return "the output coder is not KV<K, Iterable<V>> of the input's K and V"
    return ""


class ColumnsWriter:
    """Turns batches of windowed KVs into :class:`KeyedColumns` for the windowed coder
    ``coder`` (a GroupByKey's input coder, checked by :func:`columnar_coders`)."""

    def __init__(self, coder: Any) -> None:
        key, value = coder.wrapped_value_coder._coders
        self._key = key.get_impl().encode_nested
        self._value = value.get_impl().encode_nested

    def columns(self, batch: Batch) -> KeyedColumns:
        """``batch``'s rows: one per (element, window); interval windows only."""
        windows = batch.windows
        if windows is GLOBAL:
            raise ValueError("a GroupByKey's columns need interval windows, not the global one")
        values = batch.values
        if isinstance(windows, Intervals):
            rows = None
            starts, ends = windows.start, windows.end
        else:  # Beam window objects, one or more per element
            rows = np.array([i for i, ws in enumerate(windows) for _ in ws], dtype=np.int64)
            starts = np.array([w._start_micros for ws in windows for w in ws], dtype=np.int64)
            ends = np.array([w._end_micros for ws in windows for w in ws], dtype=np.int64)
        index: dict[Any, int] = {}
        keys: list[bytes] = []
        codes = np.empty(len(values), dtype=np.int64)
        encoded: list[bytes] = []
        key_bytes, value_bytes = self._key, self._value
        for i, (k, v) in enumerate(values):
            exact = (type(k), k) if type(k) in _EXACT_KEYS else None
            code = index.get(exact) if exact is not None else None
            if code is None:
                kb = key_bytes(k)
                code = index.setdefault(kb, len(keys))
                if code == len(keys):
                    keys.append(kb)
                if exact is not None:
                    index[exact] = code
            codes[i] = code
            encoded.append(value_bytes(v))
        column = pa.array(encoded, type=pa.large_binary(), memory_pool=POOL)
        micros = coded_micros(batch.micros)
        if rows is not None:
            codes, micros = codes[rows], micros[rows]
            column = pc.take(column, pa.array(rows), memory_pool=POOL)
        return KeyedColumns(keys, codes, column, micros, starts // 1000 * 1000, ends // 1000 * 1000)


def columns_of(chunk: Any, writer: ColumnsWriter, impl: Any) -> KeyedColumns:
    """``chunk`` as columns: as it is if it already is, else (Beam's bytes, ``impl``
    the windowed coder) decoded once."""
    if isinstance(chunk, KeyedColumns):
        return chunk
    return writer.columns(decode([chunk], impl))


def split_by_partition(columns: KeyedColumns, partitions: int) -> list[tuple[int, KeyedColumns]]:
    """``columns`` dealt over ``partitions`` by key: ``(partition, rows)`` per partition
    that gets any; a key's partition is ``crc32(key bytes) % partitions``."""
    if not len(columns):
        return []
    of_key = np.array([zlib.crc32(k) % partitions for k in columns.keys], dtype=np.int64)
    of_row = of_key[columns.codes]
    if len(of_key) == 1 or not np.any(of_row != of_row[0]):
        return [(int(of_row[0]), columns)]
    order = np.argsort(of_row, kind="stable")
    bounds = np.flatnonzero(np.diff(of_row[order])) + 1
    return [(int(of_row[part[0]]), columns.take(part)) for part in np.split(order, bounds)]


def concat(pieces: Sequence[KeyedColumns]) -> KeyedColumns:
    """One :class:`KeyedColumns` of all ``pieces``' rows, in order, keys merged."""
    if len(pieces) == 1:
        return pieces[0]
    if not pieces:
        raise ValueError("no pieces to join")
    index: dict[bytes, int] = {}
    codes = []
    for piece in pieces:
        remap = np.array([index.setdefault(k, len(index)) for k in piece.keys], dtype=np.int64)
        codes.append(remap[piece.codes] if len(piece.keys) else piece.codes)
    return KeyedColumns(
        list(index),
        np.concatenate(codes),
        pa.concat_arrays([p.values for p in pieces], memory_pool=POOL),
        np.concatenate([p.micros for p in pieces]),
        np.concatenate([p.starts for p in pieces]),
        np.concatenate([p.ends for p in pieces]),
    )
