"""Ctrl-C and SIGTERM in the command line: the handlers, the one line, the exit status.

SIGINT raises KeyboardInterrupt and SIGTERM :class:`Terminated`, so clean-up runs as for
any exception and the command prints one line and exits 130 or 143. In the console
entry point a watchdog also ends a run that has not exited :data:`GRACE` s after the
signal (a library that swallowed the exception, a call to the JVM that never returns),
with the same line; what such a run leaves (a temporary output, its run directory) the
next run removes.
"""

from __future__ import annotations

import _thread  # not threading: this module loads before the handlers are in place
import os
import signal
import sys
import time

__all__ = [
    "GRACE",
    "INTERRUPTED",
    "TERMINATED",
    "Terminated",
    "enable_watchdog",
    "forget_signal",
    "install_signals",
    "raise_interrupt",
    "raise_terminated",
    "report",
    "signal_seen",
    "stopped",
]

#: Exit statuses of a run stopped by Ctrl-C and by SIGTERM (128 + the signal).
INTERRUPTED = 130
TERMINATED = 143


class Terminated(BaseException):
    """SIGTERM received (raised by the CLI's handler so clean-up runs as for Ctrl-C)."""


#: Seconds a signalled console run has to exit by itself before the watchdog ends it.
GRACE = 15.0

_WATCHDOG = {"enabled": False, "armed": False, "reported": False}
_SEEN: list[int] = []  # the exit status of the signal received, if any


def signal_seen() -> int | None:
    """130 or 143 once SIGINT or SIGTERM was received (since :func:`forget_signal`)."""
    return _SEEN[0] if _SEEN else None


def forget_signal() -> None:
    """Start a run with no signal seen."""
    _SEEN.clear()


def _arm_watchdog(code: int) -> None:
    """Record the signal; in the console entry point also end the process with ``code``
    and the one line if it has not exited :data:`GRACE` s after the signal (a library
    that swallowed the KeyboardInterrupt, a call to the JVM that never returns). What it
    leaves behind (a temporary output, the run directory) the next run removes."""
    if not _SEEN:
        _SEEN.append(code)
    if not _WATCHDOG["enabled"] or _WATCHDOG["armed"]:
        return
    _WATCHDOG["armed"] = True

    def watch() -> None:
        time.sleep(GRACE)
        if not _WATCHDOG["reported"]:
            report(code)
        sys.stderr.flush()
        os._exit(code)

    _thread.start_new_thread(watch, ())  # as a daemon thread: no wait for it at exit


def raise_terminated(signum: int, frame: object) -> None:
    """The SIGTERM handler: raise :class:`Terminated`."""
    _arm_watchdog(TERMINATED)
    raise Terminated(f"terminated by signal {signum}")


def raise_interrupt(signum: int, frame: object) -> None:
    """The SIGINT handler: raise KeyboardInterrupt."""
    _arm_watchdog(INTERRUPTED)
    raise KeyboardInterrupt


def install_signals() -> None:
    """SIGTERM raises :class:`Terminated`; SIGINT raises KeyboardInterrupt (unless the
    parent ignores it). Main thread only (elsewhere a no-op)."""
    try:
        signal.signal(signal.SIGTERM, raise_terminated)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, raise_interrupt)
    except ValueError:  # not the main thread
        pass


def report(code: int) -> int:
    """Print the one line of a run stopped by SIGTERM (143) or Ctrl-C (130)."""
    _WATCHDOG["reported"] = True
    if code == TERMINATED:
        print("watermarks: terminated (SIGTERM); previous output left as it was", file=sys.stderr)
    else:
        print("watermarks: interrupted (Ctrl-C); previous output left as it was", file=sys.stderr)
    return code


def stopped(exc: BaseException) -> int:
    """One line and the exit status for a Ctrl-C (130) or a SIGTERM (143)."""
    return report(TERMINATED if isinstance(exc, Terminated) else INTERRUPTED)


def enable_watchdog() -> None:
    """Let a signal arm the watchdog (the console entry point only)."""
    _WATCHDOG["enabled"] = True
