"""The console entry point's first instructions, before anything heavy is imported.

:func:`main` (``watermarks = spark_backend.cli:main``) imports only the standard library
until it has

- installed the handlers of :mod:`spark_backend.cli.interrupts`, so Ctrl-C at any
  moment once it runs (modules still importing included) exits 130 with one line,
  SIGTERM 143, and a run that does not exit soon after is ended by its watchdog;
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
import sys

from spark_backend.cli.interrupts import (
    Terminated,
    enable_watchdog,
    install_signals,
    stopped,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MIN_ADDRESS_SPACE", "main", "memory_limit", "no_memory_line"]

#: The least address space (bytes) a run starts in: the local engine's imports map
#: about 700 MiB; Spark's JVM needs more.
MIN_ADDRESS_SPACE = 1 << 30

#: Native thread pools whose size is read from the environment when they load.
_THREAD_POOLS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def memory_limit() -> int | None:
    """The address-space limit (bytes) of this process, None when unlimited."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


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
    point; in-process callers use :func:`spark_backend.cli.commands.main`. A signal at
    any moment from its first instruction on, the handlers' installation included,
    ends the run with one line."""
    try:
        enable_watchdog()
        install_signals()
        return _guarded(argv)
    except (KeyboardInterrupt, Terminated) as exc:
        return stopped(exc)


def _guarded(argv: Sequence[str] | None) -> int:
    """The memory guard, then the commands."""
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
