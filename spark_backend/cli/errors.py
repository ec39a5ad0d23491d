"""Any failure as one line naming its cause, for the command line's exit-2 message.

Spark's exceptions carry multi-line messages and JVM stacks; :func:`one_line` keeps the
cause: an AnalysisException's error class and first line, a Py4J Java error's innermost
Java exception (class and message), a JVM that would not start, a MemoryError with what
could not be allocated. Other exceptions give their message (ValueError, TypeError,
OSError and the trace errors already name row, column and file), prefixed by their
type when the message alone would not say what failed.
"""

from __future__ import annotations

#: Exceptions whose message says what was wrong without their type name.
_PLAIN = (ValueError, TypeError, OSError, RuntimeError)
_MAX = 500


def _squash(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX else text[: _MAX - 3] + "..."


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _java_cause(exc: BaseException) -> str | None:
    """The innermost cause of a Py4JJavaError, as ``Class: message``."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return None
    try:
        seen = 0
        while java.getCause() is not None and seen < 20:
            java = java.getCause()
            seen += 1
        name = str(java.getClass().getSimpleName())
        message = str(java.getMessage() or "")
    except Exception:  # the gateway may be gone
        return None
    return f"{name}: {_first_line(message)}" if message else name


def _spark(exc: BaseException) -> str | None:
    try:
        from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
        from pyspark.errors import PySparkException
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    if isinstance(exc, Py4JJavaError):
        cause = _java_cause(exc)
        return f"Spark failed: {cause or _first_line(str(exc))}"
    if isinstance(exc, Py4JNetworkError):
        return f"lost the connection to Spark's JVM: {_first_line(str(exc))}"
    if isinstance(exc, Py4JError):
        return f"Spark's JVM failed: {_first_line(str(exc))}"
    if isinstance(exc, PySparkException):
        cls = exc.getCondition() if hasattr(exc, "getCondition") else exc.getErrorClass()
        if cls == "JAVA_GATEWAY_EXITED":
            return "Spark's JVM would not start (its own error is printed above)"
        text = _first_line(exc.getMessage() if hasattr(exc, "getMessage") else str(exc))
        if cls and cls not in text:
            text = f"[{cls}] {text}"
        return f"Spark refused the input: {text}"
    return None


def one_line(exc: BaseException) -> str:
    """The cause of ``exc`` in one line (at most 500 characters)."""
    try:
        spark = _spark(exc)
    except Exception:  # pyspark failed to load (no memory left, say): not a Spark error
        spark = None
    if spark is not None:
        return _squash(spark)
    if isinstance(exc, MemoryError):
        return _squash(f"out of memory: {exc or 'an allocation failed'}")
    text = str(exc)
    if "Java gateway process exited" in text:
        return "Spark's JVM would not start (see the lines above; is Java 17+ installed?)"
    if isinstance(exc, _PLAIN) and text:
        return _squash(text)
    name = type(exc).__name__
    return _squash(f"{name}: {text}" if text else name)


__all__ = ["one_line"]
