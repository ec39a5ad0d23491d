"""Spark's Python worker with an event at each task's start, for the fault cases of
``test_cluster.py`` (``spark.python.worker.module``; Spark's daemon only loads a worker
module whose name starts with ``pyspark``, so this folder is on the workers'
``PYTHONPATH`` and the module sits at its top).

When ``WATERMARKS_TASK_EVENTS`` names a folder and its file ``armed`` exists, the first
task to start claims the file ``victim`` (``O_EXCL``: one task across every process),
writes the name of its worker (``WATERMARKS_WORKER_NAME``) into it and then waits, so it
is still running when the test kills that worker; other tasks run as usual.
"""

from __future__ import annotations

import os
import time
from typing import BinaryIO

#: Seconds the claiming task waits for its worker to be killed before it runs anyway.
HOLD_S = 120.0


def _claim(folder: str) -> bool:
    """Whether this task is the armed case's victim (it then has written its worker)."""
    if not os.path.exists(os.path.join(folder, "armed")):
        return False
    try:
        fd = os.open(os.path.join(folder, "victim"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(os.environ.get("WATERMARKS_WORKER_NAME", "?"))
    return True


def main(infile: BinaryIO, outfile: BinaryIO) -> None:
    """:func:`pyspark.worker.main`, once the task's first bytes arrived (a reused worker
    waits here between tasks) and, for the victim, after its hold."""
    folder = os.environ.get("WATERMARKS_TASK_EVENTS")
    if folder and infile.peek(1) and _claim(folder):  # type: ignore[attr-defined]
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
    from pyspark.worker import main as worker_main

    worker_main(infile, outfile)
