"""theory.memory: glibc keeping freed memory, opt-in and scoped."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from theory import memory

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


_MEASURE = """
import json
from tests.theory.test_memory import _faults, _resident, _touch
from theory.memory import kept_freed_memory
with kept_freed_memory() as applied:
    _touch()
    inside = _faults(_touch)
    held = _resident()
after = _resident()
_touch()
outside = _faults(_touch)
print(json.dumps([applied, inside, held, after, outside]))
"""


def test_freed_memory_is_reused_within_the_block_and_returned_after():
    """In a fresh interpreter: the allocator's settings are process-wide, and a test
    process that ran others before (the suite's xdist workers) may hold any of them
    (one such worker saw no fresh page at all outside the block)."""
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE], cwd=root, env=env, capture_output=True, text=True,
        check=True, timeout=120,
    ).stdout
    applied, inside, held, after, outside = json.loads(out.strip().splitlines()[-1])
    assert applied
    # inside: the heap block freed just before, no fresh memory; outside: mmapped and
    # unmapped each time, fresh memory
    assert outside >= 16  # 64 MiB of at most 2 MiB pages
    assert inside * 8 < outside
    assert held - after > 48 << 20  # the kept block went back to the kernel on leaving
