"""The user's error inside a Spark failure: the Python exception a task raised.

Spark reports a failed Python task as a Py4J error (classic API) whose text holds the
worker's traceback, or as ``PythonException``; Beam's bundle processor has already
tagged the DoFn's exception with ``[while running '<label>']``. The last lines of the
task's traceback carry that message, which is what a Beam author needs to see.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["python_error_message"]

_MAX_CHARS: Final[int] = 4000
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*$")


def python_error_message(error: BaseException) -> str:
    """The Python exception text of a failed Spark task in ``error`` (else ``str``)."""
    text = str(error)
    tracebacks = text.split("Traceback (most recent call last):")
    if len(tracebacks) == 1:
        return _shorten(text.strip())
    lines = tracebacks[-1].splitlines()
    start = next((i for i, line in enumerate(lines) if _EXCEPTION_LINE.match(line)), None)
    if start is None:
        return _shorten(text.strip())
    body = [line for line in lines[start:] if not line.strip().startswith("at ")]
    return _shorten("\n".join(body).strip())


def _shorten(text: str) -> str:
    """``text``, or its head and tail (where an exception's summary usually is)."""
    if len(text) <= _MAX_CHARS:
        return text
    half = _MAX_CHARS // 2
    return f"{text[:half]} ... {text[-half:]}"
