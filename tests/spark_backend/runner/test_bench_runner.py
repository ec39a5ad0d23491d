"""bench/runner.py runs end to end on a small size and reports identical outputs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def test_bench_runner_smoke() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "runner.py"), "--sizes", "2000"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = re.findall(r"^  (\w+) +PySparkRunner .* outputs identical$", done.stdout, re.M)
    assert lines == ["wordcount", "windowed_combine", "session_gbk"], done.stdout
    assert "hand-written RDD" in done.stdout
