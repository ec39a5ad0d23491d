"""Parsing raw columns (Arrow or numpy) into typed values and per-rule bad-row masks.

:func:`parse_column` turns one column into :class:`ParsedColumn`: the values (int64 µs
timestamps and partitions, int64 or str keys, float64 values; 0 where a row is bad) and,
per rule kind of :data:`theory.data.schema.RULES`, a mask of the rows breaking it. Typed
columns are parsed vectorised; only strings that are not plain integers (and Python
objects) take the per-value path of :mod:`theory.data.text`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from theory.columns import INT64_MAX
from theory.data.errors import unsupported_type_error
from theory.data.schema import INT_KINDS, INT_TARGETS, KEY, VALUE_KINDS, IntTarget
from theory.data.text import float_of, int_of
from theory.time import DAY

__all__ = ["Column", "ParsedColumn", "normalise", "parse_column"]

#: A raw column after :func:`normalise`.
Column: TypeAlias = pa.Array | np.ndarray
#: Values and bad-row masks by rule kind (masks of one column are disjoint).
Masks: TypeAlias = dict[str, np.ndarray]

#: µs per unit of an Arrow/numpy time unit, and the divisor of sub-µs units (floored).
_UNIT_FACTOR: Final[dict[str, int]] = {
    "W": 7 * DAY, "D": DAY, "h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000,
    "ms": 1_000, "us": 1,
}  # fmt: skip
_UNIT_DIVISOR: Final[dict[str, int]] = {"ns": 1_000, "ps": 1_000_000, "fs": 10**9, "as": 10**12}
#: Strings Arrow casts to int64 safely: at most 18 digits.
_SHORT_INT_RE: Final[str] = r"^[+-]?\d{1,18}$"


@dataclass
class ParsedColumn:
    """A parsed column: ``values``, ``bad[kind]`` masks, and ``raw(i)`` (row ``i`` as read,
    for error messages and report examples)."""

    values: np.ndarray
    bad: Masks
    raw: Callable[[int], object]


def normalise(col: Any) -> Column:
    """One Arrow array (chunks combined, dictionaries decoded) or a 1-d numpy array."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if isinstance(col, pa.Array):
        return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col
    arr = np.asarray(col)
    if arr.ndim != 1:
        raise ValueError(f"columns must be 1-d, got shape {arr.shape}")
    return arr


def parse_column(name: str, col: Column) -> ParsedColumn:
    """Parse trace column ``name``; TraceError (``row=None``) for an unsupported type."""
    if name == "key":
        values, bad = _keys(name, col)
    elif name == "value":
        values, bad = _values(name, col)
    else:
        values, bad = _ints(name, col, INT_TARGETS[name])
    kinds = VALUE_KINDS if name == "value" else INT_KINDS
    n = len(col)
    return ParsedColumn(values, {k: bad.get(k, _zeros(n)) for k in kinds}, _raw_getter(col))


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool)


def _raw_getter(col: Column) -> Callable[[int], object]:
    if isinstance(col, pa.Array):
        return lambda i: col[i].as_py()

    def get(i: int) -> object:
        x = col[i]
        return x.item() if isinstance(x, np.generic) else x

    return get


def _unsupported(name: str, col: Column) -> Exception:
    return unsupported_type_error(
        name, str(col.type if isinstance(col, pa.Array) else col.dtype), None
    )


# --------------------------------------------------------------------------- integers


def _ints(name: str, col: Column, t: IntTarget) -> tuple[np.ndarray, Masks]:
    """Integer columns (timestamps, partition, int keys): int64 and their masks."""
    if isinstance(col, pa.Array):
        parse = _arrow_int_parser(col.type, t)
    else:
        parse = _numpy_int_parser(col.dtype, t)
    if parse is None:
        raise _unsupported(name, col)
    return parse(col, t)


IntParser = Callable[[Any, IntTarget], tuple[np.ndarray, Masks]]


def _arrow_int_parser(ty: pa.DataType, t: IntTarget) -> IntParser | None:
    if pa.types.is_null(ty):
        return _all_null
    if pa.types.is_integer(ty):
        return _arrow_integers
    if pa.types.is_floating(ty):
        return _arrow_floats
    if t.temporal and (pa.types.is_timestamp(ty) or pa.types.is_date(ty)):
        return _arrow_times
    if pa.types.is_string(ty) or pa.types.is_large_string(ty):
        return _arrow_strings
    return None


def _numpy_int_parser(dtype: np.dtype, t: IntTarget) -> IntParser | None:
    kind = dtype.kind
    if kind in "iu":
        return lambda col, t: _in_range(col, np.ones(len(col), dtype=bool), t)
    if kind == "f":
        return _floats_to_ints
    if kind == "M" and t.temporal:
        return _numpy_times
    if kind in "USO":
        return lambda col, t: _one_by_one(list(col), t)
    return None


def _all_null(col: pa.Array, t: IntTarget) -> tuple[np.ndarray, Masks]:
    n = len(col)
    return np.zeros(n, dtype=np.int64), {"null": np.ones(n, dtype=bool)}


def _arrow_nulls(col: pa.Array) -> np.ndarray:
    return np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _arrow_integers(col: pa.Array, t: IntTarget) -> tuple[np.ndarray, Masks]:
    null = _arrow_nulls(col)
    values, bad = _in_range(col.fill_null(0).to_numpy(zero_copy_only=False), ~null, t)
    return values, {**bad, "null": null}


def _arrow_floats(col: pa.Array, t: IntTarget) -> tuple[np.ndarray, Masks]:
    raw = col.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return _floats_to_ints(raw, t)


def _arrow_times(col: pa.Array, t: IntTarget) -> tuple[np.ndarray, Masks]:
    """Arrow timestamps (any unit) and dates, in µs."""
    ty = col.type
    if pa.types.is_timestamp(ty):
        factor, divisor = _UNIT_FACTOR.get(ty.unit, 1), _UNIT_DIVISOR.get(ty.unit, 1)
        ints = col.cast(pa.int64())
    elif pa.types.is_date32(ty):
        factor, divisor, ints = DAY, 1, col.cast(pa.int32()).cast(pa.int64())
    else:  # date64: ms
        factor, divisor, ints = 1_000, 1, col.cast(pa.int64())
    null = _arrow_nulls(col)
    return _scaled_in_range(
        ints.fill_null(0).to_numpy(zero_copy_only=False), null, factor, divisor, t
    )


def _numpy_times(col: np.ndarray, t: IntTarget) -> tuple[np.ndarray, Masks]:
    """numpy datetime64 of any unit, in µs (years and months via days)."""
    unit, count = np.datetime_data(col.dtype)
    if unit in ("Y", "M"):
        col, unit, count = col.astype("datetime64[D]"), "D", 1
    null = np.isnat(col)
    ints = col.view(np.int64)
    factor = _UNIT_FACTOR.get(unit, 1) * int(count)
    divisor = _UNIT_DIVISOR.get(unit, 1)
    if divisor > 1 and count != 1:
        ints = ints * int(count)  # sub-µs units with a count: rare; may overflow
    return _scaled_in_range(np.where(null, 0, ints), null, factor, divisor, t)


def _scaled_in_range(
    ints: np.ndarray, null: np.ndarray, factor: int, divisor: int, t: IntTarget
) -> tuple[np.ndarray, Masks]:
    """``ints * factor // divisor`` in µs, with overflow and the range as ``out_of_range``."""
    scaled, over = _scaled(ints, factor, divisor)
    values, bad = _in_range(scaled, ~null & ~over, t)
    return values, {"null": null, "out_of_range": (over & ~null) | bad["out_of_range"]}


def _scaled(v: np.ndarray, factor: int, divisor: int) -> tuple[np.ndarray, np.ndarray]:
    """``v * factor // divisor`` with an overflow mask."""
    v = v.astype(np.int64, copy=False)
    if divisor > 1:
        return np.floor_divide(v, divisor), _zeros(v.shape[0])
    if factor == 1:
        return v, _zeros(v.shape[0])
    lim = INT64_MAX // factor
    over = (v > lim) | (v < -lim)
    return np.where(over, 0, v) * factor, over


def _arrow_strings(col: pa.Array, t: IntTarget) -> tuple[np.ndarray, Masks]:
    """Plain integers vectorised in Arrow; any other string value by value."""
    null = _arrow_nulls(col)
    trimmed = pc.utf8_trim_whitespace(col)
    simple = _mask(pc.match_substring_regex(trimmed, _SHORT_INT_RE).fill_null(False))
    raw = np.zeros(len(col), dtype=np.int64)
    raw[simple] = trimmed.filter(pa.array(simple)).cast(pa.int64()).to_numpy(zero_copy_only=False)
    values, bad = _in_range(raw, simple, t)
    bad = {**bad, "null": null}
    rest = np.flatnonzero(~simple & ~null)
    if rest.size:
        rest_values, rest_bad = _one_by_one(col.take(pa.array(rest)).to_pylist(), t)
        values[rest] = rest_values
        for kind, m in rest_bad.items():
            bad[kind] = bad.get(kind, _zeros(len(col))) | _scatter(m, rest, len(col))
    return values, bad


def _mask(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _scatter(m: np.ndarray, at: np.ndarray, n: int) -> np.ndarray:
    out = _zeros(n)
    out[at] = m
    return out


def _in_range(v: np.ndarray, ok: np.ndarray, t: IntTarget) -> tuple[np.ndarray, Masks]:
    """From integer-typed ``v``: int64 values, and the rows of ``ok`` out of range."""
    if v.dtype == np.uint64:
        over = v > np.uint64(INT64_MAX)
        v = np.where(over, np.uint64(0), v).astype(np.int64)
    else:
        over = _zeros(v.shape[0])
        v = v.astype(np.int64, copy=False)
    out = ok & (over | (v < t.lo) | (v > t.hi))
    return np.where(out | ~ok, 0, v).astype(np.int64, copy=False), {"out_of_range": out}


def _floats_to_ints(v: np.ndarray, t: IntTarget) -> tuple[np.ndarray, Masks]:
    """From float ``v``: NaN is null, non-integral values are not integers."""
    v = v.astype(np.float64, copy=False)
    null = np.isnan(v)
    with np.errstate(invalid="ignore"):
        out = ~null & (
            ~np.isfinite(v)
            | (v < float(t.lo))
            | (v > float(t.hi))
            | (v >= 2.0**63)
            | (v < -(2.0**63))
        )
        nonint = ~null & ~out & (v != np.floor(v))
    ok = ~(null | out | nonint)
    ints = np.where(ok, v, 0.0).astype(np.int64)
    out2 = ok & ((ints < t.lo) | (ints > t.hi))
    ints[out2] = 0
    return ints, {"null": null, "not_integer": nonint, "out_of_range": out | out2}


def _one_by_one(items: Sequence[object], t: IntTarget) -> tuple[np.ndarray, Masks]:
    """The per-value path (:func:`theory.data.text.int_of`)."""
    return _per_value(items, lambda x: int_of(x, t), INT_KINDS, np.int64)


def _per_value(
    items: Sequence[object] | np.ndarray,
    parse: Callable[[object], tuple[str | None, Any]],
    kinds: Sequence[str],
    dtype: Any,
) -> tuple[np.ndarray, Masks]:
    """``parse`` each item: its value, or a mark in the mask of the bad kind it returns."""
    n = len(items)
    values = np.zeros(n, dtype=dtype)
    bad = {k: _zeros(n) for k in kinds}
    for i, x in enumerate(items):
        kind, v = parse(x)
        if kind is None:
            values[i] = v
        else:
            bad[kind][i] = True
    return values, bad


# --------------------------------------------------------------------------- keys


def _keys(name: str, col: Column) -> tuple[np.ndarray, Masks]:
    """Keys: int64 (from ints or integral floats) or str; mixed int/str become str."""
    if isinstance(col, pa.Array):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            return col.to_numpy(zero_copy_only=False).astype(object), {"null": _arrow_nulls(col)}
        return _ints(name, col, KEY)
    kind = col.dtype.kind
    if kind in "iuf":
        return _ints(name, col, KEY)
    if kind == "U":
        return col.astype(object), {}
    if kind not in "SO":
        raise _unsupported(name, col)
    return _object_keys(col)


def _object_keys(col: np.ndarray) -> tuple[np.ndarray, Masks]:
    """Python objects: str (bytes decoded) stay str; any str makes every key a str."""
    n = len(col)
    out, bad = _per_value(col, _one_key, INT_KINDS, object)
    good = ~np.logical_or.reduce(list(bad.values()))
    if any(isinstance(x, str) for x in out[good]):
        out[good] = [x if isinstance(x, str) else str(x) for x in out[good]]
        out[~good] = ""
        return out, bad
    ints = np.zeros(n, dtype=np.int64)
    ints[good] = out[good].astype(np.int64) if good.any() else 0
    return ints, bad


def _one_key(x: object) -> tuple[str | None, object]:
    if isinstance(x, bytes):
        try:
            x = x.decode("utf-8")
        except UnicodeDecodeError:
            return "unparseable", None
    if isinstance(x, str):
        return None, x
    return int_of(x, KEY)


# --------------------------------------------------------------------------- values


def _values(name: str, col: Column) -> tuple[np.ndarray, Masks]:
    """Values: float64; null, unparseable and non-finite rows are bad."""
    if isinstance(col, pa.Array):
        values, bad = _arrow_values(name, col)
    elif col.dtype.kind in "iuf":
        values, bad = col.astype(np.float64), {}
    elif col.dtype.kind in "USO":
        values, bad = _values_one_by_one(list(col))
    else:
        raise _unsupported(name, col)
    n = len(values)
    values[bad.get("null", _zeros(n)) | bad.get("unparseable", _zeros(n))] = 0.0
    not_finite = ~np.isfinite(values)
    values[not_finite] = 0.0
    return values, {**bad, "not_finite": not_finite}


def _arrow_values(name: str, col: pa.Array) -> tuple[np.ndarray, Masks]:
    ty = col.type
    n = len(col)
    if pa.types.is_null(ty):
        return np.zeros(n), {"null": np.ones(n, dtype=bool)}
    if pa.types.is_integer(ty) or pa.types.is_floating(ty):
        values = col.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False).copy()
        return values, {"null": _arrow_nulls(col)}
    if not (pa.types.is_string(ty) or pa.types.is_large_string(ty)):
        raise _unsupported(name, col)
    try:
        as_float = pc.utf8_trim_whitespace(col).cast(pa.float64()).fill_null(0.0)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _values_one_by_one(col.to_pylist())
    return as_float.to_numpy(zero_copy_only=False).copy(), {"null": _arrow_nulls(col)}


def _values_one_by_one(items: Sequence[object]) -> tuple[np.ndarray, Masks]:
    """The per-value path (:func:`theory.data.text.float_of`)."""
    return _per_value(items, float_of, ("null", "unparseable"), np.float64)
