"""The user's error inside a Spark failure: the Python exception a task raised.

Spark reports a failed Python task as a Py4J error (classic API) whose text holds the
worker's traceback, or as ``PythonException``; Beam's bundle processor has already
tagged the DoFn's exception with ``[while running '<label>']``, and the task noted the
element it failed on (:func:`note_element`). The task's last Python traceback carries
the user's own frames and that message, which is what a Beam author needs to see, as
FnApiRunner shows the SDK worker's traceback; the JVM's frames are left out, and one
line first names the transform, the element (its repr cut short) and the exception.
Beam's own log of the error it re-raises (a traceback a Spark task's worker would print
to the terminal) is dropped unless traces are shown (:func:`quiet_reraised_logs`).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final

from spark_backend.session.quiet_logs import traces_shown

__all__ = [
    "ELEMENT_NOTE",
    "REPR_CHARS",
    "cut_repr",
    "note_element",
    "python_error_message",
    "quiet_reraised_logs",
]

_MAX_CHARS: Final[int] = 4000
#: An element's repr is cut to this many characters in the error's first line.
REPR_CHARS: Final[int] = 200
#: The start of the note a task adds to a DoFn's exception: the element's cut repr.
ELEMENT_NOTE: Final[str] = "while processing element: "
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*$")
# (a KeyError's text is its message's repr: the tag then ends inside its quotes)
_TAGGED = re.compile(
    r"^(?P<error>[A-Za-z_][\w.]*(?:: .*?)?) \[while running '(?P<label>.*)'\](?P<quote>[\"']?)$"
)


def cut_repr(value: Any, limit: int = REPR_CHARS) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (``...`` marks a cut)."""
    try:
        text = repr(value)
    except Exception as err:  # (a user type's __repr__ may fail)
        text = f"<{type(value).__name__} whose repr failed: {type(err).__name__}>"
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def note_element(exn: BaseException, value: Any) -> BaseException:
    """``exn`` with a note naming the element ``value`` it was raised on (once)."""
    notes = getattr(exn, "__notes__", ())
    if not any(str(n).startswith(ELEMENT_NOTE) for n in notes):
        exn.add_note(ELEMENT_NOTE + cut_repr(value))
    return exn


def python_error_message(error: BaseException) -> str:
    """The Python exception text of a failed Spark task in ``error`` (else ``str``):
    one line naming the transform, the element and the exception when the text tells
    them, then the Python tracebacks."""
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
    summary = _summary(body)
    traces = _shorten("\n".join(body).strip())
    return f"{summary}\n{traces}" if summary else traces


def _summary(lines: list[str]) -> str:
    """``transform 'L' failed on element E: Error: message``, from the last tagged exception
    line and its element note; empty when no line is tagged."""
    tagged = [m for m in map(_TAGGED.match, lines) if m]
    if not tagged:
        return ""
    last = tagged[-1]
    error, quote = last["error"], last["quote"]
    if quote:
        error = error.replace(f": {quote}", ": ", 1)
    notes = [line[len(ELEMENT_NOTE) :] for line in lines if line.startswith(ELEMENT_NOTE)]
    where = f" on element {notes[-1]}" if notes else ""
    return f"transform {last['label']!r} failed{where}: {error}"


#: The logger of Beam's ``DoFnRunner``, which logs each error it tags and re-raises.
BEAM_RERAISE_LOGGER: Final[str] = "apache_beam.runners.common"


class _NoReraisedError(logging.Filter):
    """Drops Beam's log of an error it tagged and re-raised, unless traces are shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        tagged = getattr(record.msg, "_tagged_with_step", False)
        return not (isinstance(record.msg, BaseException) and tagged) or traces_shown()


_FILTER: Final = _NoReraisedError()


def quiet_reraised_logs() -> None:
    """Install the filter of Beam's re-raised errors' log in this process (idempotent);
    the error itself reaches the caller."""
    logger = logging.getLogger(BEAM_RERAISE_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def _shorten(text: str) -> str:
    """``text``, or its head and tail (where an exception's summary usually is)."""
    if len(text) <= _MAX_CHARS:
        return text
    half = _MAX_CHARS // 2
    return f"{text[:half]} ... {text[-half:]}"
