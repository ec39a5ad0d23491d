"""The console entry point's first instructions, before anything heavy is imported.

:func:`main` (``watermarks = spark_backend.cli:main``) imports only the standard library
until it has

- made SIGTERM raise :class:`Terminated` and SIGINT raise KeyboardInterrupt, so Ctrl-C
  at any moment (modules still importing included) exits 130 with one line, SIGTERM 143;
  a watchdog ends a run that has not exited :data:`GRACE` s after the signal (Spark's
  and Py4J's calls may swallow the exception or wait forever), with the same line;
- refused an address-space limit (``ulimit -v``, ``prlimit --as``) below
  :data:`MIN_ADDRESS_SPACE` with one line naming it, exit 2: below it numpy, pandas and
  pyarrow fail to load at random places, and OpenBLAS aborts the process outright;
- under a larger limit, capped the native thread pools at one thread before numpy
  loads (OpenBLAS reserves a buffer per thread);

and then imports the commands: a failure to load them, or to run, for want of memory
is one line naming the limit, exit 2.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from collections.abc import Sequence

__all__ = [
    "INTERRUPTED",
    "TERMINATED",
    "Terminated",
    "install_signals",
    "main",
    "memory_limit",
    "no_memory_line",
    "raise_interrupt",
    "raise_terminated",
    "report",
    "stopped",
]

#: Exit statuses of a run stopped by Ctrl-C and by SIGTERM (128 + the signal).
INTERRUPTED = 130
TERMINATED = 143

#: The least address space (bytes) a run starts in: the local engine's imports map
#: about 700 MiB; Spark's JVM needs more.
MIN_ADDRESS_SPACE = 1 << 30

#: Native thread pools whose size is read from the environment when they load.
_THREAD_POOLS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class Terminated(BaseException):
    """SIGTERM received (raised by the CLI's handler so clean-up runs as for Ctrl-C)."""


#: Seconds a signalled console run has to exit by itself before the watchdog ends it.
GRACE = 15.0

_WATCHDOG = {"enabled": False, "armed": False, "reported": False}


def _arm_watchdog(code: int) -> None:
    """In the console entry point: end the process with ``code`` and the one line if it
    has not exited :data:`GRACE` s after the signal (a library that swallowed the
    KeyboardInterrupt, a call to the JVM that never returns). What it leaves behind
    (a temporary output, the run directory) the next run removes."""
    if not _WATCHDOG["enabled"] or _WATCHDOG["armed"]:
        return
    _WATCHDOG["armed"] = True

    def watch() -> None:
        import time

        time.sleep(GRACE)
        if not _WATCHDOG["reported"]:
            report(code)
        sys.stderr.flush()
        os._exit(code)

    import threading

    threading.Thread(target=watch, name="watermarks-signal-watchdog", daemon=True).start()


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


def memory_limit() -> int | None:
    """The address-space limit (bytes) of this process, None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


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


def no_memory_line(limit: int | None, detail: str) -> str:
    """The one line of a start that failed for want of memory."""
    where = (
        f"the address-space limit is {limit / 2**20:,.0f} MiB (ulimit -v / prlimit --as)"
        if limit is not None
        else "the machine has too little free memory"
    )
    detail = " ".join(detail.split())[:200]
    return f"watermarks: error: not enough memory to start: {where}; {detail}"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``watermarks`` command (see :func:`spark_backend.cli.commands.main`), with
    its signal handlers and memory guard in place before any heavy import. The handlers
    stay for the rest of the process (its exit stops Spark): this is a program's entry
    point; in-process callers use :func:`spark_backend.cli.commands.main`."""
    _WATCHDOG["enabled"] = True
    install_signals()
    limit = memory_limit()
    if limit is not None and limit < MIN_ADDRESS_SPACE:
        print(
            no_memory_line(limit, f"it needs at least {MIN_ADDRESS_SPACE >> 20:,} MiB"),
            file=sys.stderr,
        )
        return 2
    if limit is not None:
        for name in _THREAD_POOLS:
            os.environ.setdefault(name, "1")
    try:
        from spark_backend.cli.commands import main as run

        return run(argv)
    except (KeyboardInterrupt, Terminated) as exc:
        return stopped(exc)
    except (MemoryError, ImportError, OSError) as exc:
        if limit is None and not isinstance(exc, MemoryError):
            raise
        print(no_memory_line(limit, _detail(exc)), file=sys.stderr)
        return 2


def _detail(exc: BaseException) -> str:
    """The cause of a failed import in a few words (numpy's hint text left out)."""
    text = str(exc)
    _, sep, original = text.partition("Original error was:")
    return f"{type(exc).__name__}: {original if sep else text}"
