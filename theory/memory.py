"""An opt-in allocator setting for large vectorised runs: glibc keeping freed memory.

By default glibc hands a freed block over 32 MiB back to the kernel at once (and trims
the heap's free top past 64 MiB), so at millions of events every large numpy temporary
is fresh memory: the kernel maps and zeroes it at first touch, which at 10M events in
the simulator is about a third of the CPU time (system time). :func:`kept_freed_memory`
has glibc serve such blocks from its heap and keep what is freed for the next one,
within a ``with`` block:

- it is process-wide while it lasts (``mallopt``: every thread's allocations);
- on leaving, the thresholds are set to glibc's own dynamic ceilings (32 MiB for
  ``M_MMAP_THRESHOLD``, 64 MiB for ``M_TRIM_THRESHOLD``: what a process that has freed a
  large block runs with anyway; glibc's dynamic adjustment stays off, as after any
  ``mallopt``), the top pad to its default, and the kept memory is returned to the
  kernel (``malloc_trim(0)``);
- off glibc (another libc, another OS) it does nothing and yields False.

Nothing in the library enables it by itself; :func:`theory.pipeline.simulator.simulate`
takes ``keep_freed_memory=True``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["kept_freed_memory", "set_keep_freed_memory"]

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
#: While kept: blocks under 1 GiB come from the heap, and up to 1 GiB of free heap top
#: is kept (C ints: mallopt takes an ``int``).
_KEPT = {_M_MMAP_THRESHOLD: 1 << 30, _M_TRIM_THRESHOLD: 1 << 30, _M_TOP_PAD: 64 << 20}
#: After: glibc's dynamic ceilings on 64-bit and its default top pad.
_AFTER = {_M_MMAP_THRESHOLD: 32 << 20, _M_TRIM_THRESHOLD: 64 << 20, _M_TOP_PAD: 128 << 10}


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has ``mallopt`` and ``malloc_trim``)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only)
    except (OSError, AttributeError):
        return None
    return libc


def set_keep_freed_memory(keep: bool) -> bool:
    """Process-wide: glibc keeps freed memory (``keep``), or goes back to the settings
    described in the module's docstring and returns what it kept. True if applied (on
    glibc)."""
    libc = _glibc()
    if libc is None:
        return False
    for option, value in (_KEPT if keep else _AFTER).items():
        if not libc.mallopt(ctypes.c_int(option), ctypes.c_int(value)):
            raise OSError(f"mallopt refused option {option} = {value}")
    if not keep:
        libc.malloc_trim(ctypes.c_size_t(0))
    return True


@contextmanager
def kept_freed_memory() -> Iterator[bool]:
    """Within the block, glibc keeps freed memory (see the module's docstring); yields
    whether that applies (False off glibc: nothing changes)."""
    applied = set_keep_freed_memory(True)
    try:
        yield applied
    finally:
        if applied:
            set_keep_freed_memory(False)
