"""theory.memory: glibc keeping freed memory, opt-in and scoped."""

import resource

import numpy as np
import pytest

from theory import memory
from theory.memory import kept_freed_memory

pytestmark = pytest.mark.skipif(memory._glibc() is None, reason="glibc only")

BLOCK = 8 << 20  # 64 MiB of float64: over glibc's 32 MiB dynamic mmap ceiling


def _faults(fn) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _touch() -> None:
    a = np.ones(BLOCK)
    del a


def test_freed_memory_is_reused_within_the_block_and_returned_after():
    with kept_freed_memory() as applied:
        assert applied
        _touch()
        inside = _faults(_touch)  # the heap block freed just before: no fresh memory
        held = _resident()
    after = _resident()
    _touch()
    outside = _faults(_touch)  # mmapped and unmapped each time: fresh memory
    assert outside >= 16  # 64 MiB of at most 2 MiB pages
    assert inside * 8 < outside
    assert held - after > 48 << 20  # the kept block went back to the kernel on leaving
