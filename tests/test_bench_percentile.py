"""bench/percentile.py runs end to end on a small trace and prints every figure.

Speed is not asserted (benchmarks measure it, tests do not); the sketch's accuracy is:
no evaluation may be further from the exact answer than its stated bound E."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_percentile_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "percentile.py"), "--sizes", "3000",
         "--repeats", "1", "--naive", "500", "--general", "--vector-ps", "0.5"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert re.search(r"vectorised .* events/s  \(p=0\.9\)", out)
    assert re.search(r"vectorised .* events/s  \(p=0\.5\)", out)
    assert re.search(r"vectorised .* \(p=0\.9, stage level: general path\)", out)
    assert re.search(r"incremental .* updates/s", out)
    sketches = re.findall(r"sketch (\w+) .* over E (\d+) of (\d+)", out)
    assert [name for name, _, _ in sketches] == ["exact", "sketched"]
    for _, over, evals in sketches:
        assert int(evals) > 0 and int(over) == 0
    assert re.search(r"naive .* steps/s", out)
