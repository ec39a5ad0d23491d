"""The user's error inside a Spark failure: the Python exception a task raised.

Spark reports a failed Python task as a Py4J error (classic API) whose text holds the
worker's traceback, or as ``PythonException``; Beam's bundle processor has already
tagged the DoFn's exception with ``[while running '<label>']``. The task's last Python
traceback carries the user's own frames and that message, which is what a Beam author
needs to see, as FnApiRunner shows the SDK worker's traceback; the JVM's frames are left
out.
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
    first = text.find("Traceback (most recent call last):")
    if first < 0:
        return _shorten(text.strip())
    # the Python tracebacks (a chained exception's cause first, where the user's frames
    # are), without the JVM's frames and what Spark adds after them
    lines = text[first:].split("\nDriver stacktrace:")[0].splitlines()
    if not any(_EXCEPTION_LINE.match(line) for line in lines):
        return _shorten(text.strip())
    body = [line for line in lines if line.strip() and not line.strip().startswith("at ")]
    return _shorten("\n".join(body).strip())


def _shorten(text: str) -> str:
    """``text``, or its head and tail (where an exception's summary usually is)."""
    if len(text) <= _MAX_CHARS:
        return text
    half = _MAX_CHARS // 2
    return f"{text[:half]} ... {text[-half:]}"
