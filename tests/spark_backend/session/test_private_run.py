"""A run with every default (its own process, ``private_run.py``): it keeps its files in
a private directory and leaves nothing behind in the temporary directory given to it,
makes no ``hsperfdata`` file, listens on loopback only, and retries a failed task.

The child gets its own TMPDIR and no ``WATERMARKS_LOCAL_TASK_ATTEMPTS`` (the test suite
sets one attempt), so it runs on the toolkit's default master, ``local[*,4]``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("private_run.py")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    root = tmp_path_factory.mktemp("private-run")
    tmp = root / "tmp"
    tmp.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "WATERMARKS_LOCAL_TASK_ATTEMPTS"}
    env.pop("SPARK_LOCAL_IP", None)  # loopback must come from the session's settings
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(root / "failed-once")],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]), tmp


def test_nothing_is_left_in_the_temporary_directory(run) -> None:
    report, tmp = run
    assert sorted(p.name for p in tmp.iterdir()) == []
    assert report["hsperfdata"] is False
    assert str(report["local_dir"]).startswith(str(tmp / f"dataflow-watermarks-{os.geteuid()}"))


def test_the_driver_listens_on_loopback_only(run) -> None:
    report, _ = run
    assert report["listening"], "no listening socket found: the check saw nothing"
    assert all(ipaddress.ip_address(a).is_loopback for a in report["listening"]), report


def test_a_task_that_fails_once_is_retried_by_default(run) -> None:
    report, _ = run
    assert report["master"] == "local[*,4]"
    assert report["failed_once"], "the DoFn never failed: no retry was exercised"
    assert report["state"] == "DONE"
    assert report["seen"] == [60]  # committed metrics count the retried task once
