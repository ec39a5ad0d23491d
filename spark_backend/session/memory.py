"""This process's memory, for the CLI's peak-memory statement (bytes)."""

from __future__ import annotations

import os
import resource

__all__ = ["peak_rss", "rss"]


def rss() -> int:
    """The resident set size now (bytes)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """The largest resident set size so far (bytes; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
