"""The one home of argument checks: scalars and columns.

Every public function of ``theory`` checks its arguments with these, so the same fault
gets the same error everywhere:

- a value of the wrong *type* (a float where µs are asked, a bool, a float column)
  raises ``TypeError``;
- a value of the right type but a bad *value* (out of range, negative, too large for
  int64, a 2-d array, a length mismatch) raises ``ValueError``.

Every message names the parameter (``name``), and for a column the index of the first
offending element, so the caller can find it. Times and durations are µs.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Final

import numpy as np
from numpy.typing import ArrayLike

from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, parse_duration

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "DurationLike",
    "as_duration",
    "as_int",
    "as_offset",
    "bool_column",
    "check_bool",
    "check_count",
    "check_duration",
    "check_fraction",
    "check_positive",
    "check_seed",
    "check_timestamp",
    "int_column",
    "key_column",
    "same_length",
    "time_column",
]

INT64_MIN: Final[int] = -(2**63)
INT64_MAX: Final[int] = 2**63 - 1

#: What :func:`as_duration` accepts: µs as an int, a ``timedelta``, or ``"60s"``-style text.
DurationLike = int | np.integer | _dt.timedelta | str


# --------------------------------------------------------------------------- scalars


def as_int(value: object, name: str) -> int:
    """``value`` as a Python int. ``TypeError`` for anything but an int or a numpy integer
    (``bool`` is refused: ``True`` µs is always a mistake)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def check_timestamp(value: object, name: str = "timestamp") -> int:
    """A timestamp in µs within ``[MIN_TIMESTAMP, MAX_TIMESTAMP]``, as an int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer number of microseconds, got {value!r}")
    v = int(value)
    if not MIN_TIMESTAMP <= v <= MAX_TIMESTAMP:
        raise ValueError(
            f"{name}={v} µs is outside [MIN_TIMESTAMP={MIN_TIMESTAMP}, "
            f"MAX_TIMESTAMP={MAX_TIMESTAMP}]"
        )
    return v


def check_duration(
    value: object, name: str, *, allow_zero: bool = True, maximum: int = INT64_MAX
) -> int:
    """A duration in µs: ``>= 0`` (``> 0`` with ``allow_zero=False``) and ``<= maximum``
    (int64 by default; ``MAX_TIMESTAMP`` where the caller subtracts it from timestamps in
    int64 arrays and must not overflow)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer number of microseconds, got {value!r}")
    v = int(value)
    if v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} µs, got {v}")
    if v > maximum:
        if maximum == INT64_MAX:
            raise ValueError(f"{name} must fit in int64 microseconds, got {v}")
        raise ValueError(f"{name} must be <= {maximum} µs, got {v}")
    return v


def _duration_micros(value: object, name: str) -> object:
    """``value`` in µs if it is a ``datetime.timedelta`` (exact) or a duration string
    (:func:`theory.time.parse_duration`, ``ValueError`` naming ``name``); else unchanged."""
    if isinstance(value, _dt.timedelta):
        return value // _dt.timedelta(microseconds=1)
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    return value


def as_duration(
    value: object, name: str, *, allow_zero: bool = True, maximum: int = INT64_MAX
) -> int:
    """:func:`check_duration` of a duration given as an int of µs (a bare int is always
    µs), a ``datetime.timedelta`` or a duration string such as ``"60s"`` or ``"1.5m"``."""
    return check_duration(
        _duration_micros(value, name), name, allow_zero=allow_zero, maximum=maximum
    )


def as_offset(value: object, name: str) -> int:
    """A signed offset in µs: an int (µs), a ``datetime.timedelta``, or a duration string
    with an optional leading ``-`` (``"-15m"``)."""
    if isinstance(value, str) and value.strip().startswith("-"):
        return -as_int(_duration_micros(value.strip()[1:], name), name)
    return as_int(_duration_micros(value, name), name)


def check_count(value: object, name: str, *, minimum: int = 0) -> int:
    """An integer count ``>= minimum``."""
    v = as_int(value, name)
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def check_positive(value: object, name: str, *, allow_zero: bool = False) -> float:
    """A finite real number ``> 0`` (``>= 0`` with ``allow_zero=True``)."""
    v = _as_float(value, name)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return v


def check_fraction(value: object, name: str) -> float:
    """A real number in ``[0, 1]``."""
    v = _as_float(value, name)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be a fraction in [0, 1], got {value!r}")
    return v


def check_seed(value: object, name: str = "seed") -> int:
    """A non-negative integer seed."""
    return check_count(value, name, minimum=0)


def check_bool(value: object, name: str) -> bool:
    """A flag: a ``bool`` or ``numpy.bool_`` (``TypeError`` for anything else, ``1``
    included: a flag given as a number is usually a parameter in the wrong place)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _as_float(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- columns


def int_column(x: ArrayLike, name: str) -> np.ndarray:
    """A 1-d int64 array (no copy when ``x`` already is one).

    ``TypeError`` for a non-integer dtype; ``ValueError`` for a shape that is not 1-d, or
    naming the first element that does not fit in int64 (a uint64 above 2**63 - 1)."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers (µs), got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and int(arr.max()) > INT64_MAX:
        i = int(np.argmax(arr > INT64_MAX))
        raise ValueError(f"{name}[{i}]={int(arr[i])} does not fit in int64")
    return arr.astype(np.int64, copy=False)


def time_column(x: ArrayLike, name: str) -> np.ndarray:
    """:func:`int_column`, with every value a timestamp in ``[MIN_TIMESTAMP, MAX_TIMESTAMP]``
    µs; ``ValueError`` names the first value outside."""
    arr = int_column(x, name)
    if arr.size:
        bad = (arr < MIN_TIMESTAMP) | (arr > MAX_TIMESTAMP)
        if bool(bad.any()):
            i = int(np.argmax(bad))
            side = "below MIN_TIMESTAMP" if int(arr[i]) < MIN_TIMESTAMP else "above MAX_TIMESTAMP"
            raise ValueError(f"{name}[{i}]={int(arr[i])} µs is {side}")
    return arr


def key_column(x: ArrayLike, name: str = "key") -> np.ndarray:
    """A 1-d key array as given (ints, strings or hashable objects); ``ValueError`` for
    another shape, or naming the first row whose key is missing (None)."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array, got shape {arr.shape}")
    if arr.dtype.kind == "O" and arr.size:
        missing = np.equal(arr, np.array(None, dtype=object))
        if bool(missing.any()):
            i = int(np.argmax(missing))
            raise ValueError(f"{name}[{i}] is None: row {i} has no key")
    return arr


def bool_column(x: ArrayLike, name: str, n: int) -> np.ndarray:
    """A 1-d bool array of ``n`` entries: ``TypeError`` for another dtype, ``ValueError``
    for another shape."""
    arr = np.asarray(x)
    if arr.shape != (n,):
        raise ValueError(f"{name} must be a 1-d array of {n} entries, got shape {arr.shape}")
    if arr.dtype != np.bool_:
        raise TypeError(f"{name} must hold bools, got dtype {arr.dtype}")
    return arr


def same_length(reference: str, n: int, **columns: np.ndarray | None) -> None:
    """``ValueError`` unless every column given (``None`` skipped) has ``n`` elements, like
    the column named ``reference``."""
    for name, col in columns.items():
        if col is not None and col.size != n:
            raise ValueError(f"{name} has {col.size} elements but {reference} has {n}")
