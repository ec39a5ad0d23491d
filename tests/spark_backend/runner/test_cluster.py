"""PySparkRunner off the shared session: Spark task retries and a standalone cluster.

Each case runs ``cluster_pipeline.py`` in its own process, since a process holds one
SparkContext and these need their own master:

- ``local[2,2]`` (plain ``local[N]`` never retries): a DoFn fails once and Spark
  retries the task; the output has every element once, the counter counts once;
- a standalone master and worker on loopback (``spark-class``, the pip package has no
  start scripts), reached with ``--spark_master spark://127.0.0.1:PORT``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("cluster_pipeline.py")
ROOT = Path(__file__).resolve().parents[3]


def _run(master: str, marker: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), master, str(marker)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_task_retried_by_spark_gives_the_same_output_and_counts_once(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    report = _run("local[2,2]", marker)
    assert marker.exists(), "the DoFn never failed: the retry was not exercised"
    assert report["state"] == "DONE"
    assert report["seen"] == [60]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A Spark standalone master and one worker on loopback; yields the master URL."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port = _free_port()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    master_cmd = [
        str(spark_class),
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        "0",
    ]
    url = f"spark://127.0.0.1:{port}"
    worker_cmd = [
        str(spark_class),
        "org.apache.spark.deploy.worker.Worker",
        url,
        "--cores",
        "2",
        "--memory",
        "1g",
        "--webui-port",
        "0",
    ]
    log = (tmp_path / "daemons.log").open("w")
    master = subprocess.Popen(master_cmd, env=env, stdout=log, stderr=log)
    worker = None
    try:
        _wait_for_port(port, 120)
        worker = subprocess.Popen(worker_cmd, env=env, stdout=log, stderr=log)
        yield url
    finally:
        for proc in (worker, master):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        log.close()


def test_a_standalone_cluster_gives_the_same_output(standalone: str, tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    marker.touch()  # no failure here: this case checks the cluster path only
    report = _run(standalone, marker)
    assert report["state"] == "DONE"
    assert report["seen"] == [60]
