"""What of Spark's and py4j's logs reaches the terminal: their traces only when asked.

A failed task's Python error reaches the caller as one exception
(:class:`spark_backend.runner.errors.PipelineFailedError`); the JVM's log of the same
failure (an executor's ``Exception in task``, with the JVM's stack) and py4j's logged
tracebacks would print it again. They are shown when the ``spark_backend`` logger is
enabled for DEBUG (the runner as a library), or after
:func:`spark_backend.session.session.set_jvm_log_level` (the CLI's ``-v``).
"""

from __future__ import annotations

import logging
from typing import Final

__all__ = ["default_jvm_log_level", "quiet_py4j", "traces_shown"]

#: py4j's loggers that log tracebacks (a logger's filters apply to its own records).
PY4J_LOGGERS: Final[tuple[str, ...]] = ("py4j.java_gateway", "py4j.clientserver")


def traces_shown() -> bool:
    """Whether Spark's and py4j's traces are shown: ``spark_backend`` logs at DEBUG."""
    return logging.getLogger("spark_backend").isEnabledFor(logging.DEBUG)


def default_jvm_log_level() -> str:
    """The JVM's log4j2 level: ``error`` when traces are shown, else ``off``."""
    return "error" if traces_shown() else "off"


class _NoTraces(logging.Filter):
    """Drops records carrying an exception unless :func:`traces_shown`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.exc_info or traces_shown()


_FILTER: Final = _NoTraces()


def quiet_py4j() -> None:
    """Keep py4j's logged tracebacks out of any handler unless :func:`traces_shown`
    (idempotent)."""
    for name in PY4J_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
