"""Plain Python values as JSON and back, with their types kept: nothing is unpickled.

:func:`encode` maps ``None``, ``bool``, ``int``, ``float`` (NaN and ±inf included),
``str`` and ``list`` to themselves in JSON, and tags the rest: ``{"t": [...]}`` a tuple,
``{"b": "<base64>"}`` bytes, ``{"d": [[k, v], ...]}`` a dict, ``{"f": "nan"}`` a float
JSON cannot spell. Any other type is a ``TypeError`` naming it. :func:`decode` is its
inverse and raises ``ValueError`` for a shape :func:`encode` never writes.
"""

from __future__ import annotations

import base64
import math
from typing import Any

__all__ = ["decode", "encode"]


def encode(value: Any) -> Any:
    """``value`` as a JSON-ready structure (see the module docstring); ``TypeError`` for
    a type outside the plain ones."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"f": repr(value)}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"t": [encode(v) for v in value]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {"d": [[encode(k), encode(v)] for k, v in value.items()]}
    raise TypeError(
        f"values of type {type(value).__qualname__} cannot be stored as plain JSON "
        "(None, bool, int, float, str, bytes, tuple, list and dict can)"
    )


def decode(data: Any) -> Any:
    """The value :func:`encode` made ``data`` from; ``ValueError`` for anything else."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if isinstance(data, dict) and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "t" and isinstance(body, list):
            return tuple(decode(v) for v in body)
        if tag == "b" and isinstance(body, str):
            return base64.b64decode(body.encode("ascii"), validate=True)
        if tag == "d" and isinstance(body, list):
            return {_hashable(decode(_pair(p)[0])): decode(_pair(p)[1]) for p in body}
        if tag == "f" and body in ("nan", "inf", "-inf"):
            return float(body)
    raise ValueError(f"not a plain JSON value: {str(data)[:80]}")


def _pair(item: Any) -> list[Any]:
    if not isinstance(item, list) or len(item) != 2:
        raise ValueError(f"not a [key, value] pair: {str(item)[:80]}")
    return item


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        raise ValueError(f"a dict key must be hashable, got {str(key)[:80]}") from None
    return key
